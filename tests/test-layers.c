/* SPDX-License-Identifier: MIT */
/*
 * CPU layer plugins: finite-difference gradient checks and behaviour tests.
 *
 * Each plugin is dlopen()ed from $PH_LAYER_DIR (or the compile-time
 * PH_LAYER_DIR), configured through the same option parser the host uses
 * (core/options.c), and driven through its ph_layer_ops exactly as the
 * engine would: create, meta, forward, backward.
 *
 * The gradient check (tests/fd-harness.h): L = sum(y .* r) for a random r (for the loss layer,
 * L = the summed loss with loss_scale 1).  backward(dy = r) must give dL/dx
 * and dL/dparams; they are compared with central differences
 * (L(v + eps) - L(v - eps)) / (2 eps), error measured as
 * |a - n| / max(|a|, |n|, 1e-3).  Gradients start at a nonzero value to
 * catch "=" where "+=" is due, and dx starts as NaN to catch "+=" where
 * "=" is due.  Inputs keep clear of kinks (relu at 0, maxpool ties).
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
#include "fd-harness.h"
#include "unit-harness.h"

/* This file's use of the harness (tests/fd-harness.h): softmax_xent's input
 * is [K], every element a class; plain central differences; the split
 * backward (conv2d's) is checked by conv_split_case below, not by gradcheck. */
static void inst_open(inst *L, const char *type, const char *const *kv, ph_shape in, int batch)
{
	inst_open_k(L, type, kv, in, batch, FD_CLASSES_NUMEL);
}

static void gradcheck(inst *L, float eps, double tol)
{
	gradcheck_with(L, &(fd_check){ .eps = eps, .tol = tol });
}

static void run_gradcheck(const char *type, const char *const *kv, ph_shape in, int batch,
			  uint64_t seed)
{
	rng_seed(seed);
	inst L;
	inst_open(&L, type, kv, in, batch);
	gradcheck(&L, 1e-2f, 1e-2);
	inst_close(&L);
}

/* ------------------------------------------------------------------ */
/* Every plugin: a well-formed head.                                   */

static const char *const all_layers[] = { "linear", "relu", "conv2d", "maxpool2d",
					  "flatten", "dropout", "softmax_xent" };

START_TEST(test_heads)
{
	const char *name = all_layers[_i];
	const uint32_t flags = strcmp(name, "softmax_xent") == 0 ? PH_LAYER_LOSS
			       : strcmp(name, "linear") == 0   ? PH_LAYER_BACKWARD_NO_Y
							       : 0;
	const ph_layer_ops *ops = check_layer_head(name, flags);
	/* conv2d has both split-backward hooks */
	if (strcmp(name, "conv2d") == 0)
		ck_assert(ph_layer_has_split_backward(ops));
}
END_TEST

/* ------------------------------------------------------------------ */
/* linear                                                              */

START_TEST(test_linear_grad_vector)
{
	run_gradcheck("linear", KV("units", "4"), SHAPE(6), 3, 11);
}
END_TEST

START_TEST(test_linear_grad_sequence)
{
	/* [T, C] input: the layer maps the last dimension only. */
	run_gradcheck("linear", KV("units", "5", "bias", "no"), SHAPE(3, 4), 2, 12);
}
END_TEST

START_TEST(test_linear_forward_meta)
{
	rng_seed(13);
	inst L;
	inst_open(&L, "linear", KV("units", "3"), SHAPE(2, 5), 2);
	ck_assert_int_eq(L.meta.out.ndim, 2);
	ck_assert_int_eq(L.meta.out.d[0], 2);
	ck_assert_int_eq(L.meta.out.d[1], 3);
	ck_assert_int_eq(L.meta.nparams, 2);
	ck_assert_str_eq(L.meta.params[0].name, "weight");
	ck_assert_int_eq(L.meta.params[0].shape.ndim, 2);
	ck_assert_int_eq(L.meta.params[0].shape.d[0], 3);
	ck_assert_int_eq(L.meta.params[0].shape.d[1], 5);
	ck_assert_int_eq(L.meta.params[0].init, PH_INIT_UNIFORM);
	ck_assert_float_eq_tol(L.meta.params[0].init_arg, 1 / sqrt(5.0), 1e-6);
	ck_assert_int_eq(L.meta.params[0].no_decay, 0);
	ck_assert_str_eq(L.meta.params[1].name, "bias");
	ck_assert_int_eq(L.meta.params[1].shape.d[0], 3);
	ck_assert_int_eq(L.meta.params[1].no_decay, 1);
	ck_assert_double_ge(L.meta.fwd_flops, 2.0 * 2 * 5 * 3);
	ck_assert_double_ge(L.meta.bwd_flops, 2 * 2.0 * 2 * 5 * 3);

	/* y = x W^T + b, against a plain triple loop. */
	fwd(&L);
	const float *W = L.params[0], *b = L.params[1];
	for (int r = 0; r < 4; r++)
		for (int u = 0; u < 3; u++) {
			double s = b[u];
			for (int i = 0; i < 5; i++)
				s += (double)L.x[r * 5 + i] * W[u * 5 + i];
			ck_assert_double_eq_tol(L.y[r * 3 + u], s, 1e-5);
		}
	inst_close(&L);
}
END_TEST

/* ------------------------------------------------------------------ */
/* relu                                                                */

START_TEST(test_relu_grad)
{
	rng_seed(21);
	inst L;
	inst_open(&L, "relu", NULL, SHAPE(2, 3, 4), 2);
	/* Stay at least 0.1 from the kink at 0 (eps is 0.01). */
	for (int64_t i = 0; i < L.nx; i++)
		L.x[i] = (rng_next() & 1 ? 1.0f : -1.0f) * urand(0.1f, 1.0f);
	gradcheck(&L, 1e-2f, 1e-2);
	/* Forward values. */
	fwd(&L);
	for (int64_t i = 0; i < L.nx; i++)
		ck_assert_float_eq(L.y[i], L.x[i] > 0 ? L.x[i] : 0.0f);
	ck_assert_int_eq(L.meta.out.ndim, 3);
	inst_close(&L);
}
END_TEST

/* ------------------------------------------------------------------ */
/* conv2d                                                              */

/* Direct convolution, the definition, in double. */
static void conv_ref(const float *x, const float *w, const float *bias, float *y, int B, int C,
		     int H, int W, int F, int k, int s, int p)
{
	int OH = (H + 2 * p - k) / s + 1, OW = (W + 2 * p - k) / s + 1;
	for (int b = 0; b < B; b++)
		for (int f = 0; f < F; f++)
			for (int oh = 0; oh < OH; oh++)
				for (int ow = 0; ow < OW; ow++) {
					double acc = bias ? bias[f] : 0.0;
					for (int c = 0; c < C; c++)
						for (int i = 0; i < k; i++)
							for (int j = 0; j < k; j++) {
								int h = oh * s - p + i, ww = ow * s - p + j;
								if (h < 0 || h >= H || ww < 0 || ww >= W)
									continue;
								acc += (double)x[((b * C + c) * H + h) * W + ww] *
								       w[((f * C + c) * k + i) * k + j];
							}
					y[((b * F + f) * OH + oh) * OW + ow] = (float)acc;
				}
}

static void conv_forward_case(int C, int H, int W, int F, int k, int s, int p, int bias,
			      int B, uint64_t seed)
{
	char f_[16], k_[16], s_[16], p_[16];
	snprintf(f_, sizeof f_, "%d", F), snprintf(k_, sizeof k_, "%d", k);
	snprintf(s_, sizeof s_, "%d", s), snprintf(p_, sizeof p_, "%d", p);
	rng_seed(seed);
	inst L;
	inst_open(&L, "conv2d",
		  KV("filters", f_, "kernel", k_, "stride", s_, "padding", p_, "bias",
		     bias ? "yes" : "no"),
		  SHAPE(C, H, W), B);
	int OH = (H + 2 * p - k) / s + 1, OW = (W + 2 * p - k) / s + 1;
	ck_assert_int_eq(L.meta.out.ndim, 3);
	ck_assert_int_eq(L.meta.out.d[0], F);
	ck_assert_int_eq(L.meta.out.d[1], OH);
	ck_assert_int_eq(L.meta.out.d[2], OW);
	ck_assert_int_eq(L.meta.nparams, bias ? 2 : 1);
	ck_assert_int_eq(L.meta.params[0].shape.ndim, 4);
	ck_assert_int_eq(L.meta.params[0].shape.d[1], C);
	ck_assert_float_eq_tol(L.meta.params[0].init_arg, 1 / sqrt((double)C * k * k), 1e-6);
	/* Scratch: cols [C*k*k, G*P] and Y_all [F, G*P] for a group of G samples,
	 * 1 <= G <= max_batch (G = max_batch unless that passes the plugin's cap). */
	size_t per_sample = ((size_t)C * k * k + F) * OH * OW * sizeof(float);
	ck_assert_uint_ge(L.meta.scratch_bytes, per_sample);
	ck_assert_uint_le(L.meta.scratch_bytes, per_sample * B);
	ck_assert_uint_eq(L.meta.scratch_bytes % per_sample, 0);
	ck_assert_double_ge(L.meta.fwd_flops, 2.0 * F * C * k * k * OH * OW);

	fwd(&L);
	float *ref = malloc(L.ny * sizeof(float));
	conv_ref(L.x, L.params[0], bias ? L.params[1] : NULL, ref, B, C, H, W, F, k, s, p);
	for (int64_t i = 0; i < L.ny; i++)
		ck_assert_msg(fabs(L.y[i] - ref[i]) <= 1e-5 * (1 + fabs(ref[i])),
			      "conv2d y[%lld] = %.7g, direct convolution %.7g", (long long)i,
			      L.y[i], ref[i]);
	/* A micro-batch smaller than max_batch: the first B-1 samples, the rest
	 * of y untouched. */
	if (B > 1) {
		for (int64_t i = 0; i < L.ny; i++)
			L.y[i] = NAN;
		L.ctx.batch = B - 1;
		fwd(&L);
		int64_t n = L.ny / B * (B - 1);
		for (int64_t i = 0; i < n; i++)
			ck_assert_msg(fabs(L.y[i] - ref[i]) <= 1e-5 * (1 + fabs(ref[i])),
				      "conv2d batch %d of %d: y[%lld] = %.7g, direct convolution %.7g",
				      B - 1, B, (long long)i, L.y[i], ref[i]);
		for (int64_t i = n; i < L.ny; i++)
			ck_assert_msg(isnan(L.y[i]), "conv2d batch %d of %d wrote y[%lld]", B - 1, B,
				      (long long)i);
		L.ctx.batch = B;
	}
	free(ref);
	inst_close(&L);
}

START_TEST(test_conv2d_forward_reference)
{
	conv_forward_case(3, 9, 8, 4, 3, 2, 1, 1, 2, 31); /* stride and padding */
	conv_forward_case(2, 6, 7, 3, 5, 1, 2, 0, 3, 32); /* "same" padding, no bias */
	conv_forward_case(4, 5, 5, 2, 1, 1, 0, 1, 2, 33); /* 1x1 */
	conv_forward_case(1, 8, 8, 2, 4, 4, 0, 1, 1, 34); /* non-overlapping windows */
	conv_forward_case(2, 3, 3, 2, 3, 1, 3, 1, 1, 35); /* padding wider than the image */
	conv_forward_case(3, 6, 5, 4, 3, 1, 1, 1, 4, 40); /* 3x3 "same", as in the CNNs */
	conv_forward_case(2, 2, 9, 3, 5, 1, 2, 1, 3, 41); /* "same", kernel taller than the image */
}
END_TEST

START_TEST(test_conv2d_grad_plain)
{
	run_gradcheck("conv2d", KV("filters", "3", "kernel", "3"), SHAPE(2, 5, 6), 2, 36);
}
END_TEST

START_TEST(test_conv2d_grad_same)
{
	/* 3x3, padding 1, stride 1: the shifted-plane im2col/col2im. */
	run_gradcheck("conv2d", KV("filters", "3", "kernel", "3", "padding", "1"), SHAPE(2, 5, 6), 3,
		      42);
}
END_TEST

START_TEST(test_conv2d_grad_stride_padding)
{
	run_gradcheck("conv2d", KV("filters", "2", "kernel", "3", "stride", "2", "padding", "1"),
		      SHAPE(2, 7, 5), 2, 37);
}
END_TEST

START_TEST(test_conv2d_grad_1x1_nobias)
{
	run_gradcheck("conv2d", KV("filters", "3", "kernel", "1", "bias", "no"), SHAPE(4, 3, 3), 2,
		      38);
}
END_TEST

START_TEST(test_conv2d_grad_large_stride)
{
	/* stride > kernel: some input pixels feed nothing, their dx must be 0. */
	run_gradcheck("conv2d", KV("filters", "2", "kernel", "2", "stride", "3", "padding", "1"),
		      SHAPE(1, 7, 7), 2, 39);
}
END_TEST

/*
 * The split backward (ABI 1.1): on fresh gradients and dx, backward_weight
 * then backward_input (and the ZB-H1 order, input then weight) must give
 * bitwise the grads and dx that backward() gives.  The scratch is poisoned
 * before every call (it is only valid during one), each half must leave the
 * other's outputs alone, and backward_input with dx = NULL does nothing.
 * Run on the whole micro-batch and on one sample fewer.
 */
static void conv_split_case(const char *const *kv, ph_shape in, int B, uint64_t seed)
{
	rng_seed(seed);
	inst L;
	inst_open(&L, "conv2d", kv, in, B);
	ck_assert(ph_layer_has_split_backward(L.ops));
	ph_err e = { { 0 } };
	float *dx_ref = malloc(L.nx * sizeof(float));
	float *g_ref[PH_MAX_PARAMS];
	for (int p = 0; p < L.meta.nparams; p++)
		g_ref[p] = malloc(L.pn[p] * sizeof(float));
	for (int batch = B; batch >= B - 1 && batch >= 1; batch--) {
		L.ctx.batch = batch;
		const int64_t nx = L.nx / B * batch;
		fwd(&L);
		/* The reference: the full backward. */
		for (int p = 0; p < L.meta.nparams; p++)
			for (int64_t i = 0; i < L.pn[p]; i++)
				L.grads[p][i] = GRAD_INIT;
		for (int64_t i = 0; i < L.nx; i++)
			L.dx[i] = NAN;
		memset(L.ctx.scratch, 0xff, L.meta.scratch_bytes);
		bwd(&L, L.dx);
		memcpy(dx_ref, L.dx, L.nx * sizeof(float));
		for (int p = 0; p < L.meta.nparams; p++)
			memcpy(g_ref[p], L.grads[p], L.pn[p] * sizeof(float));

		for (int order = 0; order < 2; order++) { /* 0: W then I; 1: I then W */
			for (int p = 0; p < L.meta.nparams; p++)
				for (int64_t i = 0; i < L.pn[p]; i++)
					L.grads[p][i] = GRAD_INIT;
			for (int64_t i = 0; i < L.nx; i++)
				L.dx[i] = 12345.0f;
			for (int half = 0; half < 2; half++) {
				memset(L.ctx.scratch, 0xff, L.meta.scratch_bytes);
				int rc;
				if (half == order) {
					rc = L.ops->backward_weight(L.state, &L.ctx, L.params, L.grads, L.x,
								    L.y, L.r, &e);
					ck_assert_msg(rc == PH_OK, "conv2d backward_weight: %s", e.msg);
					if (half == 0)
						for (int64_t i = 0; i < L.nx; i++)
							ck_assert_msg(L.dx[i] == 12345.0f,
								      "conv2d backward_weight wrote dx[%lld]",
								      (long long)i);
				} else {
					rc = L.ops->backward_input(L.state, &L.ctx, L.params, L.x, L.y,
								   L.r, L.dx, &e);
					ck_assert_msg(rc == PH_OK, "conv2d backward_input: %s", e.msg);
					if (half == 0)
						for (int p = 0; p < L.meta.nparams; p++)
							for (int64_t i = 0; i < L.pn[p]; i++)
								ck_assert_msg(L.grads[p][i] == GRAD_INIT,
									      "conv2d backward_input wrote d%s",
									      L.meta.params[p].name);
				}
			}
			ck_assert_msg(memcmp(dx_ref, L.dx, nx * sizeof(float)) == 0,
				      "conv2d batch %d, %s: split backward gives a different dx", batch,
				      order ? "I then W" : "W then I");
			for (int p = 0; p < L.meta.nparams; p++)
				ck_assert_msg(memcmp(g_ref[p], L.grads[p], L.pn[p] * sizeof(float)) == 0,
					      "conv2d batch %d, %s: split backward gives a different d%s",
					      batch, order ? "I then W" : "W then I",
					      L.meta.params[p].name);
		}
		/* dx beyond the micro-batch is never written. */
		for (int64_t i = nx; i < L.nx; i++)
			ck_assert_msg(L.dx[i] == 12345.0f, "conv2d batch %d of %d wrote dx[%lld]", batch,
				      B, (long long)i);
		/* dx = NULL: the input half does nothing (and succeeds). */
		for (int p = 0; p < L.meta.nparams; p++)
			for (int64_t i = 0; i < L.pn[p]; i++)
				L.grads[p][i] = GRAD_INIT;
		ck_assert_int_eq(L.ops->backward_input(L.state, &L.ctx, L.params, L.x, L.y, L.r, NULL,
						       &e),
				 PH_OK);
		for (int p = 0; p < L.meta.nparams; p++)
			for (int64_t i = 0; i < L.pn[p]; i++)
				ck_assert(L.grads[p][i] == GRAD_INIT);
	}
	L.ctx.batch = B;
	for (int p = 0; p < L.meta.nparams; p++)
		free(g_ref[p]);
	free(dx_ref);
	inst_close(&L);
}

START_TEST(test_conv2d_split_backward)
{
	/* stride and padding (the general im2col/col2im), one group of 3 samples */
	conv_split_case(KV("filters", "4", "kernel", "3", "stride", "2", "padding", "1"),
			SHAPE(3, 9, 8), 3, 43);
	/* 3x3 "same" (the shifted-plane case); with the default scratch cap the
	 * 5 samples take two groups, 3 + 2 */
	conv_split_case(KV("filters", "8", "kernel", "3", "padding", "1"), SHAPE(16, 16, 16), 5, 44);
	/* no padding, no bias, one sample (dy read in place) */
	conv_split_case(KV("filters", "3", "kernel", "2", "bias", "no"), SHAPE(2, 5, 6), 1, 45);
}
END_TEST

START_TEST(test_conv2d_bad_config)
{
	ph_err e;
	ck_assert_int_eq(try_create("conv2d", KV("filters", "2", "kernel", "7"), SHAPE(3, 4, 4), &e),
			 PH_EINVAL);
	ck_assert_msg(strstr(e.msg, "kernel 7") && strstr(e.msg, "4x4"), "message: %s", e.msg);
	/* Padding makes the same kernel fit. */
	ck_assert_int_eq(try_create("conv2d", KV("filters", "2", "kernel", "7", "padding", "2"),
				    SHAPE(3, 4, 4), &e),
			 PH_OK);
	/* Wrong rank: names what it got. */
	ck_assert_int_eq(try_create("conv2d", KV("filters", "2", "kernel", "3"), SHAPE(16), &e),
			 PH_EINVAL);
	ck_assert_msg(strstr(e.msg, "1 dimension") && strstr(e.msg, "need 3"), "message: %s", e.msg);
	ck_assert_int_eq(try_create("conv2d", KV("filters", "2", "kernel", "3"), SHAPE(1, 3, 8, 8),
				    &e),
			 PH_EINVAL);
	ck_assert_msg(strstr(e.msg, "4 dimensions"), "message: %s", e.msg);
	/* The option table refuses a zero kernel before create sees it. */
	ck_assert_int_eq(option_set_status("conv2d", "kernel", "0"), PH_EINVAL);
}
END_TEST

/* ------------------------------------------------------------------ */
/* maxpool2d                                                           */

/* Max over each window, straight from the definition. */
static void maxpool_ref(const float *x, float *y, int B, int C, int H, int W, int size,
			int stride)
{
	int OH = (H - size) / stride + 1, OW = (W - size) / stride + 1;
	for (int bc = 0; bc < B * C; bc++)
		for (int oh = 0; oh < OH; oh++)
			for (int ow = 0; ow < OW; ow++) {
				float m = -INFINITY;
				for (int i = 0; i < size; i++)
					for (int j = 0; j < size; j++)
						m = fmaxf(m, x[(bc * H + oh * stride + i) * W +
							       ow * stride + j]);
				y[(bc * OH + oh) * OW + ow] = m;
			}
}

/* stride 0 = the default (= size) */
static void maxpool_grad_case(int size, int stride, ph_shape in, int B, uint64_t seed)
{
	char size_[16], stride_[16];
	snprintf(size_, sizeof size_, "%d", size), snprintf(stride_, sizeof stride_, "%d", stride);
	rng_seed(seed);
	inst L;
	inst_open(&L, "maxpool2d", KV("size", size_, "stride", stride_), in, B);
	int C = (int)in.d[0], H = (int)in.d[1], W = (int)in.d[2], st = stride ? stride : size;
	ck_assert_int_eq(L.meta.out.d[0], C);
	ck_assert_int_eq(L.meta.out.d[1], (H - size) / st + 1);
	ck_assert_int_eq(L.meta.out.d[2], (W - size) / st + 1);
	ck_assert_uint_eq(L.meta.saved_bytes, ph_shape_numel(&L.meta.out) * sizeof(int32_t));
	fill_distinct(L.x, L.nx);
	gradcheck(&L, 1e-2f, 1e-2);

	/* Forward against the definition: the gradient check alone would pass a
	 * layer that picks the wrong element consistently in both directions. */
	fwd(&L);
	float *ref = malloc(L.ny * sizeof(float));
	maxpool_ref(L.x, ref, B, C, H, W, size, st);
	ck_assert(memcmp(ref, L.y, L.ny * sizeof(float)) == 0);
	free(ref);
	inst_close(&L);
}

START_TEST(test_maxpool2d_grad_default)
{
	maxpool_grad_case(2, 0, SHAPE(2, 6, 7), 2, 41);
}
END_TEST

START_TEST(test_maxpool2d_grad_overlap)
{
	/* size 3, stride 2: windows share pixels, dx accumulates. */
	maxpool_grad_case(3, 2, SHAPE(2, 7, 8), 2, 42);
}
END_TEST

START_TEST(test_maxpool2d_forward_ties)
{
	rng_seed(43);
	inst L;
	inst_open(&L, "maxpool2d", NULL, SHAPE(1, 4, 5), 1); /* size 2, stride 2 */
	ck_assert_int_eq(L.meta.out.d[0], 1);
	ck_assert_int_eq(L.meta.out.d[1], 2);
	ck_assert_int_eq(L.meta.out.d[2], 2); /* the fifth column is dropped */
	ck_assert_uint_eq(L.meta.saved_bytes, 4 * sizeof(int32_t));
	ck_assert_int_eq(L.meta.nparams, 0);
	/* All equal: every window's max is its first (top-left) element. */
	for (int64_t i = 0; i < L.nx; i++)
		L.x[i] = 0.5f;
	fwd(&L);
	for (int i = 0; i < 4; i++)
		ck_assert_float_eq(L.y[i], 0.5f);
	for (int i = 0; i < 4; i++)
		L.r[i] = (float)(i + 1);
	bwd(&L, L.dx);
	const float want[20] = { 1, 0, 2, 0, 0, /**/ 0, 0, 0, 0, 0,
				 3, 0, 4, 0, 0, /**/ 0, 0, 0, 0, 0 };
	for (int i = 0; i < 20; i++)
		ck_assert_msg(L.dx[i] == want[i], "dx[%d] = %g, want %g", i, L.dx[i], want[i]);
	/* A plain max. */
	for (int64_t i = 0; i < L.nx; i++)
		L.x[i] = (float)((i * 7) % 20);
	fwd(&L);
	for (int oh = 0; oh < 2; oh++)
		for (int ow = 0; ow < 2; ow++) {
			float m = -1;
			for (int i = 0; i < 2; i++)
				for (int j = 0; j < 2; j++)
					m = fmaxf(m, L.x[(oh * 2 + i) * 5 + ow * 2 + j]);
			ck_assert_float_eq(L.y[oh * 2 + ow], m);
		}
	inst_close(&L);
}
END_TEST

START_TEST(test_maxpool2d_bad_config)
{
	ph_err e;
	ck_assert_int_eq(try_create("maxpool2d", KV("size", "5"), SHAPE(2, 4, 4), &e), PH_EINVAL);
	ck_assert_msg(strstr(e.msg, "5x5") && strstr(e.msg, "4x4"), "message: %s", e.msg);
	ck_assert_int_eq(try_create("maxpool2d", NULL, SHAPE(8, 8), &e), PH_EINVAL);
	ck_assert_msg(strstr(e.msg, "2 dimensions"), "message: %s", e.msg);
}
END_TEST

/* ------------------------------------------------------------------ */
/* flatten                                                             */

START_TEST(test_flatten)
{
	rng_seed(51);
	inst L;
	inst_open(&L, "flatten", NULL, SHAPE(2, 3, 4), 3);
	ck_assert_int_eq(L.meta.out.ndim, 1);
	ck_assert_int_eq(L.meta.out.d[0], 24);
	ck_assert_int_eq(L.meta.nparams, 0);
	fwd(&L);
	ck_assert(memcmp(L.x, L.y, L.nx * sizeof(float)) == 0);
	gradcheck(&L, 1e-2f, 1e-2);
	inst_close(&L);
}
END_TEST

/* ------------------------------------------------------------------ */
/* dropout                                                             */

START_TEST(test_dropout_grad)
{
	/* With the key fixed the mask is fixed: y is linear in x. */
	run_gradcheck("dropout", KV("rate", "0.3"), SHAPE(5, 4), 3, 61);
}
END_TEST

START_TEST(test_dropout_mask)
{
	rng_seed(62);
	inst L;
	inst_open(&L, "dropout", KV("rate", "0.25"), SHAPE(1000), 4);
	for (int64_t i = 0; i < L.nx; i++)
		L.x[i] = urand(0.5f, 1.5f); /* never 0: a zero in y means dropped */
	const float scale = (float)(1.0 / (1.0 - 0.25));
	fwd(&L);

	/* Exactly the documented mask: keep iff ph_rng_uniform(key, i) >= rate. */
	uint64_t key = ph_rng_key(L.ctx.seed, L.ctx.step, L.ctx.microbatch, L.ctx.layer);
	int64_t kept = 0;
	for (int64_t i = 0; i < L.nx; i++) {
		int keep = ph_rng_uniform(key, (uint64_t)i) >= 0.25f;
		ck_assert_msg(L.y[i] == (keep ? L.x[i] * scale : 0.0f), "y[%lld] = %g, x = %g, keep %d",
			      (long long)i, L.y[i], L.x[i], keep);
		kept += keep;
	}
	/* 4000 draws: the kept fraction is 0.75 within ~6 standard deviations. */
	double frac = (double)kept / L.nx;
	ck_assert_msg(fabs(frac - 0.75) < 0.04, "kept fraction %.4f, want ~0.75", frac);

	/* Same key: the same mask (recomputation). */
	float *y1 = malloc(L.ny * sizeof(float));
	memcpy(y1, L.y, L.ny * sizeof(float));
	fwd(&L);
	ck_assert(memcmp(y1, L.y, L.ny * sizeof(float)) == 0);

	/* Backward draws the mask again: dx = dy * scale where kept, 0 elsewhere. */
	bwd(&L, L.dx);
	for (int64_t i = 0; i < L.nx; i++)
		ck_assert(L.dx[i] == (y1[i] != 0.0f ? L.r[i] * scale : 0.0f));

	/* Another micro-batch, step or layer: another mask. */
	uint64_t *fields[] = { &L.ctx.microbatch, &L.ctx.step, &L.ctx.layer, &L.ctx.seed };
	for (int f = 0; f < 4; f++) {
		uint64_t old = *fields[f];
		*fields[f] = old + 1;
		fwd(&L);
		int64_t differ = 0;
		for (int64_t i = 0; i < L.ny; i++)
			differ += (L.y[i] == 0.0f) != (y1[i] == 0.0f);
		ck_assert_msg(differ > L.ny / 10, "changing ctx field %d changed only %lld of the mask",
			      f, (long long)differ);
		*fields[f] = old;
	}

	/* Evaluation: identity, forward and backward. */
	L.ctx.training = 0;
	fwd(&L);
	ck_assert(memcmp(L.x, L.y, L.nx * sizeof(float)) == 0);
	bwd(&L, L.dx);
	ck_assert(memcmp(L.r, L.dx, L.nx * sizeof(float)) == 0);
	free(y1);
	inst_close(&L);
}
END_TEST

START_TEST(test_dropout_rate_zero_and_range)
{
	rng_seed(63);
	inst L;
	inst_open(&L, "dropout", KV("rate", "0"), SHAPE(3, 7), 2);
	fwd(&L);
	ck_assert(memcmp(L.x, L.y, L.nx * sizeof(float)) == 0);
	ck_assert_int_eq(L.meta.saved_bytes, 0); /* the mask is recomputed, never stored */
	inst_close(&L);

	/* The option table bounds the rate. */
	ck_assert_double_eq(option_default_float("dropout", "rate"), 0.5);
	ck_assert_int_eq(option_set_status("dropout", "rate", "1"), PH_EINVAL);
	ck_assert_int_eq(option_set_status("dropout", "rate", "-0.1"), PH_EINVAL);
	ck_assert_int_eq(option_set_status("dropout", "rate", "0.99"), PH_OK);
}
END_TEST

/* ------------------------------------------------------------------ */
/* softmax_xent                                                        */

START_TEST(test_softmax_xent_grad)
{
	run_gradcheck("softmax_xent", NULL, SHAPE(5), 4, 71);
}
END_TEST

START_TEST(test_softmax_xent_values)
{
	rng_seed(72);
	inst L;
	inst_open(&L, "softmax_xent", NULL, SHAPE(3), 4);
	ck_assert_int_eq(L.meta.out.ndim, 1);
	ck_assert_int_eq(L.meta.out.d[0], 2);
	ck_assert_int_eq(L.meta.targets_per_sample, 1);
	ck_assert_int_eq(L.meta.nparams, 0);
	const float x[12] = { 1, 2, 3,     /* target 2: the max, correct */
			      1, 2, 3,     /* target 0: wrong */
			      2, 2, 1,     /* tie: argmax is the first, 0; target 1 is wrong */
			      1000, 0, -1000 }; /* huge logits must not overflow */
	const int32_t t[4] = { 2, 0, 1, 1 };
	memcpy(L.x, x, sizeof x);
	memcpy(L.targets, t, sizeof t);
	fwd(&L);
	double lse = log(exp(1.0) + exp(2.0) + exp(3.0)); /* 3.40760596 */
	ck_assert_double_eq_tol(L.y[0], lse - 3, 1e-6);
	ck_assert_float_eq(L.y[1], 1.0f);
	ck_assert_double_eq_tol(L.y[2], lse - 1, 1e-6);
	ck_assert_float_eq(L.y[3], 0.0f);
	ck_assert_double_eq_tol(L.y[4], log(2 * exp(2.0) + exp(1.0)) - 2, 1e-6);
	ck_assert_float_eq(L.y[5], 0.0f);
	ck_assert_double_eq_tol(L.y[6], 1000.0, 1e-3);
	ck_assert_float_eq(L.y[7], 0.0f);

	/* dx = (softmax - onehot) * loss_scale, by hand for sample 0. */
	L.ctx.loss_scale = 0.25f;
	bwd(&L, L.dx);
	double Z = exp(1.0) + exp(2.0) + exp(3.0);
	ck_assert_double_eq_tol(L.dx[0], 0.25 * exp(1.0) / Z, 1e-6);
	ck_assert_double_eq_tol(L.dx[1], 0.25 * exp(2.0) / Z, 1e-6);
	ck_assert_double_eq_tol(L.dx[2], 0.25 * (exp(3.0) / Z - 1), 1e-6);
	for (int i = 0; i < 12; i++)
		ck_assert(isfinite(L.dx[i]));
	/* sample 3: softmax is (1, 0, 0) to float precision, target 1 */
	ck_assert_double_eq_tol(L.dx[9], 0.25, 1e-7);
	ck_assert_double_eq_tol(L.dx[10], -0.25, 1e-7);
	ck_assert_double_eq_tol(L.dx[11], 0.0, 1e-7);
	inst_close(&L);
}
END_TEST

START_TEST(test_softmax_xent_errors)
{
	ph_err e;
	ck_assert_int_eq(try_create("softmax_xent", NULL, SHAPE(2, 3, 4), &e), PH_EINVAL);
	ck_assert_msg(strstr(e.msg, "3 dimensions"), "message: %s", e.msg);

	rng_seed(73);
	inst L;
	inst_open(&L, "softmax_xent", NULL, SHAPE(4), 3);
	L.targets[1] = 4;
	memset(&e, 0, sizeof e);
	ck_assert_int_eq(L.ops->forward(L.state, &L.ctx, L.params, L.x, L.y, &e), PH_EINVAL);
	ck_assert_msg(strstr(e.msg, "sample 1") && strstr(e.msg, "target 4"), "message: %s", e.msg);
	L.targets[1] = -1;
	memset(&e, 0, sizeof e);
	ck_assert_int_eq(L.ops->backward(L.state, &L.ctx, L.params, L.grads, L.x, L.y, NULL, L.dx,
					 &e),
			 PH_EINVAL);
	ck_assert_msg(strstr(e.msg, "target -1"), "message: %s", e.msg);
	inst_close(&L);
}
END_TEST

/* ------------------------------------------------------------------ */

static Suite *layers_suite(void)
{
	Suite *s = suite_create("layers");
	TCase *tc;

	tc = tcase_create("heads");
	tcase_add_loop_test(tc, test_heads, 0, (int)(sizeof all_layers / sizeof all_layers[0]));
	suite_add_tcase(s, tc);

	tc = tcase_create("linear");
	tcase_add_test(tc, test_linear_grad_vector);
	tcase_add_test(tc, test_linear_grad_sequence);
	tcase_add_test(tc, test_linear_forward_meta);
	suite_add_tcase(s, tc);

	tc = tcase_create("relu");
	tcase_add_test(tc, test_relu_grad);
	suite_add_tcase(s, tc);

	tc = tcase_create("conv2d");
	tcase_add_test(tc, test_conv2d_forward_reference);
	tcase_add_test(tc, test_conv2d_grad_plain);
	tcase_add_test(tc, test_conv2d_grad_same);
	tcase_add_test(tc, test_conv2d_grad_stride_padding);
	tcase_add_test(tc, test_conv2d_grad_1x1_nobias);
	tcase_add_test(tc, test_conv2d_grad_large_stride);
	tcase_add_test(tc, test_conv2d_bad_config);
	tcase_add_test(tc, test_conv2d_split_backward);
	suite_add_tcase(s, tc);

	tc = tcase_create("maxpool2d");
	tcase_add_test(tc, test_maxpool2d_grad_default);
	tcase_add_test(tc, test_maxpool2d_grad_overlap);
	tcase_add_test(tc, test_maxpool2d_forward_ties);
	tcase_add_test(tc, test_maxpool2d_bad_config);
	suite_add_tcase(s, tc);

	tc = tcase_create("flatten");
	tcase_add_test(tc, test_flatten);
	suite_add_tcase(s, tc);

	tc = tcase_create("dropout");
	tcase_add_test(tc, test_dropout_grad);
	tcase_add_test(tc, test_dropout_mask);
	tcase_add_test(tc, test_dropout_rate_zero_and_range);
	suite_add_tcase(s, tc);

	tc = tcase_create("softmax_xent");
	tcase_add_test(tc, test_softmax_xent_grad);
	tcase_add_test(tc, test_softmax_xent_values);
	tcase_add_test(tc, test_softmax_xent_errors);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return run_suite(layers_suite());
}
