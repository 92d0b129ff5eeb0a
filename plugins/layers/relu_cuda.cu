/* SPDX-License-Identifier: MIT */
/* relu's CUDA twin (relu.c): y = max(x, 0); dx = y > 0 ? dy : 0.
 * Element-wise over n = batch * numel, grid-stride.  y may alias x, dx dy. */
#include "cuda_common.cuh"
#include "relu_state.h"

/* x, y [n] */
static __global__ void relu_fwd_kernel(const float *x, float *y, int64_t n)
{
	PH_GRID_STRIDE(i, n) {
		const float v = x[i];
		y[i] = v > 0.0f ? v : 0.0f;
	}
}

/* y, dy, dx [n] */
static __global__ void relu_bwd_kernel(const float *y, const float *dy, float *dx, int64_t n)
{
	PH_GRID_STRIDE(i, n)
		dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

static int relu_cuda_forward(void *state, const ph_ctx *ctx, float *const *params, const float *x, float *y,
			     ph_err *err)
{
	const int64_t n = ctx->batch * ((const relu_state *)state)->numel;
	if (n <= 0)
		return PH_OK;
	relu_fwd_kernel<<<ph_blocks(n), 256, 0, PH_STREAM(ctx)>>>(x, y, n);
	PH_CUDA_CHECK_LAUNCH(err, "relu: forward");
	return PH_OK;
}

static int relu_cuda_backward(void *state, const ph_ctx *ctx, float *const *params, float *const *grads,
			      const float *x, const float *y, const float *dy, float *dx, ph_err *err)
{
	const int64_t n = ctx->batch * ((const relu_state *)state)->numel;
	if (n <= 0 || !dx)
		return PH_OK;
	relu_bwd_kernel<<<ph_blocks(n), 256, 0, PH_STREAM(ctx)>>>(y, dy, dx, n);
	PH_CUDA_CHECK_LAUNCH(err, "relu: backward");
	return PH_OK;
}

PH_LAYER_CUDA_OPS(relu_cuda_ops) = { .struct_size = sizeof(ph_layer_device_ops),
				     .forward = relu_cuda_forward,
				     .backward = relu_cuda_backward };
