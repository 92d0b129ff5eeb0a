/* SPDX-License-Identifier: MIT */
/* flatten's CUDA twin (flatten.c): both directions are a device-to-device
 * copy of n = batch * numel floats on the stream, skipped in place. */
#include "cuda_common.cuh"
#include "flatten_state.h"

/* dst = src, n floats */
static int copy(const ph_ctx *ctx, const float *src, float *dst, int64_t n, ph_err *err)
{
	if (n <= 0 || dst == src)
		return PH_OK;
	PH_CUDA_TRY(err, cudaMemcpyAsync(dst, src, (size_t)n * sizeof(float), cudaMemcpyDeviceToDevice,
					 PH_STREAM(ctx)));
	return PH_OK;
}

static int flatten_cuda_forward(void *state, const ph_ctx *ctx, float *const *params, const float *x, float *y,
				ph_err *err)
{
	return copy(ctx, x, y, ctx->batch * ((const flatten_state *)state)->numel, err);
}

static int flatten_cuda_backward(void *state, const ph_ctx *ctx, float *const *params, float *const *grads,
				 const float *x, const float *y, const float *dy, float *dx, ph_err *err)
{
	return dx ? copy(ctx, dy, dx, ctx->batch * ((const flatten_state *)state)->numel, err) : PH_OK;
}

PH_LAYER_CUDA_OPS(flatten_cuda_ops) = { .struct_size = sizeof(ph_layer_device_ops),
					.forward = flatten_cuda_forward,
					.backward = flatten_cuda_backward };
