/* SPDX-License-Identifier: MIT */
/*
 * linear_cuda.cu: the CUDA twin of linear.c, y = x W^T + b over the last
 * dimension, every leading dimension folded into rows.
 *
 *   x [rows, in] -> y [rows, units];  W [units, in];  b [units]
 *
 * The products go to the host's GEMM (ctx->gpu, at the run's precision),
 * the same three calls as the CPU's cblas_sgemm; the forward's bias rides in
 * the product's epilogue (gemm_ex) where the CPU preloads it into y.  No
 * scratch, no saved state.
 */
#include "cuda_common.cuh"
#include "cuda_ops.cuh"
#include "linear_state.h"

static int check_call(const ph_ctx *ctx, ph_err *err)
{
	if (ctx->batch > 0 && !ctx->gpu)
		return ph_fail(err, PH_EINTERNAL, "linear: no GPU services in the call context");
	return PH_OK;
}

/* y [rows, units] = x [rows, in] . W^T [in, units] (+ b) */
static int linear_cuda_forward(void *state, const ph_ctx *ctx, float *const *params, const float *x, float *y,
			       ph_err *err)
{
	const linear_state *s = (const linear_state *)state;
	int rc = check_call(ctx, err);
	if (rc || ctx->batch == 0)
		return rc;
	const int rows = (int)(ctx->batch * s->lead);
	return ph_gemm_xwt_bias(ctx, rows, s->units, s->in_f, x, params[0], s->bias ? params[1] : NULL, y, err);
}

/* dx [rows, in] = dy [rows, units] . W [units, in]     (the I half; dx NULL: nothing) */
static int linear_cuda_backward_input(void *state, const ph_ctx *ctx, float *const *params, const float *x,
				      const float *y, const float *dy, float *dx, ph_err *err)
{
	const linear_state *s = (const linear_state *)state;
	const int in = s->in_f, units = s->units;
	int rc = check_call(ctx, err);
	if (rc || ctx->batch == 0 || !dx)
		return rc;
	const int rows = (int)(ctx->batch * s->lead);
	return ph_gemm(ctx, 0, 0, rows, in, units, 1.0f, dy, units, params[0], in, 0.0f, dx, in, err);
}

/*
 * The W half:
 *   dW [units, in] += dy^T [units, rows] . x [rows, in]     (beta = 1)
 *   db [units]     += column sums of dy, in a fixed order (no atomics)
 */
static int linear_cuda_backward_weight(void *state, const ph_ctx *ctx, float *const *params, float *const *grads,
				       const float *x, const float *y, const float *dy, ph_err *err)
{
	const linear_state *s = (const linear_state *)state;
	const int in = s->in_f, units = s->units, bias = s->bias;
	int rc = check_call(ctx, err);
	if (rc || ctx->batch == 0)
		return rc;
	const int rows = (int)(ctx->batch * s->lead);
	if ((rc = ph_gemm(ctx, 1, 0, units, in, rows, 1.0f, dy, units, x, in, 1.0f, grads[0], in, err)))
		return rc;
	if (bias)
		PH_CUDA_TRY(err, ph_k_colsum_acc(PH_STREAM(ctx), dy, rows, units, grads[1]));
	return PH_OK;
}

/* The two halves, as linear.c's backward.  Both are one product reading
 * dy: under bf16 the second may reuse the first's rounded copy of it. */
static int linear_cuda_backward(void *state, const ph_ctx *ctx, float *const *params, float *const *grads,
				const float *x, const float *y, const float *dy, float *dx, ph_err *err)
{
	int rc = linear_cuda_backward_weight(state, ctx, params, grads, x, y, dy, err);
	if (rc)
		return rc;
	if (dx && ctx->batch > 0)
		ph_gpu_reuse_operand(ctx, dy);
	return linear_cuda_backward_input(state, ctx, params, x, y, dy, dx, err);
}

PH_LAYER_CUDA_OPS(linear_cuda_ops) = { .struct_size = sizeof(ph_layer_device_ops),
				       .forward = linear_cuda_forward,
				       .backward = linear_cuda_backward,
				       .backward_input = linear_cuda_backward_input,
				       .backward_weight = linear_cuda_backward_weight };
