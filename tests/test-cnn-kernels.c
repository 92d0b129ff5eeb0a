/* SPDX-License-Identifier: MIT */
/*
 * The CNN layers' fast CPU kernels against their plain references, bit for
 * bit (issue 24): each fast path keeps the plain loop's operations in the
 * same order, so any difference, even in the sign of a zero or in which of
 * two equal values is the argmax, is a bug.  Awkward shapes on purpose:
 * odd sizes, rows shorter than a vector block, batch 1, stride != size.
 * Inputs have ties, NaNs, signed zeros and infinities.
 *
 * The references below are the plugins' loops as they were before the fast
 * paths (maxpool2d.c keeps its copy as pool_forward_ref/pool_backward_ref
 * for the shapes the fast path does not take).
 */
#include <check.h>
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pipehost/plugin.h>
#include "options.h"

#include "layer-harness.h"

/* A CPU training context for batch samples. */
static void open_layer(inst *L, const char *type, const char *const *kv, ph_shape in, int batch)
{
	inst_create(L, type, kv, in, batch,
		    (ph_ctx){ .batch = batch, .training = 1, .seed = 99, .step = 3,
			      .microbatch = 1, .layer = 4, .device = PH_DEV_CPU, .loss_scale = 1.0f });
}

/* Values with ties (a few levels), signed zeros, and now and then a NaN or
 * an infinity (special != 0). */
static void fill_awkward(float *p, int64_t n, int special)
{
	for (int64_t i = 0; i < n; i++) {
		uint64_t r = rng_next();
		float v = (float)((int)(r % 7) - 3) * 0.5f;  /* -1.5 .. 1.5, many ties */
		if (v == 0.0f && (r >> 8) & 1)
			v = -0.0f;
		if (special) {
			unsigned k = (unsigned)(r >> 16) % 53;
			if (k == 0)
				v = NAN;
			else if (k == 1)
				v = INFINITY;
			else if (k == 2)
				v = -INFINITY;
		}
		p[i] = v;
	}
}

static void assert_same_bits(const void *got, const void *want, size_t bytes, const char *what,
			     const char *where)
{
	if (memcmp(got, want, bytes) == 0)
		return;
	const uint32_t *g = got, *w = want;
	size_t i = 0;
	while (g[i] == w[i])
		i++;
	ck_abort_msg("%s: %s differs at element %zu: 0x%08x, reference 0x%08x", where, what, i,
		     (unsigned)g[i], (unsigned)w[i]);
}

/* ------------------------------------------------------------------ */
/* maxpool2d                                                           */

/* x [B, C, H, W] -> y, arg [B, C, OH, OW]: maxpool2d.c's plain loop. */
static void maxpool_fwd_ref(const float *x, float *y, int32_t *arg, int B, int C, int H, int W,
			    int size, int stride)
{
	const int OH = (H - size) / stride + 1, OW = (W - size) / stride + 1;
	const size_t in_n = (size_t)C * H * W, out_n = (size_t)C * OH * OW;
	for (int b = 0; b < B; b++) {
		const float *xs = x + b * in_n;
		size_t o = 0;
		for (int c = 0; c < C; c++)
			for (int oh = 0; oh < OH; oh++)
				for (int ow = 0; ow < OW; ow++, o++) {
					const int32_t corner = (c * H + oh * stride) * W + ow * stride;
					int32_t bi = corner;
					float best = xs[corner];
					for (int i = 0; i < size; i++)
						for (int j = 0; j < size; j++) {
							int32_t idx = corner + i * W + j;
							float v = xs[idx];
							if (v > best || (isnan(v) && !isnan(best)))
								best = v, bi = idx;
						}
					y[b * out_n + o] = best;
					arg[b * out_n + o] = bi;
				}
	}
}

/* dx = 0, then dx[arg] += dy */
static void maxpool_bwd_ref(const int32_t *arg, const float *dy, float *dx, size_t in_n,
			    size_t out_n, int B)
{
	memset(dx, 0, (size_t)B * in_n * sizeof *dx);
	for (int b = 0; b < B; b++)
		for (size_t o = 0; o < out_n; o++)
			dx[b * in_n + arg[b * out_n + o]] += dy[b * out_n + o];
}

static void maxpool_case(int C, int H, int W, int B, int size, int stride, uint64_t seed)
{
	char where[96], size_[16], stride_[16];
	snprintf(where, sizeof where, "maxpool2d size %d stride %d on [%d, %d, %d] x %d", size,
		 stride, C, H, W, B);
	snprintf(size_, sizeof size_, "%d", size), snprintf(stride_, sizeof stride_, "%d", stride);
	rng_seed(seed);
	inst L;
	open_layer(&L, "maxpool2d", KV("size", size_, "stride", stride_), SHAPE(C, H, W), B);
	const int64_t nx = L.nx, ny = L.ny;
	float *yr = malloc(ny * sizeof *yr), *dxr = malloc(nx * sizeof *dxr);
	int32_t *ar = malloc(ny * sizeof *ar);
	for (int special = 0; special <= 1; special++) {
		fill_awkward(L.x, nx, special);
		fill_awkward(L.r, ny, special);
		maxpool_fwd_ref(L.x, yr, ar, B, C, H, W, size, stride);
		maxpool_bwd_ref(ar, L.r, dxr, (size_t)nx / B, (size_t)ny / B, B);
		ph_err e = { { 0 } };
		ck_assert_int_eq(L.ops->forward(L.state, &L.ctx, L.params, L.x, L.y, &e), PH_OK);
		assert_same_bits(L.y, yr, ny * sizeof *yr, "y", where);
		assert_same_bits(L.ctx.saved, ar, ny * sizeof *ar, "argmax", where);
		for (int64_t i = 0; i < nx; i++)
			L.dx[i] = NAN;  /* every element must be written */
		ck_assert_int_eq(L.ops->backward(L.state, &L.ctx, L.params, L.grads, L.x, L.y,
						 L.r, L.dx, &e), PH_OK);
		assert_same_bits(L.dx, dxr, nx * sizeof *dxr, "dx", where);
		/* Evaluation: no saved argmax, the same y. */
		void *saved = L.ctx.saved;
		L.ctx.saved = NULL;
		L.ctx.training = 0;
		for (int64_t i = 0; i < ny; i++)
			L.y[i] = NAN;
		ck_assert_int_eq(L.ops->forward(L.state, &L.ctx, L.params, L.x, L.y, &e), PH_OK);
		assert_same_bits(L.y, yr, ny * sizeof *yr, "y (eval)", where);
		L.ctx.saved = saved;
		L.ctx.training = 1;
	}
	free(yr), free(dxr), free(ar);
	inst_close(&L);
}

START_TEST(test_maxpool2d_fast_vs_ref)
{
	/* 2x2 stride 2, the fast path: rows of 1..3 windows (no vector block),
	 * 4 (one), 5..7 (an overlapping last block), odd H and W (an uncovered
	 * row and column), the CNN's 28x28 and 14x14. */
	maxpool_case(1, 2, 2, 1, 2, 2, 1);
	maxpool_case(1, 5, 6, 1, 2, 2, 2);
	maxpool_case(3, 7, 9, 1, 2, 2, 3);
	maxpool_case(2, 8, 8, 3, 2, 2, 4);
	maxpool_case(5, 13, 17, 2, 2, 2, 5);
	maxpool_case(1, 2, 11, 1, 2, 2, 6);
	maxpool_case(2, 3, 16, 2, 2, 2, 7);
	maxpool_case(4, 28, 28, 2, 2, 2, 8);
	maxpool_case(3, 14, 14, 3, 2, 2, 9);
	maxpool_case(1, 300, 301, 1, 2, 2, 10); /* OW = 150: eval's chunks of 128 */
	/* Other shapes: the plain loop itself. */
	maxpool_case(2, 7, 8, 2, 3, 2, 11);
	maxpool_case(2, 6, 7, 1, 2, 1, 12);
	maxpool_case(1, 9, 9, 2, 3, 3, 13);
}
END_TEST

/* ------------------------------------------------------------------ */
/* relu                                                                */

static void relu_case(ph_shape in, int B, uint64_t seed)
{
	char where[64];
	snprintf(where, sizeof where, "relu on %lld x %d", (long long)ph_shape_numel(&in), B);
	rng_seed(seed);
	inst L;
	open_layer(&L, "relu", NULL, in, B);
	const int64_t n = L.nx;
	float *x = malloc(n * sizeof *x), *want = malloc(n * sizeof *x), *dwant = malloc(n * sizeof *x);
	fill_awkward(x, n, 1);
	fill_awkward(L.r, n, 1);
	for (int64_t i = 0; i < n; i++) {
		want[i] = x[i] > 0.0f ? x[i] : 0.0f;
		dwant[i] = want[i] > 0.0f ? L.r[i] : 0.0f;
	}
	ph_err e = { { 0 } };
	/* Out of place, then in place (the host may pass y == x, dx == dy). */
	memcpy(L.x, x, n * sizeof *x);
	ck_assert_int_eq(L.ops->forward(L.state, &L.ctx, L.params, L.x, L.y, &e), PH_OK);
	assert_same_bits(L.y, want, n * sizeof *x, "y", where);
	ck_assert_int_eq(L.ops->forward(L.state, &L.ctx, L.params, L.x, L.x, &e), PH_OK);
	assert_same_bits(L.x, want, n * sizeof *x, "y in place", where);
	ck_assert_int_eq(L.ops->backward(L.state, &L.ctx, L.params, L.grads, x, L.y, L.r, L.dx, &e),
			 PH_OK);
	assert_same_bits(L.dx, dwant, n * sizeof *x, "dx", where);
	ck_assert_int_eq(L.ops->backward(L.state, &L.ctx, L.params, L.grads, x, L.y, L.r, L.r, &e),
			 PH_OK);
	assert_same_bits(L.r, dwant, n * sizeof *x, "dx in place", where);
	free(x), free(want), free(dwant);
	inst_close(&L);
}

START_TEST(test_relu_fast_vs_ref)
{
	relu_case(SHAPE(1), 1, 21);
	relu_case(SHAPE(3), 1, 22);
	relu_case(SHAPE(7, 5), 3, 23);
	relu_case(SHAPE(32, 28, 28), 2, 24);
	relu_case(SHAPE(2, 3, 5, 7), 1, 25);
}
END_TEST

static Suite *cnn_kernels_suite(void)
{
	Suite *s = suite_create("cnn-kernels");
	TCase *tc = tcase_create("maxpool2d");
	tcase_add_test(tc, test_maxpool2d_fast_vs_ref);
	suite_add_tcase(s, tc);
	tc = tcase_create("relu");
	tcase_add_test(tc, test_relu_fast_vs_ref);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(cnn_kernels_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
