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

static int check_call(const ph_ctx *ctx, int max_batch, ph_err *err)
{
	if (ctx->batch < 0 || ctx->batch > max_batch)
		return ph_fail(err, PH_EINTERNAL, "linear: batch %d outside [0, %d] given at create", ctx->batch,
			       max_batch);
	if (ctx->batch > 0 && !ctx->gpu)
		return ph_fail(err, PH_EINTERNAL, "linear: no GPU services in the call context");
	return PH_OK;
}

/* y [rows, units] = x [rows, in] . W^T [in, units] (+ b) */
extern "C" int linear_cuda_forward(const ph_ctx *ctx, int64_t lead, int in, int units, int bias, int max_batch,
				   float *const *params, const float *x, float *y, ph_err *err)
{
	int rc = check_call(ctx, max_batch, err);
	if (rc || ctx->batch == 0)
		return rc;
	const int rows = (int)(ctx->batch * lead);
	return ph_gemm_xwt_bias(ctx, rows, units, in, x, params[0], bias ? params[1] : NULL, y, err);
}

/* dx [rows, in] = dy [rows, units] . W [units, in]     (the I half; dx NULL: nothing) */
extern "C" int linear_cuda_backward_input(const ph_ctx *ctx, int64_t lead, int in, int units, int max_batch,
					  float *const *params, const float *dy, float *dx, ph_err *err)
{
	int rc = check_call(ctx, max_batch, err);
	if (rc || ctx->batch == 0 || !dx)
		return rc;
	const int rows = (int)(ctx->batch * lead);
	return ph_gemm(ctx, 0, 0, rows, in, units, 1.0f, dy, units, params[0], in, 0.0f, dx, in, err);
}

/*
 * The W half:
 *   dW [units, in] += dy^T [units, rows] . x [rows, in]     (beta = 1)
 *   db [units]     += column sums of dy, in a fixed order (no atomics)
 */
extern "C" int linear_cuda_backward_weight(const ph_ctx *ctx, int64_t lead, int in, int units, int bias,
					   int max_batch, float *const *grads, const float *x, const float *dy,
					   ph_err *err)
{
	int rc = check_call(ctx, max_batch, err);
	if (rc || ctx->batch == 0)
		return rc;
	const int rows = (int)(ctx->batch * lead);
	if ((rc = ph_gemm(ctx, 1, 0, units, in, rows, 1.0f, dy, units, x, in, 1.0f, grads[0], in, err)))
		return rc;
	if (bias)
		PH_CUDA_TRY(err, ph_k_colsum_acc(PH_STREAM(ctx), dy, rows, units, grads[1]));
	return PH_OK;
}
