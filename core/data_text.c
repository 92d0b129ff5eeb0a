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

/* What a directory held besides the text it gave: each a count. */
typedef struct {
	int dir;    /* the path is a directory (the rest count its entries) */
	int nul;    /* regular files holding NUL bytes: not text */
	int dat;    /* fortune's .dat indexes */
	int links;  /* symbolic links (Debian's .u8 names link to the same text) */
	int dirs;   /* subdirectories: not descended into */
	int other;  /* FIFOs, sockets, devices, dot-files */
} skipped_t;

/* "1 file holding NUL bytes, 2 symlinks" into buf; "" when nothing was skipped. */
static void skipped_text(const skipped_t *k, char *buf, size_t len)
{
	const int n[5] = { k->nul, k->dat, k->links, k->dirs, k->other };
	const char *one[5] = { "file holding NUL bytes", ".dat index", "symlink", "subdirectory", "other entry" },
		   *many[5] = { "files holding NUL bytes", ".dat indexes", "symlinks", "subdirectories", "other entries" };
	size_t used = 0;
	buf[0] = 0;
	for (int i = 0; i < 5 && used < len; i++)
		if (n[i])
			used += (size_t)snprintf(buf + used, len - used, "%s%d %s", used ? ", " : "", n[i],
						 n[i] == 1 ? one[i] : many[i]);
}

/* Append a regular text file to buf; a file with a NUL byte is not text. */
static int append_file(const char *path, unsigned char **buf, size_t *len, size_t *cap, skipped_t *skipped,
		       ph_err *err)
{
	FILE *f;
	int rc = ph_fopen_regular(path, "text: [data] path", "set [data] path to a text file or directory", &f, err);
	if (rc)
		return rc;
	struct stat sb;
	const int fd = fileno(f); /* -1 for a stream of no descriptor (a test's): the path's */
	const long long size = (fd >= 0 ? fstat(fd, &sb) : stat(path, &sb)) ? -1 : (long long)sb.st_size;
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
	/* cut while being read: a part of the corpus once trained, exit 0 */
	if (size >= 0 && (long long)(*len - start) < size)
		return ph_fail(err, PH_EIO, "text: %s shrank while being read (%zu of %lld bytes); run again once nothing "
			       "writes it", path, *len - start, size);
	if (memchr(*buf + start, 0, *len - start)) {
		*len = start; /* binary (an index, an image): not part of the corpus */
		skipped->nul++;
	}
	return PH_OK;
}

/* The corpus of `path` (a file, or a directory's text files) into *out;
 * what a directory held besides into *skipped. */
static int read_corpus(const char *path, unsigned char **out, size_t *out_len, skipped_t *skipped, ph_err *err)
{
	*out = NULL;
	*out_len = 0;
	memset(skipped, 0, sizeof *skipped);
	struct stat st;
	if (stat(path, &st) != 0) {
		if (strcmp(path, PH_FORTUNES_DIR) == 0)
			return ph_fail(err, PH_EIO, "text: %s not found; install Debian's fortunes package "
				       "(apt-get install fortunes) or set [data] path to a text file or directory", path);
		return ph_fail(err, PH_EIO, "text: %s not found; set [data] path to a text file or directory", path);
	}
	unsigned char *buf = NULL;
	size_t len = 0, cap = 0;
	int rc = PH_OK;
	skipped->dir = S_ISDIR(st.st_mode);
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
			if (!strcmp(nm, ".") || !strcmp(nm, ".."))
				continue;
			/* each entry left out is counted: a directory that gives
			 * no text says what it held instead */
			char full[4096];
			snprintf(full, sizeof full, "%s/%s", path, nm);
			struct stat fs;
			int *skip = NULL;
			if (nm[0] == '.' || lstat(full, &fs) != 0)
				skip = &skipped->other;
			else if (S_ISLNK(fs.st_mode))
				skip = &skipped->links;
			else if (S_ISDIR(fs.st_mode))
				skip = &skipped->dirs;
			else if (!S_ISREG(fs.st_mode))
				skip = &skipped->other;
			else if (l > 4 && strcmp(nm + l - 4, ".dat") == 0)
				skip = &skipped->dat;
			if (skip) {
				(*skip)++;
				continue;
			}
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
		if (!rc && n > 1) /* names is NULL when nothing was kept: qsort must not see it */
			qsort(names, (size_t)n, sizeof *names, cmp_name);
		for (int i = 0; i < n; i++) {
			if (!rc)
				rc = append_file(names[i], &buf, &len, &cap, skipped, err);
			free(names[i]);
		}
		free(names);
	} else {
		rc = append_file(path, &buf, &len, &cap, skipped, err);
		if (!rc && skipped->nul)
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

/* "too few for one sequence": why, and what to do.  A directory that
 * gave no text says what it held instead; the held-out part names
 * holdout, and that a run that never evaluates needs none. */
static int too_few(const char *path, size_t len, size_t part, int train, int seq_len, double holdout,
		   const skipped_t *skipped, ph_err *err)
{
	char sk[160];
	skipped_text(skipped, sk, sizeof sk);
	if (len == 0 && sk[0])
		return ph_fail(err, PH_EINVAL, "text: %s holds no text: skipped %s (only regular files without NUL bytes "
			       "are read); add text files, or set [data] path to one", path, sk);
	if (len == 0 && skipped->dir)
		return ph_fail(err, PH_EINVAL, "text: %s holds no text (no files, or only empty ones); add text files, or "
			       "set [data] path to one", path);
	if (train && sk[0])
		return ph_fail(err, PH_EINVAL, "text: %s has %zu bytes of text (skipped %s), too few for one training "
			       "sequence of %d; use more text or a shorter seq_len", path, len, sk, seq_len);
	if (train)
		return ph_fail(err, PH_EINVAL, "text: %s has %zu bytes, too few for one training sequence of %d; use more "
			       "text or a shorter seq_len", path, len, seq_len);
	return ph_fail(err, PH_EINVAL, "text: %s has %zu bytes; its last holdout = %g is %zu bytes, too few for one "
		       "validation sequence of %d; raise [data] holdout, use more text or a shorter seq_len, or set "
		       "[run] eval = no", path, len, holdout, part, seq_len);
}

/* ph_data_load_text; a validation split too short for one sequence is
 * empty instead of an error when `may_be_empty` (a run without eval). */
static int load_text(const char *path, int seq_len, double holdout, int train, int may_be_empty, ph_dataset *ds,
		     ph_err *err)
{
	memset(ds, 0, sizeof *ds);
	if (!path || !path[0])
		path = PH_FORTUNES_DIR;
	if (seq_len < 1 || holdout <= 0 || holdout >= 1)
		return ph_fail(err, PH_EINVAL, "text: seq_len %d / holdout %g out of range", seq_len, holdout);
	unsigned char *buf;
	size_t len;
	skipped_t skipped;
	int rc = read_corpus(path, &buf, &len, &skipped, err);
	if (rc)
		return rc;
	/* train: the first (1 - holdout) of the bytes; validation: the rest */
	size_t cut = (size_t)((double)len * (1.0 - holdout));
	size_t a = train ? 0 : cut, b = train ? cut : len;
	int64_t nseq = b - a > (size_t)seq_len ? (int64_t)((b - a - 1) / (size_t)seq_len) : 0;
	if (nseq < 1 && !train && len && may_be_empty) {
		free(buf);
		ph_data_empty_split(ds, &(ph_shape){ 1, { seq_len } }, seq_len);
		return PH_OK;
	}
	if (nseq < 1) {
		free(buf);
		return too_few(path, len, b - a, train, seq_len, holdout, &skipped, err);
	}
	ds->n = nseq;
	ds->shape = (ph_shape){ 1, { seq_len } };
	ds->targets_per_sample = seq_len;
	ds->nclasses = 256;
	ds->unit = "byte";
	ds->first = (int64_t)a;
	snprintf(ds->x_from, sizeof ds->x_from, "text: %s", path);
	snprintf(ds->y_from, sizeof ds->y_from, "text: %s", path);
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

int ph_data_load_text(const char *path, int seq_len, double holdout, int train, ph_dataset *ds, ph_err *err)
{
	return load_text(path, seq_len, holdout, train, 0, ds, err);
}

static int text_shape(const ph_config *c, ph_shape *s, ph_err *err)
{
	*s = (ph_shape){ 1, { c->data.seq_len } };
	return PH_OK;
}

/* tokenizer = bpe: the corpus encoded with GPT-2's BPE, the last holdout
 * of the tokens held out, sequences cut as the bytes are. */
static int text_load_bpe(const ph_data_cfg *d, int eval_on, ph_dataset *train, ph_dataset *eval, ph_err *err)
{
	const char *path = d->path[0] ? d->path : PH_FORTUNES_DIR;
	unsigned char *buf = NULL;
	size_t len = 0, n = 0;
	int32_t *ids = NULL;
	ph_bpe *bpe = NULL;
	skipped_t skipped;
	int T = (int)d->seq_len;
	int rc = ph_bpe_load(&bpe, d->vocab, d->merges, err);
	if (!rc)
		rc = read_corpus(path, &buf, &len, &skipped, err);
	if (!rc && len == 0) /* no text at all: say why, as the bytes do */
		rc = too_few(path, 0, 0, 1, T, d->holdout, &skipped, err);
	if (!rc)
		rc = ph_bpe_encode(bpe, buf, len, &ids, &n, err);
	if (!rc) {
		int vocab = ph_bpe_vocab_size(bpe);
		size_t cut = (size_t)((double)n * (1.0 - d->holdout));
		/* ids are below vocab by construction: the uint32 view is exact */
		const uint32_t *tok = (const uint32_t *)ids;
		rc = ph_data_token_sequences(tok, 0, cut, T, vocab, path, "training", train, err);
		if (!rc && n - cut <= (size_t)T && !eval_on)
			ph_data_empty_split(eval, &(ph_shape){ 1, { T } }, T); /* never evaluated: no error */
		else if (!rc && n - cut <= (size_t)T)
			rc = ph_fail(err, PH_EINVAL, "text: %s has %zu tokens; its last holdout = %g is %zu tokens, too few "
				     "for one validation sequence of %d; raise [data] holdout, use more text or a shorter "
				     "seq_len, or set [run] eval = no", path, n, d->holdout, n - cut, T);
		else if (!rc)
			rc = ph_data_token_sequences(tok, cut, n, T, vocab, path, "held-out", eval, err);
		if (rc)
			ph_data_free(train);
	}
	if (!rc) {
		/* what a token id past the model's is traced back to: the text,
		 * encoded by [data] vocab's BPE */
		snprintf(train->x_from, sizeof train->x_from, "text (bpe of [data] vocab): %s", path);
		snprintf(train->y_from, sizeof train->y_from, "%s", train->x_from);
		snprintf(eval->x_from, sizeof eval->x_from, "%s", train->x_from);
		snprintf(eval->y_from, sizeof eval->y_from, "%s", train->x_from);
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
		return text_load_bpe(d, c->run.eval, train, eval, err);
	/* The held-out bytes are held out whatever [run] eval says (the
	 * training bytes, and so the run, do not depend on it); a run that
	 * never evaluates only needs none of them. */
	int rc = load_text(d->path, (int)d->seq_len, d->holdout, 1, 0, train, err);
	if (!rc && (rc = load_text(d->path, (int)d->seq_len, d->holdout, 0, !c->run.eval, eval, err)))
		ph_data_free(train);
	return rc;
}

static const char *const text_keys[] = { "path", "seq_len", "holdout", "tokenizer", "vocab", "merges", NULL };

/* vocab and merges are the BPE's files: the byte tokenizer reads neither. */
static const char *text_unread(const ph_config *c, const char *key)
{
	if (c->data.tokenizer != PH_TOKENIZER_BPE && (!strcmp(key, "vocab") || !strcmp(key, "merges")))
		return "tokenizer = bpe";
	return NULL;
}

const ph_data_source ph_data_source_text = {
	.name = "text",
	.help = "byte-level text from a file or directory (Debian's fortunes by default), next-byte targets",
	.keys = text_keys,
	.sample_shape = text_shape,
	.load = text_load,
	.per_byte = 1,
	.unread = text_unread,
};
