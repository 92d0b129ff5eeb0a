/* SPDX-License-Identifier: MIT */
/* safetensors writer and reader: round trip, byte layout, every kind of
 * corruption refused with one line, and failed writes that leave the old
 * file alone. */
#define _GNU_SOURCE
#include <check.h>
#include <math.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "weights.h"

#define SCRATCH_DIR_PREFIX "ph-test-weights"
#include "unit-harness.h"

static unsigned char *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	ck_assert_msg(f != NULL, "open %s: %s", path, strerror(errno));
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	unsigned char *b = malloc((size_t)n + 1);
	ck_assert_uint_eq(fread(b, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	*len = (size_t)n;
	return b;
}

static void spit(const char *path, const void *b, size_t len)
{
	FILE *f = fopen(path, "wb");
	ck_assert_ptr_nonnull(f);
	ck_assert_uint_eq(fwrite(b, 1, len, f), len);
	ck_assert_int_eq(fclose(f), 0);
}

/* A safetensors file with this exact JSON header and dlen data bytes. */
static const char *make_st(const char *name, const char *json, size_t dlen)
{
	const char *path = in_dir(name);
	size_t hl = strlen(json);
	unsigned char *b = calloc(1, 8 + hl + dlen + 1);
	for (int i = 0; i < 8; i++)
		b[i] = (unsigned char)((uint64_t)hl >> (8 * i));
	memcpy(b + 8, json, hl);
	for (size_t i = 0; i < dlen; i++)
		b[8 + hl + i] = (unsigned char)i;
	spit(path, b, 8 + hl + dlen);
	free(b);
	return path;
}

static ph_tensor_ref ref(const char *name, float *data, int ndim, ...)
{
	ph_tensor_ref t;
	memset(&t, 0, sizeof t);
	snprintf(t.name, sizeof t.name, "%s", name);
	t.data = data;
	t.shape.ndim = ndim;
	va_list ap;
	va_start(ap, ndim);
	for (int i = 0; i < ndim; i++)
		t.shape.d[i] = va_arg(ap, int);
	va_end(ap);
	return t;
}

/* The read must fail with `want` in the message, and leave dst untouched. */
static void expect_fail(const char *path, ph_tensor_ref *t, int n, const char *want)
{
	int64_t cnt[8];
	for (int i = 0; i < n; i++) {
		cnt[i] = ph_shape_numel(&t[i].shape);
		for (int64_t j = 0; j < cnt[i]; j++)
			t[i].data[j] = -7.f;
	}
	ph_err err = { "" };
	int rc = ph_safetensors_read(path, t, n, &err);
	ck_assert_int_ne(rc, PH_OK);
	ck_assert_msg(strstr(err.msg, want) != NULL, "got \"%s\", wanted \"%s\"", err.msg,
		      want);
	ck_assert_msg(strstr(err.msg, path) == err.msg, "message does not start with the "
		      "file: %s", err.msg);
	for (int i = 0; i < n; i++) {
		for (int64_t j = 0; j < cnt[i]; j++)
			ck_assert_msg(t[i].data[j] == -7.f, "a failed read wrote into %s",
				      t[i].name);
	}
}

static float w1[40], b1[10], s1[1];

static int write_sample(const char *path, ph_err *err)
{
	for (int i = 0; i < 40; i++)
		w1[i] = (float)i * 0.25f - 3.f;
	for (int i = 0; i < 10; i++)
		b1[i] = 1.f / (float)(i + 1);
	s1[0] = 42.5f;
	ph_tensor_ref t[4] = {
		ref("fc1.weight", w1, 2, 10, 4),
		ref("fc1.bias", b1, 1, 10),
		ref("scale", s1, 0),
		ref("empty", NULL, 2, 0, 3),
	};
	const char *meta[] = { "format", "pt", "step", "12", NULL };
	return ph_safetensors_write(path, t, 4, meta, err);
}

/* Where a read of the sample file's three tensors with data goes, and the
 * refs that ask for them. */
typedef struct {
	float w[40], b[10], s[1];
	ph_tensor_ref t[3];
} sample_dst;

/* The tests that damage a copy of the sample file start from this: its bytes
 * (written to in_dir("full")), *len of them, to free, and *dst ready to read
 * a copy back with ph_safetensors_read(path, dst->t, 3, ...). */
static unsigned char *sample_bytes(size_t *len, sample_dst *dst)
{
	ph_err err = { "" };
	const char *full = in_dir("full");
	ck_assert_int_eq(write_sample(full, &err), PH_OK);
	dst->t[0] = ref("fc1.weight", dst->w, 2, 10, 4);
	dst->t[1] = ref("fc1.bias", dst->b, 1, 10);
	dst->t[2] = ref("scale", dst->s, 0);
	return slurp(full, len);
}

/* Names in the scratch directory other than `keep`: leftovers of a failed or finished write. */
static int strays(const char *keep)
{
	DIR *d = opendir(scratch_dir);
	ck_assert_ptr_nonnull(d);
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") &&
		    (!keep || strcmp(e->d_name, keep)))
			n++;
	closedir(d);
	return n;
}

START_TEST(test_round_trip)
{
	ph_err err = { "" };
	const char *path = in_dir("w.safetensors");
	ck_assert_int_eq(write_sample(path, &err), PH_OK);
	ck_assert_int_eq(strays("w.safetensors"), 0);

	float w[40], b[10], s[1];
	/* Another order than written, and a subset: both are fine. */
	ph_tensor_ref t[4] = {
		ref("scale", s, 0),
		ref("fc1.bias", b, 1, 10),
		ref("fc1.weight", w, 2, 10, 4),
		ref("empty", NULL, 2, 0, 3),
	};
	ck_assert_int_eq(ph_safetensors_read(path, t, 4, &err), PH_OK);
	ck_assert_mem_eq(w, w1, sizeof w);
	ck_assert_mem_eq(b, b1, sizeof b);
	ck_assert_mem_eq(s, s1, sizeof s);
	memset(b, 0, sizeof b);
	ck_assert_int_eq(ph_safetensors_read(path, t + 1, 1, &err), PH_OK);
	ck_assert_mem_eq(b, b1, sizeof b);
	/* n = 0 still validates the file. */
	ck_assert_int_eq(ph_safetensors_read(path, NULL, 0, &err), PH_OK);
}
END_TEST

START_TEST(test_byte_stable)
{
	ph_err err = { "" };
	size_t la, lb, lc;
	ck_assert_int_eq(write_sample(in_dir("a"), &err), PH_OK);
	ck_assert_int_eq(write_sample(in_dir("b"), &err), PH_OK);
	unsigned char *a = slurp(in_dir("a"), &la), *b = slurp(in_dir("b"), &lb);
	ck_assert_uint_eq(la, lb);
	ck_assert_mem_eq(a, b, la);
	/* Overwriting in place gives the same bytes again. */
	ck_assert_int_eq(write_sample(in_dir("a"), &err), PH_OK);
	unsigned char *c = slurp(in_dir("a"), &lc);
	ck_assert_uint_eq(la, lc);
	ck_assert_mem_eq(a, c, la);
	free(a), free(b), free(c);
}
END_TEST

/* Bytes written by Python's safetensors 0.8.0:
 *   save_file({'a': np.array([1,2], dtype=np.float32)}, f, metadata={'format':'pt'})
 * Our writer must produce exactly these, and our reader must read them. */
static const unsigned char py_ref1[] = {
	0x58, 0, 0, 0, 0, 0, 0, 0,
	'{', '"', '_', '_', 'm', 'e', 't', 'a', 'd', 'a', 't', 'a', '_', '_', '"', ':',
	'{', '"', 'f', 'o', 'r', 'm', 'a', 't', '"', ':', '"', 'p', 't', '"', '}', ',',
	'"', 'a', '"', ':', '{', '"', 'd', 't', 'y', 'p', 'e', '"', ':', '"', 'F', '3',
	'2', '"', ',', '"', 's', 'h', 'a', 'p', 'e', '"', ':', '[', '2', ']', ',', '"',
	'd', 'a', 't', 'a', '_', 'o', 'f', 'f', 's', 'e', 't', 's', '"', ':', '[', '0',
	',', '8', ']', '}', '}', ' ', ' ', ' ',
	0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0x40,
};

/* save_file({'fc1.bias': np.arange(3), 'fc1.weight': np.arange(6).reshape(3,2)*0.5})
 * (float32): a header that needs no padding, and two tensors. */
static const unsigned char py_ref2[] = {
	0x80, 0, 0, 0, 0, 0, 0, 0,
	'{', '"', 'f', 'c', '1', '.', 'b', 'i', 'a', 's', '"', ':', '{', '"', 'd', 't',
	'y', 'p', 'e', '"', ':', '"', 'F', '3', '2', '"', ',', '"', 's', 'h', 'a', 'p',
	'e', '"', ':', '[', '3', ']', ',', '"', 'd', 'a', 't', 'a', '_', 'o', 'f', 'f',
	's', 'e', 't', 's', '"', ':', '[', '0', ',', '1', '2', ']', '}', ',', '"', 'f',
	'c', '1', '.', 'w', 'e', 'i', 'g', 'h', 't', '"', ':', '{', '"', 'd', 't', 'y',
	'p', 'e', '"', ':', '"', 'F', '3', '2', '"', ',', '"', 's', 'h', 'a', 'p', 'e',
	'"', ':', '[', '3', ',', '2', ']', ',', '"', 'd', 'a', 't', 'a', '_', 'o', 'f',
	'f', 's', 'e', 't', 's', '"', ':', '[', '1', '2', ',', '3', '6', ']', '}', '}',
	0, 0, 0, 0, 0, 0, 0x80, 0x3f, 0, 0, 0, 0x40,
	0, 0, 0, 0, 0, 0, 0, 0x3f, 0, 0, 0x80, 0x3f, 0, 0, 0xc0, 0x3f, 0, 0, 0, 0x40,
	0, 0, 0x20, 0x40,
};

START_TEST(test_reference_layout)
{
	ph_err err = { "" };
	float a[2] = { 1.f, 2.f };
	ph_tensor_ref t = ref("a", a, 1, 2);
	const char *meta[] = { "format", "pt", NULL };
	const char *path = in_dir("ref1");
	ck_assert_int_eq(ph_safetensors_write(path, &t, 1, meta, &err), PH_OK);
	size_t len;
	unsigned char *b = slurp(path, &len);
	/* The length field is little-endian and counts the padded header. */
	uint64_t hl = 0;
	for (int i = 7; i >= 0; i--)
		hl = hl << 8 | b[i];
	ck_assert_uint_eq((8 + hl) % 8, 0);
	ck_assert_uint_eq(len, 8 + hl + 8);
	ck_assert_int_eq(b[8], '{');
	ck_assert_int_eq(b[8 + hl - 1], ' ');
	ck_assert_uint_eq(len, sizeof py_ref1);
	ck_assert_mem_eq(b, py_ref1, len);
	free(b);

	float bias[3] = { 0, 1, 2 }, w[6] = { 0, .5f, 1, 1.5f, 2, 2.5f };
	ph_tensor_ref t2[2] = { ref("fc1.bias", bias, 1, 3), ref("fc1.weight", w, 2, 3, 2) };
	path = in_dir("ref2");
	ck_assert_int_eq(ph_safetensors_write(path, t2, 2, NULL, &err), PH_OK);
	b = slurp(path, &len);
	ck_assert_uint_eq(len, sizeof py_ref2);
	ck_assert_mem_eq(b, py_ref2, len);
	free(b);

	/* And the reader takes Python's files as they are. */
	spit(in_dir("py2"), py_ref2, sizeof py_ref2);
	float rb[3], rw[6];
	ph_tensor_ref r2[2] = { ref("fc1.weight", rw, 2, 3, 2), ref("fc1.bias", rb, 1, 3) };
	ck_assert_int_eq(ph_safetensors_read(in_dir("py2"), r2, 2, &err), PH_OK);
	ck_assert_mem_eq(rb, bias, sizeof rb);
	ck_assert_mem_eq(rw, w, sizeof rw);
}
END_TEST

START_TEST(test_every_truncation)
{
	ph_err err = { "" };
	size_t len;
	sample_dst dst;
	unsigned char *b = sample_bytes(&len, &dst);
	ph_tensor_ref *t = dst.t;
	const char *cut = in_dir("cut");
	for (size_t n = 0; n < len; n++) {
		spit(cut, b, n);
		err.msg[0] = 0;
		ck_assert_int_ne(ph_safetensors_read(cut, t, 3, &err), PH_OK);
		ck_assert_msg(err.msg[0] && !strchr(err.msg, '\n'), "length %zu: \"%s\"", n,
			      err.msg);
	}
	uint64_t hl = 0;
	for (int i = 7; i >= 0; i--)
		hl = hl << 8 | b[i];
	spit(cut, b, 4);
	expect_fail(cut, t, 3, "4 bytes, too short for the 8-byte header length");
	spit(cut, b, 8 + hl / 2);
	expect_fail(cut, t, 3, "exceeds the file");
	spit(cut, b, len - 1);
	expect_fail(cut, t, 3, "run past the data section");
	expect_fail(cut, t, 3, "truncated file");
	free(b);
}
END_TEST

START_TEST(test_header_too_long)
{
	/* The brief's example: a length of 1e12 in a 300-byte file. */
	unsigned char b[300];
	memset(b, ' ', sizeof b);
	uint64_t hl = 1000000000000ull;
	for (int i = 0; i < 8; i++)
		b[i] = (unsigned char)(hl >> (8 * i));
	const char *path = in_dir("long");
	spit(path, b, sizeof b);
	float x[1];
	ph_tensor_ref t = ref("x", x, 1, 1);
	char want[512];
	snprintf(want, sizeof want, "%s: header length 1000000000000 exceeds the file "
		 "(300 bytes): truncated or not safetensors", path);
	ph_err err = { "" };
	ck_assert_int_eq(ph_safetensors_read(path, &t, 1, &err), PH_EINVAL);
	ck_assert_str_eq(err.msg, want);

	/* Inside the file but over 100 MB: refused before allocating.  The file
	 * is sparse, so this costs no disk. */
	int fd = open(path, O_WRONLY);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ftruncate(fd, 200 * 1000 * 1000), 0);
	hl = 150 * 1000 * 1000;
	for (int i = 0; i < 8; i++)
		b[i] = (unsigned char)(hl >> (8 * i));
	ck_assert_int_eq(pwrite(fd, b, 8, 0), 8);
	close(fd);
	expect_fail(path, &t, 1, "header length 150000000 exceeds the 100 MB limit");
}
END_TEST

static const char *F32A = "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}";

START_TEST(test_bad_headers)
{
	float a[2], x[4];
	ph_tensor_ref ta = ref("a", a, 1, 2);
	char j[512];
	expect_fail(make_st("j1", "{\"a\":", 8), &ta, 1, "header is not valid JSON");
	expect_fail(make_st("j2", "", 8), &ta, 1, "header is not valid JSON");
	expect_fail(make_st("j3", "[1,2]", 8), &ta, 1, "not an object");
	snprintf(j, sizeof j, "{%s}xx", F32A);
	expect_fail(make_st("j4", j, 8), &ta, 1, "bytes after its JSON");
	expect_fail(make_st("j5", "{\"a\":3}", 8), &ta, 1, "header entry a is not an object");
	expect_fail(make_st("j6", "{\"a\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8), &ta,
		    1, "a has no \"dtype\" string");
	expect_fail(make_st("j7", "{\"a\":{\"dtype\":\"F99\",\"shape\":[2],"
			    "\"data_offsets\":[0,8]}}", 8), &ta, 1, "unknown dtype \"F99\"");
	expect_fail(make_st("j8", "{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", 8),
		    &ta, 1, "no \"shape\" array");
	expect_fail(make_st("j9", "{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],"
			    "\"data_offsets\":[0,8]}}", 8), &ta, 1, "not a non-negative integer");
	expect_fail(make_st("j10", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],"
			    "\"data_offsets\":[0,8]}}", 8), &ta, 1, "not a non-negative integer");
	expect_fail(make_st("j11", "{\"a\":{\"dtype\":\"F32\",\"shape\":[\"2\"],"
			    "\"data_offsets\":[0,8]}}", 8), &ta, 1, "not a non-negative integer");
	expect_fail(make_st("j12", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],"
			    "\"data_offsets\":[8,0]}}", 8), &ta, 1, "bad \"data_offsets\"");
	expect_fail(make_st("j13", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],"
			    "\"data_offsets\":[0]}}", 8), &ta, 1, "bad \"data_offsets\"");
	expect_fail(make_st("j14", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],"
			    "\"data_offsets\":[0,400]}}", 8), &ta, 1,
		    "a data_offsets [0,400] run past the data section (8 bytes)");
	expect_fail(make_st("j15", "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],"
			    "\"data_offsets\":[0,8]}}", 8), &ta, 1,
		    "a data_offsets [0,8] hold 8 bytes, but its shape of F32 needs 12");
	/* A shape whose element count overflows 64 bits. */
	expect_fail(make_st("j16", "{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,"
			    "4294967296,16],\"data_offsets\":[0,8]}}", 8), &ta, 1,
		    "needs more than");
	expect_fail(make_st("j17", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":"
			    "[0,8]},\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":"
			    "[4,12]}}", 16), &ta, 1, "tensors a and b overlap");
	snprintf(j, sizeof j, "{%s,%s}", F32A, F32A);
	expect_fail(make_st("j18", j, 8), &ta, 1, "tensor a appears twice");
	snprintf(j, sizeof j, "{\"__metadata__\":{\"k\":1},%s}", F32A);
	expect_fail(make_st("j19", j, 8), &ta, 1, "__metadata__ is not an object of strings");
	/* Deep nesting must not blow the stack. */
	static char deep[8192];
	memset(deep, '[', 4000);
	deep[4000] = 0;
	expect_fail(make_st("j20", deep, 8), &ta, 1, "not valid JSON");

	/* Well-formed files, but not what the model wants. */
	const char *fc = make_st("fc", "{\"__metadata__\":{\"format\":\"pt\"},"
				 "\"fc1.weight\":{\"dtype\":\"F32\",\"shape\":[10,5],"
				 "\"data_offsets\":[0,200]},\"fc1.bias\":{\"dtype\":\"I16\","
				 "\"shape\":[2],\"data_offsets\":[200,204]}}", 204);
	static float w[50];
	ph_tensor_ref tw = ref("fc1.weight", w, 2, 10, 4);
	char want[512];
	snprintf(want, sizeof want, "%s: fc1.weight has shape [10,5], the model expects "
		 "[10,4]", fc);
	expect_fail(fc, &tw, 1, want);
	tw = ref("fc1.weight", w, 1, 10);
	expect_fail(fc, &tw, 1, "fc1.weight has shape [10,5], the model expects [10]");
	ph_tensor_ref tb = ref("fc1.bias", x, 1, 2);
	snprintf(want, sizeof want, "%s: dtype I16 for fc1.bias; only F32, F16 and BF16 are read", fc);
	expect_fail(fc, &tb, 1, want);
	ph_tensor_ref tm[2] = { ref("fc1.weight", w, 2, 10, 5), ref("fc2.weight", x, 1, 4) };
	snprintf(want, sizeof want, "%s: tensor fc2.weight missing", fc);
	/* The present tensor is not copied either: the request fails whole. */
	expect_fail(fc, tm, 2, want);

	ph_err err = { "" };
	ck_assert_int_eq(ph_safetensors_read(in_dir("nope"), &ta, 1, &err), PH_EIO);
	ck_assert_ptr_nonnull(strstr(err.msg, "cannot open: No such file"));
}
END_TEST

/* Flip bytes of a good file at random: every read ends in OK or one line. */
START_TEST(test_fuzz)
{
	ph_err err = { "" };
	size_t len;
	sample_dst dst;
	unsigned char *b = sample_bytes(&len, &dst);
	ph_tensor_ref *t = dst.t;
	unsigned char *m = malloc(len);
	uint64_t x = 12345;
	int ok = 0;
	const char *path = in_dir("fz");
	for (int it = 0; it < 3000; it++) {
		memcpy(m, b, len);
		int flips = 1 + it % 3;
		for (int k = 0; k < flips; k++) {
			x = x * 6364136223846793005ull + 1442695040888963407ull;
			size_t at = (size_t)(x >> 33) % len;
			/* Mostly the header, where the interesting damage is. */
			if (it % 4)
				at %= 8 + 200;
			m[at] = (unsigned char)(x >> 17);
		}
		spit(path, m, len);
		err.msg[0] = 0;
		int rc = ph_safetensors_read(path, t, 3, &err);
		if (rc == PH_OK)
			ok++;
		else
			ck_assert_msg(err.msg[0] && !strchr(err.msg, '\n'), "rc %d, \"%s\"", rc,
				      err.msg);
	}
	ck_assert_int_gt(ok, 0); /* flips in the data section are harmless */
	free(b), free(m);
}
END_TEST

static void assert_same_file(const char *path, const unsigned char *old, size_t len)
{
	size_t now;
	unsigned char *b = slurp(path, &now);
	ck_assert_uint_eq(now, len);
	ck_assert_mem_eq(b, old, len);
	free(b);
}

START_TEST(test_failed_write_keeps_old)
{
	ph_err err = { "" };
	const char *path = in_dir("ck.safetensors");
	float one[1] = { 1.f };
	ph_tensor_ref t1 = ref("x", one, 1, 1);
	ck_assert_int_eq(ph_safetensors_write(path, &t1, 1, NULL, &err), PH_OK);
	size_t len;
	unsigned char *old = slurp(path, &len);

	/* 1. The temp file cannot be created: its name is taken by a directory. */
	char tmp[4300];
	snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
	ck_assert_int_eq(mkdir(tmp, 0700), 0);
	ck_assert_int_eq(write_sample(path, &err), PH_EIO);
	ck_assert_ptr_nonnull(strstr(err.msg, "cannot create"));
	assert_same_file(path, old, len);
	ck_assert_int_eq(rmdir(tmp), 0);

	/* 2. The disk "fills" half-way: writes past 64 bytes fail with EFBIG. */
	struct rlimit was, small = { 64, 64 };
	ck_assert_int_eq(getrlimit(RLIMIT_FSIZE, &was), 0);
	small.rlim_max = was.rlim_max;
	signal(SIGXFSZ, SIG_IGN);
	err.msg[0] = 0;
	/* No ck_assert while the limit holds: Check writes its own files. */
	int lim = setrlimit(RLIMIT_FSIZE, &small);
	int rc = write_sample(path, &err);
	setrlimit(RLIMIT_FSIZE, &was);
	ck_assert_int_eq(lim, 0);
	ck_assert_int_eq(rc, PH_EIO);
	ck_assert_ptr_nonnull(strstr(err.msg, "the previous file is unchanged"));
	assert_same_file(path, old, len);
	ck_assert_int_eq(strays("ck.safetensors"), 0); /* the temp file is gone */

	/* 3. Bad input is refused before anything is written. */
	ph_tensor_ref dup[2] = { ref("x", one, 1, 1), ref("x", one, 1, 1) };
	ck_assert_int_eq(ph_safetensors_write(path, dup, 2, NULL, &err), PH_EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "listed twice"));
	ph_tensor_ref nodata = ref("y", NULL, 1, 3);
	ck_assert_int_eq(ph_safetensors_write(path, &nodata, 1, NULL, &err), PH_EINVAL);
	ph_tensor_ref meta = ref("__metadata__", one, 1, 1);
	ck_assert_int_eq(ph_safetensors_write(path, &meta, 1, NULL, &err), PH_EINVAL);
	ph_tensor_ref neg = ref("z", one, 1, -1);
	ck_assert_int_eq(ph_safetensors_write(path, &neg, 1, NULL, &err), PH_EINVAL);
	const char *odd[] = { "key", NULL };
	ck_assert_int_eq(ph_safetensors_write(path, &t1, 1, odd, &err), PH_EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "metadata key key has no value"));
	assert_same_file(path, old, len);

	/* 4. An unwritable directory (root writes anywhere, so only as a user). */
	if (geteuid() != 0) {
		ck_assert_int_eq(chmod(scratch_dir, 0500), 0);
		ck_assert_int_eq(write_sample(path, &err), PH_EIO);
		chmod(scratch_dir, 0700);
		assert_same_file(path, old, len);
	}
	ck_assert_int_eq(strays("ck.safetensors"), 0);

	/* 5. A directory that does not exist. */
	ck_assert_int_eq(write_sample(in_dir("no/such/dir/w.safetensors"), &err), PH_EIO);
	ck_assert_ptr_nonnull(strstr(err.msg, "check the directory exists"));
	free(old);
}
END_TEST

/* The bits of a float, to tell -0 from +0 and one NaN from another. */
static uint32_t bits_of(float f)
{
	uint32_t b;
	memcpy(&b, &f, sizeof b);
	return b;
}

/* F16 and BF16 widen to F32 exactly: every half against its definition,
 * the edge values by their bits, and both through a file read by
 * ph_safetensors_read (the [run] init path). */
START_TEST(test_half_dtypes)
{
	/* every finite half: (-1)^s 2^(e-15) (1 + m/1024), or 2^-24 m when e = 0 */
	for (uint32_t h = 0; h < 0x10000; h++) {
		uint32_t e = (h >> 10) & 0x1f, m = h & 0x3ff;
		if (e == 0x1f)
			continue;
		double want = e ? ldexp(1024.0 + m, (int)e - 25) : ldexp((double)m, -24);
		if (h & 0x8000)
			want = -want;
		float got = ph_half_to_float((uint16_t)h);
		ck_assert_msg(got == (float)want && (float)want == want && !signbit(got) == !signbit(want),
			      "half 0x%04x: %a, want %a", h, (double)got, want);
	}
	static const struct {
		uint16_t in;
		uint32_t want;
	} half[] = {
		{ 0x0000, 0x00000000 }, /* +0 */
		{ 0x8000, 0x80000000 }, /* -0 */
		{ 0x0001, 0x33800000 }, /* the smallest subnormal, 2^-24 */
		{ 0x03ff, 0x387fc000 }, /* the largest subnormal */
		{ 0x8200, 0xb8000000 }, /* -2^-15, a subnormal */
		{ 0x0400, 0x38800000 }, /* the smallest normal, 2^-14 */
		{ 0x3c00, 0x3f800000 }, /* 1 */
		{ 0x3555, 0x3eaaa000 }, /* 0.333251953125 */
		{ 0x7bff, 0x477fe000 }, /* 65504, the largest */
		{ 0x7c00, 0x7f800000 }, /* +inf */
		{ 0xfc00, 0xff800000 }, /* -inf */
		{ 0x7e00, 0x7fc00000 }, /* quiet NaN */
		{ 0x7c01, 0x7f802000 }, /* signalling NaN, payload kept */
		{ 0xfe01, 0xffc02000 }, /* negative NaN with a payload */
	};
	for (size_t i = 0; i < sizeof half / sizeof half[0]; i++)
		ck_assert_msg(bits_of(ph_half_to_float(half[i].in)) == half[i].want, "half 0x%04x: 0x%08x, want 0x%08x",
			      half[i].in, bits_of(ph_half_to_float(half[i].in)), half[i].want);
	static const uint16_t bf[] = { 0x0000, 0x8000, 0x0001, 0x007f, 0x0080, 0x3f80, 0xc049, 0x7f7f,
				       0x7f80, 0xff80, 0x7fc0, 0x7f81, 0xffc1 };
	for (size_t i = 0; i < sizeof bf / sizeof bf[0]; i++)
		ck_assert_msg(bits_of(ph_bf16_to_float(bf[i])) == (uint32_t)bf[i] << 16, "bf16 0x%04x: 0x%08x", bf[i],
			      bits_of(ph_bf16_to_float(bf[i])));

	/* through a file: an F16, a BF16 and an F32 tensor, little-endian */
	enum { NH = sizeof half / sizeof half[0], NB = sizeof bf / sizeof bf[0] };
	char json[512];
	int hl = snprintf(json, sizeof json,
			  "{\"h\":{\"dtype\":\"F16\",\"shape\":[%d],\"data_offsets\":[0,%d]},"
			  "\"b\":{\"dtype\":\"BF16\",\"shape\":[%d],\"data_offsets\":[%d,%d]},"
			  "\"f\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[%d,%d]}}",
			  NH, 2 * NH, NB, 2 * NH, 2 * NH + 2 * NB, 2 * NH + 2 * NB, 2 * NH + 2 * NB + 4);
	unsigned char file[1024];
	size_t at = 8;
	for (int i = 0; i < 8; i++)
		file[i] = (unsigned char)((uint64_t)hl >> (8 * i));
	memcpy(file + at, json, (size_t)hl);
	at += (size_t)hl;
	for (int i = 0; i < NH; i++, at += 2)
		file[at] = (unsigned char)half[i].in, file[at + 1] = (unsigned char)(half[i].in >> 8);
	for (int i = 0; i < NB; i++, at += 2)
		file[at] = (unsigned char)bf[i], file[at + 1] = (unsigned char)(bf[i] >> 8);
	memcpy(file + at, (const unsigned char[]){ 0x00, 0x00, 0xc0, 0x3f }, 4); /* 1.5f */
	at += 4;
	const char *path = in_dir("half.safetensors");
	spit(path, file, at);
	float hv[NH], bv[NB], fv[1];
	memset(hv, 0xee, sizeof hv);
	memset(bv, 0xee, sizeof bv);
	ph_tensor_ref t[3] = { ref("h", hv, 1, NH), ref("b", bv, 1, NB), ref("f", fv, 1, 1) };
	ph_err err = { "" };
	ck_assert_msg(ph_safetensors_read(path, t, 3, &err) == PH_OK, "%s", err.msg);
	for (int i = 0; i < NH; i++)
		ck_assert_msg(bits_of(hv[i]) == half[i].want, "F16 file, element %d: 0x%08x, want 0x%08x", i,
			      bits_of(hv[i]), half[i].want);
	for (int i = 0; i < NB; i++)
		ck_assert_msg(bits_of(bv[i]) == (uint32_t)bf[i] << 16, "BF16 file, element %d: 0x%08x", i, bits_of(bv[i]));
	ck_assert(fv[0] == 1.5f);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("weights");
	TCase *tc = tcase_create("safetensors");
	tcase_add_checked_fixture(tc, scratch_setup, scratch_teardown);
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_round_trip);
	tcase_add_test(tc, test_half_dtypes);
	tcase_add_test(tc, test_byte_stable);
	tcase_add_test(tc, test_reference_layout);
	tcase_add_test(tc, test_every_truncation);
	tcase_add_test(tc, test_header_too_long);
	tcase_add_test(tc, test_bad_headers);
	tcase_add_test(tc, test_fuzz);
	tcase_add_test(tc, test_failed_write_keeps_old);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return run_suite(suite());
}
