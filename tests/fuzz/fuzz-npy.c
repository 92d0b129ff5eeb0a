/* SPDX-License-Identifier: MIT */
/* libFuzzer: the npy data source's reader (core/data_npy.c).  Input: a
 * 2-byte little-endian length L, then L bytes of the images .npy and the
 * rest as the labels .npy.  A pair either loads or fails with a message;
 * one that loads has samples, a label per sample in 0 .. nclasses - 1,
 * and only finite inputs. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"
#include "fuzz-util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	size_t l = size >= 2 ? (size_t)(data[0] | data[1] << 8) : 0;
	const uint8_t *p = size >= 2 ? data + 2 : data;
	const size_t rest = size >= 2 ? size - 2 : size;
	if (l > rest)
		l = rest;
	const char *images = fuzz_file(0, "images.npy", p, l);
	const char *labels = fuzz_file(1, "labels.npy", p + l, rest - l);
	ph_dataset ds;
	ph_err err = { { 0 } };
	if (ph_data_load_npy(images, labels, &ds, &err) != PH_OK) {
		if (!err.msg[0])
			abort();
		return 0;
	}
	const int64_t numel = ph_shape_numel(&ds.shape);
	if (ds.n < 1 || numel < 0 || ds.nclasses < 1)
		abort();
	for (int64_t i = 0; i < ds.n; i++)
		if (ds.y[i] < 0 || ds.y[i] >= ds.nclasses)
			abort();
	for (int64_t i = 0; i < ds.n * numel; i++)
		if (!isfinite(ds.x[i]))
			abort();
	ph_data_free(&ds);
	return 0;
}
