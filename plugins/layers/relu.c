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

/*
 * The kernels: straight loops over restrict pointers, which gcc vectorises
 * (local.mk's CNN_VEC_CFLAGS) into compare-and-mask code, no branches: the
 * sign of a relu input is a coin toss, and the branchy form mispredicted
 * on every other element.  In place (y == x, dx == dy) is its own loop, as
 * restrict promises no aliasing.  The results are those of the plain
 * expressions x > 0 ? x : 0 and y > 0 ? dy : 0, elementwise, so bitwise the
 * same as relu_ref/relu_grad_ref (tests/test-cnn-kernels.c compares).
 */

/* y [n] = x [n] > 0 ? x : 0 (a NaN gives 0) */
static void relu_fwd(float *restrict y, const float *restrict x, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

static void relu_fwd_inplace(float *restrict y, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		y[i] = y[i] > 0.0f ? y[i] : 0.0f;
}

/* dx [n] = y [n] > 0 ? dy : 0 */
static void relu_bwd(float *restrict dx, const float *restrict y, const float *restrict dy,
		     int64_t n)
{
	for (int64_t i = 0; i < n; i++) {
		const float g = dy[i];  /* read unconditionally: a select, not a branch */
		dx[i] = y[i] > 0.0f ? g : 0.0f;
	}
}

static void relu_bwd_inplace(float *restrict dx, const float *restrict y, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		dx[i] = y[i] > 0.0f ? dx[i] : 0.0f;
}

static int relu_forward(void *state, const ph_ctx *ctx, float *const *params,
			const float *x, float *y, ph_err *err)
{
	const relu_state *s = state;
	const int64_t n = ctx->batch * s->numel;
	if (y == x)
		relu_fwd_inplace(y, n);
	else
		relu_fwd(y, x, n);
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
	if (dx == dy)
		relu_bwd_inplace(dx, y, n);
	else
		relu_bwd(dx, y, dy, n);
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
