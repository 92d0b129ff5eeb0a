/* SPDX-License-Identifier: MIT */
/* softmax_xent's CUDA twin (softmax_xent.c).  One warp per sample row:
 *
 *   x [B, K] logits, targets [B] int32  ->  y [B, 2] = [loss, correct]
 *   loss = logsumexp(x_b) - x_b[t_b],  logsumexp = m + log(sum_k exp((double)x_bk - m))
 *   correct = argmax(x_b) == t_b (first max on ties)
 *   backward: dx_b = (float)((exp((double)x_bk - m) / sum - (k == t_b)) * (double)loss_scale)
 *
 * The row max and its index are the CPU's sequential scan (strict >, start at
 * x[0]): with x[0] NaN it is (NaN, 0), else the largest non-NaN value at its
 * first index.  The sum runs in double: lane l adds k = l, l+32, ... in
 * order, then a fixed xor tree (deterministic; the CPU sums in index order,
 * so the last bits may differ).  exp is CUDA's double exp.
 *
 * Targets live on the device and are not checked against K before the
 * launch (that would need a synchronisation): a target outside [0, K) gives
 * a NaN loss, correct 0, and a NaN gradient row, where the CPU refuses the
 * call with PH_EINVAL.
 */
#include <math.h>

#include "cuda_ops.cuh"
#include "softmax_xent_state.h"

#define SX_THREADS 256 /* 8 rows per block */

/* Row max and its index, as row_max() in softmax_xent.c; every lane of the
 * warp returns the same pair.  Lane l scans k = l, l + 32, ... */
static __device__ float sx_row_max(const float *xr, int K, int *arg)
{
	ph_maxloc p = ph_d_warp_maxloc(ph_d_maxloc_scan(xr, K, threadIdx.x & 31, 32));
	const float x0 = xr[0];
	if (x0 != x0) { /* a leading NaN sticks in the sequential scan */
		p.v = x0;
		p.i = 0;
	}
	*arg = p.i;
	return p.v;
}

/* sum_k exp((double)x_k - m), the same value in every lane */
static __device__ double sx_row_sumexp(const float *xr, int K, float m)
{
	double s = 0.0;
	for (int k = threadIdx.x & 31; k < K; k += 32)
		s += exp((double)xr[k] - m);
	return ph_d_warp_sum(s);
}

/* x [B, K], targets [B], y [B, 2] */
static __global__ void sx_fwd_kernel(const float *x, const int32_t *targets, float *y, int B, int K)
{
	const int b = (int)(((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5);
	if (b >= B) /* whole warps leave together */
		return;
	const float *xr = x + (int64_t)b * K;
	int arg;
	const float m = sx_row_max(xr, K, &arg);
	const double lse = (double)m + log(sx_row_sumexp(xr, K, m));
	if ((threadIdx.x & 31) == 0) {
		const int t = targets[b];
		if (t >= 0 && t < K) {
			y[2 * b] = (float)(lse - xr[t]);
			y[2 * b + 1] = arg == t ? 1.0f : 0.0f;
		} else {
			y[2 * b] = __int_as_float(0x7fffffff); /* NaN: bad target */
			y[2 * b + 1] = 0.0f;
		}
	}
}

/* x, dx [B, K], targets [B] */
static __global__ void sx_bwd_kernel(const float *x, const int32_t *targets, float *dx, int B, int K,
				     double scale)
{
	const int b = (int)(((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5);
	if (b >= B)
		return;
	const float *xr = x + (int64_t)b * K;
	float *dxr = dx + (int64_t)b * K;
	int arg;
	const float m = sx_row_max(xr, K, &arg);
	const double sum = sx_row_sumexp(xr, K, m);
	const int t = targets[b];
	const int bad = t < 0 || t >= K;
	__syncwarp(); /* every read of the row is done: dx may alias x */
	for (int k = threadIdx.x & 31; k < K; k += 32) {
		const double p = exp((double)xr[k] - m) / sum;
		dxr[k] = bad ? __int_as_float(0x7fffffff) : (float)((p - (k == t)) * scale);
	}
}

static unsigned sx_grid(int B)
{
	return (unsigned)(((int64_t)B * 32 + SX_THREADS - 1) / SX_THREADS);
}

/* The targets are device memory: checked for presence, not range. */
static int check_call(const ph_ctx *ctx, ph_err *err)
{
	if (!ctx->targets && ctx->batch > 0)
		return ph_fail(err, PH_EINTERNAL, "softmax_xent: called without targets");
	return PH_OK;
}

static int softmax_xent_cuda_forward(void *state, const ph_ctx *ctx, float *const *params, const float *x,
				     float *y, ph_err *err)
{
	const int K = ((const softmax_xent_state *)state)->K;
	int rc = check_call(ctx, err);
	if (rc || ctx->batch <= 0)
		return rc;
	sx_fwd_kernel<<<sx_grid(ctx->batch), SX_THREADS, 0, PH_STREAM(ctx)>>>(x, ctx->targets, y,
									    ctx->batch, K);
	PH_CUDA_CHECK_LAUNCH(err, "softmax_xent: forward");
	return PH_OK;
}

static int softmax_xent_cuda_backward(void *state, const ph_ctx *ctx, float *const *params, float *const *grads,
				      const float *x, const float *y, const float *dy, float *dx, ph_err *err)
{
	const int K = ((const softmax_xent_state *)state)->K;
	int rc = check_call(ctx, err);
	if (rc || ctx->batch <= 0 || !dx)
		return rc;
	sx_bwd_kernel<<<sx_grid(ctx->batch), SX_THREADS, 0, PH_STREAM(ctx)>>>(
		x, ctx->targets, dx, ctx->batch, K, (double)ctx->loss_scale);
	PH_CUDA_CHECK_LAUNCH(err, "softmax_xent: backward");
	return PH_OK;
}

PH_LAYER_CUDA_OPS(softmax_xent_cuda_ops) = { .struct_size = sizeof(ph_layer_device_ops),
					     .forward = softmax_xent_cuda_forward,
					     .backward = softmax_xent_cuda_backward };
