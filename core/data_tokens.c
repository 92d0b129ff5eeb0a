/* SPDX-License-Identifier: MIT */
/* The tokens data source: pre-tokenised corpora as nanoGPT and llm.c
 * write them.  nanoGPT's train.bin/val.bin: raw little-endian uint16 (or
 * uint32) ids, no header; llm.c's: a 256 x int32 header (magic, version,
 * token count) then the ids, as its dev/data/data_common.py writes them:
 * GPT-2's magic 20240520 version 1 with uint16 ids, LLaMA 3's magic
 * 20240801 version 7 with uint32 ids.
 * Sequences are cut the way the text source cuts bytes. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data_source.h"

#define LLMC_MAGIC 20240520u      /* GPT-2 tokens: version 1, uint16 */
#define LLMC_MAGIC_U32 20240801u  /* LLaMA 3 tokens: version 7, uint32 */
#define LLMC_HELLASWAG 20240522u  /* llm.c's HellaSwag evaluation data: not tokens */
#define LLMC_HEADER_BYTES (256 * 4)

static uint32_t le32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Whether `count` uint32 ids at p look like uint16 ids read two at a
 * time: more than half of them at or past vocab, and every 16-bit half
 * below it.  Run only on the way to an error. */
static int looks_uint16(const unsigned char *p, size_t count, int64_t vocab)
{
	size_t past = 0;
	for (size_t i = 0; i < count; i++) {
		uint32_t v = le32(p + 4 * i);
		if ((int64_t)(v & 0xffff) >= vocab || (int64_t)(v >> 16) >= vocab)
			return 0;
		past += (int64_t)v >= vocab;
	}
	return past * 2 > count;
}

int ph_data_read_tokens(const char *path, int token_bytes, int64_t vocab, uint32_t **tok, size_t *n, ph_err *err)
{
	*tok = NULL;
	*n = 0;
	if (!path || !path[0])
		return ph_fail(err, PH_EINVAL, "tokens: [data] tokens is not set; give the token file (e.g. nanoGPT's train.bin)");
	struct stat st;
	if (stat(path, &st) != 0)
		return ph_fail(err, PH_EIO, "tokens: %s not found: %s", path, strerror(errno));
	if (!S_ISREG(st.st_mode))
		return ph_fail(err, PH_EINVAL, "tokens: %s is not a regular file", path);
	if ((unsigned long long)st.st_size > (unsigned long long)PH_DATA_MAX_ELEMS * 4 + LLMC_HEADER_BYTES)
		return ph_fail(err, PH_EINVAL, "tokens: %s holds more than %lld tokens; use a smaller file", path,
			       PH_DATA_MAX_ELEMS);
	FILE *f = fopen(path, "rb");
	if (!f)
		return ph_fail(err, PH_EIO, "tokens: cannot read %s: %s", path, strerror(errno));
	size_t size = (size_t)st.st_size;
	unsigned char *raw = malloc(size ? size : 1);
	if (!raw) {
		fclose(f);
		return ph_fail(err, PH_ENOMEM, "tokens: out of memory reading %s", path);
	}
	size_t got = fread(raw, 1, size, f);
	int bad = ferror(f), e = errno;
	fclose(f);
	int rc = PH_OK;
	if (got != size) {
		rc = bad ? ph_fail(err, PH_EIO, "tokens: error reading %s: %s; check the disk and run again", path,
				   strerror(e))
			 : ph_fail(err, PH_EIO, "tokens: %s shrank while being read (%zu of %zu bytes); run again once "
				   "nothing writes it", path, got, size);
		goto out;
	}
	size_t off = 0, count;
	uint32_t magic = size >= 4 ? le32(raw) : 0;
	int llmc = magic == LLMC_MAGIC || magic == LLMC_MAGIC_U32;
	if (magic == LLMC_HELLASWAG) {
		rc = ph_fail(err, PH_EINVAL, "tokens: %s is llm.c's HellaSwag evaluation data (magic %u), not a token file; "
			     "give a train or val .bin", path, magic);
		goto out;
	}
	if (llmc && size < LLMC_HEADER_BYTES) {
		rc = ph_fail(err, PH_EINVAL, "tokens: %s is truncated: llm.c's magic, but %zu bytes of its %d-byte header",
			     path, size, LLMC_HEADER_BYTES);
		goto out;
	}
	if (llmc) {
		/* llm.c's header states the id width and the count */
		uint32_t version = le32(raw + 4), declared = le32(raw + 8);
		uint32_t want = magic == LLMC_MAGIC ? 1 : 7;
		if (version != want) {
			rc = ph_fail(err, PH_EINVAL, "tokens: %s has llm.c's magic %u but version %u; llm.c writes GPT-2 token "
				     "files as magic 20240520 version 1 (uint16 ids) and LLaMA 3 ones as magic 20240801 "
				     "version 7 (uint32)", path, magic, version);
			goto out;
		}
		token_bytes = magic == LLMC_MAGIC ? 2 : 4;
		off = LLMC_HEADER_BYTES;
		count = declared;
		size_t have = size - off, need = count * (size_t)token_bytes;
		if (have < need) {
			rc = ph_fail(err, PH_EINVAL, "tokens: %s is truncated: its header says %zu tokens (%zu bytes), it holds "
				     "%zu bytes of them", path, count, need, have);
			goto out;
		}
		if (have > need) {
			rc = ph_fail(err, PH_EINVAL, "tokens: %s holds %zu bytes after the %zu tokens its header says; the "
				     "file is corrupt", path, have - need, count);
			goto out;
		}
	} else {
		if (size % (size_t)token_bytes) {
			rc = ph_fail(err, PH_EINVAL, "tokens: %s is truncated: %zu bytes is not a whole number of uint%d ids "
				     "(is [data] token_type right?)", path, size, token_bytes * 8);
			goto out;
		}
		count = size / (size_t)token_bytes;
	}
	if (count == 0) {
		rc = ph_fail(err, PH_EINVAL, "tokens: %s holds no tokens", path);
		goto out;
	}
	uint32_t *t = malloc(count * sizeof *t);
	if (!t) {
		rc = ph_fail(err, PH_ENOMEM, "tokens: out of memory for %s", path);
		goto out;
	}
	for (size_t i = 0; i < count; i++) {
		const unsigned char *p = raw + off + i * (size_t)token_bytes;
		t[i] = token_bytes == 2 ? (uint32_t)p[0] | (uint32_t)p[1] << 8 : le32(p);
		if ((int64_t)t[i] >= vocab) {
			/* A headerless file of uint16 ids read as uint32 (most
			 * values past vocab_size, every 16-bit half below it), or
			 * an id no vocabulary has: the width is wrong, not
			 * vocab_size. */
			int raw32 = off == 0 && token_bytes == 4;
			if (raw32 && looks_uint16(raw, count, vocab))
				rc = ph_fail(err, PH_EINVAL, "tokens: %s: token %u at position %zu is not below vocab_size %lld, "
					     "and most are not, but read as uint16 every id is: set [data] token_type = uint16",
					     path, t[i], i, (long long)vocab);
			else if (raw32 && t[i] >= (1u << 24))
				rc = ph_fail(err, PH_EINVAL, "tokens: %s: token %u at position %zu is past any vocabulary (ids "
					     "travel as floats, exact below 2^24): is [data] token_type = uint32 right?", path,
					     t[i], i);
			else
				rc = ph_fail(err, PH_EINVAL, "tokens: %s: token %u at position %zu is not below vocab_size %lld; set "
					     "[data] vocab_size to the tokenizer's", path, t[i], i, (long long)vocab);
			free(t);
			goto out;
		}
	}
	*tok = t;
	*n = count;
out:
	free(raw);
	return rc;
}

int ph_data_token_sequences(const uint32_t *tok, size_t a, size_t b, int seq_len, int64_t vocab, const char *what,
			    const char *split, ph_dataset *ds, ph_err *err)
{
	memset(ds, 0, sizeof *ds);
	int64_t nseq = b - a > (size_t)seq_len ? (int64_t)((b - a - 1) / (size_t)seq_len) : 0;
	if (nseq < 1)
		return ph_fail(err, PH_EINVAL, "%s has %zu %s tokens, too few for one sequence of %d (it takes %d: each "
			       "sequence's last token needs the one after it as its target); use more data or a shorter "
			       "seq_len", what, b - a, split, seq_len, seq_len + 1);
	ds->n = nseq;
	ds->shape = (ph_shape){ 1, { seq_len } };
	ds->targets_per_sample = seq_len;
	ds->nclasses = (int)vocab;
	ds->unit = "token";
	ds->first = (int64_t)a;
	snprintf(ds->x_from, sizeof ds->x_from, "%s", what);
	snprintf(ds->y_from, sizeof ds->y_from, "%s", what);
	ds->x = malloc((size_t)nseq * seq_len * sizeof *ds->x);
	ds->y = malloc((size_t)nseq * seq_len * sizeof *ds->y);
	if (!ds->x || !ds->y) {
		ph_data_free(ds);
		return ph_fail(err, PH_ENOMEM, "%s: out of memory", what);
	}
	/* sequence i: tokens [i*T, i*T+T) in, the next token of each out */
	for (int64_t i = 0; i < nseq; i++)
		for (int t = 0; t < seq_len; t++) {
			size_t o = a + (size_t)i * seq_len + (size_t)t;
			ds->x[i * seq_len + t] = (float)tok[o];
			ds->y[i * seq_len + t] = (int32_t)tok[o + 1];
		}
	return PH_OK;
}

static int tokens_shape(const ph_config *c, ph_shape *s, ph_err *err)
{
	*s = (ph_shape){ 1, { c->data.seq_len } };
	return PH_OK;
}

/* Name a split's file for the errors that point into it (ph_data_where). */
static void from_file(ph_dataset *ds, const char *path)
{
	snprintf(ds->x_from, sizeof ds->x_from, "tokens: %s", path);
	snprintf(ds->y_from, sizeof ds->y_from, "tokens: %s", path);
}

static int tokens_load(const ph_config *c, const ph_shape *shape, ph_dataset *train, ph_dataset *eval, ph_err *err)
{
	const ph_data_cfg *d = &c->data;
	int width = d->token_type == PH_TOKEN_UINT32 ? 4 : 2, T = (int)d->seq_len;
	memset(train, 0, sizeof *train);
	memset(eval, 0, sizeof *eval);
	uint32_t *tok = NULL, *vtok = NULL;
	size_t n = 0, vn = 0;
	int rc = ph_data_read_tokens(d->tokens, width, d->vocab_size, &tok, &n, err);
	if (!rc && d->test_tokens[0])
		rc = ph_data_read_tokens(d->test_tokens, width, d->vocab_size, &vtok, &vn, err);
	int held_out = !rc && !vtok;
	if (!rc && vtok) {
		rc = ph_data_token_sequences(tok, 0, n, T, d->vocab_size, d->tokens, "training", train, err);
		if (!rc)
			rc = ph_data_token_sequences(vtok, 0, vn, T, d->vocab_size, d->test_tokens, "validation", eval, err);
	} else if (!rc) {
		/* no validation file: the last holdout of the tokens, as text does */
		size_t cut = (size_t)((double)n * (1.0 - d->holdout));
		rc = ph_data_token_sequences(tok, 0, cut, T, d->vocab_size, d->tokens, "training", train, err);
		if (!rc && n - cut <= (size_t)T && !c->run.eval) {
			/* never evaluated: held out all the same (the training
			 * tokens do not depend on eval), but no error */
			ph_data_empty_split(eval, shape, T);
		} else if (!rc && n - cut <= (size_t)T) {
			rc = ph_fail(err, PH_EINVAL, "tokens: %s: its last holdout = %g is %zu tokens, too few for one "
				     "validation sequence of %d; raise [data] holdout, give test_tokens, use a shorter "
				     "seq_len, or set [run] eval = no", d->tokens, d->holdout, n - cut, T);
		} else if (!rc) {
			rc = ph_data_token_sequences(tok, cut, n, T, d->vocab_size, d->tokens, "held-out", eval, err);
		}
	}
	free(tok);
	free(vtok);
	if (rc) {
		ph_data_free(train);
		ph_data_free(eval);
		return rc;
	}
	from_file(train, d->tokens);
	from_file(eval, held_out ? d->tokens : d->test_tokens);
	return PH_OK;
}

static const char *const tokens_keys[] = { "tokens", "test_tokens", "token_type", "vocab_size", "seq_len", "holdout",
					   NULL };

const ph_data_source ph_data_source_tokens = {
	.name = "tokens",
	.help = "token ids from nanoGPT's train.bin/val.bin (uint16 or uint32) or llm.c's .bin, next-token targets",
	.keys = tokens_keys,
	.sample_shape = tokens_shape,
	.load = tokens_load,
};
