/* SPDX-License-Identifier: MIT */
/* GPT-2's BPE (core/bpe.h) as a --generate tokenizer (ph_tokenizer): a
 * run whose text is tokenised with [data] tokenizer = bpe generates in the
 * same ids, read from the same vocab.json and merges.txt. */
#include <stdlib.h>

#include "bpe.h"
#include "generate.h"

static int bpe_encode(void *self, const char *text, size_t len, int32_t **ids, int64_t *n, ph_err *err)
{
	size_t k = 0;
	int rc = ph_bpe_encode(self, (const unsigned char *)text, len, ids, &k, err);
	*n = (int64_t)k;
	return rc;
}

/* One id's bytes; a character split over ids is completed by the next. */
static int bpe_decode(void *self, int32_t id, FILE *out, ph_err *err)
{
	unsigned char *s = NULL;
	size_t len = 0;
	int rc = ph_bpe_decode(self, &id, 1, &s, &len, err);
	if (!rc && len && fwrite(s, 1, len, out) != len)
		rc = ph_generate_write_error(out, err);
	free(s);
	return rc;
}

int ph_tokenizer_bpe(ph_tokenizer *t, const char *vocab_json, const char *merges_txt, ph_err *err)
{
	ph_bpe *b = NULL;
	int rc = ph_bpe_load(&b, vocab_json, merges_txt, err);
	if (rc)
		return rc;
	*t = (ph_tokenizer){ .name = "gpt2-bpe", .vocab = ph_bpe_vocab_size(b), .self = b, .encode = bpe_encode,
			     .decode = bpe_decode };
	return PH_OK;
}

void ph_tokenizer_bpe_free(ph_tokenizer *t)
{
	ph_bpe_free(t->self);
	t->self = NULL;
}
