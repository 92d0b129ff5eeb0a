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
 * for the shapes the fast path does not take); conv2d's is its pipeline
 * with im2col and col2im by their definitions.
 */
#include <check.h>
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>
#include <pipehost/plugin.h>
#include "options.h"
#include "conv2d_state.h"

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

/* ------------------------------------------------------------------ */
/* conv2d                                                              */

/* im2col by the definition: sample x [C, H, W] -> its P columns of
 * cols [CKK, ld], zero outside the image. */
static void im2col_def(const conv2d_state *s, const float *x, float *col, size_t ld)
{
	for (int c = 0; c < s->C; c++)
		for (int i = 0; i < s->k; i++)
			for (int j = 0; j < s->k; j++)
				for (int oh = 0; oh < s->OH; oh++)
					for (int ow = 0; ow < s->OW; ow++) {
						int h = oh * s->s - s->p + i, w = ow * s->s - s->p + j;
						float v = h < 0 || h >= s->H || w < 0 || w >= s->W
							? 0.0f : x[((size_t)c * s->H + h) * s->W + w];
						col[(size_t)((c * s->k + i) * s->k + j) * ld +
						    (size_t)oh * s->OW + ow] = v;
					}
}

/* Its adjoint: dx [C, H, W] += dcol, in (c, i, j, oh, ow) order. */
static void col2im_def(const conv2d_state *s, const float *dcol, size_t ld, float *dx)
{
	for (int c = 0; c < s->C; c++)
		for (int i = 0; i < s->k; i++)
			for (int j = 0; j < s->k; j++)
				for (int oh = 0; oh < s->OH; oh++)
					for (int ow = 0; ow < s->OW; ow++) {
						int h = oh * s->s - s->p + i, w = ow * s->s - s->p + j;
						if (h < 0 || h >= s->H || w < 0 || w >= s->W)
							continue;
						dx[((size_t)c * s->H + h) * s->W + w] +=
							dcol[(size_t)((c * s->k + i) * s->k + j) * ld +
							     (size_t)oh * s->OW + ow];
					}
}

/* conv2d.c's sum8: 8 interleaved partial sums, added pairwise. */
static float sum8_ref(const float *v, size_t n)
{
	float acc[8] = { 0 };
	size_t i = 0;
	for (; i + 8 <= n; i += 8)
		for (int l = 0; l < 8; l++)
			acc[l] += v[i + l];
	for (int l = 0; i < n; i++, l++)
		acc[l] += v[i];
	return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

/*
 * conv2d's whole pipeline with the definitions above in place of its
 * im2col and col2im (shifted runs, taps outside channels), the same gemm
 * calls on the same groups of G samples:
 *   y [B, F, P], dW [F, CKK] += , db [F] += , dx [B, C, H, W]
 */
static void conv_pipeline_ref(const conv2d_state *s, int B, const float *x, const float *w,
			      const float *bias, const float *dy, float *y, float *dw, float *db,
			      float *dx)
{
	const size_t P = (size_t)s->ohw, in_n = (size_t)s->C * s->H * s->W, out_n = (size_t)s->F * P;
	float *cols = malloc((size_t)s->ckk * s->group * P * sizeof *cols);
	float *all = malloc((size_t)s->F * s->group * P * sizeof *all);
	for (int b0 = 0; b0 < B; b0 += s->group) {
		const int n = B - b0 < s->group ? B - b0 : s->group;
		const size_t N = (size_t)n * P;
		for (int q = 0; q < n; q++)
			im2col_def(s, x + (b0 + q) * in_n, cols + q * P, N);
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s->F, (int)N, s->ckk, 1.0f, w,
			    s->ckk, cols, (int)N, 0.0f, all, (int)N);
		for (int q = 0; q < n; q++)
			for (int f = 0; f < s->F; f++)
				for (size_t i = 0; i < P; i++)
					y[(b0 + q) * out_n + f * P + i] =
						bias ? all[f * N + q * P + i] + bias[f] : all[f * N + q * P + i];
		/* dY_all [F, N]; the plugin uses dy in place for a group of one: the
		 * same numbers */
		for (int q = 0; q < n; q++)
			for (int f = 0; f < s->F; f++)
				memcpy(all + f * N + q * P, dy + (b0 + q) * out_n + f * P, P * sizeof *all);
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, s->F, s->ckk, (int)N, 1.0f, all,
			    (int)N, cols, (int)N, 1.0f, dw, s->ckk);
		if (bias)
			for (int f = 0; f < s->F; f++)
				db[f] += sum8_ref(all + f * N, N);
		cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, s->ckk, (int)N, s->F, 1.0f, w,
			    s->ckk, all, (int)N, 0.0f, cols, (int)N);
		for (int q = 0; q < n; q++) {
			memset(dx + (b0 + q) * in_n, 0, in_n * sizeof *dx);
			col2im_def(s, cols + q * P, N, dx + (b0 + q) * in_n);
		}
	}
	free(cols), free(all);
}

static void conv_case(int C, int H, int W, int F, int k, int st, int p, int bias, int B,
		      uint64_t seed)
{
	char where[128], f_[16], k_[16], s_[16], p_[16];
	snprintf(where, sizeof where, "conv2d F %d k %d s %d p %d%s on [%d, %d, %d] x %d", F, k, st,
		 p, bias ? "" : " no bias", C, H, W, B);
	snprintf(f_, sizeof f_, "%d", F), snprintf(k_, sizeof k_, "%d", k);
	snprintf(s_, sizeof s_, "%d", st), snprintf(p_, sizeof p_, "%d", p);
	rng_seed(seed);
	inst L;
	open_layer(&L, "conv2d",
		   KV("filters", f_, "kernel", k_, "stride", s_, "padding", p_, "bias",
		      bias ? "yes" : "no"), SHAPE(C, H, W), B);
	const conv2d_state *cs = L.state;
	fill_uniform(L.x, L.nx, -1, 1);
	inst_draw(&L, 1.0f, 1);
	const float *bp = bias ? L.params[1] : NULL;
	float *y = malloc(L.ny * sizeof *y), *dx = malloc(L.nx * sizeof *dx);
	float *dw = malloc(L.pn[0] * sizeof *dw), *db = calloc(F, sizeof *db);
	for (int64_t i = 0; i < L.pn[0]; i++)
		dw[i] = L.grads[0][i] = 0.25f;
	if (bias)
		for (int f = 0; f < F; f++)
			db[f] = L.grads[1][f] = 0.25f;
	conv_pipeline_ref(cs, B, L.x, L.params[0], bp, L.r, y, dw, db, dx);
	ph_err e = { { 0 } };
	ph_layer_inst_fill_scratch(&L, 0xff);  /* NaNs: scratch is not zeroed by the host */
	ck_assert_int_eq(L.ops->forward(L.state, &L.ctx, L.params, L.x, L.y, &e), PH_OK);
	assert_same_bits(L.y, y, L.ny * sizeof *y, "y", where);
	ph_layer_inst_fill_scratch(&L, 0xff);
	ck_assert_int_eq(L.ops->backward(L.state, &L.ctx, L.params, L.grads, L.x, L.y, L.r, L.dx,
					 &e), PH_OK);
	assert_same_bits(L.grads[0], dw, L.pn[0] * sizeof *dw, "dW", where);
	if (bias)
		assert_same_bits(L.grads[1], db, F * sizeof *db, "db", where);
	assert_same_bits(L.dx, dx, L.nx * sizeof *dx, "dx", where);
	free(y), free(dx), free(dw), free(db);
	inst_close(&L);
}

START_TEST(test_conv2d_fast_vs_ref)
{
	/* "same" 3x3 (the shifted-run path), as in the CNN, odd sizes, batch 1 */
	conv_case(1, 28, 28, 4, 3, 1, 1, 1, 3, 31);
	conv_case(3, 14, 14, 5, 3, 1, 1, 1, 2, 32);
	conv_case(2, 5, 7, 3, 3, 1, 1, 0, 1, 33);
	conv_case(2, 2, 9, 3, 5, 1, 2, 1, 3, 34);   /* kernel taller than the image */
	conv_case(2, 6, 5, 2, 1, 1, 0, 1, 2, 35);   /* 1x1 */
	/* groups of one, whose gemm writes y directly: conv1 of the CNN in
	 * groups of 4 (5 samples: a last group of one), a conv2-like layer
	 * with batch 1.  Its C*k*k = 216 stays within one OpenBLAS K block
	 * (GEMM_Q >= 256 on x86-64) as the bitwise claim needs. */
	conv_case(1, 28, 28, 32, 3, 1, 1, 1, 5, 38);
	conv_case(24, 14, 14, 64, 3, 1, 1, 1, 1, 39);
	conv_case(24, 14, 14, 64, 3, 1, 1, 0, 1, 40);
	/* the general path */
	conv_case(3, 9, 8, 4, 3, 2, 1, 1, 2, 36);
	conv_case(2, 3, 3, 2, 3, 1, 3, 1, 1, 37);   /* padding wider than the image */
}
END_TEST

static Suite *cnn_kernels_suite(void)
{
	Suite *s = suite_create("cnn-kernels");
	TCase *tc = tcase_create("maxpool2d");
	tcase_add_test(tc, test_maxpool2d_fast_vs_ref);
	suite_add_tcase(s, tc);
	tc = tcase_create("conv2d");
	tcase_add_test(tc, test_conv2d_fast_vs_ref);
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
