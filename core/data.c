/* Data sets: Fashion-MNIST from gzip IDX files, synthetic classes, epoch order. */
#include "data.h"
#include "readfile.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <zlib.h>

/* Refuse anything bigger before allocating: a corrupt header must not make
 * us try to allocate terabytes.  Fashion-MNIST train is 47 M pixels. */
#define PH_DATA_MAX_ELEMS 100000000LL

#define IDX_MAGIC_LABELS 0x00000801u
#define IDX_MAGIC_IMAGES 0x00000803u

#define INSTALL_HINT \
	"install Debian's dataset-fashion-mnist package " \
	"(apt-get install dataset-fashion-mnist) or set [data] path"

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
			const char *msg = gzerror(f, &zerr);
			return ph_fail(err, PH_EIO, "fashion-mnist: %s: reading %s: %s; "
				       "the file is damaged, reinstall it", path, what,
				       zerr == Z_ERRNO ? strerror(errno) : msg);
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
	gzFile f = gzopen(path, "rb");
	if (!f)
		return ph_fail(err, PH_EIO, "fashion-mnist: cannot open %s: %s",
			       path, errno ? strerror(errno) : "out of memory");
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
		const char *msg = gzerror(f, &zerr);
		return ph_fail(err, PH_EIO, "fashion-mnist: %s: %s; the file is damaged, "
			       "reinstall it", path, zerr == Z_ERRNO ? strerror(errno) : msg);
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

static int read_images(const char *path, int64_t *n, int64_t *rows, int64_t *cols,
		       float **x, ph_err *err)
{
	gzFile f;
	int rc = open_idx(path, &f, err);
	if (rc)
		return rc;
	unsigned char h[16];
	unsigned char *raw = NULL;
	float *out = NULL;
	rc = gz_read_all(f, path, h, sizeof h, "IDX header", err);
	if (rc)
		goto done;
	uint32_t magic = be32(h);
	if (magic != IDX_MAGIC_IMAGES) {
		rc = ph_fail(err, PH_EINVAL, "fashion-mnist: %s: magic 0x%08x, expected "
			     "0x%08x (IDX unsigned-byte images): not an image file",
			     path, magic, IDX_MAGIC_IMAGES);
		goto done;
	}
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
	int rc = open_idx(path, &f, err);
	if (rc)
		return rc;
	unsigned char h[8];
	unsigned char *raw = NULL;
	int32_t *out = NULL;
	rc = gz_read_all(f, path, h, sizeof h, "IDX header", err);
	if (rc)
		goto done;
	uint32_t magic = be32(h);
	if (magic != IDX_MAGIC_LABELS) {
		rc = ph_fail(err, PH_EINVAL, "fashion-mnist: %s: magic 0x%08x, expected "
			     "0x%08x (IDX unsigned-byte labels): not a label file",
			     path, magic, IDX_MAGIC_LABELS);
		goto done;
	}
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
	 * a missing directory shows up here as a missing file, named in full. */
	struct stat st;
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
	return PH_OK;
}

/* Stream tags, so the prototypes, the noise and the label order never share
 * random numbers with each other or with the epoch permutations (0xDA7A). */
#define SYN_PROTO 0x5950524FULL /* "PROT" */
#define SYN_NOISE 0x4E4F4953ULL /* "NOIS" */
#define SYN_ORDER 0x4F524452ULL /* "ORDR" */

int ph_data_synthetic(int64_t n, const ph_shape *shape, int nclasses, uint64_t seed,
		      ph_dataset *ds, ph_err *err)
{
	memset(ds, 0, sizeof *ds);
	if (n <= 0 || n > PH_DATA_MAX_ELEMS)
		return ph_fail(err, PH_EINVAL, "synthetic data: %lld samples; use 1..%lld",
			       (long long)n, PH_DATA_MAX_ELEMS);
	if (nclasses < 1 || nclasses > 1000000)
		return ph_fail(err, PH_EINVAL, "synthetic data: %d classes; use 1..1000000",
			       nclasses);
	if (!shape || shape->ndim < 1 || shape->ndim > PH_MAX_DIMS)
		return ph_fail(err, PH_EINVAL, "synthetic data: a sample needs 1..%d "
			       "dimensions", PH_MAX_DIMS);
	int64_t numel = 1;
	for (int i = 0; i < shape->ndim; i++) {
		if (shape->d[i] < 1 || shape->d[i] > PH_DATA_MAX_ELEMS)
			return ph_fail(err, PH_EINVAL, "synthetic data: dimension %d is "
				       "%lld; use 1..%lld", i, (long long)shape->d[i],
				       PH_DATA_MAX_ELEMS);
		numel *= shape->d[i];
		if (numel > PH_DATA_MAX_ELEMS)
			break;
	}
	/* Division, not multiplication, so the check itself cannot overflow. */
	if (numel > PH_DATA_MAX_ELEMS || n > PH_DATA_MAX_ELEMS / numel ||
	    (int64_t)nclasses > PH_DATA_MAX_ELEMS / numel)
		return ph_fail(err, PH_EINVAL, "synthetic data: %lld samples (or %d "
			       "classes) of %lld values exceed %lld values in all; make "
			       "it smaller", (long long)n, nclasses, (long long)numel,
			       PH_DATA_MAX_ELEMS);

	float *x = malloc((size_t)(n * numel) * sizeof *x);
	int32_t *y = malloc((size_t)n * sizeof *y);
	float *proto = malloc((size_t)(nclasses * numel) * sizeof *proto);
	int64_t *perm = malloc((size_t)n * sizeof *perm);
	if (!x || !y || !proto || !perm) {
		free(x);
		free(y);
		free(proto);
		free(perm);
		return ph_fail(err, PH_ENOMEM, "synthetic data: no memory for %lld samples "
			       "of %lld values", (long long)n, (long long)numel);
	}

	/* Prototypes uniform in [-1,1); noise uniform in [-0.5,0.5).  Per value
	 * the prototypes differ by ~0.8 on average while noise is 0.29 rms, so a
	 * linear model separates the classes once a sample has a few values. */
	for (int c = 0; c < nclasses; c++) {
		uint64_t key = ph_rng_key(seed, SYN_PROTO, (uint64_t)c, 0);
		for (int64_t j = 0; j < numel; j++)
			proto[c * numel + j] = 2.f * ph_rng_uniform(key, (uint64_t)j) - 1.f;
	}
	/* Labels i mod nclasses (balanced), in an order fixed by the seed. */
	ph_data_permutation(ph_mix64(seed ^ SYN_ORDER), 0, n, perm);
	for (int64_t i = 0; i < n; i++) {
		int32_t c = (int32_t)(perm[i] % nclasses);
		uint64_t key = ph_rng_key(seed, SYN_NOISE, (uint64_t)i, 0);
		const float *p = proto + c * numel;
		float *xi = x + i * numel;
		for (int64_t j = 0; j < numel; j++)
			xi[j] = p[j] + 0.5f * (2.f * ph_rng_uniform(key, (uint64_t)j) - 1.f);
		y[i] = c;
	}
	free(proto);
	free(perm);

	ds->n = n;
	ds->shape = *shape;
	ds->targets_per_sample = 1;
	ds->nclasses = nclasses;
	ds->x = x;
	ds->y = y;
	return PH_OK;
}

void ph_data_free(ph_dataset *ds)
{
	if (!ds)
		return;
	free(ds->x);
	free(ds->y);
	memset(ds, 0, sizeof *ds);
}

void ph_data_permutation(uint64_t seed, uint64_t epoch, int64_t n, int64_t *perm)
{
	if (n <= 0)
		return;
	for (int64_t i = 0; i < n; i++)
		perm[i] = i;
	/* Fisher-Yates from the top.  Step i draws 64 bits at counter i, so the
	 * whole order is a pure function of (seed, epoch, n).  j = floor(r*(i+1)
	 * / 2^64) is Lemire's multiply-shift; its bias is below (i+1)/2^64. */
	uint64_t key = ph_rng_key(seed, epoch, 0xDA7A, 0);
	for (int64_t i = n - 1; i > 0; i--) {
		ph_philox4 r = ph_philox4x32(key, 0, (uint64_t)i);
		uint64_t bits = (uint64_t)r.v[0] << 32 | r.v[1];
		int64_t j = (int64_t)(((unsigned __int128)bits * (uint64_t)(i + 1)) >> 64);
		int64_t t = perm[i];
		perm[i] = perm[j];
		perm[j] = t;
	}
}

void ph_data_gather(const ph_dataset *ds, const int64_t *idx, int count, float *x, int32_t *y)
{
	int64_t numel = ph_shape_numel(&ds->shape);
	int tps = ds->targets_per_sample;
	for (int k = 0; k < count; k++) {
		int64_t i = idx[k];
		if (x)
			memcpy(x + (int64_t)k * numel, ds->x + i * numel,
			       (size_t)numel * sizeof *x);
		if (y)
			memcpy(y + (int64_t)k * tps, ds->y + i * tps, (size_t)tps * sizeof *y);
	}
}

/* ------------------------------------------------------------------ */
/* Byte-level text.                                                     */

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
	int bad = ferror(f);
	fclose(f);
	if (bad)
		return ph_fail(err, PH_EIO, "text: error reading %s", path);
	if (memchr(*buf + start, 0, *len - start)) {
		*len = start; /* binary (an index, an image): not part of the corpus */
		(*skipped)++;
	}
	return PH_OK;
}

int ph_data_load_text(const char *path, int seq_len, double holdout, int train, ph_dataset *ds, ph_err *err)
{
	memset(ds, 0, sizeof *ds);
	if (!path || !path[0])
		path = PH_FORTUNES_DIR;
	if (seq_len < 1 || holdout <= 0 || holdout >= 1)
		return ph_fail(err, PH_EINVAL, "text: seq_len %d / holdout %g out of range", seq_len, holdout);
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
