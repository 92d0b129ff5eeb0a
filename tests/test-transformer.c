/* SPDX-License-Identifier: MIT */
/*
 * Transformer layer plugins (embedding, layernorm, gelu, attention, seq_xent,
 * gpt_block):
 * finite-difference gradient checks and behaviour tests.
 *
 * Plugins are dlopen()ed from $PH_LAYER_DIR and configured through the
 * host's option parser (tests/layer-harness.h); the gradient-check harness
 * (tests/fd-harness.h) is test-layers.c's, driven through their ph_layer_ops.
 * L = sum(y .* r) (for the loss layer, the summed loss with loss_scale 1);
 * backward(dy = r) is compared with central differences.  Gradients start
 * nonzero (catches "=" for "+="), dx starts NaN (catches "+=" for "=").
 * Added here: layers with the split backward must give bitwise the same
 * dx and gradients from backward_input + backward_weight as from backward;
 * the embedding's ids are not differentiated (dx must be 0).
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

#include "gpt_block_state.h" /* gpt_sdpa_backward_spans */
#include "layer-harness.h"
#include "sdpa_place.h"
#include "fd-harness.h"
#include "unit-harness.h"

/* This file's use of the harness (tests/fd-harness.h): seq_xent's input is
 * [T, V], the classes its last dimension; a layer with the split backward
 * must match backward() bitwise.  The embedding (ids) and the gpt_block
 * (Richardson) call gradcheck_with() themselves. */
static void inst_open(inst *L, const char *type, const char *const *kv, ph_shape in, int batch)
{
	inst_open_k(L, type, kv, in, batch, FD_CLASSES_LAST_DIM);
}

static void gradcheck(inst *L, float eps, double tol)
{
	gradcheck_with(L, &(fd_check){ .eps = eps, .tol = tol, .split = 1 });
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

/* Scale every parameter (keeps softmaxes soft enough for central differences). */
static void scale_params(inst *L, float k)
{
	for (int p = 0; p < L->meta.nparams; p++)
		for (int64_t i = 0; i < L->pn[p]; i++)
			L->params[p][i] *= k;
}

/* Causal, for attention and gpt_block alike (L: a micro-batch of one [T, d]
 * sample, x drawn): changing position t changes the output at t and leaves
 * every earlier position bitwise alone; and backward from dy at position 2
 * only gives dx at positions <= 2.  Dropout, if on, keeps its key throughout. */
static void check_causal(inst *L)
{
	ck_assert_int_eq(L->meta.out.ndim, 2);
	const int T = (int)L->meta.out.d[0], d = (int)L->meta.out.d[1];
	fwd(L);
	float *y0 = malloc(L->ny * sizeof(float));
	float *keep = malloc(d * sizeof(float));
	memcpy(y0, L->y, L->ny * sizeof(float));
	for (int t = 0; t < T; t++) {
		memcpy(keep, L->x + t * d, d * sizeof(float));
		for (int c = 0; c < d; c++)
			L->x[t * d + c] += 0.5f + c;
		fwd(L);
		/* positions before t: bitwise unchanged; t itself: changed */
		ck_assert_msg(memcmp(y0, L->y, (size_t)t * d * sizeof(float)) == 0,
			      "changing position %d changed an earlier output", t);
		ck_assert_msg(memcmp(y0 + t * d, L->y + t * d, d * sizeof(float)) != 0,
			      "changing position %d did not change its own output", t);
		memcpy(L->x + t * d, keep, d * sizeof(float));
	}
	/* Backward: dy at position 2 only gives dx at positions <= 2. */
	fwd(L);
	for (int64_t i = 0; i < L->ny; i++)
		L->r[i] = i >= 2 * d && i < 3 * d ? 1.0f : 0.0f;
	bwd(L, L->dx);
	for (int i = 3 * d; i < T * d; i++)
		ck_assert_msg(L->dx[i] == 0.0f, "dx[%d] = %g leaks from the future", i, L->dx[i]);
	free(keep);
	free(y0);
}

/* Dropout's mask comes from its key (ctx), for attention and gpt_block alike:
 * in training, sample `sample`'s output must differ from ref, that sample's
 * output without dropout; the same key must give bitwise the same output, the
 * next step another.  Leaves L training at its first step; returns the output
 * of that step (the caller frees it) for checks of the other key fields. */
static float *check_dropout_keyed(inst *L, int sample, const double *ref)
{
	const int64_t per_sample = ph_shape_numel(&L->meta.out);
	L->ctx.training = 1;
	float *y1 = malloc(L->ny * sizeof(float));
	fwd(L);
	memcpy(y1, L->y, L->ny * sizeof(float));
	int differ = 0;
	for (int64_t i = 0; i < per_sample; i++)
		differ += fabs(L->y[sample * per_sample + i] - ref[i]) > 1e-3;
	ck_assert_int_gt(differ, 0);
	fwd(L);
	ck_assert(memcmp(y1, L->y, L->ny * sizeof(float)) == 0);
	L->ctx.step++;
	fwd(L);
	ck_assert(memcmp(y1, L->y, L->ny * sizeof(float)) != 0);
	L->ctx.step--;
	return y1;
}

/* ------------------------------------------------------------------ */
/* Every plugin: a well-formed head.                                   */

static const char *const all_layers[] = { "embedding", "layernorm", "gelu", "attention",
					  "seq_xent", "gpt_block" };

START_TEST(test_heads)
{
	const char *name = all_layers[_i];
	check_layer_head(name, strcmp(name, "seq_xent") == 0 ? PH_LAYER_LOSS | PH_LAYER_DX_OVER_X : 0);
}
END_TEST

/* ------------------------------------------------------------------ */
/* embedding                                                           */

static void fill_ids(inst *L, int vocab)
{
	for (int64_t i = 0; i < L->nx; i++)
		L->x[i] = (float)(rng_next() % (uint64_t)vocab);
}

START_TEST(test_embedding_grad)
{
	rng_seed(101);
	inst L;
	inst_open(&L, "embedding", KV("vocab", "5", "dim", "3"), SHAPE(6), 3);
	fill_ids(&L, 5);
	L.x[0] = L.x[1] = L.x[7] = 2; /* repeated ids accumulate */
	ck_assert(ph_layer_has_split_backward(L.ops));
	gradcheck_with(&L, &(fd_check){ .eps = 1e-2f, .tol = 1e-2, .x_ids = 1, .split = 1 });
	inst_close(&L);
}
END_TEST

START_TEST(test_embedding_forward_meta)
{
	rng_seed(102);
	inst L;
	inst_open(&L, "embedding", KV("vocab", "7", "dim", "4"), SHAPE(5), 2);
	ck_assert_int_eq(L.meta.out.ndim, 2);
	ck_assert_int_eq(L.meta.out.d[0], 5);
	ck_assert_int_eq(L.meta.out.d[1], 4);
	ck_assert_int_eq(L.meta.nparams, 2);
	ck_assert_str_eq(L.meta.params[0].name, "tokens");
	ck_assert_int_eq(L.meta.params[0].shape.d[0], 7);
	ck_assert_int_eq(L.meta.params[0].shape.d[1], 4);
	ck_assert_int_eq(L.meta.params[0].init, PH_INIT_NORMAL);
	ck_assert_float_eq_tol(L.meta.params[0].init_arg, 0.02f, 1e-9);
	ck_assert_str_eq(L.meta.params[1].name, "positions");
	ck_assert_int_eq(L.meta.params[1].shape.d[0], 5);
	ck_assert_int_eq(L.meta.params[1].shape.d[1], 4);
	ck_assert_int_eq(L.meta.params[1].init, PH_INIT_NORMAL);
	ck_assert_float_eq_tol(L.meta.params[1].init_arg, 0.01f, 1e-9);
	fill_ids(&L, 7);
	L.x[3] = 6; /* the last id is valid */
	fwd(&L);
	for (int b = 0; b < 2; b++)
		for (int t = 0; t < 5; t++)
			for (int c = 0; c < 4; c++) {
				int id = (int)L.x[b * 5 + t];
				ck_assert_float_eq(L.y[(b * 5 + t) * 4 + c],
						   L.params[0][id * 4 + c] + L.params[1][t * 4 + c]);
			}
	inst_close(&L);
}
END_TEST

START_TEST(test_embedding_bad_ids)
{
	rng_seed(103);
	inst L;
	inst_open(&L, "embedding", KV("vocab", "7", "dim", "4"), SHAPE(5), 2);
	const float bad[] = { 7, -1, 2.5f, NAN };
	for (int k = 0; k < 4; k++) {
		fill_ids(&L, 7);
		L.x[8] = bad[k]; /* sample 1, position 3 */
		ph_err e = { { 0 } };
		ck_assert_int_eq(L.ops->forward(L.state, &L.ctx, L.params, L.x, L.y, &e), PH_EINVAL);
		ck_assert_msg(strstr(e.msg, "position 3") && strstr(e.msg, "sample 1"), "message: %s",
			      e.msg);
		char val[32];
		snprintf(val, sizeof val, "holds %g", (double)bad[k]);
		ck_assert_msg(strstr(e.msg, val), "message: %s (want \"%s\")", e.msg, val);
		memset(&e, 0, sizeof e);
		ck_assert_int_eq(L.ops->backward(L.state, &L.ctx, L.params, L.grads, L.x, L.y, L.r,
						 L.dx, &e),
				 PH_EINVAL);
	}
	inst_close(&L);

	/* Required options, input rank. */
	ph_err e;
	ck_assert_int_eq(try_create("embedding", KV("dim", "4"), SHAPE(5), &e), PH_EINVAL);
	ck_assert_int_eq(try_create("embedding", KV("vocab", "4"), SHAPE(5), &e), PH_EINVAL);
	ck_assert_int_eq(try_create("embedding", KV("vocab", "4", "dim", "2"), SHAPE(5, 2), &e),
			 PH_EINVAL);
	ck_assert_msg(strstr(e.msg, "2 dimensions"), "message: %s", e.msg);
}
END_TEST

/* ------------------------------------------------------------------ */
/* layernorm                                                           */

START_TEST(test_layernorm_grad)
{
	rng_seed(201);
	inst L;
	inst_open(&L, "layernorm", NULL, SHAPE(3, 8), 2);
	ck_assert(ph_layer_has_split_backward(L.ops));
	gradcheck(&L, 1e-2f, 1e-2);
	inst_close(&L);
}
END_TEST

START_TEST(test_layernorm_normalises)
{
	rng_seed(202);
	inst L;
	inst_open(&L, "layernorm", KV("eps", "1e-5"), SHAPE(4, 16), 3);
	ck_assert_uint_eq(L.meta.saved_bytes, 4 * 2 * sizeof(float));
	ck_assert_int_eq(L.meta.nparams, 2);
	ck_assert_str_eq(L.meta.params[0].name, "weight");
	ck_assert_int_eq(L.meta.params[0].init, PH_INIT_ONES);
	ck_assert_int_eq(L.meta.params[0].no_decay, 1);
	ck_assert_str_eq(L.meta.params[1].name, "bias");
	ck_assert_int_eq(L.meta.params[1].init, PH_INIT_ZEROS);
	ck_assert_int_eq(L.meta.params[1].no_decay, 1);
	for (int c = 0; c < 16; c++)
		L.params[0][c] = 1.0f, L.params[1][c] = 0.0f;
	for (int64_t i = 0; i < L.nx; i++)
		L.x[i] = urand(-3, 5); /* off-centre, not unit variance */
	fwd(&L);
	for (int r = 0; r < 12; r++) {
		double m = 0, v = 0;
		for (int c = 0; c < 16; c++)
			m += L.y[r * 16 + c];
		m /= 16;
		for (int c = 0; c < 16; c++)
			v += (L.y[r * 16 + c] - m) * (L.y[r * 16 + c] - m);
		v /= 16;
		ck_assert_msg(fabs(m) < 1e-5, "row %d mean %g", r, m);
		ck_assert_msg(fabs(v - 1) < 1e-4, "row %d variance %g", r, v);
	}
	/* A gain and a shift apply per feature. */
	for (int c = 0; c < 16; c++)
		L.params[0][c] = 2.0f, L.params[1][c] = (float)c;
	float *y0 = malloc(L.ny * sizeof(float));
	memcpy(y0, L.y, L.ny * sizeof(float));
	fwd(&L);
	for (int64_t i = 0; i < L.ny; i++)
		ck_assert_double_eq_tol(L.y[i], 2.0 * y0[i] + (double)(i % 16), 1e-5);
	free(y0);
	inst_close(&L);

	/* The option table bounds eps away from 0 (a constant row would divide by 0). */
	ck_assert_double_eq(option_default_float("layernorm", "eps"), 1e-5);
	ck_assert_int_eq(option_set_status("layernorm", "eps", "0"), PH_EINVAL);
}
END_TEST

/* ------------------------------------------------------------------ */
/* gelu                                                                */

START_TEST(test_gelu)
{
	rng_seed(301);
	inst L;
	inst_open(&L, "gelu", NULL, SHAPE(4, 5), 2);
	for (int64_t i = 0; i < L.nx; i++)
		L.x[i] = urand(-4, 4);
	gradcheck(&L, 1e-2f, 1e-2);
	ck_assert_int_eq(L.meta.nparams, 0);
	ck_assert_int_eq(L.meta.saved_bytes, 0);
	const float xs[] = { 0.0f, 1.0f, -1.0f, 3.0f, -3.0f, 10.0f, -10.0f };
	for (int i = 0; i < 7; i++)
		L.x[i] = xs[i];
	fwd(&L);
	for (int i = 0; i < 7; i++) {
		double x = xs[i];
		double want = 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
		ck_assert_double_eq_tol(L.y[i], want, 1e-6);
	}
	ck_assert_double_eq_tol(L.y[1], 0.8411920, 1e-6); /* published values */
	ck_assert_double_eq_tol(L.y[2], -0.1588080, 1e-6);
	inst_close(&L);
}
END_TEST

/* ------------------------------------------------------------------ */
/* seq_xent                                                            */

START_TEST(test_seq_xent_grad)
{
	run_gradcheck("seq_xent", NULL, SHAPE(3, 5), 2, 401);
}
END_TEST

START_TEST(test_seq_xent_values)
{
	rng_seed(402);
	inst L;
	inst_open(&L, "seq_xent", NULL, SHAPE(2, 3), 2);
	ck_assert_int_eq(L.meta.out.ndim, 1);
	ck_assert_int_eq(L.meta.out.d[0], 2);
	ck_assert_int_eq(L.meta.targets_per_sample, 2);
	ck_assert_int_eq(L.meta.nparams, 0);
	const float x[12] = { 1, 2, 3, /**/ 1, 2, 3,          /* sample 0 */
			      2, 2, 1, /**/ 1000, 0, -1000 }; /* sample 1 */
	const int32_t t[4] = { 2, 0, /**/ 1, 0 };
	memcpy(L.x, x, sizeof x);
	memcpy(L.targets, t, sizeof t);
	fwd(&L);
	double lse = log(exp(1.0) + exp(2.0) + exp(3.0));
	ck_assert_double_eq_tol(L.y[0], (lse - 3) + (lse - 1), 1e-5);
	ck_assert_float_eq(L.y[1], 1.0f); /* position 0 right, position 1 wrong */
	ck_assert_double_eq_tol(L.y[2], log(2 * exp(2.0) + exp(1.0)) - 2 + 0.0, 1e-5);
	ck_assert_float_eq(L.y[3], 1.0f); /* tie goes to index 0 (wrong); 1000 is right */

	/* dx = (softmax - onehot) * loss_scale, the host's 1/(B*T) */
	L.ctx.loss_scale = 0.25f;
	bwd(&L, L.dx);
	double Z = exp(1.0) + exp(2.0) + exp(3.0);
	ck_assert_double_eq_tol(L.dx[0], 0.25 * exp(1.0) / Z, 1e-7);
	ck_assert_double_eq_tol(L.dx[2], 0.25 * (exp(3.0) / Z - 1), 1e-7);
	ck_assert_double_eq_tol(L.dx[3], 0.25 * (exp(1.0) / Z - 1), 1e-7);
	ck_assert_double_eq_tol(L.dx[9], 0.0, 1e-7);
	ck_assert_double_eq_tol(L.dx[10], 0.0, 1e-7);
	for (int i = 0; i < 12; i++)
		ck_assert(isfinite(L.dx[i]));

	/* A target out of range names the sample and position. */
	L.targets[3] = 3;
	ph_err e = { { 0 } };
	ck_assert_int_eq(L.ops->forward(L.state, &L.ctx, L.params, L.x, L.y, &e), PH_EINVAL);
	ck_assert_msg(strstr(e.msg, "sample 1 position 1") && strstr(e.msg, "target 3"),
		      "message: %s", e.msg);
	inst_close(&L);
	ck_assert_int_eq(try_create("seq_xent", NULL, SHAPE(6), &e), PH_EINVAL);
}
END_TEST

/* ------------------------------------------------------------------ */
/* attention                                                           */

/* The definition, in double, one sample: x [T, d] -> y [T, d], no dropout. */
static void attention_ref(const float *x, float *const *p, int T, int d, int H, double *y)
{
	int hd = d / H;
	double *qkv = calloc((size_t)T * 3 * d, sizeof(double));
	double *att = calloc((size_t)T * d, sizeof(double));
	for (int t = 0; t < T; t++)
		for (int o = 0; o < 3 * d; o++) {
			double s = p[1][o];
			for (int i = 0; i < d; i++)
				s += (double)x[t * d + i] * p[0][o * d + i];
			qkv[t * 3 * d + o] = s;
		}
	for (int h = 0; h < H; h++)
		for (int i = 0; i < T; i++) {
			double sc[64], m = -INFINITY, z = 0;
			for (int j = 0; j <= i; j++) {
				double s = 0;
				for (int c = 0; c < hd; c++)
					s += qkv[i * 3 * d + h * hd + c] * qkv[j * 3 * d + d + h * hd + c];
				sc[j] = s / sqrt((double)hd);
				m = fmax(m, sc[j]);
			}
			for (int j = 0; j <= i; j++)
				z += (sc[j] = exp(sc[j] - m));
			for (int c = 0; c < hd; c++) {
				double s = 0;
				for (int j = 0; j <= i; j++)
					s += sc[j] / z * qkv[j * 3 * d + 2 * d + h * hd + c];
				att[i * d + h * hd + c] = s;
			}
		}
	for (int t = 0; t < T; t++)
		for (int o = 0; o < d; o++) {
			double s = p[3][o];
			for (int i = 0; i < d; i++)
				s += att[t * d + i] * p[2][o * d + i];
			y[t * d + o] = s;
		}
	free(qkv);
	free(att);
}

START_TEST(test_attention_grad)
{
	rng_seed(501);
	inst L;
	inst_open(&L, "attention", KV("heads", "2"), SHAPE(4, 6), 2);
	ck_assert(ph_layer_has_split_backward(L.ops));
	scale_params(&L, 0.5f);
	gradcheck(&L, 1e-2f, 1e-2);
	inst_close(&L);
}
END_TEST

START_TEST(test_attention_grad_dropout)
{
	/* The key is fixed, so the mask is fixed: y is smooth in x and params. */
	rng_seed(502);
	inst L;
	inst_open(&L, "attention", KV("heads", "3", "dropout", "0.3"), SHAPE(5, 6), 2);
	scale_params(&L, 0.5f);
	gradcheck(&L, 1e-2f, 1e-2);
	inst_close(&L);
}
END_TEST

START_TEST(test_attention_forward_meta)
{
	rng_seed(503);
	const int T = 5, d = 8, H = 2, B = 2;
	inst L;
	inst_open(&L, "attention", KV("heads", "2", "dropout", "0.5"), SHAPE(5, 8), B);
	ck_assert_int_eq(L.meta.out.ndim, 2);
	ck_assert_int_eq(L.meta.out.d[0], T);
	ck_assert_int_eq(L.meta.out.d[1], d);
	ck_assert_uint_eq(L.meta.saved_bytes, (size_t)(T * 3 * d + H * T * T + T * d) * 4);
	ck_assert_int_eq(L.meta.nparams, 4);
	const char *names[] = { "qkv_weight", "qkv_bias", "proj_weight", "proj_bias" };
	const int64_t d0[] = { 3 * d, 3 * d, d, d };
	for (int p = 0; p < 4; p++) {
		ck_assert_str_eq(L.meta.params[p].name, names[p]);
		ck_assert_int_eq(L.meta.params[p].shape.d[0], d0[p]);
		ck_assert_int_eq(L.meta.params[p].shape.ndim, p % 2 ? 1 : 2);
		ck_assert_int_eq(L.meta.params[p].no_decay, p % 2);
		ck_assert_int_eq(L.meta.params[p].init, p % 2 ? PH_INIT_ZEROS : PH_INIT_NORMAL);
	}
	ck_assert_double_ge(L.meta.fwd_flops, 8.0 * T * d * d + 4.0 * T * T * d);

	/* Evaluation (dropout off) against the definition. */
	L.ctx.training = 0;
	fwd(&L);
	double ref[5 * 8];
	for (int b = 0; b < B; b++) {
		attention_ref(L.x + b * T * d, L.params, T, d, H, ref);
		for (int i = 0; i < T * d; i++)
			ck_assert_msg(fabs(L.y[b * T * d + i] - ref[i]) < 1e-4,
				      "y[%d][%d] = %g, want %g", b, i, L.y[b * T * d + i], ref[i]);
	}
	/* Training with dropout 0.5 changes the output; the same key, the same output. */
	float *y1 = check_dropout_keyed(&L, B - 1, ref);
	free(y1);
	inst_close(&L);
}
END_TEST

START_TEST(test_attention_causal)
{
	rng_seed(504);
	inst L;
	inst_open(&L, "attention", KV("heads", "2", "dropout", "0.2"), SHAPE(6, 4), 1);
	check_causal(&L);
	inst_close(&L);
}
END_TEST

START_TEST(test_attention_bad_config)
{
	ph_err e;
	ck_assert_int_eq(try_create("attention", KV("heads", "4"), SHAPE(5, 6), &e), PH_EINVAL);
	ck_assert_msg(strstr(e.msg, "heads = 4") && strstr(e.msg, "6"), "message: %s", e.msg);
	ck_assert_int_eq(try_create("attention", KV("heads", "8"), SHAPE(5, 4), &e), PH_EINVAL);
	ck_assert_int_eq(try_create("attention", KV("heads", "2"), SHAPE(8), &e), PH_EINVAL);
	ck_assert_msg(strstr(e.msg, "1 dimensions"), "message: %s", e.msg);
	ck_assert_int_eq(try_create("attention", NULL, SHAPE(5, 4), &e), PH_EINVAL); /* required */
	ck_assert_int_eq(try_create("attention", KV("heads", "2"), SHAPE(5, 4), &e), PH_OK);
}
END_TEST


/* ------------------------------------------------------------------ */
/* gpt_block                                                           */

/* Layer normalisation of one row in double, rounded to float like the plugin's output. */
static void ln_ref(const float *x, const float *w, const float *b, int d, float *y)
{
	double m = 0, v = 0;
	for (int c = 0; c < d; c++)
		m += x[c];
	m /= d;
	for (int c = 0; c < d; c++)
		v += (x[c] - m) * (x[c] - m);
	v /= d;
	for (int c = 0; c < d; c++)
		y[c] = (float)((x[c] - m) / sqrt(v + 1e-5) * w[c] + b[c]);
}

/* The definition, one sample, no dropout: x [T, d] -> y [T, d] (mlp_ratio r). */
static void gpt_block_ref(const float *x, float *const *p, int T, int d, int H, int r, double *y)
{
	const int rd = r * d;
	const float *bias = p[6];
	float *h = calloc((size_t)T * d, sizeof(float));
	float *x1 = calloc((size_t)T * d, sizeof(float));
	double *a = calloc((size_t)T * d, sizeof(double));
	for (int t = 0; t < T; t++)
		ln_ref(x + t * d, p[0], p[1], d, h + t * d);
	float *ap[4] = { p[2], (float *)bias, p[3], (float *)bias + 3 * d };
	attention_ref(h, ap, T, d, H, a);
	for (int i = 0; i < T * d; i++)
		x1[i] = (float)(x[i] + a[i]);
	for (int t = 0; t < T; t++) {
		ln_ref(x1 + t * d, p[0] + d, p[1] + d, d, h + t * d);
		double g[512];
		for (int o = 0; o < rd; o++) {
			double s = bias[4 * d + o];
			for (int i = 0; i < d; i++)
				s += (double)h[t * d + i] * p[4][o * d + i];
			g[o] = 0.5 * s * (1 + tanh(sqrt(2 / M_PI) * (s + 0.044715 * s * s * s)));
		}
		for (int o = 0; o < d; o++) {
			double s = bias[4 * d + rd + o];
			for (int i = 0; i < rd; i++)
				s += g[i] * p[5][o * rd + i];
			y[t * d + o] = x1[t * d + o] + s;
		}
	}
	free(h), free(x1), free(a);
}

START_TEST(test_gpt_block_grad)
{
	rng_seed(601);
	inst L;
	inst_open(&L, "gpt_block", KV("heads", "2"), SHAPE(4, 8), 2);
	ck_assert(ph_layer_has_split_backward(L.ops));
	scale_params(&L, 0.5f);
	/* Float rounding through two layernorms, attention and the MLP leaves
	 * ~1e-5 of noise in plain central differences at eps 1e-2; Richardson at
	 * eps 0.1 brings the worst error to ~0.5%. */
	gradcheck_with(&L, &(fd_check){ .eps = 1e-1f, .tol = 1e-2, .richardson = 1, .split = 1 });
	inst_close(&L);
}
END_TEST

START_TEST(test_gpt_block_grad_dropout)
{
	/* Three dropout sites, fixed keys: y is smooth in x and the parameters. */
	rng_seed(602);
	inst L;
	inst_open(&L, "gpt_block", KV("heads", "2", "dropout", "0.2"), SHAPE(4, 8), 2);
	scale_params(&L, 0.5f);
	gradcheck_with(&L, &(fd_check){ .eps = 1e-1f, .tol = 1e-2, .richardson = 1, .split = 1 });
	inst_close(&L);
}
END_TEST

START_TEST(test_gpt_block_forward_meta)
{
	rng_seed(603);
	const int T = 5, d = 8, H = 2, B = 2;
	inst L;
	inst_open(&L, "gpt_block", KV("heads", "2", "dropout", "0.5"), SHAPE(5, 8), B);
	ck_assert_int_eq(L.meta.out.ndim, 2);
	ck_assert_int_eq(L.meta.out.d[0], T);
	ck_assert_int_eq(L.meta.out.d[1], d);
	ck_assert_int_eq(L.meta.nparams, 7);
	const char *names[] = { "ln_weight", "ln_bias", "qkv_weight", "proj_weight",
				"fc_weight", "fc_proj_weight", "biases" };
	const int inits[] = { PH_INIT_ONES, PH_INIT_ZEROS, PH_INIT_NORMAL, PH_INIT_NORMAL,
			      PH_INIT_NORMAL, PH_INIT_NORMAL, PH_INIT_ZEROS };
	const int no_decay[] = { 1, 1, 0, 0, 0, 0, 1 };
	int64_t total = 0;
	for (int p = 0; p < 7; p++) {
		ck_assert_str_eq(L.meta.params[p].name, names[p]);
		ck_assert_int_eq(L.meta.params[p].init, inits[p]);
		ck_assert_int_eq(L.meta.params[p].no_decay, no_decay[p]);
		if (inits[p] == PH_INIT_NORMAL)
			ck_assert_float_eq_tol(L.meta.params[p].init_arg, 0.02f, 1e-9);
		total += L.pn[p];
	}
	ck_assert_int_eq(total, 12 * d * d + 13 * d);
	ck_assert_int_eq(L.pn[6], 9 * d);
	/* every matmul plus the attention's two T x T products */
	ck_assert_double_ge(L.meta.fwd_flops, 24.0 * T * d * d + 4.0 * T * T * d);
	ck_assert_double_lt(L.meta.fwd_flops, 2 * (24.0 * T * d * d + 4.0 * T * T * d));
	ck_assert_double_eq(L.meta.bwd_flops, 2 * L.meta.fwd_flops);
	/* h1 qkv att x1 h2 (7 T d), 2 layernorms' stats, P, u and g */
	ck_assert_uint_eq(L.meta.saved_bytes,
			  (size_t)(7 * T * d + 4 * T + H * T * T + 2 * T * 4 * d) * 4);
	ck_assert_uint_ge(L.meta.scratch_bytes, (size_t)B * T * d * 4);

	/* Evaluation (dropout off) against the definition. */
	L.ctx.training = 0;
	fwd(&L);
	double ref[5 * 8];
	for (int b = 0; b < B; b++) {
		gpt_block_ref(L.x + b * T * d, L.params, T, d, H, 4, ref);
		for (int i = 0; i < T * d; i++)
			ck_assert_msg(fabs(L.y[b * T * d + i] - ref[i]) < 2e-4 * fmax(1, fabs(ref[i])),
				      "y[%d][%d] = %g, want %g", b, i, L.y[b * T * d + i], ref[i]);
	}
	/* Training drops; the same key, the same output; another step, another;
	 * another layer, another. */
	float *y1 = check_dropout_keyed(&L, B - 1, ref);
	L.ctx.layer++;
	fwd(&L);
	ck_assert(memcmp(y1, L.y, L.ny * sizeof(float)) != 0);
	free(y1);
	inst_close(&L);

	/* mlp_ratio: (4 + 2 r) d^2 + (9 + r) d parameters. */
	inst_open(&L, "gpt_block", KV("heads", "4", "mlp_ratio", "2"), SHAPE(3, 8), 1);
	total = 0;
	for (int p = 0; p < L.meta.nparams; p++)
		total += L.pn[p];
	ck_assert_int_eq(total, 8 * d * d + 11 * d);
	ck_assert_int_eq(L.meta.params[4].shape.d[0], 2 * d);
	ck_assert_int_eq(L.meta.params[5].shape.d[1], 2 * d);
	inst_close(&L);
}
END_TEST

START_TEST(test_gpt_block_causal)
{
	rng_seed(604);
	inst L;
	inst_open(&L, "gpt_block", KV("heads", "2", "dropout", "0.2"), SHAPE(6, 8), 1);
	check_causal(&L);
	inst_close(&L);
}
END_TEST

START_TEST(test_gpt_block_bad_config)
{
	ph_err e;
	ck_assert_int_eq(try_create("gpt_block", KV("heads", "3"), SHAPE(4, 8), &e), PH_EINVAL);
	ck_assert_msg(strstr(e.msg, "heads = 3") && strstr(e.msg, "8"), "message: %s", e.msg);
	ck_assert_int_eq(try_create("gpt_block", KV("heads", "16"), SHAPE(4, 8), &e), PH_EINVAL);
	ck_assert_int_eq(try_create("gpt_block", KV("heads", "2"), SHAPE(8), &e), PH_EINVAL);
	ck_assert_msg(strstr(e.msg, "1 dimensions"), "message: %s", e.msg);
	ck_assert_int_eq(try_create("gpt_block", NULL, SHAPE(4, 8), &e), PH_EINVAL); /* required */
	ck_assert_int_eq(try_create("gpt_block", KV("heads", "2"), SHAPE(4, 8), &e), PH_OK);
	/* the option table bounds dropout and mlp_ratio */
	ck_assert_int_eq(option_set_status("gpt_block", "dropout", "1"), PH_EINVAL);
	ck_assert_int_eq(option_set_status("gpt_block", "mlp_ratio", "0"), PH_EINVAL);
}
END_TEST

/* ---- cuDNN's fused attention: where its blocks go (sdpa_place.h) ---- */

/* Every placed block aligned, inside one span, apart from the others. */
static void check_placement(const ph_sdpa_span *sp, int ns, const size_t *sz, int n, void *const *at)
{
	for (int i = 0; i < n; i++) {
		if (sz[i] == 0) {
			ck_assert_ptr_null(at[i]);
			continue;
		}
		const uintptr_t a = (uintptr_t)at[i];
		ck_assert_uint_eq(a % PH_SDPA_ALIGN, 0);
		int inside = 0;
		for (int j = 0; j < ns; j++)
			inside += a >= (uintptr_t)sp[j].p && a + sz[i] <= (uintptr_t)sp[j].p + sp[j].bytes;
		ck_assert_msg(inside == 1, "block %d (%zu bytes) lies in %d spans", i, sz[i], inside);
		for (int k = 0; k < i; k++)
			if (sz[k])
				ck_assert_msg(a + sz[i] <= (uintptr_t)at[k] || (uintptr_t)at[k] + sz[k] <= a,
					      "blocks %d and %d overlap", k, i);
	}
}

static uint64_t xs64(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

START_TEST(test_sdpa_place_random)
{
	uint64_t x = 0x5dbaULL;
	int placed = 0, refused = 0;
	for (int trial = 0; trial < 2000; trial++) {
		ph_sdpa_span sp[PH_SDPA_SPANS];
		size_t sz[PH_SDPA_BLOCKS], biggest = 0, need = 0;
		void *at[PH_SDPA_BLOCKS];
		const int ns = (int)(xs64(&x) % PH_SDPA_SPANS) + 1, n = (int)(xs64(&x) % PH_SDPA_BLOCKS) + 1;
		uintptr_t base = 0x100000 + (uintptr_t)(xs64(&x) % 4096); /* spans at odd addresses too */
		for (int j = 0; j < ns; j++) {
			sp[j].p = (void *)base;
			sp[j].bytes = (size_t)(xs64(&x) % 100000);
			base += sp[j].bytes + (size_t)(xs64(&x) % 1000);
			biggest = sp[j].bytes > biggest ? sp[j].bytes : biggest;
		}
		for (int i = 0; i < n; i++) {
			sz[i] = xs64(&x) % 5 == 0 ? 0 : (size_t)(xs64(&x) % 60000);
			need += sz[i] + PH_SDPA_ALIGN;
		}
		const int ok = ph_sdpa_place(sp, ns, sz, n, at);
		if (ok)
			check_placement(sp, ns, sz, n, at);
		else /* it refuses only what one span of them all could not take */
			ck_assert_msg(need > biggest, "refused %zu bytes in %d blocks with a span of %zu", need, n,
				      biggest);
		placed += ok;
		refused += !ok;
	}
	ck_assert_int_gt(placed, 100); /* both outcomes exercised */
	ck_assert_int_gt(refused, 100);

	/* largest first: taken in call order, best fit puts the 30 in the
	 * 60-span and the 70 then has no room */
	const size_t k = PH_SDPA_ALIGN;
	const ph_sdpa_span sp[2] = { { (void *)(uintptr_t)(1000 * k), 100 * k }, { (void *)(uintptr_t)(2000 * k), 60 * k } };
	const size_t sz[3] = { 30 * k, 60 * k, 70 * k };
	void *at[3];
	ck_assert(ph_sdpa_place(sp, 2, sz, 3, at));
	check_placement(sp, 2, sz, 3, at);
}
END_TEST

/* GPT-2 small's block (8 x 1024, d 768, 12 heads of 64, MLP x4) in bf16:
 * the spans gpt_block_cuda.cu lends cuDNN's backward miss every buffer
 * still live, and with the deterministic backward's workspace as
 * cudnn-frontend 1.32 sizes it on Hopper (dP, B*H*T*T*2 bytes) plus dQ's
 * fp32 accumulator, the copies and workspace of 4 samples fit beside each
 * other: the backward runs in 2 groups, not 4 (the cut from the front that
 * came before) or 8. */
START_TEST(test_sdpa_gpt2_spans)
{
	const size_t B = 8, T = 1024, d = 768, r = 4, H = 12, hd = 64, n = B * T * d;
	for (int dqkv16 = 0; dqkv16 <= 1; dqkv16++) {
		gpt_scratch_span gs[3];
		const int ns = gpt_sdpa_backward_spans(B, T, d, r, H, dqkv16, gs);
		const size_t end = gpt_device_scratch_floats(B, T, d, r, H, 0);
		const size_t dqkv = 4 * n + r * n;
		/* live: dx1, dh (datt), dqkv's used part */
		const size_t live[3][2] = { { 0, n }, { 2 * n, 3 * n }, { dqkv, dqkv + (dqkv16 ? 3 * n / 2 : 3 * n) } };
		size_t free_floats = 0;
		for (int j = 0; j < ns; j++) {
			ck_assert_uint_le(gs[j].at + gs[j].floats, end);
			for (int k = 0; k < 3; k++)
				ck_assert_msg(gs[j].at + gs[j].floats <= live[k][0] || live[k][1] <= gs[j].at,
					      "span %d overlaps live buffer %d", j, k);
			free_floats += gs[j].floats;
		}
		/* and nothing else is live: the spans and the live buffers cover the scratch */
		ck_assert_uint_eq(free_floats + 2 * n + (live[2][1] - live[2][0]), end);

		ph_sdpa_span sp[3];
		for (int j = 0; j < ns; j++)
			sp[j] = (ph_sdpa_span){ (void *)(uintptr_t)(0x40000000u + gs[j].at * sizeof(float)),
						gs[j].floats * sizeof(float) };
		int fits[9] = { 0 };
		for (size_t Bg = 1; Bg <= B; Bg *= 2) {
			/* q16, do16, o16 (att saved in bf16: none), g16 (none where dqkv16), stats, workspace */
			const size_t sz[6] = { n * 3 * 2,     n * 2,
					       0,             dqkv16 ? 0 : n * 3 * 2,
					       Bg * H * T * 4, Bg * H * T * T * 2 + Bg * H * T * hd * 4 };
			void *at[6];
			fits[Bg] = ph_sdpa_place(sp, ns, sz, 6, at);
			if (fits[Bg])
				check_placement(sp, ns, sz, 6, at);
		}
		/* fp32 also copies dqkv through bf16: 36 MiB more, groups of 2 */
		const size_t want = dqkv16 ? 4 : 2;
		ck_assert_msg(fits[1] && fits[want] && !fits[2 * want], "dqkv16 %d: groups of 1 %d, 2 %d, 4 %d, 8 %d",
			      dqkv16, fits[1], fits[2], fits[4], fits[8]);
	}
}
END_TEST

/* ------------------------------------------------------------------ */

static Suite *transformer_suite(void)
{
	Suite *s = suite_create("transformer");
	TCase *tc;

	tc = tcase_create("heads");
	tcase_add_loop_test(tc, test_heads, 0, (int)(sizeof all_layers / sizeof all_layers[0]));
	suite_add_tcase(s, tc);

	tc = tcase_create("embedding");
	tcase_add_test(tc, test_embedding_grad);
	tcase_add_test(tc, test_embedding_forward_meta);
	tcase_add_test(tc, test_embedding_bad_ids);
	suite_add_tcase(s, tc);

	tc = tcase_create("layernorm");
	tcase_add_test(tc, test_layernorm_grad);
	tcase_add_test(tc, test_layernorm_normalises);
	suite_add_tcase(s, tc);

	tc = tcase_create("gelu");
	tcase_add_test(tc, test_gelu);
	suite_add_tcase(s, tc);

	tc = tcase_create("seq_xent");
	tcase_add_test(tc, test_seq_xent_grad);
	tcase_add_test(tc, test_seq_xent_values);
	suite_add_tcase(s, tc);

	tc = tcase_create("attention");
	tcase_add_test(tc, test_attention_grad);
	tcase_add_test(tc, test_attention_grad_dropout);
	tcase_add_test(tc, test_attention_forward_meta);
	tcase_add_test(tc, test_attention_causal);
	tcase_add_test(tc, test_attention_bad_config);
	suite_add_tcase(s, tc);

	tc = tcase_create("gpt_block");
	tcase_add_test(tc, test_gpt_block_grad);
	tcase_add_test(tc, test_gpt_block_grad_dropout);
	tcase_add_test(tc, test_gpt_block_forward_meta);
	tcase_add_test(tc, test_gpt_block_causal);
	tcase_add_test(tc, test_gpt_block_bad_config);
	suite_add_tcase(s, tc);

	tc = tcase_create("cudnn_scratch");
	tcase_add_test(tc, test_sdpa_place_random);
	tcase_add_test(tc, test_sdpa_gpt2_spans);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return run_suite(transformer_suite());
}
