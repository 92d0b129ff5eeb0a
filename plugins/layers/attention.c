/* SPDX-License-Identifier: MIT */
/*
 * attention: causal multi-head self-attention with its own projections
 * (GPT-2's attn: c_attn, the causal softmax, attention dropout, c_proj).
 *
 *   x [B, T, d]  ->  y [B, T, d]
 *   qkv = x qkv_weight^T + qkv_bias                 [T, 3d]: q | k | v
 *   per head h (hd = d / heads columns of each of q, k, v):
 *     P_h   = softmax(q_h k_h^T / sqrt(hd)), causal (position i sees j <= i)
 *     att_h = dropout(P_h) v_h
 *   y = att proj_weight^T + proj_bias               att: the heads side by side
 *
 *   qkv_weight [3d, d], proj_weight [d, d]: N(0, 0.02^2)
 *   qkv_bias [3d], proj_bias [d]: zeros, no weight decay
 *
 * Dropout on the attention probabilities (training only, `dropout` > 0):
 * element ((b*heads + h)*T + i)*T + j of the micro-batch is kept iff
 * ph_rng_uniform(ph_rng_key(seed, step, micro-batch, layer), that index) >=
 * (float)dropout and then scaled by (float)(1/(1 - dropout)).  The mask is
 * drawn again in backward, never stored.
 *
 * Saved per sample: qkv [T, 3d], P [heads, T, T] (before dropout) and
 * att [T, d]; for the micro-batch they lie as qkv [B, T, 3d], P [B, heads,
 * T, T], att [B, T, d], one after the other.
 *
 * The split backward: the weight half (all four parameter gradients) and
 * the input half (dx) each run the attention core backward to get d(qkv);
 * backward() runs the same code once with both outputs, so the results are
 * bitwise the same either way.
 *
 * On a GPU the host calls attention_cuda.cu's hooks (attention_cuda_ops)
 * instead, with the same saved layout; the core is attention_ops.cuh.
 */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>
#include <pipehost/plugin.h>
#define TF_WANT_ATTENTION 1
#include "transformer_ops.h"
#include "attention_state.h"

PH_LAYER_TWIN(attention_cuda_ops); /* attention_cuda.cu; NULL in a build without CUDA */

typedef struct {
	int64_t heads;
	double dropout;
} attention_config;

static const ph_option attention_options[] = {
	PH_OPT_INT_(attention_config, heads, "heads", NULL, 1, INT_MAX,
		    "attention heads; must divide the model dimension"),
	PH_OPT_FLOAT_(attention_config, dropout, "dropout", "0", 0, 0.99,
		      "dropout on the attention probabilities in training"),
	PH_OPT_END
};

static int attention_create(const void *config, const ph_shape *in, int max_batch,
			    void **state, ph_err *err)
{
	const attention_config *cfg = config;
	tf_attn_geom g;
	if (tf_attn_geom_make("attention", in, cfg->heads, cfg->dropout, &g, err))
		return PH_EINVAL;
	const int64_t T = in->d[0], d = in->d[1];
	/* CBLAS takes int dimensions (T and d first: T * T must not overflow). */
	if (T > INT_MAX || d > INT_MAX || 3 * d > INT_MAX || T * T > INT_MAX || (int64_t)max_batch * T > INT_MAX)
		return ph_fail(err, PH_EINVAL,
			       "attention: T = %lld, d = %lld, micro-batch %d exceed BLAS int sizes",
			       (long long)T, (long long)d, max_batch);
	attention_state *s = calloc(1, sizeof *s);
	if (!s)
		return ph_fail(err, PH_ENOMEM, "attention: out of memory");
	s->g = g;
	s->max_batch = max_batch;
	*state = s;
	return PH_OK;
}

static void attention_destroy(void *state)
{
	free(state);
}

static void add_param(ph_layer_meta *m, const char *name, int64_t d0, int64_t d1)
{
	ph_param_desc *p = &m->params[m->nparams++];
	strcpy(p->name, name);
	if (d1) {
		p->shape = (ph_shape){ 2, { d0, d1 } };
		p->init = PH_INIT_NORMAL;
		p->init_arg = 0.02f;
	} else {
		p->shape = (ph_shape){ 1, { d0 } };
		p->init = PH_INIT_ZEROS;
		p->no_decay = 1;
	}
}

static int attention_meta(const void *state, ph_layer_meta *m, ph_err *err)
{
	const attention_state *s = state;
	const double T = s->g.T, d = s->g.d, H = s->g.H;
	*m = (ph_layer_meta){ 0 };
	m->out = (ph_shape){ 2, { s->g.T, s->g.d } };
	/* Projections: 2*T*d*3d + 2*T*d*d.  Attention: q k^T and P v, 2*T*T*d
	 * each, counted over the full T x T square (the kernels skip most of
	 * the masked triangle, 62.5% of the square at T = 128, but the count
	 * stays the square's so that partitions do not move).  Softmax (and
	 * dropout): ~5 per score. */
	const double proj = 8.0 * T * d * d, core = 4.0 * T * T * d, soft = 5.0 * H * T * T;
	m->fwd_flops = proj + core + soft + 4.0 * T * d;
	m->bwd_flops = 2 * proj + 2 * core + soft + 8.0 * T * d;
	m->saved_bytes = ((size_t)s->g.T * 4 * s->g.d + (size_t)s->g.H * s->g.T * s->g.T) *
			 sizeof(float);
	m->scratch_bytes = ((size_t)s->max_batch * s->g.T * 4 * s->g.d +
			    2 * (size_t)s->g.T * s->g.T) * sizeof(float);
	/* The GPU batches the heads of a sample: datt and dqkv as on the CPU,
	 * then dP [heads, T, T], and Pd [heads, T, T] when there is dropout. */
	m->device_scratch_bytes = ((size_t)s->max_batch * s->g.T * 4 * s->g.d +
				   (size_t)s->g.H * s->g.T * s->g.T * (s->g.rate > 0.0f ? 2 : 1)) *
				  sizeof(float);
	add_param(m, "qkv_weight", 3 * (int64_t)s->g.d, s->g.d);
	add_param(m, "qkv_bias", 3 * (int64_t)s->g.d, 0);
	add_param(m, "proj_weight", s->g.d, s->g.d);
	add_param(m, "proj_bias", s->g.d, 0);
	return PH_OK;
}

static int check_call(const attention_state *s, const ph_ctx *ctx, ph_err *err)
{
	if (ctx->batch > 0 && (!ctx->saved || !ctx->scratch))
		return ph_fail(err, PH_EINTERNAL, "attention: called without saved or scratch space");
	return PH_OK;
}

/* The saved regions of this micro-batch. */
static void saved_views(const attention_state *s, const ph_ctx *ctx, float **qkv, float **P,
			float **att)
{
	const size_t B = (size_t)ctx->batch, T = s->g.T, d = s->g.d, H = s->g.H;
	*qkv = ctx->saved;
	*P = *qkv + B * T * 3 * d;
	*att = *P + B * H * T * T;
}

static int attention_forward(void *state, const ph_ctx *ctx, float *const *params,
			     const float *x, float *y, ph_err *err)
{
	const attention_state *s = state;
	int rc = check_call(s, ctx, err);
	if (rc || ctx->batch == 0)
		return rc;
	const int rows = ctx->batch * s->g.T, d = s->g.d;
	float *qkv, *P, *att;
	saved_views(s, ctx, &qkv, &P, &att);
	const int drop = ctx->training && s->g.rate > 0.0f;
	const uint64_t key = ph_rng_key(ctx->seed, ctx->step, ctx->microbatch, ctx->layer);

	/* qkv = x W^T + b: preload the bias, gemm accumulates onto it */
	for (int r = 0; r < rows; r++)
		memcpy(qkv + (size_t)r * 3 * d, params[1], (size_t)3 * d * sizeof(float));
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, 3 * d, d, 1.0f, x, d,
		    params[0], d, 1.0f, qkv, 3 * d);
	tf_attn_forward(&s->g, ctx->batch, drop, key, qkv, P, att, ctx->scratch);
	/* y = att proj^T + b */
	tf_bias_preload(y, params[3], rows, d);
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, d, d, 1.0f, att, d,
		    params[2], d, 1.0f, y, d);
	return PH_OK;
}

/* The whole backward; grads == NULL skips the weight half, dx == NULL the input half. */
static int attention_bwd(const attention_state *s, const ph_ctx *ctx, float *const *params,
			 float *const *grads, const float *x, const float *dy, float *dx,
			 ph_err *err)
{
	int rc = check_call(s, ctx, err);
	if (rc || ctx->batch == 0 || (!grads && !dx))
		return rc;
	const int rows = ctx->batch * s->g.T, d = s->g.d;
	float *qkv, *P, *att;
	saved_views(s, ctx, &qkv, &P, &att);
	const int drop = ctx->training && s->g.rate > 0.0f;
	const uint64_t key = ph_rng_key(ctx->seed, ctx->step, ctx->microbatch, ctx->layer);
	float *datt = ctx->scratch, *dqkv = datt + (size_t)rows * d;
	float *tmp = dqkv + (size_t)rows * 3 * d;

	/* datt = dy proj_weight */
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, d, d, 1.0f, dy, d,
		    params[2], d, 0.0f, datt, d);
	if (grads) {
		/* dproj_weight += dy^T att, dproj_bias += sum dy */
		cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, d, d, rows, 1.0f, dy, d,
			    att, d, 1.0f, grads[2], d);
		tf_colsum_add(grads[3], dy, rows, d);
	}
	tf_attn_backward(&s->g, ctx->batch, drop, key, qkv, P, datt, dqkv, tmp);
	if (grads) {
		/* dqkv_weight += dqkv^T x, dqkv_bias += sum dqkv */
		cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, 3 * d, d, rows, 1.0f, dqkv,
			    3 * d, x, d, 1.0f, grads[0], d);
		tf_colsum_add(grads[1], dqkv, rows, 3 * d);
	}
	if (dx) /* dx = dqkv qkv_weight */
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, d, 3 * d, 1.0f, dqkv,
			    3 * d, params[0], d, 0.0f, dx, d);
	return PH_OK;
}

static int attention_backward(void *state, const ph_ctx *ctx, float *const *params,
			      float *const *grads, const float *x, const float *y,
			      const float *dy, float *dx, ph_err *err)
{
	return attention_bwd(state, ctx, params, grads, x, dy, dx, err);
}

static int attention_backward_input(void *state, const ph_ctx *ctx, float *const *params,
				    const float *x, const float *y, const float *dy, float *dx,
				    ph_err *err)
{
	return attention_bwd(state, ctx, params, NULL, x, dy, dx, err);
}

static int attention_backward_weight(void *state, const ph_ctx *ctx, float *const *params,
				     float *const *grads, const float *x, const float *y,
				     const float *dy, ph_err *err)
{
	return attention_bwd(state, ctx, params, grads, x, dy, NULL, err);
}

static const ph_layer_ops attention_ops = {
	.head = PH_HEAD(ph_layer_ops, "attention",
			"causal multi-head self-attention over [T, d] with qkv and output projections",
			attention_options, attention_config),
	.devices = PH_DEV_CPU,
	.flags = 0,
	.create = attention_create,
	.destroy = attention_destroy,
	.meta = attention_meta,
	.forward = attention_forward,
	.backward = attention_backward,
	.backward_input = attention_backward_input,
	.backward_weight = attention_backward_weight,
	.cuda = &attention_cuda_ops,
};

/* A named array: a braced list inside PH_PLUGIN() would split at its comma. */
static const ph_layer_ops *const attention_layers[] = { &attention_ops, NULL };
PH_PLUGIN(attention_layers, NULL, NULL)
