/* SPDX-License-Identifier: MIT */
/* The npy data source: inputs and class labels from NumPy .npy files
 * (train_images, train_labels, test_images, test_labels), the arrays
 * people already have.  Format 1.0/2.0/3.0, C order, little-endian;
 * float32 or uint8 inputs (uint8 scaled to [0,1] like Fashion-MNIST's;
 * float32 ones finite), int64, int32 or uint8 labels. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data_source.h"

/* The .npy header says more than a megabyte of dict only when corrupt. */
#define NPY_MAX_HEADER (1 << 20)

typedef struct {
	char kind;        /* 'f', 'u', 'i' */
	int size;         /* bytes per element */
	int ndim;
	int64_t dims[PH_MAX_DIMS + 1];
	long data_offset; /* where the array starts */
	int64_t count;    /* elements */
} npy_header;

/* The value text of 'key' in the header dict, or NULL. */
static const char *dict_value(const char *h, const char *key)
{
	char q[40];
	for (int quote = 0; quote < 2; quote++) {
		snprintf(q, sizeof q, quote ? "\"%s\"" : "'%s'", key);
		const char *p = strstr(h, q);
		if (p) {
			p += strlen(q);
			/* a Python literal: any blanks around the colon */
			while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
				p++;
			if (*p != ':')
				return NULL;
			p++;
			while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
				p++;
			return p;
		}
	}
	return NULL;
}

/* The most of a descr an error quotes: a structured dtype's list can
 * run on for the whole header. */
#define DESCR_SHOWN 60

/* The descr value as the header writes it, for an error: a quoted
 * string ('<f4') to its closing quote, a list or dict ([('a', '<f4')])
 * to its closing bracket (brackets inside quotes not counted), anything
 * else to the next comma; at most DESCR_SHOWN characters of it and "..."
 * after a cut, each byte that is not printable ASCII as \xNN (the
 * header is the file's, any bytes at all). */
static void descr_text(const char *d, char *buf, size_t len)
{
	size_t n = 0;
	if (d[0] == '\'' || d[0] == '"') {
		const char *e = strchr(d + 1, d[0]);
		n = e ? (size_t)(e - d) + 1 : strlen(d);
	} else if (d[0] == '[' || d[0] == '(' || d[0] == '{') {
		int depth = 0;
		char quote = 0;
		for (; d[n]; n++) {
			char ch = d[n];
			if (quote) {
				quote = ch == quote ? 0 : quote;
			} else if (ch == '\'' || ch == '"') {
				quote = ch;
			} else if (ch == '[' || ch == '(' || ch == '{') {
				depth++;
			} else if ((ch == ']' || ch == ')' || ch == '}') && --depth == 0) {
				n++;
				break;
			}
		}
	} else {
		n = strcspn(d, ",}");
	}
	size_t used = 0, i = 0;
	for (; i < n && i < DESCR_SHOWN && used + 5 < len; i++) {
		unsigned char ch = (unsigned char)d[i];
		if (ch >= 0x20 && ch < 0x7f)
			buf[used++] = (char)ch;
		else
			used += (size_t)snprintf(buf + used, len - used, "\\x%02x", ch);
	}
	if (i < n && used + 4 <= len) {
		memcpy(buf + used, "...", 3);
		used += 3;
	}
	buf[used] = 0;
}

/* A short fread of `path`: the system's read error (errno named), not the
 * file's format, when the stream says so; else 0 and the caller says what
 * the file lacks. */
static int read_error(FILE *f, const char *path, ph_err *err)
{
	if (!ferror(f))
		return PH_OK;
	return ph_fail(err, PH_EIO, "npy: error reading %s: %s; check the disk and run again", path, strerror(errno));
}

/* Parse the header of `path` (which `what` names: "images"/"labels"). */
static int read_header(FILE *f, const char *path, npy_header *h, ph_err *err)
{
	unsigned char pre[12];
	memset(h, 0, sizeof *h);
	size_t got = fread(pre, 1, 10, f);
	int rc = got < 10 ? read_error(f, path, err) : PH_OK;
	if (rc)
		return rc;
	if (got < 10 && got >= 1 && memcmp(pre, "\x93NUMPY", got < 6 ? got : 6) == 0)
		return ph_fail(err, PH_EINVAL, "npy: %s is truncated: %zu bytes, inside the .npy magic and version", path,
			       got);
	if (got != 10 || memcmp(pre, "\x93NUMPY", 6) != 0)
		return ph_fail(err, PH_EINVAL, "npy: %s is not a .npy file (no \\x93NUMPY magic); save it with numpy.save",
			       path);
	int major = pre[6];
	/* numpy reads (and writes) versions 1.0, 2.0 and 3.0 only */
	if ((major == 1 || major == 2 || major == 3) && pre[7] != 0)
		return ph_fail(err, PH_EINVAL, "npy: %s is .npy format version %d.%d; numpy writes 1.0, 2.0 and 3.0: save "
			       "it again with numpy.save", path, major, pre[7]);
	uint32_t hlen;
	long start;
	if (major == 1) {
		hlen = (uint32_t)pre[8] | (uint32_t)pre[9] << 8;
		start = 10;
	} else if (major == 2 || major == 3) {
		if (fread(pre + 10, 1, 2, f) != 2) {
			rc = read_error(f, path, err);
			return rc ? rc : ph_fail(err, PH_EINVAL, "npy: %s: header cut short; the file is truncated", path);
		}
		hlen = (uint32_t)pre[8] | (uint32_t)pre[9] << 8 | (uint32_t)pre[10] << 16 | (uint32_t)pre[11] << 24;
		start = 12;
	} else {
		return ph_fail(err, PH_EINVAL, "npy: %s is .npy format version %d.%d; only 1.0, 2.0 and 3.0 are read",
			       path, major, pre[7]);
	}
	if (hlen > NPY_MAX_HEADER)
		return ph_fail(err, PH_EINVAL, "npy: %s: header of %u bytes; the file is corrupt", path, hlen);
	char *txt = malloc(hlen + 1);
	if (!txt)
		return ph_fail(err, PH_ENOMEM, "npy: out of memory reading %s", path);
	if (fread(txt, 1, hlen, f) != hlen) {
		free(txt);
		rc = read_error(f, path, err);
		return rc ? rc : ph_fail(err, PH_EINVAL, "npy: %s: header cut short; the file is truncated", path);
	}
	txt[hlen] = 0;
	rc = PH_OK;
	const char *descr = dict_value(txt, "descr"), *fo = dict_value(txt, "fortran_order"),
		   *shape = dict_value(txt, "shape");
	if (!descr || !fo || !shape) {
		rc = ph_fail(err, PH_EINVAL, "npy: %s: header lacks %s; the file is corrupt", path,
			     !descr ? "'descr'" : !fo ? "'fortran_order'" : "'shape'");
		goto out;
	}
	/* a Python bool: False, or True (Fortran order); anything else is
	 * no header numpy wrote (it once read "0" as Fortran order) */
	int fo_false = strncmp(fo, "False", 5) == 0, fo_true = strncmp(fo, "True", 4) == 0;
	const char *fo_end = fo + (fo_false ? 5 : fo_true ? 4 : 0);
	if ((!fo_false && !fo_true) || isalnum((unsigned char)*fo_end) || *fo_end == '_') {
		rc = ph_fail(err, PH_EINVAL, "npy: %s: fortran_order is neither True nor False; the file is corrupt", path);
		goto out;
	}
	if (fo_true) {
		rc = ph_fail(err, PH_EINVAL, "npy: %s is in Fortran order; save numpy.ascontiguousarray(a) instead", path);
		goto out;
	}
	/* descr: '<f4', '|u1', '<i8' ... */
	char q = descr[0], shown[DESCR_SHOWN * 4 + 8];
	descr_text(descr, shown, sizeof shown);
	if ((q != '\'' && q != '"') || !descr[1] || !descr[2] || !descr[3] || descr[4] != q) {
		rc = ph_fail(err, PH_EINVAL, "npy: %s has dtype %s; use float32, uint8, int32 or int64 ('<f4', '|u1', "
			     "'<i4', '<i8')", path, shown);
		goto out;
	}
	char endian = descr[1];
	h->kind = descr[2];
	h->size = descr[3] - '0';
	if (endian == '>' && h->size > 1) {
		rc = ph_fail(err, PH_EINVAL, "npy: %s is big-endian (%s); save it as little-endian (a.astype('<...'))",
			     path, shown);
		goto out;
	}
	if (!((h->kind == 'f' && h->size == 4) || (h->kind == 'u' && h->size == 1) ||
	      (h->kind == 'i' && (h->size == 4 || h->size == 8)))) {
		rc = ph_fail(err, PH_EINVAL, "npy: %s has dtype %s; use float32, uint8, int32 or int64 ('<f4', '|u1', "
			     "'<i4', '<i8')", path, shown);
		goto out;
	}
	/* shape: (N, d1, ...) or (N,) */
	const char *p = shape;
	if (*p != '(') {
		rc = ph_fail(err, PH_EINVAL, "npy: %s: shape is not a tuple; the file is corrupt", path);
		goto out;
	}
	p++;
	h->count = 1;
	for (;;) {
		while (isspace((unsigned char)*p) || *p == ',')
			p++;
		if (*p == ')')
			break;
		char *e;
		errno = 0;
		long long d = strtoll(p, &e, 10);
		if (e == p || errno || d < 0) {
			rc = ph_fail(err, PH_EINVAL, "npy: %s: unreadable shape; the file is corrupt", path);
			goto out;
		}
		if (h->ndim == PH_MAX_DIMS + 1) {
			rc = ph_fail(err, PH_EINVAL, "npy: %s has more than %d dimensions; reshape it", path,
				     PH_MAX_DIMS + 1);
			goto out;
		}
		h->dims[h->ndim++] = d;
		if (d > PH_DATA_MAX_ELEMS || (d && h->count > PH_DATA_MAX_ELEMS / d)) {
			rc = ph_fail(err, PH_EINVAL, "npy: %s holds more than %lld values; use a smaller set", path,
				     PH_DATA_MAX_ELEMS);
			goto out;
		}
		h->count *= d;
		p = e;
		if (*p == 'L' || *p == 'l') /* Python 2's long literal (10L), which numpy still reads */
			p++;
	}
	if (h->ndim == 0 || h->dims[0] == 0) {
		rc = ph_fail(err, PH_EINVAL, "npy: %s holds no samples", path);
		goto out;
	}
	h->data_offset = start + (long)hlen;
out:
	free(txt);
	return rc;
}

/* Open `path` as a regular file (a FIFO or a directory is refused before
 * any read can block) and read its header; `key` is its [data] key. */
static int open_npy(const char *key, const char *path, FILE **fp, npy_header *h, ph_err *err)
{
	*fp = NULL;
	if (!path[0])
		return ph_fail(err, PH_EINVAL, "npy: [data] %s is not set; give the .npy file", key);
	struct stat st;
	if (stat(path, &st) != 0)
		return ph_fail(err, PH_EIO, "npy: %s (%s) not found: %s", path, key, strerror(errno));
	if (!S_ISREG(st.st_mode))
		return ph_fail(err, PH_EINVAL, "npy: %s (%s) is not a regular file", path, key);
	FILE *f = fopen(path, "rb");
	if (!f)
		return ph_fail(err, PH_EIO, "npy: cannot read %s (%s): %s", path, key, strerror(errno));
	int rc = read_header(f, path, h, err);
	if (!rc) {
		long long want = (long long)h->data_offset + (long long)h->count * h->size;
		if ((long long)st.st_size < want)
			rc = ph_fail(err, PH_EINVAL, "npy: %s is truncated: its shape needs %lld bytes, it has %lld", path,
				     want, (long long)st.st_size);
		else if ((long long)st.st_size > want)
			rc = ph_fail(err, PH_EINVAL, "npy: %s has %lld bytes after its array; the file is corrupt", path,
				     (long long)st.st_size - want);
	}
	if (rc) {
		fclose(f);
		return rc;
	}
	*fp = f;
	return PH_OK;
}

static int read_payload(FILE *f, const char *path, const npy_header *h, void **buf, ph_err *err)
{
	*buf = malloc((size_t)(h->count ? h->count : 1) * (size_t)h->size);
	if (!*buf)
		return ph_fail(err, PH_ENOMEM, "npy: out of memory reading %s", path);
	if (fseek(f, h->data_offset, SEEK_SET) != 0 || fread(*buf, (size_t)h->size, (size_t)h->count, f) != (size_t)h->count) {
		free(*buf);
		*buf = NULL;
		int rc = read_error(f, path, err);
		return rc ? rc
			  : ph_fail(err, PH_EIO, "npy: %s ends before its data (%lld values): it is truncated, or shrank "
				    "while being read; save it again with numpy.save", path, (long long)h->count);
	}
	return PH_OK;
}

static int64_t le_int(const unsigned char *p, int size)
{
	uint64_t v = 0;
	for (int i = size - 1; i >= 0; i--)
		v = v << 8 | p[i];
	if (size == 4)
		return (int32_t)(uint32_t)v;
	return (int64_t)v;
}

static int load_split(const char *ikey, const char *ipath, const char *lkey, const char *lpath, ph_dataset *ds,
		      ph_err *err)
{
	memset(ds, 0, sizeof *ds);
	FILE *fi = NULL, *fl = NULL;
	npy_header hi, hl;
	void *raw = NULL;
	int rc = open_npy(ikey, ipath, &fi, &hi, err);
	if (!rc)
		rc = open_npy(lkey, lpath, &fl, &hl, err);
	if (rc)
		goto out;
	if (hi.ndim < 2 || hi.kind == 'i') {
		rc = ph_fail(err, PH_EINVAL, "npy: %s (%s) must be [N, ...] float32 or uint8 inputs; it is %s with %d "
			     "dimension(s)", ipath, ikey, hi.kind == 'i' ? "integer" : hi.kind == 'f' ? "float32" : "uint8",
			     hi.ndim);
		goto out;
	}
	if (hl.ndim != 1 || hl.kind == 'f') {
		rc = ph_fail(err, PH_EINVAL, "npy: %s (%s) must be [N] integer labels (int64, int32 or uint8)", lpath, lkey);
		goto out;
	}
	if (hi.dims[0] != hl.dims[0]) {
		rc = ph_fail(err, PH_EINVAL, "npy: %s has %lld samples but %s has %lld labels; they must match", ipath,
			     (long long)hi.dims[0], lpath, (long long)hl.dims[0]);
		goto out;
	}
	int64_t n = hi.dims[0];
	ds->x = malloc((size_t)hi.count * sizeof *ds->x);
	ds->y = malloc((size_t)n * sizeof *ds->y);
	if (!ds->x || !ds->y) {
		rc = ph_fail(err, PH_ENOMEM, "npy: out of memory for %s", ipath);
		goto out;
	}
	if ((rc = read_payload(fl, lpath, &hl, &raw, err)))
		goto out;
	int64_t maxlab = 0;
	for (int64_t i = 0; i < n; i++) {
		int64_t v = hl.kind == 'u' ? ((unsigned char *)raw)[i] : le_int((unsigned char *)raw + i * hl.size, hl.size);
		if (v < 0 || v >= (1 << 24)) {
			rc = ph_fail(err, PH_EINVAL, "npy: %s: label %lld at index %lld; labels are classes 0 .. %d", lpath,
				     (long long)v, (long long)i, (1 << 24) - 1);
			goto out;
		}
		ds->y[i] = (int32_t)v;
		if (v > maxlab)
			maxlab = v;
	}
	free(raw);
	raw = NULL;
	if ((rc = read_payload(fi, ipath, &hi, &raw, err)))
		goto out;
	if (hi.kind == 'u') {
		for (int64_t i = 0; i < hi.count; i++)
			ds->x[i] = (float)((unsigned char *)raw)[i] / 255.f;
	} else {
		/* a NaN or an infinity would surface only as a loss that is not
		 * finite at the first step, which reads as a learning-rate
		 * problem: name the element here instead */
		const int64_t per = n ? hi.count / n : 1;
		for (int64_t i = 0; i < hi.count; i++) {
			const unsigned char *b = (unsigned char *)raw + 4 * i;
			uint32_t u = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
			memcpy(&ds->x[i], &u, 4);
			if (!isfinite(ds->x[i])) {
				rc = ph_fail(err, PH_EINVAL, "npy: %s (%s): input %lld of sample %lld is %s; the inputs must be "
					     "finite (numpy.nan_to_num, or drop the sample)", ipath, ikey,
					     (long long)(i % per), (long long)(i / per), isnan(ds->x[i]) ? "NaN" : "infinite");
				goto out;
			}
		}
	}
	ds->n = n;
	ds->shape.ndim = hi.ndim - 1;
	for (int i = 1; i < hi.ndim; i++)
		ds->shape.d[i - 1] = hi.dims[i];
	ds->targets_per_sample = 1;
	ds->nclasses = (int)maxlab + 1;
	snprintf(ds->x_from, sizeof ds->x_from, "npy: %s (%s)", ipath, ikey);
	snprintf(ds->y_from, sizeof ds->y_from, "npy: %s (%s)", lpath, lkey);
out:
	free(raw);
	if (fi)
		fclose(fi);
	if (fl)
		fclose(fl);
	if (rc)
		ph_data_free(ds);
	return rc;
}

int ph_data_load_npy(const char *images, const char *labels, ph_dataset *ds, ph_err *err)
{
	return load_split("images", images, "labels", labels, ds, err);
}

/* The shape comes from train_images' header alone (a few hundred bytes):
 * the model is planned from it without reading the arrays. */
static int npy_shape(const ph_config *c, ph_shape *s, ph_err *err)
{
	memset(s, 0, sizeof *s);
	FILE *f;
	npy_header h;
	int rc = open_npy("train_images", c->data.train_images, &f, &h, err);
	if (rc)
		return rc;
	fclose(f);
	if (h.ndim < 2)
		return ph_fail(err, PH_EINVAL, "npy: %s (train_images) must be [N, ...] inputs; it has %d dimension(s)",
			       c->data.train_images, h.ndim);
	s->ndim = h.ndim - 1;
	for (int i = 1; i < h.ndim; i++)
		s->d[i - 1] = h.dims[i];
	return PH_OK;
}

/* "[1,28,28]", for the errors (model.c's ph_shape_str is not linked here). */
static void shape_text(const ph_shape *s, char *buf, size_t len)
{
	size_t u = (size_t)snprintf(buf, len, "[");
	for (int i = 0; i < s->ndim && u < len; i++)
		u += (size_t)snprintf(buf + u, len - u, "%s%lld", i ? "," : "", (long long)s->d[i]);
	if (u < len)
		snprintf(buf + u, len - u, "]");
}

static int npy_load(const ph_config *c, const ph_shape *shape, ph_dataset *train, ph_dataset *eval, ph_err *err)
{
	const ph_data_cfg *d = &c->data;
	memset(eval, 0, sizeof *eval);
	int rc = load_split("train_images", d->train_images, "train_labels", d->train_labels, train, err);
	if (rc)
		return rc;
	if (!c->run.eval && !d->test_images[0] && !d->test_labels[0]) {
		/* never evaluated and no test files named: none needed (with
		 * either named, both are read and checked as under eval) */
		ph_data_empty_split(eval, shape, 1);
		return PH_OK;
	}
	if ((rc = load_split("test_images", d->test_images, "test_labels", d->test_labels, eval, err))) {
		ph_data_free(train);
		return rc;
	}
	/* the test inputs must be the samples the model was planned for */
	int same = eval->shape.ndim == shape->ndim;
	for (int i = 0; same && i < shape->ndim; i++)
		same = eval->shape.d[i] == shape->d[i];
	if (!same) {
		char want[96], got[96];
		shape_text(shape, want, sizeof want);
		shape_text(&eval->shape, got, sizeof got);
		rc = ph_fail(err, PH_EINVAL, "npy: %s holds samples of %s, %s's are %s; they must match", d->test_images,
			     got, d->train_images, want);
		ph_data_free(train);
		ph_data_free(eval);
	}
	return rc;
}

static const char *const npy_keys[] = { "train_images", "train_labels", "test_images", "test_labels", NULL };

const ph_data_source ph_data_source_npy = {
	.name = "npy",
	.help = "NumPy .npy arrays: [N, ...] float32/uint8 inputs, [N] integer class labels",
	.keys = npy_keys,
	.sample_shape = npy_shape,
	.load = npy_load,
};
