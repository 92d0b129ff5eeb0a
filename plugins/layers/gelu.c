/* SPDX-License-Identifier: MIT */
/*
 * gelu: GELU activation, tanh approximation (GPT-2), any shape.
 *
 *   y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
 *   dx = dy * (0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2)),
 *        t = tanh(sqrt(2/pi) (x + 0.044715 x^3))
 *
 * Evaluated in float per element as x sigmoid(2u), u the tanh's argument
 * (the same function: 0.5 (1 + tanh u) = sigmoid(2u); tf_gelu in
 * transformer_ops.h, which gpt_block shares); within 1.5e-6 of PyTorch's
 * gelu(approximate="tanh") in double.  No parameters, nothing saved (x is
 * kept by the host).
 */
#include <stdlib.h>

#include <pipehost/plugin.h>
#include "gelu_state.h"
#include "transformer_ops.h"

PH_LAYER_TWIN(gelu_cuda_ops); /* gelu_cuda.cu; NULL in a build without CUDA */

static int gelu_create(const void *config, const ph_shape *in, int max_batch, void **state,
		       ph_err *err)
{
	if (in->ndim < 1 || in->ndim > PH_MAX_DIMS)
		return ph_fail(err, PH_EINVAL, "gelu: input has %d dimensions; need 1 to %d",
			       in->ndim, PH_MAX_DIMS);
	for (int i = 0; i < in->ndim; i++)
		if (in->d[i] < 1)
			return ph_fail(err, PH_EINVAL, "gelu: input dimension %d is %lld; need >= 1",
				       i, (long long)in->d[i]);
	gelu_state *s = calloc(1, sizeof *s);
	if (!s)
		return ph_fail(err, PH_ENOMEM, "gelu: out of memory");
	s->shape = *in;
	s->numel = ph_shape_numel(in);
	*state = s;
	return PH_OK;
}

static void gelu_destroy(void *state)
{
	free(state);
}

static int gelu_meta(const void *state, ph_layer_meta *m, ph_err *err)
{
	const gelu_state *s = state;
	*m = (ph_layer_meta){ 0 };
	m->out = s->shape;
	m->fwd_flops = 8.0 * (double)s->numel;
	m->bwd_flops = 14.0 * (double)s->numel;
	return PH_OK;
}

static int gelu_forward(void *state, const ph_ctx *ctx, float *const *params, const float *x,
			float *y, ph_err *err)
{
	const gelu_state *s = state;
	tf_gelu_forward(x, y, ctx->batch * s->numel);
	return PH_OK;
}

static int gelu_backward(void *state, const ph_ctx *ctx, float *const *params,
			 float *const *grads, const float *x, const float *y, const float *dy,
			 float *dx, ph_err *err)
{
	const gelu_state *s = state;
	if (dx)
		tf_gelu_backward(x, dy, dx, ctx->batch * s->numel);
	return PH_OK;
}

static const ph_layer_ops gelu_ops = {
	.head = PH_HEAD_NOOPT(ph_layer_ops, "gelu",
			      "GELU activation, tanh approximation (GPT-2)"),
	.devices = PH_DEV_CPU,
	.flags = 0,
	.create = gelu_create,
	.destroy = gelu_destroy,
	.meta = gelu_meta,
	.forward = gelu_forward,
	.backward = gelu_backward,
	.cuda = &gelu_cuda_ops,
};

/* A named array: a braced list inside PH_PLUGIN() would split at its comma. */
static const ph_layer_ops *const gelu_layers[] = { &gelu_ops, NULL };
PH_PLUGIN(gelu_layers, NULL, NULL)
