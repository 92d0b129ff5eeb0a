/* SPDX-License-Identifier: MIT */
/* The fashion-mnist data source: Fashion-MNIST from Debian's gzip IDX
 * files (dataset-fashion-mnist), train and t10k splits, pixels in [0,1]. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "data_source.h"

#define IDX_MAGIC_LABELS 0x00000801u
#define IDX_MAGIC_IMAGES 0x00000803u

#define INSTALL_HINT \
	"install Debian's dataset-fashion-mnist package " \
	"(apt-get install dataset-fashion-mnist) or set [data] path"

/* zlib's reason for a failed read, without the "PATH: " it puts first
 * (the messages name the file once already). */
static const char *gz_reason(gzFile f, const char *path, int *zerr)
{
	const char *msg = gzerror(f, zerr);
	size_t n = strlen(path);
	if (msg && !strncmp(msg, path, n) && msg[n] == ':' && msg[n + 1] == ' ')
		msg += n + 2;
	return *zerr == Z_ERRNO ? strerror(errno) : msg;
}

/* Read exactly len bytes; say what is wrong with the file otherwise. */
static int gz_read_all(gzFile f, const char *path, void *buf, size_t len,
		       const char *what, ph_err *err)
{
	unsigned char *p = buf;
	size_t got = 0;
	while (got < len) {
		/* gzread takes an unsigned int; keep each call well inside it. */
		size_t want = len - got;
		if (want > (1u << 30))
			want = 1u << 30;
		int r = gzread(f, p + got, (unsigned)want);
		if (r < 0) {
			int zerr;
			const char *why = gz_reason(f, path, &zerr);
			/* zlib's inflate state is allocated at the first read: no
			 * memory then is not damage to the file either */
			if (zerr == Z_MEM_ERROR)
				return ph_fail(err, PH_ENOMEM, "fashion-mnist: %s: out of memory reading %s", path, what);
			/* the system's read error is not damage to the file */
			return ph_fail(err, PH_EIO, "fashion-mnist: %s: reading %s: %s; %s", path, what, why,
				       zerr == Z_ERRNO ? "check the disk and run again" : "the file is damaged, reinstall it");
		}
		if (r == 0)
			return ph_fail(err, PH_EIO, "fashion-mnist: %s: truncated: "
				       "expected %zu bytes of %s, got %zu; reinstall "
				       "the file", path, len, what, got);
		got += (size_t)r;
	}
	return PH_OK;
}

static uint32_t be32(const unsigned char *b)
{
	return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}

static int open_idx(const char *path, gzFile *out, ph_err *err)
{
	struct stat st;
	if (stat(path, &st) != 0) {
		if (errno == ENOENT || errno == ENOTDIR)
			return ph_fail(err, PH_EIO, "fashion-mnist: %s not found; %s",
				       path, INSTALL_HINT);
		return ph_fail(err, PH_EIO, "fashion-mnist: %s: %s; check its permissions",
			       path, strerror(errno));
	}
	if (!S_ISREG(st.st_mode))
		return ph_fail(err, PH_EIO, "fashion-mnist: %s is not a regular file; "
			       "point [data] path at the directory holding the .gz files",
			       path);
	errno = 0;
	gzFile f = gzopen(path, "rb");
	if (!f && (!errno || errno == ENOMEM)) /* zlib's state or buffers: no errno of open's */
		return ph_fail(err, PH_ENOMEM, "fashion-mnist: out of memory opening %s", path);
	if (!f)
		return ph_fail(err, PH_EIO, "fashion-mnist: cannot open %s: %s", path, strerror(errno));
	/* The default 8 KiB buffer makes a 26 MB file take many small reads. */
	gzbuffer(f, 1u << 17);
	*out = f;
	return PH_OK;
}

/* Nothing may follow the last record: extra bytes mean the header lied. */
static int expect_eof(gzFile f, const char *path, ph_err *err)
{
	unsigned char extra;
	int r = gzread(f, &extra, 1);
	if (r < 0) {
		int zerr;
		const char *why = gz_reason(f, path, &zerr);
		if (zerr == Z_MEM_ERROR)
			return ph_fail(err, PH_ENOMEM, "fashion-mnist: %s: out of memory after the last record", path);
		return ph_fail(err, PH_EIO, "fashion-mnist: %s: after the last record: %s; %s", path, why,
			       zerr == Z_ERRNO ? "check the disk and run again" : "the file is damaged, reinstall it");
	}
	if (r > 0)
		return ph_fail(err, PH_EINVAL, "fashion-mnist: %s has bytes after the "
			       "count its header gives: not an IDX file", path);
	/* zlib reports a gzip stream cut inside its 8-byte trailer (CRC and
	 * length unchecked) only here, as a soft Z_BUF_ERROR. */
	int zerr;
	gzerror(f, &zerr);
	if (zerr == Z_BUF_ERROR)
		return ph_fail(err, PH_EIO, "fashion-mnist: %s: truncated: the gzip stream "
			       "ends before its checksum; reinstall the file", path);
	return PH_OK;
}

/* Opens an IDX file and reads its header h[0 .. hsize-1], which must start
 * with `magic`; `what` names the records ("images", "labels") and `file`
 * the kind of file expected, for the line a wrong magic gets. */
static int idx_open_header(const char *path, uint32_t magic, const char *what, const char *file,
			   unsigned char *h, size_t hsize, gzFile *out, ph_err *err)
{
	gzFile f = NULL;
	int rc = open_idx(path, &f, err);
	if (rc)
		return rc;
	rc = gz_read_all(f, path, h, hsize, "IDX header", err);
	if (!rc && be32(h) != magic)
		rc = ph_fail(err, PH_EINVAL, "fashion-mnist: %s: magic 0x%08x, expected "
			     "0x%08x (IDX unsigned-byte %s): not %s",
			     path, be32(h), magic, what, file);
	if (rc) {
		gzclose(f);
		return rc;
	}
	*out = f;
	return PH_OK;
}

static int read_images(const char *path, int64_t *n, int64_t *rows, int64_t *cols,
		       float **x, ph_err *err)
{
	gzFile f;
	unsigned char h[16];
	int rc = idx_open_header(path, IDX_MAGIC_IMAGES, "images", "an image file", h, sizeof h, &f, err);
	if (rc)
		return rc;
	unsigned char *raw = NULL;
	float *out = NULL;
	int64_t cnt = be32(h + 4), r = be32(h + 8), c = be32(h + 12);
	/* Each factor bounded first, so no product below can overflow. */
	if (cnt == 0 || r == 0 || c == 0 || cnt > PH_DATA_MAX_ELEMS ||
	    r > PH_DATA_MAX_ELEMS || c > PH_DATA_MAX_ELEMS ||
	    r * c > PH_DATA_MAX_ELEMS || cnt * (r * c) > PH_DATA_MAX_ELEMS) {
		rc = ph_fail(err, PH_EINVAL, "fashion-mnist: %s: header says %lld images "
			     "of %lldx%lld, outside 1..%lld pixels in all: corrupt file",
			     path, (long long)cnt, (long long)r, (long long)c,
			     PH_DATA_MAX_ELEMS);
		goto done;
	}
	size_t total = (size_t)(cnt * r * c);
	raw = malloc(total);
	out = malloc(total * sizeof *out);
	if (!raw || !out) {
		rc = ph_fail(err, PH_ENOMEM, "fashion-mnist: %s: no memory for %zu pixels",
			     path, total);
		goto done;
	}
	rc = gz_read_all(f, path, raw, total, "pixels", err);
	if (!rc)
		rc = expect_eof(f, path, err);
	if (rc)
		goto done;
	for (size_t i = 0; i < total; i++)
		out[i] = (float)raw[i] / 255.f;
	*n = cnt;
	*rows = r;
	*cols = c;
	*x = out;
	out = NULL;
done:
	free(raw);
	free(out);
	gzclose(f);
	return rc;
}

static int read_labels(const char *path, int64_t *n, int nclasses, int32_t **y,
		       ph_err *err)
{
	gzFile f;
	unsigned char h[8];
	int rc = idx_open_header(path, IDX_MAGIC_LABELS, "labels", "a label file", h, sizeof h, &f, err);
	if (rc)
		return rc;
	unsigned char *raw = NULL;
	int32_t *out = NULL;
	int64_t cnt = be32(h + 4);
	if (cnt == 0 || cnt > PH_DATA_MAX_ELEMS) {
		rc = ph_fail(err, PH_EINVAL, "fashion-mnist: %s: header says %lld labels, "
			     "outside 1..%lld: corrupt file", path, (long long)cnt,
			     PH_DATA_MAX_ELEMS);
		goto done;
	}
	raw = malloc((size_t)cnt);
	out = malloc((size_t)cnt * sizeof *out);
	if (!raw || !out) {
		rc = ph_fail(err, PH_ENOMEM, "fashion-mnist: %s: no memory for %lld labels",
			     path, (long long)cnt);
		goto done;
	}
	rc = gz_read_all(f, path, raw, (size_t)cnt, "labels", err);
	if (!rc)
		rc = expect_eof(f, path, err);
	if (rc)
		goto done;
	for (int64_t i = 0; i < cnt; i++) {
		if (raw[i] >= nclasses) {
			rc = ph_fail(err, PH_EINVAL, "fashion-mnist: %s: label %d at index "
				     "%lld is outside 0..%d: corrupt file", path, raw[i],
				     (long long)i, nclasses - 1);
			goto done;
		}
		out[i] = raw[i];
	}
	*n = cnt;
	*y = out;
	out = NULL;
done:
	free(raw);
	free(out);
	gzclose(f);
	return rc;
}

int ph_data_load_fashion_mnist(const char *dir, int train, ph_dataset *ds, ph_err *err)
{
	memset(ds, 0, sizeof *ds);
	if (!dir || !*dir)
		dir = PH_FASHION_MNIST_DIR;
	const char *pre = train ? "train" : "t10k";

	char ipath[4096], lpath[4096];
	if ((size_t)snprintf(ipath, sizeof ipath, "%s/%s-images-idx3-ubyte.gz", dir, pre)
		    >= sizeof ipath ||
	    (size_t)snprintf(lpath, sizeof lpath, "%s/%s-labels-idx1-ubyte.gz", dir, pre)
		    >= sizeof lpath)
		return ph_fail(err, PH_EINVAL, "fashion-mnist: path %s is too long", dir);

	/* Check both files exist before spending half a second on the images;
	 * a missing directory shows up here as a missing file, named in full,
	 * but a file given for the directory is named as such. */
	struct stat st;
	if (stat(dir, &st) == 0 && !S_ISDIR(st.st_mode))
		return ph_fail(err, PH_EINVAL, "fashion-mnist: [data] path %s is a file, not a directory; point it at the "
			       "directory holding the four .gz files (%s-images-idx3-ubyte.gz ...)", dir, pre);
	if (stat(ipath, &st) != 0)
		return ph_fail(err, PH_EIO, "fashion-mnist: %s not found; %s", ipath,
			       INSTALL_HINT);
	if (stat(lpath, &st) != 0)
		return ph_fail(err, PH_EIO, "fashion-mnist: %s not found; %s", lpath,
			       INSTALL_HINT);

	int64_t ni = 0, nl = 0, rows = 0, cols = 0;
	float *x = NULL;
	int32_t *y = NULL;
	int rc = read_labels(lpath, &nl, 10, &y, err);
	if (!rc)
		rc = read_images(ipath, &ni, &rows, &cols, &x, err);
	/* The model's input shape is planned as [1,28,28] before any file is
	 * read; an IDX file of other images must not reach the batch buffers. */
	if (!rc && (rows != 28 || cols != 28))
		rc = ph_fail(err, PH_EINVAL, "fashion-mnist: %s holds %lldx%lld images, Fashion-MNIST's "
			     "are 28x28: another data set; point [data] path at Fashion-MNIST",
			     ipath, (long long)rows, (long long)cols);
	if (!rc && ni != nl)
		rc = ph_fail(err, PH_EINVAL, "fashion-mnist: %s has %lld images but %s has "
			     "%lld labels; the two files come from different sets",
			     ipath, (long long)ni, lpath, (long long)nl);
	if (rc) {
		free(x);
		free(y);
		return rc;
	}
	ds->n = ni;
	ds->shape.ndim = 3;
	ds->shape.d[0] = 1;
	ds->shape.d[1] = rows;
	ds->shape.d[2] = cols;
	ds->targets_per_sample = 1;
	ds->nclasses = 10;
	ds->x = x;
	ds->y = y;
	/* the names for later errors, cut to fit (a message holds less) */
	snprintf(ds->x_from, sizeof ds->x_from, "fashion-mnist: %.*s", (int)sizeof ds->x_from - 16, ipath);
	snprintf(ds->y_from, sizeof ds->y_from, "fashion-mnist: %.*s", (int)sizeof ds->y_from - 16, lpath);
	return PH_OK;
}

static int fm_shape(const ph_config *c, ph_shape *s, ph_err *err)
{
	*s = (ph_shape){ 3, { 1, 28, 28 } };
	return PH_OK;
}

static int fm_load(const ph_config *c, const ph_shape *shape, ph_dataset *train, ph_dataset *eval, ph_err *err)
{
	int rc = ph_data_load_fashion_mnist(c->data.path, 1, train, err);
	if (!rc && (rc = ph_data_load_fashion_mnist(c->data.path, 0, eval, err)))
		ph_data_free(train);
	return rc;
}

static const char *const fm_keys[] = { "path", NULL };

const ph_data_source ph_data_source_fashion_mnist = {
	.name = "fashion-mnist",
	.help = "Fashion-MNIST's 60000 + 10000 28x28 images in 10 classes (Debian's dataset-fashion-mnist)",
	.keys = fm_keys,
	.sample_shape = fm_shape,
	.load = fm_load,
};
