/* SPDX-License-Identifier: MIT */
/* libFuzzer: the Fashion-MNIST IDX loader.  Input: a 2-byte little-endian
 * length L, then L bytes of the labels file, then the images file.  Both go
 * through zlib's gzopen, which reads gzip and plain bytes alike, so the
 * fuzzer can reach the IDX checks without producing valid deflate streams
 * (a gzip seed covers the compressed path). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"
#include "fuzz-util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	size_t l = size >= 2 ? (size_t)(data[0] | data[1] << 8) : 0;
	const uint8_t *p = size >= 2 ? data + 2 : data;
	size_t rest = size >= 2 ? size - 2 : size;
	if (l > rest)
		l = rest;
	fuzz_file(0, "train-labels-idx1-ubyte.gz", p, l);
	fuzz_file(1, "train-images-idx3-ubyte.gz", p + l, rest - l);
	ph_dataset ds;
	ph_err err = { { 0 } };
	int rc = ph_data_load_fashion_mnist(fuzz_tmpdir(), 1, &ds, &err);
	if (rc != PH_OK) {
		if (!err.msg[0])
			abort();
		return 0;
	}
	/* accepted: every label in range, every pixel in [0,1] */
	int64_t numel = ph_shape_numel(&ds.shape);
	for (int64_t i = 0; i < ds.n; i++)
		if (ds.y[i] < 0 || ds.y[i] >= ds.nclasses)
			abort();
	for (int64_t i = 0; i < ds.n * numel; i++)
		if (!(ds.x[i] >= 0.f && ds.x[i] <= 1.f))
			abort();
	ph_data_free(&ds);
	return 0;
}
