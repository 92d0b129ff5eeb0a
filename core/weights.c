/* SPDX-License-Identifier: MIT */
/* safetensors writer and reader.  The reader trusts nothing in the file: it
 * checks the header length, the JSON and every tensor's offsets against the
 * file's real size before it copies a byte, and refuses with one line that
 * names the file.  The writer never leaves a half-written file behind. */
#include "weights.h"
#include "json.h"
#include "readfile.h"

#include <cjson/cJSON.h>
#include <xxhash.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "outputs.h"

/* The reference implementation's limit: a bigger header is not a checkpoint. */
#define ST_MAX_HEADER (100ull * 1000 * 1000)

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#define ST_SWAP 1 /* safetensors is little-endian; swap on big-endian hosts */
static void swap32(void *p, size_t n)
{
	uint32_t *w = p;
	for (size_t i = 0; i < n; i++)
		w[i] = __builtin_bswap32(w[i]);
}
#else
#define ST_SWAP 0
#endif

/* Write and hash (h may be NULL). */
static int out_write(ph_outfile *o, XXH3_state_t *h, const void *buf, size_t len)
{
	if (h)
		XXH3_64bits_update(h, buf, len);
	return ph_outfile_write(o, buf, len);
}

static int read_all_at(int fd, void *buf, size_t len, uint64_t off)
{
	char *p = buf;
	while (len > 0) {
		ssize_t r = pread(fd, p, len > (1u << 30) ? (1u << 30) : len, (off_t)off);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		if (r == 0) {
			errno = 0; /* end of file: the caller says "truncated" */
			return -1;
		}
		p += r;
		len -= (size_t)r;
		off += (uint64_t)r;
	}
	return 0;
}

static cJSON *json_int(uint64_t v)
{
	/* Raw text, not cJSON numbers: cJSON prints doubles, and a large offset
	 * could come out as "1e+15", which safetensors readers refuse. */
	char buf[24];
	snprintf(buf, sizeof buf, "%llu", (unsigned long long)v);
	return cJSON_CreateRaw(buf);
}

/* numel * 4 of a tensor we are about to write, or -1 if the shape is bad. */
static int64_t ref_bytes(const ph_tensor_ref *t)
{
	if (t->shape.ndim < 0 || t->shape.ndim > PH_MAX_DIMS)
		return -1;
	uint64_t n = 4;
	for (int d = 0; d < t->shape.ndim; d++) {
		if (t->shape.d[d] < 0 ||
		    __builtin_mul_overflow(n, (uint64_t)t->shape.d[d], &n) || n > INT64_MAX)
			return -1;
	}
	return (int64_t)n;
}

static int check_refs(const char *path, const ph_tensor_ref *t, int n, ph_err *err)
{
	for (int i = 0; i < n; i++) {
		if (!t[i].name[0] || strnlen(t[i].name, sizeof t[i].name) == sizeof t[i].name)
			return ph_fail(err, PH_EINVAL, "%s: tensor %d has an empty or "
				       "unterminated name", path, i);
		if (!strcmp(t[i].name, "__metadata__"))
			return ph_fail(err, PH_EINVAL, "%s: a tensor may not be named "
				       "__metadata__; rename it", path);
		int64_t b = ref_bytes(&t[i]);
		if (b < 0)
			return ph_fail(err, PH_EINVAL, "%s: tensor %s has a bad shape "
				       "(0..%d dimensions, each >= 0)", path, t[i].name,
				       PH_MAX_DIMS);
		if (b > 0 && !t[i].data)
			return ph_fail(err, PH_EINVAL, "%s: tensor %s has no data", path,
				       t[i].name);
		for (int j = 0; j < i; j++)
			if (!strcmp(t[i].name, t[j].name))
				return ph_fail(err, PH_EINVAL, "%s: tensor %s is listed twice; "
					       "names must be unique", path, t[i].name);
	}
	return PH_OK;
}

/* The entry of t[] that tied copy t[i] equals, or -1 when t[i] is no tied
 * copy, its source is not in the list, or the two differ in shape or (with
 * `bits`, when writing) in any bit: then the copy is written in full, and
 * the file never hides a copy that drifted from its source. */
static int tie_source(const ph_tensor_ref *t, int n, int i, int bits)
{
	if (!t[i].tied_to)
		return -1;
	for (int j = 0; j < n; j++)
		if (j != i && !strcmp(t[j].name, t[i].tied_to)) {
			if (t[j].shape.ndim != t[i].shape.ndim)
				return -1;
			for (int d = 0; d < t[i].shape.ndim; d++)
				if (t[j].shape.d[d] != t[i].shape.d[d])
					return -1;
			size_t bytes = (size_t)ref_bytes(&t[i]);
			if (bits && bytes && (!t[i].data || !t[j].data || memcmp(t[i].data, t[j].data, bytes)))
				return -1;
			return j;
		}
	return -1;
}

/* __metadata__ "tied": "copy=source,..." for the copies left out; NULL
 * when none is (*oom set when out of memory). */
static char *tied_list(const ph_tensor_ref *t, int n, int *oom)
{
	size_t len = 0;
	for (int i = 0; i < n; i++)
		if (tie_source(t, n, i, 1) >= 0)
			len += strlen(t[i].name) + strlen(t[i].tied_to) + 2;
	*oom = 0;
	if (!len)
		return NULL;
	char *s = malloc(len + 1);
	if (!s) {
		*oom = 1;
		return NULL;
	}
	size_t k = 0;
	for (int i = 0; i < n; i++)
		if (tie_source(t, n, i, 1) >= 0)
			k += (size_t)sprintf(s + k, "%s%s=%s", k ? "," : "", t[i].name, t[i].tied_to);
	return s;
}

int ph_safetensors_tied_out(const ph_tensor_ref *t, int n)
{
	int out = 0;
	for (int i = 0; i < n; i++)
		out += tie_source(t, n, i, 1) >= 0;
	return out;
}

/* The JSON header, unpadded; NULL when out of memory.  Tied copies get no
 * entry: "tied" in __metadata__ names them. */
static char *build_header(const ph_tensor_ref *t, int n, const char *const *metadata)
{
	int oom;
	char *tied = tied_list(t, n, &oom);
	if (oom)
		return NULL;
	cJSON *root = cJSON_CreateObject();
	if (!root) {
		free(tied);
		return NULL;
	}
	int ok = 1;
	if ((metadata && metadata[0]) || tied) {
		cJSON *meta = cJSON_AddObjectToObject(root, "__metadata__");
		ok = meta != NULL;
		for (int i = 0; ok && metadata && metadata[i]; i += 2)
			ok = cJSON_AddStringToObject(meta, metadata[i], metadata[i + 1]) != NULL;
		if (ok && tied)
			ok = cJSON_AddStringToObject(meta, "tied", tied) != NULL;
	}
	free(tied);
	uint64_t off = 0;
	for (int i = 0; ok && i < n; i++) {
		if (tie_source(t, n, i, 1) >= 0)
			continue;
		uint64_t bytes = (uint64_t)ref_bytes(&t[i]);
		cJSON *e = cJSON_AddObjectToObject(root, t[i].name);
		cJSON *shape = NULL, *offs = NULL;
		ok = e && cJSON_AddStringToObject(e, "dtype", "F32") &&
		     (shape = cJSON_AddArrayToObject(e, "shape")) &&
		     (offs = cJSON_AddArrayToObject(e, "data_offsets"));
		for (int d = 0; ok && d < t[i].shape.ndim; d++)
			ok = cJSON_AddItemToArray(shape, json_int((uint64_t)t[i].shape.d[d]));
		ok = ok && cJSON_AddItemToArray(offs, json_int(off)) &&
		     cJSON_AddItemToArray(offs, json_int(off + bytes));
		off += bytes;
	}
	char *s = ok ? cJSON_PrintUnformatted(root) : NULL;
	cJSON_Delete(root);
	return s;
}

static int write_tensor(ph_outfile *o, XXH3_state_t *h, const ph_tensor_ref *t)
{
	size_t count = (size_t)ref_bytes(t) / 4;
#if ST_SWAP
	float buf[4096];
	for (size_t i = 0; i < count; i += 4096) {
		size_t k = count - i < 4096 ? count - i : 4096;
		memcpy(buf, t->data + i, k * 4);
		swap32(buf, k);
		if (out_write(o, h, buf, k * 4))
			return -1;
	}
	return 0;
#else
	return count ? out_write(o, h, t->data, count * 4) : 0;
#endif
}

int ph_safetensors_write(const char *path, const ph_tensor_ref *t, int n,
			 const char *const *metadata, ph_err *err)
{
	return ph_safetensors_write_hashed(path, t, n, metadata, NULL, NULL, err);
}

int ph_safetensors_write_hashed(const char *path, const ph_tensor_ref *t, int n,
				const char *const *metadata, uint64_t *size, uint64_t *hash,
				ph_err *err)
{
	if (n < 0 || (n > 0 && !t))
		return ph_fail(err, PH_EINVAL, "%s: bad tensor list", path);
	int rc = check_refs(path, t, n, err);
	if (rc)
		return rc;
	if (metadata)
		for (int i = 0; metadata[i]; i += 2)
			if (!metadata[i + 1])
				return ph_fail(err, PH_EINVAL, "%s: metadata key %s has no "
					       "value", path, metadata[i]);

	char *json = build_header(t, n, metadata);
	if (!json)
		return ph_fail(err, PH_ENOMEM, "%s: no memory for the header", path);
	size_t len = strlen(json);
	/* Pad with spaces so the data starts 8-byte aligned, as the format asks. */
	size_t padded = (len + 7) & ~(size_t)7;
	char *hdr = malloc(8 + padded);
	if (!hdr) {
		free(json);
		return ph_fail(err, PH_ENOMEM, "%s: no memory for the header", path);
	}
	for (int i = 0; i < 8; i++)
		hdr[i] = (char)((uint64_t)padded >> (8 * i));
	memcpy(hdr + 8, json, len);
	memset(hdr + 8 + len, ' ', padded - len);
	free(json);

	ph_outfile o;
	if ((rc = ph_outfile_open(&o, path, "output", err))) {
		free(hdr);
		return rc;
	}
	XXH3_state_t *h = hash ? XXH3_createState() : NULL;
	if (hash && (!h || XXH3_64bits_reset(h) == XXH_ERROR)) {
		XXH3_freeState(h);
		ph_outfile_abort(&o);
		free(hdr);
		return ph_fail(err, PH_ENOMEM, "%s: no memory for its checksum", path);
	}
	uint64_t total = 8 + padded;
	int bad = out_write(&o, h, hdr, 8 + padded);
	ph_outfile_test_signal(path);
	for (int i = 0; !bad && i < n; i++) {
		if (tie_source(t, n, i, 1) >= 0)
			continue; /* stored once, as its source */
		bad = write_tensor(&o, h, &t[i]);
		total += (uint64_t)ref_bytes(&t[i]);
	}
	int saved = errno;
	free(hdr);
	if (hash)
		*hash = XXH3_64bits_digest(h);
	if (size)
		*size = total;
	XXH3_freeState(h);
	if (bad) {
		/* The old file at path, if any, was never touched. */
		ph_outfile_abort(&o);
		if (saved == EFBIG) /* SIGXFSZ is ignored (core/signals.c): a full disk by another name */
			return ph_fail(err, PH_EIO, "%s: writing failed: file size limit reached (ulimit -f, or the file "
				       "system's largest file); the previous file is unchanged: raise the limit", path);
		return ph_fail(err, PH_EIO, "%s: writing failed: %s; the previous file is "
			       "unchanged (check free space and permissions)", path, strerror(saved));
	}
	return ph_outfile_commit(&o, "output", err);
}

/* ------------------------------------------------------------------ */
/* Reader.                                                              */

static const struct {
	const char *name;
	int size;
} st_dtypes[] = {
	{ "F64", 8 }, { "F32", 4 }, { "F16", 2 }, { "BF16", 2 },
	{ "F8_E5M2", 1 }, { "F8_E4M3", 1 }, { "I64", 8 }, { "I32", 4 },
	{ "I16", 2 }, { "I8", 1 }, { "U64", 8 }, { "U32", 4 }, { "U16", 2 },
	{ "U8", 1 }, { "BOOL", 1 },
};

typedef struct {
	const char *name;
	const char *dtype;
	const cJSON *shape;
	uint64_t numel, b, e;
} st_entry;

/* A JSON number that is a whole number in 0..2^53 (exact in a double). */
static int json_uint(const cJSON *j, uint64_t *out)
{
	if (!cJSON_IsNumber(j))
		return 0;
	double v = j->valuedouble;
	if (!(v >= 0 && v <= 9007199254740992.0) || v != (double)(uint64_t)v)
		return 0;
	*out = (uint64_t)v;
	return 1;
}

/* "[10,5]" into buf. */
static void fmt_dims(char *buf, size_t cap, const int64_t *d, int nd)
{
	size_t k = (size_t)snprintf(buf, cap, "[");
	for (int i = 0; i < nd && k < cap; i++)
		k += (size_t)snprintf(buf + k, cap - k, "%s%lld", i ? "," : "", (long long)d[i]);
	if (k < cap)
		snprintf(buf + k, cap - k, "]");
}

static int by_name(const void *a, const void *b)
{
	return strcmp(((const st_entry *)a)->name, ((const st_entry *)b)->name);
}

static int by_offset(const void *a, const void *b)
{
	const st_entry *x = a, *y = b;
	if (x->b != y->b)
		return x->b < y->b ? -1 : 1;
	return x->e < y->e ? -1 : x->e > y->e;
}

/* Check one header entry against the data section of dsize bytes. */
static int parse_entry(const char *path, const cJSON *j, uint64_t dsize, st_entry *e,
		       ph_err *err)
{
	const char *name = j->string;
	e->name = name;
	if (!cJSON_IsObject(j))
		return ph_fail(err, PH_EINVAL, "%s: header entry %s is not an object: "
			       "corrupt or not safetensors", path, name);
	const cJSON *dt = cJSON_GetObjectItemCaseSensitive(j, "dtype");
	if (!cJSON_IsString(dt))
		return ph_fail(err, PH_EINVAL, "%s: %s has no \"dtype\" string: corrupt "
			       "header", path, name);
	int esize = 0;
	for (size_t i = 0; i < sizeof st_dtypes / sizeof st_dtypes[0]; i++)
		if (!strcmp(dt->valuestring, st_dtypes[i].name))
			esize = st_dtypes[i].size;
	if (!esize)
		return ph_fail(err, PH_EINVAL, "%s: %s has unknown dtype \"%.32s\": "
			       "corrupt or from a newer safetensors", path, name,
			       dt->valuestring);
	e->dtype = dt->valuestring;

	const cJSON *shape = cJSON_GetObjectItemCaseSensitive(j, "shape");
	if (!cJSON_IsArray(shape))
		return ph_fail(err, PH_EINVAL, "%s: %s has no \"shape\" array: corrupt "
			       "header", path, name);
	uint64_t numel = 1, bytes, dim;
	int overflow = 0;
	const cJSON *it;
	cJSON_ArrayForEach(it, shape) {
		if (!json_uint(it, &dim))
			return ph_fail(err, PH_EINVAL, "%s: %s has a shape entry that is "
				       "not a non-negative integer: corrupt header", path, name);
		overflow |= __builtin_mul_overflow(numel, dim, &numel);
	}
	overflow |= __builtin_mul_overflow(numel, (uint64_t)esize, &bytes);

	const cJSON *offs = cJSON_GetObjectItemCaseSensitive(j, "data_offsets");
	uint64_t b, en;
	if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 ||
	    !json_uint(cJSON_GetArrayItem(offs, 0), &b) ||
	    !json_uint(cJSON_GetArrayItem(offs, 1), &en) || b > en)
		return ph_fail(err, PH_EINVAL, "%s: %s has bad \"data_offsets\" (needs "
			       "[begin,end] integers, begin <= end): corrupt header",
			       path, name);
	if (en > dsize)
		return ph_fail(err, PH_EINVAL, "%s: %s data_offsets [%llu,%llu] run past "
			       "the data section (%llu bytes): truncated file", path, name,
			       (unsigned long long)b, (unsigned long long)en,
			       (unsigned long long)dsize);
	if (overflow || en - b != bytes)
		return ph_fail(err, PH_EINVAL, "%s: %s data_offsets [%llu,%llu] hold %llu "
			       "bytes, but its shape of %s needs %s%llu: corrupt header",
			       path, name, (unsigned long long)b, (unsigned long long)en,
			       (unsigned long long)(en - b), e->dtype,
			       overflow ? "more than " : "",
			       overflow ? (unsigned long long)UINT64_MAX
					: (unsigned long long)bytes);
	e->shape = shape;
	e->numel = numel;
	e->b = b;
	e->e = en;
	return PH_OK;
}

float ph_half_to_float(uint16_t h)
{
	uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, mant = h & 0x3ff, bits;
	if (exp == 0x1f) {
		bits = sign | 0x7f800000u | mant << 13; /* infinity, or NaN with its payload */
	} else if (exp) {
		bits = sign | (exp - 15 + 127) << 23 | mant << 13;
	} else if (!mant) {
		bits = sign; /* +-0 */
	} else {
		/* subnormal: mant * 2^-24; normalize it (a float has the range) */
		int e = -14;
		while (!(mant & 0x400)) {
			mant <<= 1;
			e--;
		}
		bits = sign | (uint32_t)(e + 127) << 23 | (mant & 0x3ff) << 13;
	}
	float f;
	memcpy(&f, &bits, sizeof f);
	return f;
}

float ph_bf16_to_float(uint16_t b)
{
	uint32_t bits = (uint32_t)b << 16;
	float f;
	memcpy(&f, &bits, sizeof f);
	return f;
}

/* n 16-bit values (little-endian, as the file stores them) at the back
 * half of the n floats at f, widened in place front to back: element i is
 * read before float i is written, and float i never reaches element i + 1. */
static void widen16(float *f, size_t n, int bf16)
{
	const unsigned char *h = (const unsigned char *)f + 2 * n;
	for (size_t i = 0; i < n; i++) {
		uint16_t v = (uint16_t)(h[2 * i] | h[2 * i + 1] << 8);
		f[i] = bf16 ? ph_bf16_to_float(v) : ph_half_to_float(v);
	}
}

/* Everything about the request that can be checked before copying. */
static int match_request(const char *path, const ph_tensor_ref *t, const st_entry *e,
			 ph_err *err)
{
	if (strcmp(e->dtype, "F32") && strcmp(e->dtype, "F16") && strcmp(e->dtype, "BF16"))
		return ph_fail(err, PH_EINVAL, "%s: dtype %s for %s; only F32, F16 and BF16 are read",
			       path, e->dtype, t->name);
	int nd = cJSON_GetArraySize(e->shape);
	int same = nd == t->shape.ndim;
	int64_t fd[16];
	int shown = nd < 16 ? nd : 16;
	for (int i = 0; i < shown; i++) {
		fd[i] = (int64_t)cJSON_GetArrayItem(e->shape, i)->valuedouble;
		if (same && fd[i] != t->shape.d[i])
			same = 0;
	}
	if (!same) {
		char have[200], want[200];
		fmt_dims(have, sizeof have, fd, shown);
		fmt_dims(want, sizeof want, t->shape.d, t->shape.ndim);
		return ph_fail(err, PH_EINVAL, "%s: %s has shape %s, the model expects %s",
			       path, t->name, have, want);
	}
	return PH_OK;
}

/* Does the "tied" metadata list (NULL: none) hold "copy=source"? */
static int tie_listed(const char *list, const char *copy, const char *source)
{
	size_t lc = strlen(copy), ls = strlen(source);
	for (const char *p = list; p && *p;) {
		const char *end = strchr(p, ',');
		size_t len = end ? (size_t)(end - p) : strlen(p);
		if (len == lc + 1 + ls && !strncmp(p, copy, lc) && p[lc] == '=' && !strncmp(p + lc + 1, source, ls))
			return 1;
		p = end ? end + 1 : p + len;
	}
	return 0;
}

int ph_safetensors_read(const char *path, ph_tensor_ref *t, int n, ph_err *err)
{
	if (n < 0 || (n > 0 && !t))
		return ph_fail(err, PH_EINVAL, "%s: bad tensor list", path);
	for (int i = 0; i < n; i++)
		if (strnlen(t[i].name, sizeof t[i].name) == sizeof t[i].name ||
		    t[i].shape.ndim < 0 || t[i].shape.ndim > PH_MAX_DIMS)
			return ph_fail(err, PH_EINVAL, "%s: request %d has an unterminated "
				       "name or %d dimensions (0..%d)", path, i,
				       t[i].shape.ndim, PH_MAX_DIMS);

	/* O_NONBLOCK: a FIFO must not block the open; the fstat below refuses it */
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return ph_fail(err, PH_EIO, "%s: cannot open: %s; check the path", path,
			       strerror(errno));
	char *hdr = NULL;
	cJSON *root = NULL;
	st_entry *ents = NULL;
	int rc = PH_OK; /* an empty header sets no entry and must still succeed */

	struct stat st;
	if (fstat(fd, &st)) {
		rc = ph_fail(err, PH_EIO, "%s: cannot stat: %s", path, strerror(errno));
		goto done;
	}
	if (!S_ISREG(st.st_mode)) {
		rc = ph_fail(err, PH_EINVAL, "%s: not a regular file but %s; give a safetensors file", path,
			     ph_file_kind(st.st_mode));
		goto done;
	}
	uint64_t fsize = (uint64_t)st.st_size;
	unsigned char lenb[8];
	if (fsize < 8) {
		rc = ph_fail(err, PH_EINVAL, "%s: %llu bytes, too short for the 8-byte "
			     "header length: truncated or not safetensors", path,
			     (unsigned long long)fsize);
		goto done;
	}
	if (read_all_at(fd, lenb, 8, 0)) { /* the system's failure, or a file cut while read: not its format */
		rc = ph_fail(err, PH_EIO, "%s: reading the header length: %s", path,
			     errno ? strerror(errno) : "file shrank while being read");
		goto done;
	}
	uint64_t hlen = 0;
	for (int i = 7; i >= 0; i--)
		hlen = hlen << 8 | lenb[i];
	if (hlen > fsize - 8) {
		rc = ph_fail(err, PH_EINVAL, "%s: header length %llu exceeds the file "
			     "(%llu bytes): truncated or not safetensors", path,
			     (unsigned long long)hlen, (unsigned long long)fsize);
		goto done;
	}
	if (hlen > ST_MAX_HEADER) {
		rc = ph_fail(err, PH_EINVAL, "%s: header length %llu exceeds the 100 MB "
			     "limit: corrupt or not safetensors", path,
			     (unsigned long long)hlen);
		goto done;
	}
	hdr = malloc(hlen + 1);
	if (!hdr) {
		rc = ph_fail(err, PH_ENOMEM, "%s: no memory for a %llu-byte header", path,
			     (unsigned long long)hlen);
		goto done;
	}
	if (read_all_at(fd, hdr, hlen, 8)) {
		rc = ph_fail(err, PH_EIO, "%s: reading the header: %s", path,
			     errno ? strerror(errno) : "file shrank while being read");
		goto done;
	}
	hdr[hlen] = 0;

	const char *end = NULL;
	int oom;
	root = ph_json_parse(hdr, hlen, &end, &oom);
	if (!root && oom) {
		rc = ph_fail(err, PH_ENOMEM, "%s: out of memory parsing its %llu-byte header", path,
			     (unsigned long long)hlen);
		goto done;
	}
	if (!root) {
		rc = ph_fail(err, PH_EINVAL, "%s: header is not valid JSON (error near "
			     "byte %lld of %llu): corrupt or not safetensors", path,
			     end ? (long long)(end - hdr) : -1LL, (unsigned long long)hlen);
		goto done;
	}
	/* Only the space padding may follow the JSON. */
	for (const char *p = end; p < hdr + hlen; p++)
		if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
			rc = ph_fail(err, PH_EINVAL, "%s: header has bytes after its JSON "
				     "(at byte %lld): corrupt or not safetensors", path,
				     (long long)(p - hdr));
			goto done;
		}
	if (!cJSON_IsObject(root)) {
		rc = ph_fail(err, PH_EINVAL, "%s: header is JSON but not an object: "
			     "not safetensors", path);
		goto done;
	}

	uint64_t dsize = fsize - 8 - hlen;
	int count = cJSON_GetArraySize(root), ne = 0;
	ents = calloc((size_t)count + 1, sizeof *ents);
	if (!ents) {
		rc = ph_fail(err, PH_ENOMEM, "%s: no memory for %d header entries", path,
			     count);
		goto done;
	}
	const cJSON *j;
	const char *tied = NULL; /* __metadata__ "tied": "copy=source,..." */
	cJSON_ArrayForEach(j, root) {
		if (!strcmp(j->string, "__metadata__")) {
			const cJSON *tv = cJSON_GetObjectItemCaseSensitive(j, "tied");
			if (cJSON_IsString(tv))
				tied = tv->valuestring;
			/* Free text for people; it only has to be well formed. */
			const cJSON *kv;
			int ok = cJSON_IsObject(j);
			cJSON_ArrayForEach(kv, j) ok = ok && cJSON_IsString(kv);
			if (!ok) {
				rc = ph_fail(err, PH_EINVAL, "%s: __metadata__ is not an object "
					     "of strings: corrupt header", path);
				goto done;
			}
			continue;
		}
		rc = parse_entry(path, j, dsize, &ents[ne], err);
		if (rc)
			goto done;
		ne++;
	}
	qsort(ents, (size_t)ne, sizeof *ents, by_name);
	for (int i = 1; i < ne; i++)
		if (!strcmp(ents[i - 1].name, ents[i].name)) {
			rc = ph_fail(err, PH_EINVAL, "%s: tensor %s appears twice in the "
				     "header: corrupt header", path, ents[i].name);
			goto done;
		}

	/* No two tensors may claim the same bytes (empty ones claim none). */
	qsort(ents, (size_t)ne, sizeof *ents, by_offset);
	const st_entry *prev = NULL;
	for (int i = 0; i < ne; i++) {
		if (ents[i].b == ents[i].e)
			continue;
		if (prev && ents[i].b < prev->e) {
			rc = ph_fail(err, PH_EINVAL, "%s: tensors %s and %s overlap in the "
				     "data section: corrupt header", path, prev->name,
				     ents[i].name);
			goto done;
		}
		prev = &ents[i];
	}
	qsort(ents, (size_t)ne, sizeof *ents, by_name); /* for bsearch below */
	/* Check every request before copying any, so a refused read leaves
	 * the caller's tensors as they were. */
	const st_entry **hit = calloc((size_t)n + 1, sizeof *hit);
	int *src = calloc((size_t)n + 1, sizeof *src);
	if (!hit || !src) {
		free(hit);
		free(src);
		rc = ph_fail(err, PH_ENOMEM, "%s: out of memory", path);
		goto done;
	}
	for (int i = 0; i < n; i++) {
		st_entry key = { .name = t[i].name };
		hit[i] = bsearch(&key, ents, (size_t)ne, sizeof *ents, by_name);
		if (!hit[i] && (src[i] = tie_source(t, n, i, 0)) >= 0 && tie_listed(tied, t[i].name, t[i].tied_to)) {
			if (ph_shape_numel(&t[i].shape) && !t[i].data) {
				rc = ph_fail(err, PH_EINVAL, "%s: no buffer given for %s", path, t[i].name);
				break;
			}
			continue; /* stored once, as its source: copied below */
		}
		src[i] = -1;
		if (!hit[i]) {
			rc = ph_fail(err, PH_EINVAL, "%s: tensor %.96s missing; was the file "
				     "written for another model?", path, t[i].name);
			break;
		}
		rc = match_request(path, &t[i], hit[i], err);
		if (rc)
			break;
		if (hit[i]->numel && !t[i].data) {
			rc = ph_fail(err, PH_EINVAL, "%s: no buffer given for %s", path,
				     t[i].name);
			break;
		}
	}
	for (int i = 0; !rc && i < n; i++) {
		if (!hit[i])
			continue;
		size_t bytes = (size_t)(hit[i]->e - hit[i]->b);
		int half = strcmp(hit[i]->dtype, "F32") != 0; /* F16 or BF16: widened in place */
		char *into = (char *)t[i].data + (half ? bytes : 0);
		if (bytes && read_all_at(fd, into, bytes, 8 + hlen + hit[i]->b)) {
			rc = ph_fail(err, PH_EIO, "%s: reading %s: %s", path, t[i].name,
				     errno ? strerror(errno) : "file shrank while being read");
			break;
		}
		if (half) {
			widen16(t[i].data, bytes / 2, !strcmp(hit[i]->dtype, "BF16"));
			continue;
		}
#if ST_SWAP
		swap32(t[i].data, bytes / 4);
#endif
	}
	/* the tied copies from their sources (a source may be a copy read
	 * in an earlier pass; a cycle, never written, is left as missing) */
	for (int pass = 0, left = 1; !rc && left && pass <= n; pass++) {
		left = 0;
		for (int i = 0; i < n; i++) {
			if (hit[i] || src[i] < 0)
				continue;
			if (!hit[src[i]] && src[src[i]] >= 0) {
				left = 1; /* its source is filled in a later pass */
				continue;
			}
			size_t bytes = (size_t)ph_shape_numel(&t[i].shape) * sizeof(float);
			if (bytes)
				memcpy(t[i].data, t[src[i]].data, bytes);
			src[i] = -1; /* filled */
		}
		if (left && pass == n)
			rc = ph_fail(err, PH_EINVAL, "%s: its \"tied\" metadata forms a cycle: corrupt header", path);
	}
	free(hit);
	free(src);
	if (rc)
		goto done;
	rc = PH_OK;
done:
	free(ents);
	cJSON_Delete(root);
	free(hdr);
	close(fd);
	return rc;
}

int ph_tensors_first_nonfinite(const ph_tensor_ref *t, int n, int64_t *at)
{
	for (int i = 0; i < n; i++) {
		int64_t k = ph_shape_numel(&t[i].shape);
		for (int64_t j = 0; j < k; j++)
			if (!isfinite(t[i].data[j])) {
				*at = j;
				return i;
			}
	}
	return -1;
}
