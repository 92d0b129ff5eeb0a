/* SPDX-License-Identifier: MIT */
/*
 * flatten: [C, H, W] (any rank)  ->  [C*H*W].
 *
 * Row-major storage makes this a relabelling: both directions are a copy
 * (skipped when the host passes the same buffer in and out).
 */
#include <stdlib.h>
#include <string.h>

#include <pipehost/plugin.h>
#include "flatten_state.h"

PH_LAYER_TWIN(flatten_cuda_ops); /* flatten_cuda.cu; NULL in a build without CUDA */

static int flatten_create(const void *config, const ph_shape *in, int max_batch,
			  void **state, ph_err *err)
{
	if (in->ndim < 1 || in->ndim > PH_MAX_DIMS)
		return ph_fail(err, PH_EINVAL, "flatten: input has %d dimensions; need 1 to %d",
			       in->ndim, PH_MAX_DIMS);
	for (int i = 0; i < in->ndim; i++)
		if (in->d[i] < 1)
			return ph_fail(err, PH_EINVAL, "flatten: input dimension %d is %lld; need >= 1",
				       i, (long long)in->d[i]);
	flatten_state *s = calloc(1, sizeof *s);
	if (!s)
		return ph_fail(err, PH_ENOMEM, "flatten: out of memory");
	s->numel = ph_shape_numel(in);
	*state = s;
	return PH_OK;
}

static void flatten_destroy(void *state)
{
	free(state);
}

static int flatten_meta(const void *state, ph_layer_meta *m, ph_err *err)
{
	const flatten_state *s = state;
	*m = (ph_layer_meta){ 0 };
	m->out = (ph_shape){ 1, { s->numel } };
	return PH_OK;
}

static int flatten_forward(void *state, const ph_ctx *ctx, float *const *params,
			   const float *x, float *y, ph_err *err)
{
	const flatten_state *s = state;
	if (y != x)
		memcpy(y, x, (size_t)(ctx->batch * s->numel) * sizeof *y);
	return PH_OK;
}

static int flatten_backward(void *state, const ph_ctx *ctx, float *const *params,
			    float *const *grads, const float *x, const float *y,
			    const float *dy, float *dx, ph_err *err)
{
	const flatten_state *s = state;
	if (dx && dx != dy)
		memcpy(dx, dy, (size_t)(ctx->batch * s->numel) * sizeof *dx);
	return PH_OK;
}

static const ph_layer_ops flatten_ops = {
	.head = PH_HEAD_NOOPT(ph_layer_ops, "flatten",
			      "reshape each sample to one dimension ([C,H,W] -> [C*H*W])"),
	.devices = PH_DEV_CPU,
	.flags = 0,
	.create = flatten_create,
	.destroy = flatten_destroy,
	.meta = flatten_meta,
	.forward = flatten_forward,
	.backward = flatten_backward,
	.cuda = &flatten_cuda_ops,
};

/* A named array: a braced list inside PH_PLUGIN() would split at its comma. */
static const ph_layer_ops *const flatten_layers[] = { &flatten_ops, NULL };
PH_PLUGIN(flatten_layers, NULL, NULL)
