/* SPDX-License-Identifier: MIT */
/*
 * relu: y = max(x, 0), elementwise, any shape.
 *
 *   x [B, ...]  ->  y [B, ...]
 *
 * Backward reads y, not x: dx = dy where y > 0, else 0.  Using y means the
 * host may run the forward in place (y == x) and backward still works.
 */
#include <stdlib.h>

#include <pipehost/plugin.h>
#include "relu_state.h"

PH_LAYER_TWIN(relu_cuda_ops); /* relu_cuda.cu; NULL in a build without CUDA */

static int relu_create(const void *config, const ph_shape *in, int max_batch,
		       void **state, ph_err *err)
{
	if (in->ndim < 1 || in->ndim > PH_MAX_DIMS)
		return ph_fail(err, PH_EINVAL, "relu: input has %d dimensions; need 1 to %d",
			       in->ndim, PH_MAX_DIMS);
	for (int i = 0; i < in->ndim; i++)
		if (in->d[i] < 1)
			return ph_fail(err, PH_EINVAL, "relu: input dimension %d is %lld; need >= 1",
				       i, (long long)in->d[i]);
	relu_state *s = calloc(1, sizeof *s);
	if (!s)
		return ph_fail(err, PH_ENOMEM, "relu: out of memory");
	s->shape = *in;
	s->numel = ph_shape_numel(in);
	*state = s;
	return PH_OK;
}

static void relu_destroy(void *state)
{
	free(state);
}

static int relu_meta(const void *state, ph_layer_meta *m, ph_err *err)
{
	const relu_state *s = state;
	*m = (ph_layer_meta){ 0 };
	m->out = s->shape;
	m->fwd_flops = (double)s->numel;
	m->bwd_flops = (double)s->numel;
	return PH_OK;
}

static int relu_forward(void *state, const ph_ctx *ctx, float *const *params,
			const float *x, float *y, ph_err *err)
{
	const relu_state *s = state;
	const int64_t n = ctx->batch * s->numel;
	for (int64_t i = 0; i < n; i++)
		y[i] = x[i] > 0.0f ? x[i] : 0.0f;
	return PH_OK;
}

static int relu_backward(void *state, const ph_ctx *ctx, float *const *params,
			 float *const *grads, const float *x, const float *y,
			 const float *dy, float *dx, ph_err *err)
{
	const relu_state *s = state;
	if (!dx)
		return PH_OK;
	const int64_t n = ctx->batch * s->numel;
	for (int64_t i = 0; i < n; i++)
		dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
	return PH_OK;
}

static const ph_layer_ops relu_ops = {
	.head = PH_HEAD_NOOPT(ph_layer_ops, "relu", "rectified linear unit: y = max(x, 0)"),
	.devices = PH_DEV_CPU,
	.flags = 0,
	.create = relu_create,
	.destroy = relu_destroy,
	.meta = relu_meta,
	.forward = relu_forward,
	.backward = relu_backward,
	.cuda = &relu_cuda_ops,
};

/* A named array: a braced list inside PH_PLUGIN() would split at its comma. */
static const ph_layer_ops *const relu_layers[] = { &relu_ops, NULL };
PH_PLUGIN(relu_layers, NULL, NULL)
