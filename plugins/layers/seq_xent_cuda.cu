/* SPDX-License-Identifier: MIT */
/* seq_xent's CUDA twin (seq_xent.c).
 *
 *   x [B, T, V] logits, targets [B, T] int32  ->  y [B, 2] = [loss, correct]
 *   saved: smax [B*T] then slog [B*T] (row max, log of the row's sum): the CPU's layout
 *   forward, one block per row r = b*T + t, reading the row once:
 *     m = max_k x_rk (first index on ties), sum = sum_k expf(x_rk - m) (tf_expf;
 *     each thread's float partial sum kept at its running max and brought
 *     to m at the end, then combined in double by a fixed tree),
 *     ls = log(sum) in double; row loss (double)m + ls - x_r[t_r] and hit
 *     argmax == t_r go to device scratch; then one warp per sample adds its
 *     T rows (fixed tree) into y.
 *   backward (bit for bit the CPU's, given the saved m and ls):
 *     dx_rk = expf((x_rk - m) - ls) * loss_scale, minus loss_scale's 1 at k = t_r:
 *     dx_rt = (expf((x_rt - m) - ls) - 1) * loss_scale
 *
 * Device scratch: B*T doubles (row losses) then B*T int32 (row hits).
 * Sums run in another order than the CPU's, so m is exact but ls, the loss
 * and hence the gradient may differ from the CPU in the last bits.
 * A target outside [0, V) (the CPU refuses the call; a kernel cannot
 * report it) gives a NaN loss, no hit, and a NaN gradient row.
 */
#include <limits.h>
#include <math.h>

#include "cuda_ops.cuh"
#include "seq_xent_state.h"

#define SQ_THREADS 256
#define SQ_WARPS (SQ_THREADS / 32)

/* One read of a row (online softmax): thread t scans k = t, t + SQ_THREADS,
 * ... keeping the first-index max of the non-NaN logits it saw (pt) and
 * st = sum of expf(x_k - pt.v) over them, scaled by expf(old - new) when
 * its max rises; a NaN makes st NaN.  Then the row's pair (*arg and the
 * return value; all NaN: (NaN, 0), as seq_xent.c's vectorised row_max()
 * gives), and each thread's st brought to the row max, summed in double by
 * a fixed tree into *sum: sum_k expf(x_k - m).  Every thread gets them.
 * The two-pass version (max, then the sum at the final max) rounds a
 * little differently; the CPU's differs from both in the last bits. */
static __device__ float sq_row_stats(const float *xr, int V, int *arg, double *sum)
{
	__shared__ ph_maxloc wp[SQ_WARPS];
	__shared__ double ws[SQ_WARPS];
	ph_maxloc pt = ph_d_maxloc_none();
	float st = 0.0f;
	for (int k = threadIdx.x; k < V; k += SQ_THREADS) {
		const float v = xr[k];
		if (v != v) {
			st = v; /* NaN, and it stays NaN */
		} else if (pt.i == INT_MAX) {
			st = __fadd_rn(st, 1.0f);
			pt.v = v, pt.i = k;
		} else if (v > pt.v) { /* k rises: strict > keeps the first */
			st = __fadd_rn(__fmul_rn(st, ph_d_expf(__fsub_rn(pt.v, v))), 1.0f);
			pt.v = v, pt.i = k;
		} else {
			/* v == pt.v adds exp(0) without computing -inf - -inf */
			st = __fadd_rn(st, v == pt.v ? 1.0f : ph_d_expf(__fsub_rn(v, pt.v)));
		}
	}
	ph_maxloc p = ph_d_warp_maxloc(pt);
	if ((threadIdx.x & 31) == 0)
		wp[threadIdx.x >> 5] = p;
	__syncthreads();
	p = wp[0];
	for (int w = 1; w < SQ_WARPS; w++)
		p = ph_d_maxloc_merge(p, wp[w]);
	if (p.i == INT_MAX) { /* all NaN */
		p.v = xr[0];
		p.i = 0;
	}
	const float c = pt.i == INT_MAX || pt.v == p.v ? st : __fmul_rn(st, ph_d_expf(__fsub_rn(pt.v, p.v)));
	double s = ph_d_warp_sum((double)c);
	if ((threadIdx.x & 31) == 0)
		ws[threadIdx.x >> 5] = s;
	__syncthreads();
	s = 0.0;
	for (int w = 0; w < SQ_WARPS; w++)
		s += ws[w];
	__syncthreads(); /* wp and ws are reused by the next row */
	*arg = p.i;
	*sum = s;
	return p.v;
}

/* x [rows, V], targets [rows] -> smax, slog, rloss, rhit [rows]; one block per row */
static __global__ void sq_rows_kernel(const float *x, const int32_t *targets, float *smax, float *slog,
				      double *rloss, int *rhit, int rows, int V)
{
	for (int r = blockIdx.x; r < rows; r += gridDim.x) {
		const float *xr = x + (int64_t)r * V;
		int arg;
		double sum;
		const float m = sq_row_stats(xr, V, &arg, &sum);
		const double ls = log(sum);
		if (threadIdx.x == 0) {
			const int t = targets[r];
			smax[r] = m;
			slog[r] = (float)ls;
			if (t >= 0 && t < V) {
				rloss[r] = (double)m + ls - xr[t];
				rhit[r] = arg == t;
			} else {
				rloss[r] = __longlong_as_double(0x7ff8000000000000ll); /* NaN: bad target */
				rhit[r] = 0;
			}
		}
	}
}

/* rloss, rhit [B, T] -> y [B, 2]; one warp per sample */
static __global__ void sq_sample_kernel(const double *rloss, const int *rhit, float *y, int B, int T)
{
	const int b = (int)(((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5);
	if (b >= B) /* whole warps leave together */
		return;
	double l = 0.0;
	int h = 0;
	for (int t = threadIdx.x & 31; t < T; t += 32) {
		l += rloss[(int64_t)b * T + t];
		h += rhit[(int64_t)b * T + t];
	}
	l = ph_d_warp_sum(l);
	h = ph_d_warp_sum(h);
	if ((threadIdx.x & 31) == 0) {
		y[2 * b] = (float)l;
		y[2 * b + 1] = (float)h;
	}
}

/* x, dx [rows, V]; smax, slog, targets [rows]; one block per row */
static __global__ void sq_bwd_kernel(const float *x, const int32_t *targets, const float *smax,
				     const float *slog, float *dx, int rows, int V, float scale)
{
	for (int r = blockIdx.x; r < rows; r += gridDim.x) {
		const float *xr = x + (int64_t)r * V;
		float *dxr = dx + (int64_t)r * V;
		const float m = smax[r], ls = slog[r];
		const int t = targets[r];
		const int bad = t < 0 || t >= V;
		for (int k = threadIdx.x; k < V; k += SQ_THREADS) {
			const float p = ph_d_expf(__fsub_rn(__fsub_rn(xr[k], m), ls));
			dxr[k] = bad ? __int_as_float(0x7fffffff)
				     : __fmul_rn(k == t ? __fsub_rn(p, 1.0f) : p, scale);
		}
	}
}

static unsigned sq_grid(int rows)
{
	return (unsigned)(rows < 65535 * 8 ? rows : 65535 * 8);
}

/* The targets and saved rows are device memory: checked for presence only. */
static int check_call(const ph_ctx *ctx, ph_err *err)
{
	if (!ctx->targets && ctx->batch > 0)
		return ph_fail(err, PH_EINTERNAL, "seq_xent: called without targets");
	if (!ctx->saved && ctx->batch > 0)
		return ph_fail(err, PH_EINTERNAL, "seq_xent: called without saved state");
	return PH_OK;
}

static int seq_xent_cuda_forward(void *state, const ph_ctx *ctx, float *const *params, const float *x, float *y,
				 ph_err *err)
{
	const seq_xent_state *s = (const seq_xent_state *)state;
	const int T = s->T, V = s->V;
	int rc = check_call(ctx, err);
	const int64_t rows = (int64_t)ctx->batch * T;
	if (rc || rows <= 0)
		return rc;
	if (rows > INT_MAX)
		return ph_fail(err, PH_EUNSUPPORTED, "seq_xent: %lld rows in one call; at most %d on CUDA",
			       (long long)rows, INT_MAX);
	if (!ctx->scratch)
		return ph_fail(err, PH_EINTERNAL, "seq_xent: no device scratch for the row losses");
	float *smax = (float *)ctx->saved, *slog = smax + rows;
	double *rloss = (double *)ctx->scratch;
	int *rhit = (int *)(rloss + rows);
	cudaStream_t st = PH_STREAM(ctx);
	sq_rows_kernel<<<sq_grid((int)rows), SQ_THREADS, 0, st>>>(x, ctx->targets, smax, slog, rloss, rhit,
								  (int)rows, V);
	PH_CUDA_CHECK_LAUNCH(err, "seq_xent: forward (rows)");
	sq_sample_kernel<<<(unsigned)(((int64_t)ctx->batch * 32 + 255) / 256), 256, 0, st>>>(
		rloss, rhit, y, ctx->batch, T);
	PH_CUDA_CHECK_LAUNCH(err, "seq_xent: forward (samples)");
	return PH_OK;
}

static int seq_xent_cuda_backward(void *state, const ph_ctx *ctx, float *const *params, float *const *grads,
				  const float *x, const float *y, const float *dy, float *dx, ph_err *err)
{
	const seq_xent_state *s = (const seq_xent_state *)state;
	const int T = s->T, V = s->V;
	int rc = check_call(ctx, err);
	const int64_t rows = (int64_t)ctx->batch * T;
	if (rc || rows <= 0 || !dx)
		return rc;
	if (rows > INT_MAX)
		return ph_fail(err, PH_EUNSUPPORTED, "seq_xent: %lld rows in one call; at most %d on CUDA",
			       (long long)rows, INT_MAX);
	const float *smax = (const float *)ctx->saved, *slog = smax + rows;
	sq_bwd_kernel<<<sq_grid((int)rows), SQ_THREADS, 0, PH_STREAM(ctx)>>>(
		x, ctx->targets, smax, slog, dx, (int)rows, V, ctx->loss_scale);
	PH_CUDA_CHECK_LAUNCH(err, "seq_xent: backward");
	return PH_OK;
}

PH_LAYER_CUDA_OPS(seq_xent_cuda_ops) = { .struct_size = sizeof(ph_layer_device_ops),
					 .forward = seq_xent_cuda_forward,
					 .backward = seq_xent_cuda_backward };
