/* SPDX-License-Identifier: MIT */
/* leaky_relu's CUDA twin: the same layer on a GPU, built with nvcc against
 * the installed headers and linked into leaky_relu.so (Makefile):
 *
 *     nvcc -std=c++17 -Xcompiler -fPIC $(pkg-config --cflags pipehost) -c leaky_relu_cuda.cu
 *
 * The host calls these hooks for a layer placed on a GPU, after checking
 * ctx->batch; every pointer is device memory and the work goes on
 * ctx->stream, unsynchronised (<pipehost/cuda.h>). */
#include <pipehost/cuda.h>

#include "leaky_relu.h"

/* out[i] = in[i] * (x[i] > 0 ? 1 : slope): y from x (in = x), dx from dy */
static __global__ void leaky_kernel(const float *x, const float *in, float *out, float slope, int64_t n)
{
	PH_GRID_STRIDE(i, n)
		out[i] = x[i] > 0.0f ? in[i] : slope * in[i];
}

static int leaky_cuda_forward(void *state, const ph_ctx *ctx, float *const *params, const float *x, float *y,
			      ph_err *err)
{
	const leaky *l = (const leaky *)state;
	const int64_t n = ph_shape_numel(&l->shape) * ctx->batch;
	if (n == 0)
		return PH_OK;
	leaky_kernel<<<ph_blocks(n), 256, 0, PH_STREAM(ctx)>>>(x, x, y, l->slope, n);
	PH_CUDA_CHECK_LAUNCH(err, "leaky_relu: forward");
	return PH_OK;
}

static int leaky_cuda_backward(void *state, const ph_ctx *ctx, float *const *params, float *const *grads,
			       const float *x, const float *y, const float *dy, float *dx, ph_err *err)
{
	const leaky *l = (const leaky *)state;
	const int64_t n = ph_shape_numel(&l->shape) * ctx->batch;
	if (!dx || n == 0)
		return PH_OK;
	leaky_kernel<<<ph_blocks(n), 256, 0, PH_STREAM(ctx)>>>(x, dy, dx, l->slope, n);
	PH_CUDA_CHECK_LAUNCH(err, "leaky_relu: backward");
	return PH_OK;
}

PH_LAYER_CUDA_OPS(leaky_relu_cuda_ops) = { .struct_size = sizeof(ph_layer_device_ops),
					   .forward = leaky_cuda_forward,
					   .backward = leaky_cuda_backward };
