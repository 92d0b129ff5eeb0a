/* SPDX-License-Identifier: MIT */
/* libFuzzer: the tokens data source's reader (core/data_tokens.c):
 * nanoGPT's headerless .bin and llm.c's headed one.  Input: a byte for
 * the id width [data] token_type gives (even: uint16, odd: uint32), a
 * byte for seq_len (1..64), two bytes for vocab_size (2..65537), then the
 * file.  A file either loads or fails with a message; one that loads
 * holds ids below vocab_size, and its sequences (cut at a 0.1 holdout,
 * as the source does without test_tokens) are the ids in order with each
 * target the next id. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"
#include "fuzz-util.h"

/* The sequences of tok[a..b), or a message; checked against tok. */
static void check_sequences(const uint32_t *tok, size_t a, size_t b, int T, int64_t vocab)
{
	ph_dataset ds;
	ph_err err = { { 0 } };
	if (ph_data_token_sequences(tok, a, b, T, vocab, "fuzz.bin", "training", &ds, &err) != PH_OK) {
		if (!err.msg[0] || b - a > (size_t)T)
			abort(); /* refused only when too few tokens for one sequence and its last target */
		return;
	}
	if (ds.n < 1 || (size_t)ds.n * T + 1 > b - a || ds.targets_per_sample != T || ds.nclasses != vocab)
		abort();
	for (int64_t i = 0; i < ds.n * T; i++)
		if (ds.x[i] != (float)tok[a + i] || ds.y[i] != (int32_t)tok[a + i + 1] || ds.y[i] < 0 || ds.y[i] >= vocab)
			abort();
	ph_data_free(&ds);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 4)
		return 0;
	const int width = data[0] & 1 ? 4 : 2, T = 1 + data[1] % 64;
	const int64_t vocab = 2 + (int64_t)(data[2] | data[3] << 8);
	const char *path = fuzz_file(0, "tokens.bin", data + 4, size - 4);
	uint32_t *tok = NULL;
	size_t n = 0;
	ph_err err = { { 0 } };
	if (ph_data_read_tokens(path, width, vocab, &tok, &n, &err) != PH_OK) {
		if (!err.msg[0] || tok || n)
			abort();
		return 0;
	}
	if (!tok || n < 1 || n > size)
		abort();
	for (size_t i = 0; i < n; i++)
		if ((int64_t)tok[i] >= vocab)
			abort();
	const size_t cut = (size_t)((double)n * (1.0 - 0.1));
	check_sequences(tok, 0, cut, T, vocab);
	check_sequences(tok, cut, n, T, vocab);
	free(tok);
	return 0;
}
