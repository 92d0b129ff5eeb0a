/* SPDX-License-Identifier: MIT */
/*
 * dropout: inverted dropout, any shape.
 *
 *   x [B, ...]  ->  y [B, ...]
 *   training:  y_i = keep_i ? x_i / (1 - rate) : 0
 *   eval, or rate = 0:  y = x
 *
 * The mask is never stored.  It is a pure function of
 * key = ph_rng_key(seed, step, microbatch, layer) and the element index i over
 * the whole micro-batch (0 .. B*numel-1):
 *
 *   keep_i  <=>  ph_rng_uniform(key, i) >= (float)rate
 *
 * so backward, a recomputed forward, another schedule or another placement
 * all draw the same mask.  The comparison is in float: a CUDA twin must use
 * the same threshold and the same scale, (float)(1 / (1 - rate)).
 */
#include <stdlib.h>
#include <string.h>

#include <pipehost/plugin.h>
#include "dropout_state.h"

PH_LAYER_TWIN(dropout_cuda_ops); /* dropout_cuda.cu; NULL in a build without CUDA */

typedef struct {
	double rate;
} dropout_config;

static const ph_option dropout_options[] = {
	PH_OPT_FLOAT_(dropout_config, rate, "rate", "0.5", 0, 0.99,
		      "probability of zeroing each element in training"),
	PH_OPT_END
};


static int dropout_create(const void *config, const ph_shape *in, int max_batch,
			  void **state, ph_err *err)
{
	const dropout_config *cfg = config;
	if (in->ndim < 1 || in->ndim > PH_MAX_DIMS)
		return ph_fail(err, PH_EINVAL, "dropout: input has %d dimensions; need 1 to %d",
			       in->ndim, PH_MAX_DIMS);
	for (int i = 0; i < in->ndim; i++)
		if (in->d[i] < 1)
			return ph_fail(err, PH_EINVAL, "dropout: input dimension %d is %lld; need >= 1",
				       i, (long long)in->d[i]);
	if (!(cfg->rate >= 0 && cfg->rate <= 0.99))
		return ph_fail(err, PH_EINVAL, "dropout: rate %g outside [0, 0.99]", cfg->rate);
	dropout_state *s = calloc(1, sizeof *s);
	if (!s)
		return ph_fail(err, PH_ENOMEM, "dropout: out of memory");
	s->shape = *in;
	s->numel = ph_shape_numel(in);
	s->rate = (float)cfg->rate;
	s->scale = (float)(1.0 / (1.0 - cfg->rate));
	*state = s;
	return PH_OK;
}

static void dropout_destroy(void *state)
{
	free(state);
}

static int dropout_meta(const void *state, ph_layer_meta *m, ph_err *err)
{
	const dropout_state *s = state;
	*m = (ph_layer_meta){ 0 };
	m->out = s->shape;
	m->fwd_flops = 2.0 * (double)s->numel;  /* a draw and a multiply per element */
	m->bwd_flops = 2.0 * (double)s->numel;  /* the mask is drawn again */
	return PH_OK;
}

/* out_i = keep_i ? in_i * scale : 0.  One Philox call yields four draws, the
 * ones ph_rng_uniform(key, i) gives for i = 4q .. 4q+3. */
static void apply_mask(const dropout_state *s, const ph_ctx *ctx, const float *in,
		       float *out, int64_t n)
{
	const uint64_t key = ph_rng_key(ctx->seed, ctx->step, ctx->microbatch, ctx->layer);
	ph_philox4 r = { { 0 } };
	for (int64_t i = 0; i < n; i++) {
		if ((i & 3) == 0)
			r = ph_philox4x32(key, 0, (uint64_t)i >> 2);
		float u = ph_u01(r.v[i & 3]);
		out[i] = u >= s->rate ? in[i] * s->scale : 0.0f;
	}
}

static int dropout_forward(void *state, const ph_ctx *ctx, float *const *params,
			   const float *x, float *y, ph_err *err)
{
	const dropout_state *s = state;
	const int64_t n = ctx->batch * s->numel;
	if (!ctx->training || s->rate == 0.0f) {
		if (y != x)
			memcpy(y, x, (size_t)n * sizeof *y);
		return PH_OK;
	}
	apply_mask(s, ctx, x, y, n);
	return PH_OK;
}

/* dx_i = keep_i ? dy_i * scale : 0, with the mask drawn again from the key. */
static int dropout_backward(void *state, const ph_ctx *ctx, float *const *params,
			    float *const *grads, const float *x, const float *y,
			    const float *dy, float *dx, ph_err *err)
{
	const dropout_state *s = state;
	if (!dx)
		return PH_OK;
	const int64_t n = ctx->batch * s->numel;
	if (!ctx->training || s->rate == 0.0f) {
		if (dx != dy)
			memcpy(dx, dy, (size_t)n * sizeof *dx);
		return PH_OK;
	}
	apply_mask(s, ctx, dy, dx, n);
	return PH_OK;
}

static const ph_layer_ops dropout_ops = {
	.head = PH_HEAD(ph_layer_ops, "dropout",
			"inverted dropout; the mask is keyed by (seed, step, micro-batch, layer)",
			dropout_options, dropout_config),
	.devices = PH_DEV_CPU,
	.flags = 0,
	.create = dropout_create,
	.destroy = dropout_destroy,
	.meta = dropout_meta,
	.forward = dropout_forward,
	.backward = dropout_backward,
	.cuda = &dropout_cuda_ops,
};

/* A named array: a braced list inside PH_PLUGIN() would split at its comma. */
static const ph_layer_ops *const dropout_layers[] = { &dropout_ops, NULL };
PH_PLUGIN(dropout_layers, NULL, NULL)
