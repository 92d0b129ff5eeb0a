/* SPDX-License-Identifier: MIT */
/* gelu's CUDA twin (gelu.c): tanh-approximation GELU, element-wise over
 * n = batch * numel, bit for bit tf_gelu / tf_gelu_grad (cuda_ops.cuh).
 *   forward:  y = gelu(x)
 *   backward: dx = dy * gelu'(x)   (dx may alias dy) */
#include "cuda_ops.cuh"
#include "gelu_state.h"

static int gelu_cuda_forward(void *state, const ph_ctx *ctx, float *const *params, const float *x, float *y,
			     ph_err *err)
{
	const int64_t n = ctx->batch * ((const gelu_state *)state)->numel;
	PH_CUDA_TRY(err, ph_k_gelu_fwd(PH_STREAM(ctx), x, y, n));
	return PH_OK;
}

static int gelu_cuda_backward(void *state, const ph_ctx *ctx, float *const *params, float *const *grads,
			      const float *x, const float *y, const float *dy, float *dx, ph_err *err)
{
	if (!dx)
		return PH_OK;
	const int64_t n = ctx->batch * ((const gelu_state *)state)->numel;
	PH_CUDA_TRY(err, ph_k_gelu_bwd(PH_STREAM(ctx), x, dy, dx, n));
	return PH_OK;
}

PH_LAYER_CUDA_OPS(gelu_cuda_ops) = { .struct_size = sizeof(ph_layer_device_ops),
				     .forward = gelu_cuda_forward,
				     .backward = gelu_cuda_backward };
