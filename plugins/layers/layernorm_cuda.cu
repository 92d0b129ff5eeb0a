/* SPDX-License-Identifier: MIT */
/* layernorm's CUDA twin (layernorm.c), on cuda_ops.cuh's kernels.
 *
 *   x, y, dy, dx [rows, C], rows = batch * rows per sample; weight, bias [C]
 *   ctx->saved: mean [rows] then rstd [rows], the CPU's layout
 *
 * forward and backward_input are bit for bit the CPU's (same lane order);
 * backward_weight (dweight += sum dy*xhat, dbias += sum dy) is a
 * deterministic fixed tree over rows, not the CPU's row order, so it may
 * differ from the CPU in the last bits. */
#include <limits.h>

#include "cuda_ops.cuh"
#include "layernorm_state.h"

/* The call's rows (batch * rows per sample), or an error: no saved state,
 * or more rows than the kernels index. */
static int ln_rows(const layernorm_state *s, const ph_ctx *ctx, int64_t *out, ph_err *err)
{
	const int64_t rows = ctx->batch * s->rows;
	*out = rows;
	if (ctx->batch > 0 && !ctx->saved)
		return ph_fail(err, PH_EINTERNAL, "layernorm: called without saved state");
	if (rows > INT_MAX)
		return ph_fail(err, PH_EUNSUPPORTED, "layernorm: %lld rows in one call; at most %d on CUDA",
			       (long long)rows, INT_MAX);
	return PH_OK;
}

static int layernorm_cuda_forward(void *state, const ph_ctx *ctx, float *const *params, const float *x, float *y,
				  ph_err *err)
{
	const layernorm_state *s = (const layernorm_state *)state;
	const int C = s->C;
	const float eps = s->eps;
	int64_t rows;
	int rc = ln_rows(s, ctx, &rows, err);
	if (rc || rows == 0)
		return rc;
	float *mean = (float *)ctx->saved, *rstd = mean + rows;
	PH_CUDA_TRY(err, ph_k_layernorm_fwd(PH_STREAM(ctx), x, params[0], params[1], y, mean, rstd,
					    (int)rows, C, eps));
	return PH_OK;
}

/* dx = (skipped when NULL) */
static int layernorm_cuda_backward_input(void *state, const ph_ctx *ctx, float *const *params, const float *x,
					 const float *y, const float *dy, float *dx, ph_err *err)
{
	const layernorm_state *s = (const layernorm_state *)state;
	const int C = s->C;
	int64_t rows;
	int rc = ln_rows(s, ctx, &rows, err);
	if (rc || rows == 0 || !dx)
		return rc;
	const float *mean = (const float *)ctx->saved, *rstd = mean + rows;
	PH_CUDA_TRY(err, ph_k_layernorm_bwd_input(PH_STREAM(ctx), dy, x, params[0], mean, rstd, dx,
						  (int)rows, C));
	return PH_OK;
}

/* grads[0] (weight) +=, grads[1] (bias) += */
static int layernorm_cuda_backward_weight(void *state, const ph_ctx *ctx, float *const *params,
					  float *const *grads, const float *x, const float *y, const float *dy,
					  ph_err *err)
{
	const layernorm_state *s = (const layernorm_state *)state;
	const int C = s->C;
	int64_t rows;
	int rc = ln_rows(s, ctx, &rows, err);
	if (rc || rows == 0)
		return rc;
	const float *mean = (const float *)ctx->saved, *rstd = mean + rows;
	PH_CUDA_TRY(err, ph_k_layernorm_bwd_weight(PH_STREAM(ctx), dy, x, mean, rstd, grads[0],
						   grads[1], (int)rows, C));
	return PH_OK;
}

/* The weight half, then the input half, as layernorm.c's backward. */
static int layernorm_cuda_backward(void *state, const ph_ctx *ctx, float *const *params, float *const *grads,
				   const float *x, const float *y, const float *dy, float *dx, ph_err *err)
{
	int rc = layernorm_cuda_backward_weight(state, ctx, params, grads, x, y, dy, err);
	return rc ? rc : layernorm_cuda_backward_input(state, ctx, params, x, y, dy, dx, err);
}

PH_LAYER_CUDA_OPS(layernorm_cuda_ops) = { .struct_size = sizeof(ph_layer_device_ops),
					  .forward = layernorm_cuda_forward,
					  .backward = layernorm_cuda_backward,
					  .backward_input = layernorm_cuda_backward_input,
					  .backward_weight = layernorm_cuda_backward_weight };
