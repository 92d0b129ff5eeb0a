/* SPDX-License-Identifier: MIT */
/* libFuzzer: the safetensors reader.  Every input is read twice: with no
 * request (validation only) and asking for three tensors of the tiny
 * fixture's model, so well-formed inputs reach the copying code.  A refused
 * read must leave the caller's buffers untouched. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "weights.h"
#include "fuzz-util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *path = fuzz_file(0, "fuzz.safetensors", data, size);
	ph_err err = { { 0 } };
	int rc = ph_safetensors_read(path, NULL, 0, &err);
	if (rc != PH_OK && !err.msg[0])
		abort();

	static float w[36], b[4], c[10];
	ph_tensor_ref t[3];
	memset(t, 0, sizeof t);
	snprintf(t[0].name, sizeof t[0].name, "conv1.weight");
	t[0].shape = (ph_shape){ 4, { 4, 1, 3, 3 } };
	t[0].data = w;
	snprintf(t[1].name, sizeof t[1].name, "conv1.bias");
	t[1].shape = (ph_shape){ 1, { 4 } };
	t[1].data = b;
	snprintf(t[2].name, sizeof t[2].name, "fc2.bias");
	t[2].shape = (ph_shape){ 1, { 10 } };
	t[2].data = c;
	for (size_t i = 0; i < 36; i++)
		w[i] = -1.f;
	err.msg[0] = 0;
	rc = ph_safetensors_read(path, t, 3, &err);
	if (rc != PH_OK) {
		if (!err.msg[0])
			abort();
		for (size_t i = 0; i < 36; i++)
			if (w[i] != -1.f)
				abort(); /* refused, yet the buffer changed */
	}
	return 0;
}
