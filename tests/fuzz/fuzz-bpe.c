/* SPDX-License-Identifier: MIT */
/* libFuzzer: GPT-2's BPE tokenizer (core/bpe.c).  Input: two 2-byte
 * little-endian lengths L1 and L2, then L1 bytes of vocab.json, L2 bytes
 * of merges.txt, and the rest as text.  Whatever the files, the
 * pre-tokeniser cuts the text into chunks that advance and tile it; a
 * load either succeeds or fails with a message.  A tokenizer that loads
 * has all 256 byte tokens and only merges that make tokens of the
 * vocabulary, so any text encodes, every id is in range, there are never
 * more ids than bytes, and decoding gives the text back byte for byte. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bpe.h"
#include "fuzz-util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 4)
		return 0;
	size_t l1 = (size_t)(data[0] | data[1] << 8), l2 = (size_t)(data[2] | data[3] << 8);
	const uint8_t *p = data + 4;
	const size_t rest = size - 4;
	if (l1 > rest)
		l1 = rest;
	if (l2 > rest - l1)
		l2 = rest - l1;
	const unsigned char *text = p + l1 + l2;
	const size_t tl = rest - l1 - l2;
	for (size_t pos = 0; pos < tl;) {
		const size_t end = ph_bpe_next_chunk(text, tl, pos);
		if (end <= pos || end > tl)
			abort();
		pos = end;
	}
	const char *vocab = fuzz_file(0, "vocab.json", p, l1);
	const char *merges = fuzz_file(1, "merges.txt", p + l1, l2);
	ph_bpe *b = NULL;
	ph_err err = { { 0 } };
	if (ph_bpe_load(&b, vocab, merges, &err) != PH_OK) {
		if (!err.msg[0] || b)
			abort();
		return 0;
	}
	int32_t *ids = NULL;
	size_t n = 0;
	if (ph_bpe_encode(b, text, tl, &ids, &n, &err) != PH_OK || n > tl)
		abort();
	const int vs = ph_bpe_vocab_size(b);
	for (size_t i = 0; i < n; i++)
		if (ids[i] < 0 || ids[i] >= vs)
			abort();
	unsigned char *back = NULL;
	size_t bl = 0;
	if (ph_bpe_decode(b, ids, n, &back, &bl, &err) != PH_OK || bl != tl || memcmp(back, text, tl) != 0)
		abort();
	free(back);
	free(ids);
	ph_bpe_free(b);
	return 0;
}
