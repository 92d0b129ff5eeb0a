/* SPDX-License-Identifier: MIT */
/* Data: IDX parsing and its refusals on small files made here, the real
 * Fashion-MNIST when installed, synthetic data, epoch permutations. */
#define _GNU_SOURCE
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "data.h"
#include "data_source.h"

#define SCRATCH_DIR_PREFIX "ph-test-data"
#include "unit-harness.h"

static void put_be32(unsigned char *b, uint32_t v)
{
	b[0] = (unsigned char)(v >> 24), b[1] = (unsigned char)(v >> 16);
	b[2] = (unsigned char)(v >> 8), b[3] = (unsigned char)v;
}

/* A gzip IDX file: magic, ndims big-endian counts, then len payload bytes. */
static void write_idx(const char *name, uint32_t magic, int ndims, const uint32_t *dims,
		      const unsigned char *payload, size_t len)
{
	unsigned char h[4 + 4 * 3];
	put_be32(h, magic);
	for (int i = 0; i < ndims; i++)
		put_be32(h + 4 + 4 * i, dims[i]);
	gzFile f = gzopen(in_dir(name), "wb");
	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(gzwrite(f, h, (unsigned)(4 + 4 * ndims)), 4 + 4 * ndims);
	if (len)
		ck_assert_int_eq(gzwrite(f, payload, (unsigned)len), (int)len);
	ck_assert_int_eq(gzclose(f), Z_OK);
}

static unsigned char pix[5 * 28 * 28];

/* n images of 28x28 and n labels, valid, under the prefix (train or t10k). */
static void write_set(const char *pre, uint32_t n_img, uint32_t n_lab,
		      const unsigned char *labels)
{
	for (size_t i = 0; i < sizeof pix; i++)
		pix[i] = (unsigned char)((i * 7 + 3) % 256);
	char name[64];
	uint32_t d[3] = { n_img, 28, 28 };
	snprintf(name, sizeof name, "%s-images-idx3-ubyte.gz", pre);
	write_idx(name, 0x803, 3, d, pix, (size_t)n_img * 784);
	snprintf(name, sizeof name, "%s-labels-idx1-ubyte.gz", pre);
	write_idx(name, 0x801, 1, &n_lab, labels, n_lab);
}

static const unsigned char labels5[5] = { 0, 9, 4, 4, 7 };

/* The load must fail with `want` in the message and leave ds empty. */
static void expect_fail(int train, const char *want)
{
	ph_dataset ds;
	memset(&ds, 0x5a, sizeof ds);
	ph_err err = { "" };
	ck_assert_int_ne(ph_data_load_fashion_mnist(scratch_dir, train, &ds, &err), PH_OK);
	ck_assert_msg(strstr(err.msg, want) != NULL, "got \"%s\", wanted \"%s\"", err.msg,
		      want);
	ck_assert_ptr_null(ds.x);
	ck_assert_ptr_null(ds.y);
	ck_assert_int_eq(ds.n, 0);
}

START_TEST(test_missing_dir)
{
	ph_dataset ds;
	ph_err err = { "" };
	const char *nodir = "/nonexistent/pipehost-no-such-dir";
	ck_assert_int_eq(ph_data_load_fashion_mnist(nodir, 1, &ds, &err), PH_EIO);
	ck_assert_str_eq(err.msg, "fashion-mnist: /nonexistent/pipehost-no-such-dir/"
			 "train-images-idx3-ubyte.gz not found; install Debian's "
			 "dataset-fashion-mnist package (apt-get install "
			 "dataset-fashion-mnist) or set [data] path");
	ck_assert_ptr_null(ds.x);
	ck_assert_int_eq(ph_data_load_fashion_mnist(nodir, 0, &ds, &err), PH_EIO);
	ck_assert_ptr_nonnull(strstr(err.msg, "t10k-images-idx3-ubyte.gz not found"));
}
END_TEST

START_TEST(test_missing_labels)
{
	uint32_t d[3] = { 1, 28, 28 };
	write_idx("train-images-idx3-ubyte.gz", 0x803, 3, d, pix, 784);
	expect_fail(1, "train-labels-idx1-ubyte.gz not found; install Debian's");
}
END_TEST

START_TEST(test_small_valid)
{
	write_set("t10k", 5, 5, labels5);
	ph_dataset ds;
	ph_err err = { "" };
	ck_assert_int_eq(ph_data_load_fashion_mnist(scratch_dir, 0, &ds, &err), PH_OK);
	ck_assert_int_eq(ds.n, 5);
	ck_assert_int_eq(ds.shape.ndim, 3);
	ck_assert_int_eq(ds.shape.d[0], 1);
	ck_assert_int_eq(ds.shape.d[1], 28);
	ck_assert_int_eq(ds.shape.d[2], 28);
	ck_assert_int_eq(ds.nclasses, 10);
	ck_assert_int_eq(ds.targets_per_sample, 1);
	for (int i = 0; i < 5 * 784; i++)
		ck_assert_float_eq(ds.x[i], (float)pix[i] / 255.f);
	for (int i = 0; i < 5; i++)
		ck_assert_int_eq(ds.y[i], labels5[i]);
	ph_data_free(&ds);
	ck_assert_ptr_null(ds.x);
	ph_data_free(&ds); /* twice is harmless */
	/* The train split is another pair of files, absent here. */
	expect_fail(1, "train-images-idx3-ubyte.gz not found");
}
END_TEST

START_TEST(test_bad_files)
{
	uint32_t d[3] = { 5, 28, 28 }, n5 = 5;

	/* Labels where the images should be. */
	write_set("train", 5, 5, labels5);
	write_idx("train-images-idx3-ubyte.gz", 0x801, 3, d, pix, 5 * 784);
	expect_fail(1, "magic 0x00000801, expected 0x00000803");

	/* Counts that disagree. */
	write_set("train", 5, 4, labels5);
	expect_fail(1, "has 5 images but");
	expect_fail(1, "has 4 labels");

	/* The pixels end early. */
	write_set("train", 5, 5, labels5);
	write_idx("train-images-idx3-ubyte.gz", 0x803, 3, d, pix, 4 * 784 + 100);
	expect_fail(1, "truncated: expected 3920 bytes of pixels, got 3236");

	/* More bytes than the header counts. */
	write_idx("train-images-idx3-ubyte.gz", 0x803, 3, d, pix, 5 * 784);
	write_idx("train-labels-idx1-ubyte.gz", 0x801, 1, &n5, pix, 5 + 3);
	expect_fail(1, "has bytes after the count");

	/* A label outside 0..9. */
	unsigned char bad[5] = { 1, 2, 10, 3, 4 };
	write_idx("train-labels-idx1-ubyte.gz", 0x801, 1, &n5, bad, 5);
	expect_fail(1, "label 10 at index 2 is outside 0..9");

	/* Absurd sizes are refused from the header alone, nothing allocated. */
	write_idx("train-labels-idx1-ubyte.gz", 0x801, 1, &n5, labels5, 5);
	uint32_t huge[3] = { 100000, 10000, 10000 };
	write_idx("train-images-idx3-ubyte.gz", 0x803, 3, huge, NULL, 0);
	expect_fail(1, "header says 100000 images of 10000x10000");
	uint32_t wide[3] = { 1, 0xffffffffu, 0xffffffffu };
	write_idx("train-images-idx3-ubyte.gz", 0x803, 3, wide, NULL, 0);
	expect_fail(1, "header says 1 images of 4294967295x4294967295");
	uint32_t zero[3] = { 5, 0, 28 };
	write_idx("train-images-idx3-ubyte.gz", 0x803, 3, zero, NULL, 0);
	expect_fail(1, "corrupt file");
	uint32_t nolab = 0;
	write_idx("train-labels-idx1-ubyte.gz", 0x801, 1, &nolab, NULL, 0);
	expect_fail(1, "header says 0 labels");

	/* A short header. */
	write_idx("train-labels-idx1-ubyte.gz", 0x801, 0, NULL, NULL, 0);
	expect_fail(1, "truncated: expected 8 bytes of IDX header, got 4");

	/* A gzip stream cut in the middle. */
	write_set("train", 5, 5, labels5);
	FILE *f = fopen(in_dir("train-images-idx3-ubyte.gz"), "r+");
	ck_assert_ptr_nonnull(f);
	fseek(f, 0, SEEK_END);
	long len = ftell(f);
	fclose(f);
	ck_assert_int_eq(truncate(in_dir("train-images-idx3-ubyte.gz"), len / 2), 0);
	expect_fail(1, "train-images-idx3-ubyte.gz");
}
END_TEST

START_TEST(test_real_fashion_mnist)
{
	const char *d = PH_FASHION_MNIST_DIR;
	if (access(PH_FASHION_MNIST_DIR "/train-images-idx3-ubyte.gz", R_OK) ||
	    access(PH_FASHION_MNIST_DIR "/t10k-images-idx3-ubyte.gz", R_OK)) {
		fprintf(stderr, "note: %s not installed; skipping the real-data test "
			"(apt-get install dataset-fashion-mnist)\n", d);
		return;
	}
	static const int first_train[10] = { 9, 0, 0, 3, 0, 2, 7, 2, 5, 5 };
	static const int first_test[10] = { 9, 2, 1, 1, 6, 1, 4, 6, 5, 7 };
	for (int train = 1; train >= 0; train--) {
		ph_dataset ds;
		ph_err err = { "" };
		ck_assert_msg(ph_data_load_fashion_mnist(NULL, train, &ds, &err) == PH_OK,
			      "%s", err.msg);
		ck_assert_int_eq(ds.n, train ? 60000 : 10000);
		ck_assert_int_eq(ph_shape_numel(&ds.shape), 784);
		for (int i = 0; i < 10; i++)
			ck_assert_int_eq(ds.y[i], train ? first_train[i] : first_test[i]);
		int64_t count[10] = { 0 };
		for (int64_t i = 0; i < ds.n; i++)
			count[ds.y[i]]++;
		for (int c = 0; c < 10; c++)
			ck_assert_int_eq(count[c], ds.n / 10);
		float lo = 1, hi = 0;
		for (int64_t i = 0; i < ds.n * 784; i++)
			lo = fminf(lo, ds.x[i]), hi = fmaxf(hi, ds.x[i]);
		ck_assert_float_eq(lo, 0.f);
		ck_assert_float_eq(hi, 1.f);
		/* The first image's pixel sum, from Python's gzip module. */
		long sum = 0;
		for (int i = 0; i < 784; i++)
			sum += lrintf(ds.x[i] * 255.f);
		ck_assert_int_eq(sum, train ? 76247 : 33456);
		ph_data_free(&ds);
	}
}
END_TEST

static ph_shape shp(int ndim, int a, int b, int c)
{
	ph_shape s = { ndim, { a, b, c, 0 } };
	return s;
}

START_TEST(test_synthetic)
{
	ph_shape s = shp(3, 1, 8, 8);
	ph_dataset a, b, c;
	ph_err err = { "" };
	ck_assert_int_eq(ph_data_synthetic(2000, &s, 10, 7, &a, &err), PH_OK);
	ck_assert_int_eq(ph_data_synthetic(2000, &s, 10, 7, &b, &err), PH_OK);
	ck_assert_int_eq(ph_data_synthetic(2000, &s, 10, 8, &c, &err), PH_OK);
	ck_assert_int_eq(a.n, 2000);
	ck_assert_int_eq(a.nclasses, 10);
	ck_assert_int_eq(a.targets_per_sample, 1);
	ck_assert_int_eq(a.shape.ndim, 3);
	ck_assert_int_eq(a.shape.d[2], 8);
	/* Same seed, same bits; another seed, other data. */
	ck_assert_mem_eq(a.x, b.x, 2000 * 64 * sizeof(float));
	ck_assert_mem_eq(a.y, b.y, 2000 * sizeof(int32_t));
	ck_assert(memcmp(a.x, c.x, 2000 * 64 * sizeof(float)) != 0);
	ck_assert(memcmp(a.y, c.y, 2000 * sizeof(int32_t)) != 0);

	/* Balanced classes, shuffled (not 0,1,2,... in order). */
	int count[10] = { 0 }, in_order = 0;
	for (int i = 0; i < 2000; i++) {
		ck_assert(a.y[i] >= 0 && a.y[i] < 10);
		count[a.y[i]]++;
		in_order += a.y[i] == i % 10;
	}
	for (int k = 0; k < 10; k++)
		ck_assert_int_eq(count[k], 200);
	ck_assert_int_lt(in_order, 400);
	for (int i = 0; i < 2000 * 64; i++)
		ck_assert(a.x[i] >= -1.5f && a.x[i] < 1.5f);

	/* Learnable: class means from the first half classify the second half.
	 * Nearest mean is a linear classifier, so a small MLP does at least as
	 * well. */
	double mean[10][64] = { { 0 } };
	for (int i = 0; i < 1000; i++)
		for (int j = 0; j < 64; j++)
			mean[a.y[i]][j] += a.x[i * 64 + j] / 100.0;
	int right = 0;
	for (int i = 1000; i < 2000; i++) {
		int best = -1;
		double bd = 1e300;
		for (int k = 0; k < 10; k++) {
			double dd = 0;
			for (int j = 0; j < 64; j++)
				dd += (a.x[i * 64 + j] - mean[k][j]) * (a.x[i * 64 + j] - mean[k][j]);
			if (dd < bd)
				bd = dd, best = k;
		}
		right += best == a.y[i];
	}
	ck_assert_int_ge(right, 990);
	ph_data_free(&a), ph_data_free(&b), ph_data_free(&c);
}
END_TEST

START_TEST(test_synthetic_refusals)
{
	ph_dataset ds;
	ph_err err = { "" };
	ph_shape ok = shp(1, 16, 0, 0), bad0 = shp(0, 0, 0, 0), badd = shp(2, 4, 0, 0);
	ph_shape big = shp(3, 1000, 1000, 1000);
	ck_assert_int_eq(ph_data_synthetic(0, &ok, 3, 1, &ds, &err), PH_EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "0 samples"));
	ck_assert_int_eq(ph_data_synthetic(10, &ok, 0, 1, &ds, &err), PH_EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "0 classes"));
	ck_assert_int_eq(ph_data_synthetic(10, &bad0, 3, 1, &ds, &err), PH_EINVAL);
	ck_assert_int_eq(ph_data_synthetic(10, &badd, 3, 1, &ds, &err), PH_EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "dimension 1 is 0"));
	ck_assert_int_eq(ph_data_synthetic(1000, &big, 3, 1, &ds, &err), PH_EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "make it smaller"));
	ck_assert_ptr_null(ds.x);
	/* Fewer samples than classes is odd but allowed. */
	ck_assert_int_eq(ph_data_synthetic(3, &ok, 10, 1, &ds, &err), PH_OK);
	ph_data_free(&ds);
}
END_TEST

static int is_perm(const int64_t *p, int64_t n)
{
	char *seen = calloc((size_t)n + 1, 1);
	int ok = 1;
	for (int64_t i = 0; i < n && ok; i++) {
		ok = p[i] >= 0 && p[i] < n && !seen[p[i]];
		if (ok)
			seen[p[i]] = 1;
	}
	free(seen);
	return ok;
}

START_TEST(test_permutation)
{
	enum { M = 1000 };
	int64_t a[M], b[M], c[M], d[M];
	ph_data_permutation(42, 3, M, a);
	ph_data_permutation(42, 3, M, b);
	ph_data_permutation(42, 4, M, c);
	ph_data_permutation(43, 3, M, d);
	ck_assert(is_perm(a, M) && is_perm(c, M) && is_perm(d, M));
	ck_assert_mem_eq(a, b, sizeof a);
	ck_assert(memcmp(a, c, sizeof a) != 0);
	ck_assert(memcmp(a, d, sizeof a) != 0);

	/* Pinned: resuming a run from a checkpoint made by an earlier build
	 * relies on the same order, so any change here must be deliberate. */
	static const int64_t golden[10] = { 8, 0, 7, 2, 3, 9, 5, 1, 6, 4 };
	int64_t g[10];
	ph_data_permutation(42, 3, 10, g);
	ck_assert_mem_eq(g, golden, sizeof g);

	/* Edges. */
	int64_t one = 99;
	ph_data_permutation(1, 1, 0, &one);
	ck_assert_int_eq(one, 99);
	ph_data_permutation(1, 1, 1, &one);
	ck_assert_int_eq(one, 0);

	/* Uniform: each of the 6 orders of 3 items about 1/6 of 6000 epochs
	 * (standard deviation 29; 150 is over five of them). */
	int hist[6] = { 0 };
	for (uint64_t e = 0; e < 6000; e++) {
		int64_t p[3];
		ph_data_permutation(5, e, 3, p);
		hist[p[0] * 2 + (p[1] > p[2])]++;
	}
	for (int k = 0; k < 6; k++)
		ck_assert_msg(abs(hist[k] - 1000) < 150, "order %d: %d of 6000", k, hist[k]);
}
END_TEST

START_TEST(test_gather)
{
	ph_shape s = shp(2, 3, 2, 0);
	ph_dataset ds;
	ph_err err = { "" };
	ck_assert_int_eq(ph_data_synthetic(20, &s, 4, 1, &ds, &err), PH_OK);
	int64_t idx[3] = { 5, 0, 19 };
	float x[3 * 6];
	int32_t y[3];
	ph_data_gather(&ds, idx, 3, x, y);
	for (int k = 0; k < 3; k++) {
		ck_assert_mem_eq(x + k * 6, ds.x + idx[k] * 6, 6 * sizeof(float));
		ck_assert_int_eq(y[k], ds.y[idx[k]]);
	}
	ph_data_free(&ds);
}
END_TEST

/* ------------------------------------------------------------------ */
/* The data-source registry and each source's ops.                      */

static void expect_same(const ph_dataset *a, const ph_dataset *b)
{
	ck_assert_int_eq(a->n, b->n);
	ck_assert_int_eq(a->targets_per_sample, b->targets_per_sample);
	ck_assert_int_eq(a->nclasses, b->nclasses);
	ck_assert_mem_eq(&a->shape, &b->shape, sizeof a->shape);
	int64_t numel = ph_shape_numel(&a->shape);
	ck_assert_mem_eq(a->x, b->x, (size_t)(a->n * numel) * sizeof(float));
	ck_assert_mem_eq(a->y, b->y, (size_t)(a->n * a->targets_per_sample) * sizeof(int32_t));
}

START_TEST(test_registry)
{
	const char *names[] = { "fashion-mnist", "synthetic", "text", "npy", "tokens" };
	for (int i = 0; i < 5; i++) {
		const ph_data_source *src = ph_data_source_find(names[i]);
		ck_assert_ptr_nonnull(src);
		ck_assert_str_eq(src->name, names[i]);
		ck_assert(src->help && src->help[0] && src->sample_shape && src->load);
	}
	ck_assert_ptr_null(ph_data_source_find("mnist"));
	ck_assert_ptr_null(ph_data_source_find(""));
	char buf[128];
	ph_data_source_names(buf, sizeof buf);
	ck_assert_str_eq(buf, "fashion-mnist, synthetic, text, npy, tokens");
	ph_data_source_names(buf, 12); /* cut short, still a string */
	ck_assert_str_eq(buf, "fashion-mni");
	ck_assert(ph_data_source_find("text")->per_byte);
	ck_assert(!ph_data_source_find("synthetic")->per_byte);
}
END_TEST

/* Through the ops, each source gives the bytes its loader gives. */
START_TEST(test_source_ops)
{
	ph_config c;
	memset(&c, 0, sizeof c);
	ph_err err = { "" };
	ph_shape s;
	ph_dataset tr, ev, want, all;

	/* synthetic: shape from [data] shape; the evaluation split is the
	 * tail of samples + test_samples made from the same seed */
	c.run.seed = 11;
	c.data.samples = 40, c.data.test_samples = 9, c.data.classes = 3;
	c.data.shape = (ph_intlist){ 2, { 2, 5 } };
	const ph_data_source *syn = ph_data_source_find("synthetic");
	ck_assert_int_eq(syn->sample_shape(&c, &s, &err), PH_OK);
	ck_assert_int_eq(s.ndim, 2);
	ck_assert_int_eq(s.d[1], 5);
	ck_assert_int_eq(syn->load(&c, &s, &tr, &ev, &err), PH_OK);
	ck_assert_int_eq(ph_data_synthetic(40, &s, 3, 11, &want, &err), PH_OK);
	expect_same(&tr, &want);
	ck_assert_int_eq(ph_data_synthetic(49, &s, 3, 11, &all, &err), PH_OK);
	ck_assert_int_eq(ev.n, 9);
	ck_assert_mem_eq(ev.x, all.x + 40 * 10, 9 * 10 * sizeof(float));
	ck_assert_mem_eq(ev.y, all.y + 40, 9 * sizeof(int32_t));
	ph_data_free(&tr), ph_data_free(&ev), ph_data_free(&want), ph_data_free(&all);
	c.data.shape.n = 0;
	ck_assert_int_eq(syn->sample_shape(&c, &s, &err), PH_EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "[data] shape needs 1 to"));

	/* text: [seq_len] samples, both splits as ph_data_load_text's */
	const char *txt = in_dir("corpus.txt");
	FILE *f = fopen(txt, "w");
	ck_assert_ptr_nonnull(f);
	for (int i = 0; i < 300; i++)
		fputc('a' + i % 26, f);
	fclose(f);
	ck_assert_int_lt(snprintf(c.data.path, sizeof c.data.path, "%s", txt), (int)sizeof c.data.path);
	c.data.seq_len = 8, c.data.holdout = 0.25;
	const ph_data_source *text = ph_data_source_find("text");
	ck_assert_int_eq(text->sample_shape(&c, &s, &err), PH_OK);
	ck_assert_int_eq(s.ndim, 1);
	ck_assert_int_eq(s.d[0], 8);
	ck_assert_int_eq(text->load(&c, &s, &tr, &ev, &err), PH_OK);
	ck_assert_int_eq(ph_data_load_text(txt, 8, 0.25, 1, &want, &err), PH_OK);
	expect_same(&tr, &want);
	ph_data_free(&want);
	ck_assert_int_eq(ph_data_load_text(txt, 8, 0.25, 0, &want, &err), PH_OK);
	expect_same(&ev, &want);
	ph_data_free(&tr), ph_data_free(&ev), ph_data_free(&want);

	/* fashion-mnist: [1,28,28]; a missing evaluation split fails the
	 * load and leaves both splits empty */
	write_set("train", 5, 5, labels5);
	ck_assert_int_lt(snprintf(c.data.path, sizeof c.data.path, "%s", scratch_dir),
			 (int)sizeof c.data.path);
	const ph_data_source *fm = ph_data_source_find("fashion-mnist");
	ck_assert_int_eq(fm->sample_shape(&c, &s, &err), PH_OK);
	ck_assert_int_eq(s.ndim, 3);
	ck_assert_int_eq(s.d[2], 28);
	memset(&tr, 0x5a, sizeof tr);
	ck_assert_int_eq(fm->load(&c, &s, &tr, &ev, &err), PH_EIO);
	ck_assert_ptr_nonnull(strstr(err.msg, "t10k-images-idx3-ubyte.gz not found"));
	ck_assert_ptr_null(tr.x);
	ck_assert_ptr_null(ev.x);
	write_set("t10k", 3, 3, labels5);
	ck_assert_int_eq(fm->load(&c, &s, &tr, &ev, &err), PH_OK);
	ck_assert_int_eq(tr.n, 5);
	ck_assert_int_eq(ev.n, 3);
	ck_assert_int_eq(ph_data_load_fashion_mnist(scratch_dir, 0, &want, &err), PH_OK);
	expect_same(&ev, &want);
	ph_data_free(&tr), ph_data_free(&ev), ph_data_free(&want);
}
END_TEST

/* A .npy file: format major.0, the header dict from descr, fortran and
 * shape, padded to 64 bytes as numpy pads it, then len payload bytes. */
static void write_npy_dict(const char *name, int major, const char *dict, const void *payload, size_t len)
{
	int dl = (int)strlen(dict);
	size_t pre = major == 1 ? 10 : 12;
	size_t hl = (size_t)dl + 1;
	hl += (64 - (pre + hl) % 64) % 64;
	FILE *f = fopen(in_dir(name), "wb");
	ck_assert_ptr_nonnull(f);
	fwrite("\x93NUMPY", 1, 6, f);
	fputc(major, f), fputc(0, f);
	fputc((int)(hl & 0xff), f), fputc((int)(hl >> 8), f);
	if (major != 1)
		fputc(0, f), fputc(0, f);
	fwrite(dict, 1, (size_t)dl, f);
	for (size_t i = (size_t)dl; i + 1 < hl; i++)
		fputc(' ', f);
	fputc('\n', f);
	if (len)
		fwrite(payload, 1, len, f);
	ck_assert_int_eq(fclose(f), 0);
}

static void write_npy(const char *name, int major, const char *descr, const char *fortran, const char *shape,
		      const void *payload, size_t len)
{
	char dict[256];
	snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }", descr, fortran, shape);
	write_npy_dict(name, major, dict, payload, len);
}

static void expect_npy_fail(const char *img, const char *lab, const char *want)
{
	ph_dataset ds;
	memset(&ds, 0x5a, sizeof ds);
	ph_err err = { "" };
	ck_assert_int_ne(ph_data_load_npy(in_dir(img), in_dir(lab), &ds, &err), PH_OK);
	ck_assert_msg(strstr(err.msg, want) != NULL, "got \"%s\", wanted \"%s\"", err.msg, want);
	ck_assert_msg(!strchr(err.msg, '\n'), "two lines: %s", err.msg);
	ck_assert_ptr_null(ds.x);
	ck_assert_ptr_null(ds.y);
	ck_assert_int_eq(ds.n, 0);
}

/* float32 and uint8 inputs, int64 / int32 / uint8 labels, v1 and v2. */
START_TEST(test_npy_valid)
{
	float xf[3 * 2 * 2];
	for (int i = 0; i < 12; i++)
		xf[i] = (float)i * 0.5f - 1.f;
	int64_t l64[3] = { 2, 0, 5 };
	write_npy("xf.npy", 1, "<f4", "False", "(3, 2, 2)", xf, sizeof xf);
	write_npy("l64.npy", 1, "<i8", "False", "(3,)", l64, sizeof l64);
	ph_dataset ds;
	ph_err err = { "" };
	ck_assert_int_eq(ph_data_load_npy(in_dir("xf.npy"), in_dir("l64.npy"), &ds, &err), PH_OK);
	ck_assert_int_eq(ds.n, 3);
	ck_assert_int_eq(ds.shape.ndim, 2);
	ck_assert_int_eq(ds.shape.d[0], 2);
	ck_assert_int_eq(ds.shape.d[1], 2);
	ck_assert_int_eq(ds.targets_per_sample, 1);
	ck_assert_int_eq(ds.nclasses, 6);
	ck_assert_mem_eq(ds.x, xf, sizeof xf);
	ck_assert_int_eq(ds.y[0], 2);
	ck_assert_int_eq(ds.y[2], 5);
	ph_data_free(&ds);

	unsigned char xu[2 * 3] = { 0, 255, 51, 102, 1, 254 }, lu[2] = { 1, 0 };
	int32_t l32[2] = { 7, 3 };
	write_npy("xu.npy", 2, "|u1", "False", "(2, 3)", xu, sizeof xu);
	write_npy("lu.npy", 1, "|u1", "False", "(2,)", lu, sizeof lu);
	write_npy("l32.npy", 2, "<i4", "False", "(2,)", l32, sizeof l32);
	ck_assert_int_eq(ph_data_load_npy(in_dir("xu.npy"), in_dir("lu.npy"), &ds, &err), PH_OK);
	ck_assert_int_eq(ds.n, 2);
	ck_assert_int_eq(ds.shape.ndim, 1);
	ck_assert_int_eq(ds.shape.d[0], 3);
	for (int i = 0; i < 6; i++) /* scaled as Fashion-MNIST's pixels are */
		ck_assert(ds.x[i] == (float)xu[i] / 255.f);
	ck_assert_int_eq(ds.y[0], 1);
	ph_data_free(&ds);
	ck_assert_int_eq(ph_data_load_npy(in_dir("xu.npy"), in_dir("l32.npy"), &ds, &err), PH_OK);
	ck_assert_int_eq(ds.y[0], 7);
	ck_assert_int_eq(ds.nclasses, 8);
	ph_data_free(&ds);
}
END_TEST

/* Each bad file: one line naming it, nothing loaded. */
START_TEST(test_npy_bad)
{
	float xf[2 * 4] = { 0 };
	int64_t l2[2] = { 0, 1 }, l3[3] = { 0, 1, 2 }, neg[2] = { 0, -1 };
	write_npy("x.npy", 1, "<f4", "False", "(2, 4)", xf, sizeof xf);
	write_npy("l.npy", 1, "<i8", "False", "(2,)", l2, sizeof l2);
	write_npy("l3.npy", 1, "<i8", "False", "(3,)", l3, sizeof l3);
	write_npy("neg.npy", 1, "<i8", "False", "(2,)", neg, sizeof neg);
	write_npy("fort.npy", 1, "<f4", "True", "(2, 4)", xf, sizeof xf);
	write_npy("f8.npy", 1, "<f8", "False", "(2, 2)", xf, sizeof xf);
	write_npy("be.npy", 1, ">f4", "False", "(2, 4)", xf, sizeof xf);
	write_npy("short.npy", 1, "<f4", "False", "(2, 4)", xf, sizeof xf - 4);
	write_npy("long.npy", 1, "<f4", "False", "(2, 4)", xf, sizeof xf);
	FILE *f = fopen(in_dir("long.npy"), "ab");
	fputc(0, f);
	fclose(f);
	write_npy("v9.npy", 9, "<f4", "False", "(2, 4)", xf, sizeof xf);
	write_npy("flat.npy", 1, "<f4", "False", "(8,)", xf, sizeof xf);
	write_npy("lf.npy", 1, "<f4", "False", "(2,)", xf, 8);
	write_npy("noshape.npy", 1, "<f4", "False", "[2, 4]", xf, sizeof xf);
	f = fopen(in_dir("magic.npy"), "wb");
	fputs("PK\003\004 not an npy file at all", f);
	fclose(f);
	ck_assert_int_eq(mkfifo(in_dir("fifo.npy"), 0600), 0);

	expect_npy_fail("x.npy", "l3.npy", "x.npy has 2 samples but");
	expect_npy_fail("x.npy", "neg.npy", "neg.npy: label -1 at index 1");
	expect_npy_fail("magic.npy", "l.npy", "magic.npy is not a .npy file");
	expect_npy_fail("fort.npy", "l.npy", "fort.npy is in Fortran order");
	expect_npy_fail("f8.npy", "l.npy", "f8.npy has dtype '<f8'; use float32, uint8");
	/* the whole descr is quoted, however it is written: not cut after
	 * 4 or 5 characters or at its first comma */
	expect_npy_fail("be.npy", "l.npy", "be.npy is big-endian ('>f4'); save it as little-endian");
	write_npy_dict("rec.npy", 1, "{'descr': [('a', '<f4'), ('b', '<i4')], 'fortran_order': False, 'shape': (2,), }",
		       xf, sizeof xf);
	expect_npy_fail("rec.npy", "l.npy", "rec.npy has dtype [('a', '<f4'), ('b', '<i4')]; use float32, uint8");
	write_npy("str.npy", 1, "<U12", "False", "(2, 4)", xf, sizeof xf);
	expect_npy_fail("str.npy", "l.npy", "str.npy has dtype '<U12'; use float32");
	write_npy_dict("longdescr.npy", 1, "{'descr': [('aaaaaaaaaaaaaaaaaaaa', '<f4'), ('bbbbbbbbbbbbbbbbbbbb', '<i4'), ('c', "
		       "'<f8')], 'fortran_order': False, 'shape': (2,), }", xf, sizeof xf);
	expect_npy_fail("longdescr.npy", "l.npy",
			"longdescr.npy has dtype [('aaaaaaaaaaaaaaaaaaaa', '<f4'), ('bbbbbbbbbbbbbbbbbbbb', '...; use float32");
	write_npy_dict("ctl.npy", 1, "{'descr': '<\x01\x02', 'fortran_order': False, 'shape': (2, 4), }", xf, sizeof xf);
	expect_npy_fail("ctl.npy", "l.npy", "ctl.npy has dtype '<\\x01\\x02'; use float32");
	expect_npy_fail("short.npy", "l.npy", "short.npy is truncated: its shape needs");
	expect_npy_fail("long.npy", "l.npy", "long.npy has 1 bytes after its array");
	expect_npy_fail("v9.npy", "l.npy", "v9.npy is .npy format version 9.0");
	expect_npy_fail("flat.npy", "l.npy", "flat.npy (images) must be [N, ...] float32 or uint8");
	expect_npy_fail("x.npy", "lf.npy", "lf.npy (labels) must be [N] integer labels");
	expect_npy_fail("noshape.npy", "l.npy", "noshape.npy: shape is not a tuple");
	expect_npy_fail("fifo.npy", "l.npy", "fifo.npy (images) is not a regular file");
	expect_npy_fail("none.npy", "l.npy", "none.npy (images) not found");
	expect_npy_fail("x.npy", "none.npy", "none.npy (labels) not found");
}
END_TEST

/* The ops: the shape from train_images' header, both splits, and a test
 * split of other samples refused. */
START_TEST(test_npy_ops)
{
	ph_config c;
	memset(&c, 0, sizeof c);
	ph_err err = { "" };
	float x[4 * 6];
	for (int i = 0; i < 24; i++)
		x[i] = (float)i;
	unsigned char l[4] = { 0, 1, 1, 0 };
	write_npy("tx.npy", 1, "<f4", "False", "(4, 2, 3)", x, sizeof x);
	write_npy("tl.npy", 1, "|u1", "False", "(4,)", l, sizeof l);
	write_npy("vx.npy", 1, "<f4", "False", "(2, 2, 3)", x, 12 * sizeof(float));
	write_npy("vl.npy", 1, "|u1", "False", "(2,)", l, 2);
	write_npy("wx.npy", 1, "<f4", "False", "(2, 3, 2)", x, 12 * sizeof(float));
	const ph_data_source *npy = ph_data_source_find("npy");
	ck_assert_ptr_nonnull(npy);
	ph_shape s;
	ck_assert_int_eq(npy->sample_shape(&c, &s, &err), PH_EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "[data] train_images is not set"));
	snprintf(c.data.train_images, sizeof c.data.train_images, "%s", in_dir("tx.npy"));
	snprintf(c.data.train_labels, sizeof c.data.train_labels, "%s", in_dir("tl.npy"));
	snprintf(c.data.test_images, sizeof c.data.test_images, "%s", in_dir("vx.npy"));
	snprintf(c.data.test_labels, sizeof c.data.test_labels, "%s", in_dir("vl.npy"));
	ck_assert_int_eq(npy->sample_shape(&c, &s, &err), PH_OK);
	ck_assert_int_eq(s.ndim, 2);
	ck_assert_int_eq(s.d[0], 2);
	ck_assert_int_eq(s.d[1], 3);
	ph_dataset tr, ev;
	ck_assert_int_eq(npy->load(&c, &s, &tr, &ev, &err), PH_OK);
	ck_assert_int_eq(tr.n, 4);
	ck_assert_int_eq(ev.n, 2);
	ck_assert_mem_eq(ev.x, x, 12 * sizeof(float));
	ph_data_free(&tr), ph_data_free(&ev);
	snprintf(c.data.test_images, sizeof c.data.test_images, "%s", in_dir("wx.npy"));
	memset(&tr, 0x5a, sizeof tr);
	ck_assert_int_eq(npy->load(&c, &s, &tr, &ev, &err), PH_EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "wx.npy holds samples of [3,2]"));
	ck_assert_ptr_null(tr.x);
	ck_assert_ptr_null(ev.x);
	c.data.test_labels[0] = 0;
	ck_assert_int_eq(npy->load(&c, &s, &tr, &ev, &err), PH_EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "[data] test_labels is not set"));
}
END_TEST

/* A token file: llm.c's header (version 0: none; 7: LLaMA 3's magic
 * 20240801, else GPT-2's 20240520) and n ids of width bytes. */
static void write_tokens(const char *name, int version, int width, const uint32_t *ids, size_t n, size_t declared)
{
	FILE *f = fopen(in_dir(name), "wb");
	ck_assert_ptr_nonnull(f);
	if (version) {
		int32_t h[256] = { version == 7 ? 20240801 : 20240520, version, (int32_t)declared };
		fwrite(h, sizeof h, 1, f); /* little-endian host, as llm.c writes it */
	}
	for (size_t i = 0; i < n; i++)
		for (int b = 0; b < width; b++)
			fputc((int)(ids[i] >> (8 * b) & 0xff), f);
	ck_assert_int_eq(fclose(f), 0);
}

static void expect_tokens_fail(const char *name, int width, int64_t vocab, const char *want)
{
	uint32_t *t = (uint32_t *)1;
	size_t n = 99;
	ph_err err = { "" };
	ck_assert_int_ne(ph_data_read_tokens(in_dir(name), width, vocab, &t, &n, &err), PH_OK);
	ck_assert_msg(strstr(err.msg, want) != NULL, "got \"%s\", wanted \"%s\"", err.msg, want);
	ck_assert_msg(!strchr(err.msg, '\n'), "two lines: %s", err.msg);
	ck_assert_ptr_null(t);
	ck_assert_int_eq(n, 0);
}

START_TEST(test_tokens_files)
{
	uint32_t ids[40];
	for (int i = 0; i < 40; i++)
		ids[i] = (uint32_t)(i * 37 % 251 + (i == 3 ? 60000 : 0));
	write_tokens("nano.bin", 0, 2, ids, 40, 0);
	write_tokens("wide.bin", 0, 4, ids, 40, 0);
	write_tokens("llmc1.bin", 1, 2, ids, 40, 40);
	write_tokens("llmc2.bin", 7, 4, ids, 40, 40); /* LLaMA 3's: uint32 */
	const char *ok[] = { "nano.bin", "wide.bin", "llmc1.bin", "llmc2.bin" };
	for (int k = 0; k < 4; k++) {
		uint32_t *t;
		size_t n;
		ph_err err = { "" };
		/* token_type says uint16 for all: llm.c's header overrides it */
		ck_assert_int_eq(ph_data_read_tokens(in_dir(ok[k]), k == 1 ? 4 : 2, 65536, &t, &n, &err), PH_OK);
		ck_assert_int_eq(n, 40);
		ck_assert_mem_eq(t, ids, sizeof ids);
		free(t);
	}
	uint32_t big[3] = { 1, 2, 70000 };
	write_tokens("big.bin", 0, 4, big, 3, 0);
	write_tokens("short1.bin", 1, 2, ids, 39, 40);
	write_tokens("long1.bin", 1, 2, ids, 40, 39);
	write_tokens("v3.bin", 3, 2, ids, 40, 40);
	write_tokens("odd.bin", 0, 2, ids, 40, 0);
	FILE *f = fopen(in_dir("odd.bin"), "ab");
	fputc(1, f);
	fclose(f);
	f = fopen(in_dir("hdr.bin"), "wb");
	int32_t magic = 20240520;
	fwrite(&magic, 4, 1, f);
	fwrite(ids, 4, 10, f);
	fclose(f);
	fclose(fopen(in_dir("empty.bin"), "wb"));
	ck_assert_int_eq(mkfifo(in_dir("fifo.bin"), 0600), 0);
	expect_tokens_fail("nano.bin", 2, 50257, "nano.bin: token 60111 at position 3 is not below vocab_size 50257");
	expect_tokens_fail("big.bin", 4, 65536, "big.bin: token 70000 at position 2 is not below vocab_size 65536; set "
			   "[data] vocab_size");
	/* uint16 ids read as uint32: the width is wrong, not vocab_size */
	uint32_t pairs[40];
	for (int i = 0; i < 40; i++)
		pairs[i] = (uint32_t)(i * 37 % 251 + 1);
	write_tokens("u16.bin", 0, 2, pairs, 40, 0);
	expect_tokens_fail("u16.bin", 4, 50257, "u16.bin: token 2490369 at position 0 is not below vocab_size 50257, and "
			   "most are not, but read as uint16 every id is: set [data] token_type = uint16");
	uint32_t absurd[3] = { 1, 2, 1u << 30 };
	write_tokens("absurd.bin", 0, 4, absurd, 3, 0);
	expect_tokens_fail("absurd.bin", 4, 65536, "absurd.bin: token 1073741824 at position 2 is past any vocabulary (ids "
			   "travel as floats, exact below 2^24): is [data] token_type = uint32 right?");
	/* llm.c's header says the width: a big id there is the vocabulary's */
	write_tokens("llmc2big.bin", 7, 4, absurd, 3, 3);
	expect_tokens_fail("llmc2big.bin", 2, 65536, "token 1073741824 at position 2 is not below vocab_size 65536; set "
			   "[data] vocab_size");
	expect_tokens_fail("short1.bin", 2, 65536, "short1.bin is truncated: its header says 40 tokens (80 bytes)");
	expect_tokens_fail("long1.bin", 2, 65536, "long1.bin holds 2 bytes after the 39 tokens");
	expect_tokens_fail("v3.bin", 2, 65536, "v3.bin has llm.c's magic 20240520 but version 3; llm.c writes GPT-2 token "
			   "files as magic 20240520 version 1 (uint16 ids) and LLaMA 3 ones as magic 20240801 version 7 (uint32)");
	/* GPT-2's magic with uint32 ids (no llm.c writes it: it was read once
	 * as a "version 2") */
	write_tokens("v2.bin", 2, 4, ids, 40, 40);
	expect_tokens_fail("v2.bin", 2, 65536, "v2.bin has llm.c's magic 20240520 but version 2");
	/* a longer file whose excess is not a whole id: corrupt, not truncated */
	write_tokens("long1b.bin", 1, 2, ids, 40, 40);
	f = fopen(in_dir("long1b.bin"), "ab");
	fputc(7, f);
	fclose(f);
	expect_tokens_fail("long1b.bin", 2, 65536, "long1b.bin holds 1 bytes after the 40 tokens its header says");
	int32_t hs[256] = { 20240522, 1, 10 };
	f = fopen(in_dir("hellaswag.bin"), "wb");
	fwrite(hs, sizeof hs, 1, f);
	fclose(f);
	expect_tokens_fail("hellaswag.bin", 2, 65536, "hellaswag.bin is llm.c's HellaSwag evaluation data (magic "
			   "20240522), not a token file");
	expect_tokens_fail("odd.bin", 2, 65536, "odd.bin is truncated: 81 bytes is not a whole number of uint16 ids");
	expect_tokens_fail("hdr.bin", 2, 65536, "hdr.bin is truncated: llm.c's magic, but 44 bytes");
	expect_tokens_fail("empty.bin", 2, 65536, "empty.bin holds no tokens");
	expect_tokens_fail("fifo.bin", 2, 65536, "fifo.bin is not a regular file");
	expect_tokens_fail("none.bin", 2, 65536, "none.bin not found");
}
END_TEST

/* The ops: sequences of T in and T next out, cut like the text source's
 * bytes; held out from the end, or from test_tokens. */
START_TEST(test_tokens_ops)
{
	ph_config c;
	memset(&c, 0, sizeof c);
	ph_err err = { "" };
	uint32_t ids[100];
	for (int i = 0; i < 100; i++)
		ids[i] = (uint32_t)(i * 7 % 300);
	write_tokens("t.bin", 0, 2, ids, 100, 0);
	write_tokens("v.bin", 1, 2, ids, 30, 30);
	const ph_data_source *src = ph_data_source_find("tokens");
	ck_assert_ptr_nonnull(src);
	ck_assert(!src->per_byte);
	c.data.seq_len = 8, c.data.holdout = 0.2, c.data.vocab_size = 300, c.data.token_type = PH_TOKEN_UINT16;
	ph_shape s;
	ph_dataset tr, ev;
	ck_assert_int_eq(src->sample_shape(&c, &s, &err), PH_OK);
	ck_assert_int_eq(s.ndim, 1);
	ck_assert_int_eq(s.d[0], 8);
	ck_assert_int_eq(src->load(&c, &s, &tr, &ev, &err), PH_EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "[data] tokens is not set"));
	snprintf(c.data.tokens, sizeof c.data.tokens, "%s", in_dir("t.bin"));
	ck_assert_int_eq(src->load(&c, &s, &tr, &ev, &err), PH_OK);
	ck_assert_int_eq(tr.n, (80 - 1) / 8);
	ck_assert_int_eq(ev.n, (20 - 1) / 8);
	ck_assert_int_eq(tr.nclasses, 300);
	ck_assert_int_eq(tr.targets_per_sample, 8);
	for (int i = 0; i < tr.n * 8; i++) {
		ck_assert(tr.x[i] == (float)ids[i]);
		ck_assert_int_eq(tr.y[i], ids[i + 1]);
	}
	for (int i = 0; i < ev.n * 8; i++) {
		ck_assert(ev.x[i] == (float)ids[80 + i]);
		ck_assert_int_eq(ev.y[i], ids[80 + i + 1]);
	}
	ph_data_free(&tr), ph_data_free(&ev);
	snprintf(c.data.test_tokens, sizeof c.data.test_tokens, "%s", in_dir("v.bin"));
	ck_assert_int_eq(src->load(&c, &s, &tr, &ev, &err), PH_OK);
	ck_assert_int_eq(tr.n, 99 / 8);
	ck_assert_int_eq(ev.n, 29 / 8);
	ph_data_free(&tr), ph_data_free(&ev);
	c.data.seq_len = 40; /* too long for the 30 validation tokens */
	memset(&tr, 0x5a, sizeof tr);
	ck_assert_int_eq(src->load(&c, &s, &tr, &ev, &err), PH_EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "v.bin has 30 validation tokens, too few for one sequence of 40"));
	ck_assert_ptr_null(tr.x);
	ck_assert_ptr_null(ev.x);
	c.data.seq_len = 8, c.data.vocab_size = 250;
	ck_assert_int_eq(src->load(&c, &s, &tr, &ev, &err), PH_EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "t.bin: token 252 at position 36 is not below vocab_size 250"));
	/* held out from t.bin: 100 tokens, holdout 0.05 keeps 5, too few for
	 * a sequence of 8; refused only when the run evaluates them */
	c.data.vocab_size = 300, c.data.holdout = 0.05, c.data.test_tokens[0] = 0, c.run.eval = 1;
	ck_assert_int_eq(src->load(&c, &s, &tr, &ev, &err), PH_EINVAL);
	ck_assert_msg(strstr(err.msg, "t.bin: its last holdout = 0.05 is 5 tokens, too few for one validation sequence "
			     "of 8; raise [data] holdout, give test_tokens, use a shorter seq_len, or set [run] eval = no"),
		      "%s", err.msg);
	ck_assert_ptr_null(tr.x);
	c.run.eval = 0;
	ck_assert_int_eq(src->load(&c, &s, &tr, &ev, &err), PH_OK);
	ck_assert_int_eq(tr.n, (95 - 1) / 8); /* the same training tokens either way */
	ck_assert_int_eq(ev.n, 0);
	ck_assert_str_eq(tr.unit, "token");
	ck_assert_int_eq(strncmp(tr.x_from, "tokens: ", 8), 0);
	ph_data_free(&tr), ph_data_free(&ev);
}
END_TEST

/* Ids past a model's limits: found in one pass over the samples a run
 * reads, and placed in their file (main.c's check at load names them). */
START_TEST(test_ids_outside)
{
	ph_err err = { "" };
	char w[128];
	uint32_t *tok = malloc(5000 * sizeof *tok);
	ck_assert_ptr_nonnull(tok);
	for (int i = 0; i < 5000; i++)
		tok[i] = (uint32_t)(i % 256);
	tok[3000] = 300;
	ph_dataset ds;
	ck_assert_int_eq(ph_data_token_sequences(tok, 0, 4500, 16, 50257, "t.bin", "training", &ds, &err), PH_OK);
	ck_assert_str_eq(ds.unit, "token");
	ck_assert_str_eq(ds.x_from, "t.bin");
	int64_t k = ph_data_first_outside(&ds, ds.n, 0, 256);
	ck_assert_int_eq(k, 3000);
	ph_data_where(&ds, "training", 0, k, w, sizeof w);
	ck_assert_str_eq(w, "token 3000 (training sample 187, position 8)");
	/* the same token is the target of the position before */
	k = ph_data_first_outside(&ds, ds.n, 1, 256);
	ck_assert_int_eq(k, 2999);
	ph_data_where(&ds, "training", 1, k, w, sizeof w);
	ck_assert_str_eq(w, "token 3000 (training sample 187, position 7)");
	ck_assert_int_eq(ph_data_first_outside(&ds, 187, 0, 256), -1); /* [data] limit: not read */
	ck_assert_int_eq(ph_data_first_outside(&ds, ds.n, 0, 301), -1);
	ck_assert_int_eq(ph_data_first_outside(&ds, ds.n, 1, 301), -1);
	ph_data_free(&ds);
	/* a split cut further on counts positions from the file's start */
	ck_assert_int_eq(ph_data_token_sequences(tok, 2990, 5000, 16, 50257, "t.bin", "held-out", &ds, &err), PH_OK);
	k = ph_data_first_outside(&ds, ds.n, 0, 256);
	ph_data_where(&ds, "validation", 0, k, w, sizeof w);
	ck_assert_str_eq(w, "token 3000 (validation sample 0, position 10)");
	ph_data_free(&ds);
	free(tok);

	/* a file of records (npy): label i is sample i's */
	memset(&ds, 0, sizeof ds);
	ds.n = 60, ds.shape = (ph_shape){ 1, { 2 } }, ds.targets_per_sample = 1;
	ds.x = calloc(120, sizeof *ds.x);
	ds.y = calloc(60, sizeof *ds.y);
	ck_assert(ds.x && ds.y);
	ds.y[50] = 99;
	ds.x[7] = 2.5f;
	k = ph_data_first_outside(&ds, ds.n, 1, 10);
	ck_assert_int_eq(k, 50);
	ph_data_where(&ds, "test", 1, k, w, sizeof w);
	ck_assert_str_eq(w, "index 50 (test sample 50)");
	ck_assert_int_eq(ph_data_first_outside(&ds, 50, 1, 10), -1);
	ck_assert_int_eq(ph_data_first_outside(&ds, ds.n, 1, 100), -1);
	/* an input read as an id must be a whole number: 2.5, NaN, -1 are not */
	k = ph_data_first_outside(&ds, ds.n, 0, 10);
	ck_assert_int_eq(k, 7);
	ph_data_where(&ds, "test", 0, k, w, sizeof w);
	ck_assert_str_eq(w, "test sample 3, element 1");
	ds.x[7] = 2.f, ds.x[5] = NAN;
	ck_assert_int_eq(ph_data_first_outside(&ds, ds.n, 0, 10), 5);
	ds.x[5] = -1.f;
	ck_assert_int_eq(ph_data_first_outside(&ds, ds.n, 0, 10), 5);
	ds.x[5] = 0.f;
	ck_assert_int_eq(ph_data_first_outside(&ds, ds.n, 0, 10), -1);
	ph_data_free(&ds);
}
END_TEST

static void write_text(const char *name, const char *text, size_t len)
{
	FILE *f = fopen(in_dir(name), "wb");
	ck_assert_ptr_nonnull(f);
	ck_assert_uint_eq(fwrite(text, 1, len, f), len);
	ck_assert_int_eq(fclose(f), 0);
}

/* A directory that gives no text says what it held; a held-out part too
 * short for one sequence names holdout, and is no error without eval. */
START_TEST(test_text_refusals)
{
	ph_dataset ds;
	ph_err err = { "" };
	ck_assert_int_eq(mkdir(in_dir("t"), 0700), 0);
	write_text("t/a.bin", "abc\0def", 7);
	write_text("plain.txt", "some text\n", 10);
	ck_assert_int_eq(symlink("../plain.txt", in_dir("t/l.txt")), 0);
	ck_assert_int_eq(mkdir(in_dir("t/sub"), 0700), 0);
	write_text("t/sub/inner.txt", "more text\n", 10);
	ck_assert_int_eq(ph_data_load_text(in_dir("t"), 16, 0.1, 1, &ds, &err), PH_EINVAL);
	ck_assert_msg(strstr(err.msg, "/t holds no text: skipped 1 file holding NUL bytes, 1 symlink, 1 subdirectory "
			     "(only regular files without NUL bytes are read)"), "%s", err.msg);
	ck_assert_int_eq(mkdir(in_dir("e"), 0700), 0);
	ck_assert_int_eq(ph_data_load_text(in_dir("e"), 16, 0.1, 1, &ds, &err), PH_EINVAL);
	ck_assert_msg(strstr(err.msg, "/e holds no text (no files, or only empty ones)"), "%s", err.msg);
	/* a corpus too short with files skipped: both said */
	write_text("t/b.txt", "0123456789", 10);
	ck_assert_int_eq(ph_data_load_text(in_dir("t"), 16, 0.1, 1, &ds, &err), PH_EINVAL);
	ck_assert_msg(strstr(err.msg, "/t has 10 bytes of text (skipped 1 file holding NUL bytes, 1 symlink, 1 "
			     "subdirectory), too few for one training sequence of 16"), "%s", err.msg);

	/* 100 bytes, holdout 0.1: 90 train (5 sequences of 16), 10 held out */
	char hundred[100];
	for (int i = 0; i < 100; i++)
		hundred[i] = (char)('a' + i % 26);
	write_text("h.txt", hundred, 100);
	ck_assert_int_eq(ph_data_load_text(in_dir("h.txt"), 16, 0.1, 0, &ds, &err), PH_EINVAL);
	ck_assert_msg(strstr(err.msg, "h.txt has 100 bytes; its last holdout = 0.1 is 10 bytes, too few for one "
			     "validation sequence of 16; raise [data] holdout, use more text or a shorter seq_len, or "
			     "set [run] eval = no"), "%s", err.msg);
	ph_config c;
	memset(&c, 0, sizeof c);
	snprintf(c.data.path, sizeof c.data.path, "%s", in_dir("h.txt"));
	c.data.seq_len = 16, c.data.holdout = 0.1, c.run.eval = 1;
	const ph_data_source *text = ph_data_source_find("text");
	ph_shape s = { 1, { 16 } };
	ph_dataset tr, ev;
	ck_assert_int_eq(text->load(&c, &s, &tr, &ev, &err), PH_EINVAL);
	ck_assert_ptr_null(tr.x);
	/* without eval the held-out bytes stay held out (the training
	 * bytes are the same either way), and none are needed */
	c.run.eval = 0;
	ck_assert_int_eq(text->load(&c, &s, &tr, &ev, &err), PH_OK);
	ck_assert_int_eq(tr.n, 5);
	ck_assert_int_eq(ev.n, 0);
	ck_assert_int_eq(ev.shape.d[0], 16);
	ck_assert_int_eq(strncmp(tr.x_from, "text: ", 6), 0);
	ck_assert_str_eq(tr.x_from + 6, in_dir("h.txt"));
	ck_assert_str_eq(tr.unit, "byte");
	ph_data_free(&tr), ph_data_free(&ev);
}
END_TEST

/* The [data] keys each source reads, for the config's refusal of the
 * others (config.c). */
START_TEST(test_source_keys)
{
	const ph_data_source *text = ph_data_source_find("text"), *tokens = ph_data_source_find("tokens");
	ck_assert(ph_data_source_reads(text, "vocab"));
	ck_assert(ph_data_source_reads(text, "shuffle"));
	ck_assert(ph_data_source_reads(text, "test_limit"));
	ck_assert(!ph_data_source_reads(text, "tokens"));
	ck_assert(!ph_data_source_reads(tokens, "tokenizer"));
	ck_assert(!ph_data_source_reads(tokens, "path"));
	ph_config c;
	memset(&c, 0, sizeof c);
	c.data.tokenizer = PH_TOKENIZER_BYTES;
	ck_assert_str_eq(text->unread(&c, "vocab"), "tokenizer = bpe");
	ck_assert_str_eq(text->unread(&c, "merges"), "tokenizer = bpe");
	ck_assert_ptr_null(text->unread(&c, "path"));
	c.data.tokenizer = PH_TOKENIZER_BPE;
	ck_assert_ptr_null(text->unread(&c, "vocab"));
	char buf[256];
	ph_data_source_keys(text, buf, sizeof buf);
	ck_assert_str_eq(buf, "path, seq_len, holdout, tokenizer, vocab, merges");
	ph_data_sources_reading("path", buf, sizeof buf);
	ck_assert_str_eq(buf, "fashion-mnist or text");
	ph_data_sources_reading("seq_len", buf, sizeof buf);
	ck_assert_str_eq(buf, "text or tokens");
	ph_data_sources_reading("holdout", buf, sizeof buf);
	ck_assert_str_eq(buf, "text or tokens");
	ph_data_sources_reading("classes", buf, sizeof buf);
	ck_assert_str_eq(buf, "synthetic");
	ph_data_sources_reading("nope", buf, sizeof buf);
	ck_assert_str_eq(buf, "");
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("data");
	TCase *tc = tcase_create("data");
	tcase_add_checked_fixture(tc, scratch_setup, scratch_teardown);
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_missing_dir);
	tcase_add_test(tc, test_missing_labels);
	tcase_add_test(tc, test_small_valid);
	tcase_add_test(tc, test_bad_files);
	tcase_add_test(tc, test_real_fashion_mnist);
	tcase_add_test(tc, test_synthetic);
	tcase_add_test(tc, test_synthetic_refusals);
	tcase_add_test(tc, test_permutation);
	tcase_add_test(tc, test_gather);
	tcase_add_test(tc, test_registry);
	tcase_add_test(tc, test_source_ops);
	tcase_add_test(tc, test_npy_valid);
	tcase_add_test(tc, test_npy_bad);
	tcase_add_test(tc, test_npy_ops);
	tcase_add_test(tc, test_tokens_files);
	tcase_add_test(tc, test_tokens_ops);
	tcase_add_test(tc, test_ids_outside);
	tcase_add_test(tc, test_text_refusals);
	tcase_add_test(tc, test_source_keys);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return run_suite(suite());
}
