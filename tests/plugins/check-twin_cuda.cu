/* SPDX-License-Identifier: MIT */
/* check_twin's CUDA twin (check-twin.c): the same sums in the same order,
 * one thread an output, and the bug $PH_TEST_BAD_TWIN picked at create. */
#include <pipehost/cuda.h>

#include "check-twin_state.h"

static __global__ void fwd_kernel(const float *w, const float *x, float *y, int64_t n, int64_t total, float scale,
				  int past)
{
	PH_GRID_STRIDE(i, total + past)
		y[i] = i < total ? scale * w[i % n] * x[i] : 0.0f;
}

static __global__ void bwd_kernel(const float *w, const float *x, const float *dy, float *dw, float *dx, int64_t n,
				  int batch)
{
	PH_GRID_STRIDE(j, n) {
		float acc = 0;
		for (int b = 0; b < batch; b++)
			acc += x[(int64_t)b * n + j] * dy[(int64_t)b * n + j];
		dw[j] += acc;
		if (dx)
			for (int b = 0; b < batch; b++)
				dx[(int64_t)b * n + j] = w[j] * dy[(int64_t)b * n + j];
	}
}

static int twin_forward(void *st, const ph_ctx *ctx, float *const *params, const float *x, float *y, ph_err *err)
{
	const twin_state *s = (const twin_state *)st;
	const int64_t total = (int64_t)ctx->batch * s->n;
	if (total == 0)
		return PH_OK;
	fwd_kernel<<<ph_blocks(total + 1), 256, 0, PH_STREAM(ctx)>>>(params[0], x, y, s->n, total,
								    s->bug == 1 ? 1.1f : 1.0f, s->bug == 2);
	PH_CUDA_CHECK_LAUNCH(err, "check_twin: forward");
	return PH_OK;
}

static int twin_backward(void *st, const ph_ctx *ctx, float *const *params, float *const *grads, const float *x,
			 const float *y, const float *dy, float *dx, ph_err *err)
{
	const twin_state *s = (const twin_state *)st;
	if (ctx->batch == 0)
		return PH_OK;
	bwd_kernel<<<ph_blocks(s->n), 256, 0, PH_STREAM(ctx)>>>(params[0], x, dy, grads[0], dx, s->n, ctx->batch);
	PH_CUDA_CHECK_LAUNCH(err, "check_twin: backward");
	return PH_OK;
}

PH_LAYER_CUDA_OPS(check_twin_cuda_ops) = { .struct_size = sizeof(ph_layer_device_ops),
					   .forward = twin_forward,
					   .backward = twin_backward };
