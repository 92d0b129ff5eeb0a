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

static int ln_rows(int64_t rows, ph_err *err)
{
	if (rows > INT_MAX)
		return ph_fail(err, PH_EUNSUPPORTED, "layernorm: %lld rows in one call; at most %d on CUDA",
			       (long long)rows, INT_MAX);
	return PH_OK;
}

extern "C" int layernorm_cuda_forward(const ph_ctx *ctx, int64_t rows, int C, float eps,
				      float *const *params, const float *x, float *y, ph_err *err)
{
	int rc = ln_rows(rows, err);
	if (rc)
		return rc;
	float *mean = (float *)ctx->saved, *rstd = mean + rows;
	PH_CUDA_TRY(err, ph_k_layernorm_fwd(PH_STREAM(ctx), x, params[0], params[1], y, mean, rstd,
					    (int)rows, C, eps));
	return PH_OK;
}

/* dx = (skipped when NULL) */
extern "C" int layernorm_cuda_backward_input(const ph_ctx *ctx, int64_t rows, int C,
					     float *const *params, const float *x, const float *dy,
					     float *dx, ph_err *err)
{
	int rc = ln_rows(rows, err);
	if (rc || !dx)
		return rc;
	const float *mean = (const float *)ctx->saved, *rstd = mean + rows;
	PH_CUDA_TRY(err, ph_k_layernorm_bwd_input(PH_STREAM(ctx), dy, x, params[0], mean, rstd, dx,
						  (int)rows, C));
	return PH_OK;
}

/* grads[0] (weight) +=, grads[1] (bias) += */
extern "C" int layernorm_cuda_backward_weight(const ph_ctx *ctx, int64_t rows, int C,
					      float *const *grads, const float *x, const float *dy,
					      ph_err *err)
{
	int rc = ln_rows(rows, err);
	if (rc)
		return rc;
	const float *mean = (const float *)ctx->saved, *rstd = mean + rows;
	PH_CUDA_TRY(err, ph_k_layernorm_bwd_weight(PH_STREAM(ctx), dy, x, mean, rstd, grads[0],
						   grads[1], (int)rows, C));
	return PH_OK;
}
