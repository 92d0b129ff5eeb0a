/* SPDX-License-Identifier: MIT */
/* The text data source: byte-level text from a file or a directory
 * (Debian's fortunes by default), sequences of seq_len bytes in and each
 * next byte out, the last holdout of the bytes held out for validation. */
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "bpe.h"
#include "data_source.h"
#include "readfile.h"

static int cmp_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Append a regular text file to buf; a file with a NUL byte is not text. */
static int append_file(const char *path, unsigned char **buf, size_t *len, size_t *cap, int *skipped,
		       ph_err *err)
{
	FILE *f;
	int rc = ph_fopen_regular(path, "text: [data] path", "set [data] path to a text file or directory", &f, err);
	if (rc)
		return rc;
	size_t start = *len;
	for (;;) {
		if (*cap - *len < 65536) {
			size_t nc = *cap ? *cap * 2 : 1 << 20;
			if (nc > ((size_t)1 << 31)) {
				fclose(f);
				return ph_fail(err, PH_EINVAL, "text: corpus larger than 2 GiB at %s; use a smaller one", path);
			}
			unsigned char *n = realloc(*buf, nc);
			if (!n) {
				fclose(f);
				return ph_fail(err, PH_ENOMEM, "text: out of memory reading %s", path);
			}
			*buf = n;
			*cap = nc;
		}
		size_t got = fread(*buf + *len, 1, *cap - *len, f);
		*len += got;
		if (got == 0)
			break;
	}
	int bad = ferror(f), e = errno;
	fclose(f);
	if (bad)
		return ph_fail(err, PH_EIO, "text: error reading %s: %s; check the file or set [data] path to another",
			       path, strerror(e));
	if (memchr(*buf + start, 0, *len - start)) {
		*len = start; /* binary (an index, an image): not part of the corpus */
		(*skipped)++;
	}
	return PH_OK;
}

/* The corpus of `path` (a file, or a directory's text files) into *out. */
static int read_corpus(const char *path, unsigned char **out, size_t *out_len, ph_err *err)
{
	*out = NULL;
	*out_len = 0;
	struct stat st;
	if (stat(path, &st) != 0) {
		if (strcmp(path, PH_FORTUNES_DIR) == 0)
			return ph_fail(err, PH_EIO, "text: %s not found; install Debian's fortunes package "
				       "(apt-get install fortunes) or set [data] path to a text file or directory", path);
		return ph_fail(err, PH_EIO, "text: %s not found; set [data] path to a text file or directory", path);
	}
	unsigned char *buf = NULL;
	size_t len = 0, cap = 0;
	int skipped = 0, rc = PH_OK;
	if (S_ISDIR(st.st_mode)) {
		/* regular files only (Debian's .u8 names are symlinks to the same
		 * text), no .dat indexes, sorted so the corpus is the same everywhere */
		DIR *d = opendir(path);
		if (!d)
			return ph_fail(err, PH_EIO, "text: cannot open directory %s: %s", path, strerror(errno));
		char **names = NULL;
		int n = 0, ncap = 0;
		struct dirent *de;
		while ((de = readdir(d)) && !rc) {
			const char *nm = de->d_name;
			size_t l = strlen(nm);
			if (nm[0] == '.' || (l > 4 && strcmp(nm + l - 4, ".dat") == 0))
				continue;
			char full[4096];
			snprintf(full, sizeof full, "%s/%s", path, nm);
			struct stat fs;
			if (lstat(full, &fs) != 0 || !S_ISREG(fs.st_mode))
				continue;
			if (n == ncap) {
				ncap = ncap ? ncap * 2 : 64;
				char **nn = realloc(names, (size_t)ncap * sizeof *nn);
				if (!nn) {
					rc = ph_fail(err, PH_ENOMEM, "out of memory");
					break;
				}
				names = nn;
			}
			if (!(names[n] = strdup(full))) {
				rc = ph_fail(err, PH_ENOMEM, "out of memory");
				break;
			}
			n++;
		}
		closedir(d);
		if (!rc)
			qsort(names, (size_t)n, sizeof *names, cmp_name);
		for (int i = 0; i < n; i++) {
			if (!rc)
				rc = append_file(names[i], &buf, &len, &cap, &skipped, err);
			free(names[i]);
		}
		free(names);
	} else {
		rc = append_file(path, &buf, &len, &cap, &skipped, err);
		if (!rc && skipped)
			rc = ph_fail(err, PH_EINVAL, "text: %s holds NUL bytes: not a text file", path);
	}
	if (rc) {
		free(buf);
		return rc;
	}
	*out = buf;
	*out_len = len;
	return PH_OK;
}

int ph_data_load_text(const char *path, int seq_len, double holdout, int train, ph_dataset *ds, ph_err *err)
{
	memset(ds, 0, sizeof *ds);
	if (!path || !path[0])
		path = PH_FORTUNES_DIR;
	if (seq_len < 1 || holdout <= 0 || holdout >= 1)
		return ph_fail(err, PH_EINVAL, "text: seq_len %d / holdout %g out of range", seq_len, holdout);
	unsigned char *buf;
	size_t len;
	int rc = read_corpus(path, &buf, &len, err);
	if (rc)
		return rc;
	/* train: the first (1 - holdout) of the bytes; validation: the rest */
	size_t cut = (size_t)((double)len * (1.0 - holdout));
	size_t a = train ? 0 : cut, b = train ? cut : len;
	int64_t nseq = b - a > (size_t)seq_len ? (int64_t)((b - a - 1) / (size_t)seq_len) : 0;
	if (nseq < 1) {
		free(buf);
		return ph_fail(err, PH_EINVAL, "text: %s has %zu bytes, too few for one %s sequence of %d; use more text "
			       "or a shorter seq_len", path, len, train ? "training" : "validation", seq_len);
	}
	ds->n = nseq;
	ds->shape = (ph_shape){ 1, { seq_len } };
	ds->targets_per_sample = seq_len;
	ds->nclasses = 256;
	ds->x = malloc((size_t)nseq * seq_len * sizeof *ds->x);
	ds->y = malloc((size_t)nseq * seq_len * sizeof *ds->y);
	if (!ds->x || !ds->y) {
		free(buf);
		ph_data_free(ds);
		return ph_fail(err, PH_ENOMEM, "text: out of memory");
	}
	/* sequence i: bytes [i*T, i*T+T) in, the next byte of each out */
	for (int64_t i = 0; i < nseq; i++)
		for (int t = 0; t < seq_len; t++) {
			size_t o = a + (size_t)i * seq_len + (size_t)t;
			ds->x[i * seq_len + t] = (float)buf[o];
			ds->y[i * seq_len + t] = buf[o + 1];
		}
	free(buf);
	return PH_OK;
}

static int text_shape(const ph_config *c, ph_shape *s, ph_err *err)
{
	*s = (ph_shape){ 1, { c->data.seq_len } };
	return PH_OK;
}

/* tokenizer = bpe: the corpus encoded with GPT-2's BPE, the last holdout
 * of the tokens held out, sequences cut as the bytes are. */
static int text_load_bpe(const ph_data_cfg *d, ph_dataset *train, ph_dataset *eval, ph_err *err)
{
	const char *path = d->path[0] ? d->path : PH_FORTUNES_DIR;
	unsigned char *buf = NULL;
	size_t len = 0, n = 0;
	int32_t *ids = NULL;
	ph_bpe *bpe = NULL;
	int rc = ph_bpe_load(&bpe, d->vocab, d->merges, err);
	if (!rc)
		rc = read_corpus(path, &buf, &len, err);
	if (!rc)
		rc = ph_bpe_encode(bpe, buf, len, &ids, &n, err);
	if (!rc) {
		int vocab = ph_bpe_vocab_size(bpe);
		size_t cut = (size_t)((double)n * (1.0 - d->holdout));
		/* ids are below vocab by construction: the uint32 view is exact */
		const uint32_t *tok = (const uint32_t *)ids;
		rc = ph_data_token_sequences(tok, 0, cut, (int)d->seq_len, vocab, path, "training", train, err);
		if (!rc && (rc = ph_data_token_sequences(tok, cut, n, (int)d->seq_len, vocab, path, "held-out", eval, err)))
			ph_data_free(train);
	}
	free(ids);
	free(buf);
	ph_bpe_free(bpe);
	return rc;
}

static int text_load(const ph_config *c, const ph_shape *shape, ph_dataset *train, ph_dataset *eval, ph_err *err)
{
	const ph_data_cfg *d = &c->data;
	memset(train, 0, sizeof *train);
	memset(eval, 0, sizeof *eval);
	if (d->tokenizer == PH_TOKENIZER_BPE)
		return text_load_bpe(d, train, eval, err);
	int rc = ph_data_load_text(d->path, (int)d->seq_len, d->holdout, 1, train, err);
	if (!rc && (rc = ph_data_load_text(d->path, (int)d->seq_len, d->holdout, 0, eval, err)))
		ph_data_free(train);
	return rc;
}

static const char *const text_keys[] = { "path", "seq_len", "holdout", "tokenizer", "vocab", "merges", NULL };

const ph_data_source ph_data_source_text = {
	.name = "text",
	.help = "byte-level text from a file or directory (Debian's fortunes by default), next-byte targets",
	.keys = text_keys,
	.sample_shape = text_shape,
	.load = text_load,
	.per_byte = 1,
};
