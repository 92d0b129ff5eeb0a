/* SPDX-License-Identifier: MIT */
/*
 * layernorm: layer normalisation over the LAST dimension.
 *
 *   x [B, ..., C]  ->  y [B, ..., C]
 *   y = (x - mean) / sqrt(var + eps) * weight + bias    per row of C
 *   weight [C] (ones), bias [C] (zeros), both exempt from weight decay
 *
 * Statistics in float, two-pass, population variance, row sums in a fixed
 * lane order (transformer_ops.h).  Saved per sample: the mean and
 * 1/sqrt(var + eps) of each row, rows*2 floats: all the means of the
 * micro-batch first, then all the rstds.
 */
#include <float.h>
#include <stdlib.h>
#include <string.h>

#include <pipehost/plugin.h>
#include "layernorm_state.h"
#include "transformer_ops.h"

PH_LAYER_TWIN(layernorm_cuda_ops); /* layernorm_cuda.cu; NULL in a build without CUDA */

typedef struct {
	double eps;
} layernorm_config;

static const ph_option layernorm_options[] = {
	PH_OPT_FLOAT_(layernorm_config, eps, "eps", "1e-5", 1e-12, 1,
		      "added to the variance before the square root"),
	PH_OPT_END
};


static int layernorm_create(const void *config, const ph_shape *in, int max_batch,
			    void **state, ph_err *err)
{
	const layernorm_config *cfg = config;
	if (in->ndim < 1 || in->ndim > PH_MAX_DIMS)
		return ph_fail(err, PH_EINVAL, "layernorm: input has %d dimensions; need 1 to %d",
			       in->ndim, PH_MAX_DIMS);
	for (int i = 0; i < in->ndim; i++)
		if (in->d[i] < 1)
			return ph_fail(err, PH_EINVAL, "layernorm: input dimension %d is %lld; need >= 1",
				       i, (long long)in->d[i]);
	if (in->d[in->ndim - 1] > INT32_MAX)
		return ph_fail(err, PH_EINVAL, "layernorm: last dimension %lld too large",
			       (long long)in->d[in->ndim - 1]);
	if (!(cfg->eps >= 1e-12 && cfg->eps <= 1))
		return ph_fail(err, PH_EINVAL, "layernorm: eps %g outside [1e-12, 1]", cfg->eps);
	layernorm_state *s = calloc(1, sizeof *s);
	if (!s)
		return ph_fail(err, PH_ENOMEM, "layernorm: out of memory");
	s->shape = *in;
	s->C = (int)in->d[in->ndim - 1];
	s->rows = ph_shape_numel(in) / s->C;
	s->eps = (float)cfg->eps;
	*state = s;
	return PH_OK;
}

static void layernorm_destroy(void *state)
{
	free(state);
}

static int layernorm_meta(const void *state, ph_layer_meta *m, ph_err *err)
{
	const layernorm_state *s = state;
	*m = (ph_layer_meta){ 0 };
	m->out = s->shape;
	double n = (double)s->rows * s->C;
	m->fwd_flops = 7.0 * n;  /* sum, centre, square, normalise, scale, shift */
	m->bwd_flops = 10.0 * n;
	m->saved_bytes = (size_t)s->rows * 2 * sizeof(float);
	ph_param_desc *w = &m->params[m->nparams++];
	strcpy(w->name, "weight");
	w->shape = (ph_shape){ 1, { s->C } };
	w->init = PH_INIT_ONES;
	w->no_decay = 1;
	ph_param_desc *b = &m->params[m->nparams++];
	strcpy(b->name, "bias");
	b->shape = (ph_shape){ 1, { s->C } };
	b->init = PH_INIT_ZEROS;
	b->no_decay = 1;
	return PH_OK;
}

static int check_call(const layernorm_state *s, const ph_ctx *ctx, ph_err *err)
{
	if (ctx->batch > 0 && !ctx->saved)
		return ph_fail(err, PH_EINTERNAL, "layernorm: called without saved state");
	return PH_OK;
}

static int layernorm_forward(void *state, const ph_ctx *ctx, float *const *params,
			     const float *x, float *y, ph_err *err)
{
	const layernorm_state *s = state;
	int rc = check_call(s, ctx, err);
	if (rc || ctx->batch == 0)
		return rc;
	const int64_t rows = ctx->batch * s->rows;
	float *mean = ctx->saved, *rstd = mean + rows;
	tf_layernorm_forward(x, y, params[0], params[1], rows, s->C, s->eps, mean, rstd);
	return PH_OK;
}

static int layernorm_backward_input(void *state, const ph_ctx *ctx, float *const *params,
				    const float *x, const float *y, const float *dy, float *dx,
				    ph_err *err)
{
	const layernorm_state *s = state;
	int rc = check_call(s, ctx, err);
	if (rc || ctx->batch == 0 || !dx)
		return rc;
	const int64_t rows = ctx->batch * s->rows;
	const float *mean = ctx->saved, *rstd = mean + rows;
	tf_layernorm_backward_input(x, dy, params[0], mean, rstd, rows, s->C, dx);
	return PH_OK;
}

static int layernorm_backward_weight(void *state, const ph_ctx *ctx, float *const *params,
				     float *const *grads, const float *x, const float *y,
				     const float *dy, ph_err *err)
{
	const layernorm_state *s = state;
	int rc = check_call(s, ctx, err);
	if (rc || ctx->batch == 0)
		return rc;
	const int64_t rows = ctx->batch * s->rows;
	const float *mean = ctx->saved, *rstd = mean + rows;
	tf_layernorm_backward_weight(x, dy, mean, rstd, rows, s->C, grads[0], grads[1]);
	return PH_OK;
}

static int layernorm_backward(void *state, const ph_ctx *ctx, float *const *params,
			      float *const *grads, const float *x, const float *y,
			      const float *dy, float *dx, ph_err *err)
{
	const layernorm_state *s = state;
	if (!dx || dx == dy || ctx->batch == 0) { /* the fused pass needs dy intact */
		int rc = layernorm_backward_weight(state, ctx, params, grads, x, y, dy, err);
		return rc ? rc : layernorm_backward_input(state, ctx, params, x, y, dy, dx, err);
	}
	int rc = check_call(s, ctx, err);
	if (rc)
		return rc;
	/* both halves in one pass, bitwise the same as the two calls above */
	const int64_t rows = ctx->batch * s->rows;
	const float *mean = ctx->saved, *rstd = mean + rows;
	tf_layernorm_backward(x, dy, params[0], mean, rstd, rows, s->C, dx, grads[0], grads[1]);
	return PH_OK;
}

static const ph_layer_ops layernorm_ops = {
	.head = PH_HEAD(ph_layer_ops, "layernorm",
			"layer normalisation over the last dimension, learned gain and bias",
			layernorm_options, layernorm_config),
	.devices = PH_DEV_CPU,
	.flags = 0,
	.create = layernorm_create,
	.destroy = layernorm_destroy,
	.meta = layernorm_meta,
	.forward = layernorm_forward,
	.backward = layernorm_backward,
	.backward_input = layernorm_backward_input,
	.backward_weight = layernorm_backward_weight,
	.cuda = &layernorm_cuda_ops,
};

/* A named array: a braced list inside PH_PLUGIN() would split at its comma. */
static const ph_layer_ops *const layernorm_layers[] = { &layernorm_ops, NULL };
PH_PLUGIN(layernorm_layers, NULL, NULL)
