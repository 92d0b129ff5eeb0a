/* SPDX-License-Identifier: MIT */
/*
 * cuda_ops.cuh: CUDA kernels shared by the transformer layers' twins
 * (layernorm, gelu, dropout, gpt_block, ...): the GPU side of
 * transformer_ops.h.  Header-only, every kernel and wrapper static, so each
 * module that includes it stays self-contained.  Every wrapper launches on
 * `s`, never synchronises, and returns cudaGetLastError().  n == 0 or
 * rows == 0 launches nothing and returns cudaSuccess.
 *
 * Semantics (those of the CPU code; "bitwise" = the same bits as the CPU
 * code given the same inputs, on x86-64 where gcc does not contract a*b+c):
 *
 *   ph_k_layernorm_fwd(s, x, g, b, y, mean, rstd, rows, d, eps)
 *       y = (x - mean) * rstd * g + b per row of d; rstd = 1/sqrtf(var + eps),
 *       two-pass population variance in float; mean/rstd [rows] written when
 *       non-NULL (the CPU layers save them).  eps: the layernorm layer's
 *       option (1e-5 by default); gpt_block uses GPT_LN_EPS = 1e-5f.
 *       Where d is a multiple of 4 up to 2048 (the warp-per-row kernels):
 *       tf_layernorm_forward to rounding (another sum order); otherwise, or
 *       under PIPEHOST_LN_WARP=0, bitwise = tf_layernorm_forward (the same
 *       8-lane sum order).  y may alias x.  A y of __nv_bfloat16 gets that
 *       result rounded to bf16 (a product's input; then y must not alias x).
 *   ph_k_layernorm_bwd(s, dy, x, g, mean, rstd, dx, dg, db, rows, d, scratch)
 *       dg += sum_rows dy * xhat, db += sum_rows dy (deterministic fixed tree,
 *       NOT the CPU's row order: last-bit differences), then
 *       dx = rstd * (dy*g - mean(dy*g) - xhat * mean(dy*g*xhat))  (bitwise =
 *       tf_layernorm_backward_input on the forward's terms: to rounding
 *       where the warp kernels run).  mean, rstd: the forward's (required).
 *       dx may be NULL (skipped); dg and db
 *       may be NULL (skipped).  dx may alias dy.  scratch: needs 0 floats,
 *       pass NULL.  The halves alone: ph_k_layernorm_bwd_input (dx) and
 *       ph_k_layernorm_bwd_weight (dg, db); ph_k_layernorm_bwd_input_add
 *       adds a residual's gradient to dx in the same pass.
 *   ph_k_gelu_fwd(s, x, y, n)        y = gelu_tanh(x)        bitwise = tf_gelu;
 *                                    y may be __nv_bfloat16 (rounded)
 *   ph_k_gelu_bwd(s, x, dy, dx, n)   dx = dy * gelu'(x)      bitwise = tf_gelu_grad;
 *                                    dx may alias dy
 *   ph_k_add(s, a, b, y, n)          y = a + b; y may alias a or b
 *   ph_k_colsum_acc(s, x, rows, cols, out)
 *       out[j] += sum_i x[i][j]; deterministic fixed tree (row i goes into
 *       partial sum i % 128 in row order, then a fixed tree over the 128),
 *       not the CPU add_colsum's row order: last-bit differences.
 *   ph_k_colsum_acc_ws(s, x, rows, cols, out, ws), ph_k_colsum_cast_ws,
 *   ph_k_layernorm_bwd_weight_ws: the same sums split over slices of rows
 *       (another fixed order, set by rows alone), partials in
 *       ws [ph_colsum_ws_floats(cols)] of the caller's scratch; ws NULL or
 *       PIPEHOST_COLSUM_SPLIT=0: the one-pass kernels.
 *   ph_k_dropout_fwd(s, key, p, x, y, n)
 *       y[i] = u_i >= p ? x[i] * scale : 0 (a dropped inf/NaN gives 0, as in
 *       dropout.c), u_i = ph_rng_uniform(key, i),
 *       i = 0..n-1 over the whole micro-batch; scale = (float)(1/(1 - (double)p)).
 *       The CPU layers compute scale from their double option:
 *       (float)(1/(1 - rate_double)), which can differ from the float-p
 *       formula in the last bit; to match them bitwise pass their scale:
 *   ph_k_dropout_fwd_ex(s, key, p, scale, x, y, n)   same with the scale given
 *   ph_k_dropout_bwd(s, key, p, dy, dx, n) / ph_k_dropout_bwd_ex(..., scale, ...)
 *       dx[i] = u_i >= p ? dy[i] * scale : 0 (the same mask); dx may alias dy.
 *   ph_k_dropout_add(s, key, drop, p, scale, base, in, out, n)
 *       gpt_block's resid_drop: out[i] = (base ? base[i] : 0) + M(i) * in[i],
 *       M(i) = drop ? (u_i >= p ? scale : 0) : 1; drop == 0 gives
 *       out = base + in (or a copy of in).  out may alias in or base.  Bitwise.
 *
 * The keys are the CPU's: ph_rng_key(seed, step, microbatch, layer) for the
 * dropout layer, ph_mix64(that ^ SITE) for gpt_block's sites.  Device helpers
 * for other kernels: ph_d_expf (= tf_expf), ph_d_gelu, ph_d_gelu_grad, and
 * the warp reductions ph_d_warp_sum and ph_d_warp_maxloc (softmax_xent,
 * seq_xent).
 *
 * Bitwise agreement needs IEEE float ops on the device: every product and
 * sum here is written with __fmul_rn/__fadd_rn/... so nvcc never fuses it
 * into an FMA, but do not build with --use_fast_math (it flushes denormals).
 */
#ifndef PH_LAYERS_CUDA_OPS_CUH
#define PH_LAYERS_CUDA_OPS_CUH

#include <cuda_runtime.h>
#include <limits.h>
#include <stdint.h>

#include <cuda_bf16.h>
#include <pipehost/rng.h>
#include "cuda_common.cuh"

/* Store v as the element type: fp32 as is, bf16 rounded to nearest even. */
static __device__ __forceinline__ void ph_d_put(float *p, float v)
{
	*p = v;
}

static __device__ __forceinline__ void ph_d_put(__nv_bfloat16 *p, float v)
{
	*p = __float2bfloat16_rn(v);
}

/* An element of fp32 or bf16 as fp32 (exact). */
static __device__ __forceinline__ float ph_d_get(const float *p)
{
	return *p;
}

static __device__ __forceinline__ float ph_d_get(const __nv_bfloat16 *p)
{
	return __bfloat162float(*p);
}

/* 4 floats in one 16-byte access, 4 bf16 in one 8-byte access (the
 * address aligned to that size).  The emulator has no float4. */
#ifdef CUEMU
struct alignas(16) ph_f4 {
	float x, y, z, w;
};
#else
typedef float4 ph_f4;
#endif
struct alignas(8) ph_bf4 {
	__nv_bfloat162 a, b;
};

/* v stored as 4 elements of Y at p: one 16-byte store (fp32) or one
 * 8-byte store of the values rounded to nearest even (bf16) */
static __device__ __forceinline__ void ph_d_put4(float *p, ph_f4 v)
{
	*(ph_f4 *)p = v;
}

static __device__ __forceinline__ void ph_d_put4(__nv_bfloat16 *p, ph_f4 v)
{
	ph_bf4 b;
	b.a = __floats2bfloat162_rn(v.x, v.y);
	b.b = __floats2bfloat162_rn(v.z, v.w);
	*(ph_bf4 *)p = b;
}

/* ------------------------------------------------------------------ */
/* Element-wise math, bit for bit transformer_ops.h's.                  */

/* tf_expf: Cephes' polynomial, round-to-nearest by the 1.5*2^23 trick. */
static __device__ __forceinline__ float ph_d_expf(float x)
{
	x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
	float n = __fsub_rn(__fadd_rn(__fmul_rn(x, 1.44269504088896341f), 12582912.0f), 12582912.0f);
	float r = __fadd_rn(__fsub_rn(x, __fmul_rn(n, 0.693359375f)), __fmul_rn(n, 2.12194440e-4f));
	float p = 1.9875691500e-4f;
	p = __fadd_rn(__fmul_rn(p, r), 1.3981999507e-3f);
	p = __fadd_rn(__fmul_rn(p, r), 8.3334519073e-3f);
	p = __fadd_rn(__fmul_rn(p, r), 4.1665795894e-2f);
	p = __fadd_rn(__fmul_rn(p, r), 1.6666665459e-1f);
	p = __fadd_rn(__fmul_rn(p, r), 5.0000001201e-1f);
	p = __fadd_rn(__fadd_rn(__fmul_rn(__fmul_rn(p, r), r), r), 1.0f);
	return __fmul_rn(p, __int_as_float(((int)n + 127) << 23));
}

/* tf_gelu: x sigmoid(2y), y = k (x + a x^3) */
static __device__ __forceinline__ float ph_d_gelu(float x)
{
	float y = __fmul_rn(0.7978845608f, __fadd_rn(x, __fmul_rn(__fmul_rn(__fmul_rn(0.044715f, x), x), x)));
	return __fdiv_rn(x, __fadd_rn(1.0f, ph_d_expf(__fmul_rn(-2.0f, y))));
}

/* tf_gelu_grad: s + 2 x s (1 - s) k (1 + 3 a x^2), s = sigmoid(2y) */
static __device__ __forceinline__ float ph_d_gelu_grad(float x)
{
	float y = __fmul_rn(0.7978845608f, __fadd_rn(x, __fmul_rn(__fmul_rn(__fmul_rn(0.044715f, x), x), x)));
	float s = __fdiv_rn(1.0f, __fadd_rn(1.0f, ph_d_expf(__fmul_rn(-2.0f, y))));
	float t = __fmul_rn(__fmul_rn(__fmul_rn(__fmul_rn(2.0f, x), s), __fsub_rn(1.0f, s)), 0.7978845608f);
	float q = __fadd_rn(1.0f, __fmul_rn(__fmul_rn(3.0f * 0.044715f, x), x));
	return __fadd_rn(s, __fmul_rn(t, q));
}

/* ------------------------------------------------------------------ */
/* Warp reductions over all 32 lanes (call them with the whole warp:     */
/* mask 0xffffffff).  Each is a fixed xor butterfly, offsets 16, 8, 4,  */
/* 2, 1: the order does not depend on the thread schedule, and since    */
/* lanes l and l ^ off add the same two values (a + b == b + a exactly) */
/* every lane ends with the same bits.                                  */

/* sum over the warp of s */
static __device__ __forceinline__ double ph_d_warp_sum(double s)
{
	for (int off = 16; off > 0; off >>= 1)
		s += __shfl_xor_sync(0xffffffffu, s, off);
	return s;
}

static __device__ __forceinline__ int ph_d_warp_sum(int s)
{
	for (int off = 16; off > 0; off >>= 1)
		s += __shfl_xor_sync(0xffffffffu, s, off);
	return s;
}

static __device__ __forceinline__ float ph_d_warp_sum(float s)
{
	for (int off = 16; off > 0; off >>= 1)
		s = __fadd_rn(s, __shfl_xor_sync(0xffffffffu, s, off));
	return s;
}

/*
 * Max with its index, over the non-NaN values: i == INT_MAX means none
 * seen yet (v is then meaningless).  The contract: the largest value and,
 * on ties (==, so -0 ties +0), the lowest index; NaNs are passed over.
 * That is what a sequential scan with strict > gives, and since (value,
 * lowest index) is a total order, any way of combining partial results
 * gives the same pair: lanes, warps and blocks may split the row freely.
 * What a row of NaNs only (i == INT_MAX at the end) or a leading NaN
 * means is the caller's rule.
 */
typedef struct {
	float v;
	int i;
} ph_maxloc;

static __device__ __forceinline__ ph_maxloc ph_d_maxloc_none(void)
{
	ph_maxloc p = { 0.0f, INT_MAX };
	return p;
}

/* p combined with q */
static __device__ __forceinline__ ph_maxloc ph_d_maxloc_merge(ph_maxloc p, ph_maxloc q)
{
	if (q.i != INT_MAX && (p.i == INT_MAX || q.v > p.v || (q.v == p.v && q.i < p.i)))
		return q;
	return p;
}

/* x[k] for k = first, first + step, ... < n, in that order: this thread's part of a row */
static __device__ __forceinline__ ph_maxloc ph_d_maxloc_scan(const float *x, int n, int first, int step)
{
	ph_maxloc p = ph_d_maxloc_none();
	for (int k = first; k < n; k += step) {
		const float v = x[k];
		if (v == v && (p.i == INT_MAX || v > p.v)) { /* k rises: strict > keeps the first */
			p.v = v;
			p.i = k;
		}
	}
	return p;
}

/* over the warp; every lane gets the pair */
static __device__ __forceinline__ ph_maxloc ph_d_warp_maxloc(ph_maxloc p)
{
	for (int off = 16; off > 0; off >>= 1) {
		ph_maxloc q;
		q.v = __shfl_xor_sync(0xffffffffu, p.v, off);
		q.i = __shfl_xor_sync(0xffffffffu, p.i, off);
		p = ph_d_maxloc_merge(p, q);
	}
	return p;
}

/* ------------------------------------------------------------------ */
/* Layer normalisation.                                                */
/*                                                                     */
/* Row statistics: 8 threads per row (4 rows per warp), thread j sums    */
/* elements j, j+8, ... of the first d & ~7, the three xor-shuffles     */
/* combine them as ((a0+a1)+(a2+a3))+((a4+a5)+(a6+a7)), and every       */
/* thread adds the tail in index order: tf_row_sum's order exactly.     */

#define PH_LN_THREADS 256

/* the 8 lanes of this thread's row group within the warp */
static __device__ __forceinline__ unsigned ph_ln_group_mask(void)
{
	return 0xffu << (threadIdx.x & 24);
}

static __device__ __forceinline__ float ph_ln_tree8(unsigned mask, float a)
{
	a = __fadd_rn(a, __shfl_xor_sync(mask, a, 1));
	a = __fadd_rn(a, __shfl_xor_sync(mask, a, 2));
	a = __fadd_rn(a, __shfl_xor_sync(mask, a, 4));
	return a;
}

/*
 * x, y [rows, d]; g, b [d]; mean, rstd [rows] (or NULL).
 * Block: PH_LN_THREADS threads = PH_LN_THREADS/8 rows; grid: rows*8 threads.
 */
template <typename Y>
static __global__ void ph_layernorm_fwd_kernel(const float *x, const float *g, const float *b,
					       Y *y, float *mean, float *rstd, int rows, int d,
					       float eps)
{
	const int64_t row = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 3;
	if (row >= rows) /* whole groups of 8 leave together */
		return;
	const unsigned mask = ph_ln_group_mask();
	const int j = threadIdx.x & 7, d8 = d & ~7;
	const float *xr = x + row * d;
	const float invC = __fdiv_rn(1.0f, (float)d);

	float a = 0.0f;
	for (int k = j; k < d8; k += 8)
		a = __fadd_rn(a, xr[k]);
	float s = ph_ln_tree8(mask, a);
	for (int k = d8; k < d; k++)
		s = __fadd_rn(s, xr[k]);
	const float m = __fmul_rn(s, invC);

	a = 0.0f;
	for (int k = j; k < d8; k += 8) {
		float t = __fsub_rn(xr[k], m);
		a = __fadd_rn(a, __fmul_rn(t, t));
	}
	float v = ph_ln_tree8(mask, a);
	for (int k = d8; k < d; k++) {
		float t = __fsub_rn(xr[k], m);
		v = __fadd_rn(v, __fmul_rn(t, t));
	}
	const float rs = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fmul_rn(v, invC), eps)));
	if (j == 0) {
		if (mean)
			mean[row] = m;
		if (rstd)
			rstd[row] = rs;
	}
	__syncwarp(mask); /* every read of the row above is done: y may alias x */
	Y *yr = y + row * d;
	for (int k = j; k < d; k += 8)
		ph_d_put(yr + k, __fadd_rn(__fmul_rn(__fmul_rn(__fsub_rn(xr[k], m), rs), g[k]), b[k]));
}

/*
 * dx = rstd * ((dy*g - mean(dy*g)) - xhat * mean(dy*g * xhat)), per row,
 * plus res [rows, d] where res is not NULL (a residual branch's gradient,
 * added as ph_k_add would, in the same pass).
 * dy, x, dx [rows, d]; g [d]; mean, rstd [rows].  Same launch shape as fwd.
 */
static __global__ void ph_layernorm_bwd_input_kernel(const float *dy, const float *x, const float *g,
						     const float *mean, const float *rstd, const float *res,
						     float *dx, int rows, int d)
{
	const int64_t row = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 3;
	if (row >= rows)
		return;
	const unsigned mask = ph_ln_group_mask();
	const int j = threadIdx.x & 7, d8 = d & ~7;
	const float *xr = x + row * d, *dyr = dy + row * d;
	const float invC = __fdiv_rn(1.0f, (float)d);
	const float m = mean[row], rs = rstd[row];

	float ag = 0.0f, agx = 0.0f;
	for (int k = j; k < d8; k += 8) {
		float gk = __fmul_rn(dyr[k], g[k]);
		ag = __fadd_rn(ag, gk);
		agx = __fadd_rn(agx, __fmul_rn(gk, __fmul_rn(__fsub_rn(xr[k], m), rs)));
	}
	float sg = ph_ln_tree8(mask, ag), sgx = ph_ln_tree8(mask, agx);
	for (int k = d8; k < d; k++) {
		float gk = __fmul_rn(dyr[k], g[k]);
		sg = __fadd_rn(sg, gk);
		sgx = __fadd_rn(sgx, __fmul_rn(gk, __fmul_rn(__fsub_rn(xr[k], m), rs)));
	}
	const float mg = __fmul_rn(sg, invC), mgx = __fmul_rn(sgx, invC);
	__syncwarp(mask); /* dx may alias dy */
	float *dxr = dx + row * d;
	const float *rr = res ? res + row * d : NULL;
	for (int k = j; k < d; k += 8) {
		float xhat = __fmul_rn(__fsub_rn(xr[k], m), rs);
		float gk = __fmul_rn(dyr[k], g[k]);
		float v = __fmul_rn(rs, __fsub_rn(__fsub_rn(gk, mg), __fmul_rn(xhat, mgx)));
		dxr[k] = rr ? __fadd_rn(v, rr[k]) : v;
	}
}

/*
 * Layer normalisation, the fast path: one warp per row, the row in
 * registers.  The 8-lane kernels above give one row 8 threads, so at
 * GPT-2's shapes (1024 rows of 768 a micro-batch) a launch has 32 blocks
 * for 132 SMs, and each thread waits out some 24 memory round trips in
 * turn.  Here lane l holds elements 128c + 4l .. 128c + 4l + 3 of chunk
 * c = 0 .. C-1 as one 16-byte load, all of them issued before the first
 * is used: the row comes from memory once and in one round trip, and the
 * variance and the output are computed from the registers.
 *
 * For d a multiple of 4 up to 128 * PH_LNW_MAXC, with 16-byte-aligned x,
 * dy, res and dx and 8-byte-aligned y (ph_ln_warp_chunks); other shapes,
 * and PIPEHOST_LN_WARP=0 (to time one against the other), take the 8-lane
 * kernels, which stay the plain reference.
 *
 * Sums: each lane adds its elements in chunk order (x, y, z, w of each
 * chunk left to right), then ph_d_warp_sum's fixed butterfly: the same
 * bits in every run and for every rank, but not the CPU's 8-lane order, so
 * these match tf_layernorm_forward and tf_layernorm_backward_input to
 * rounding (test-cuda-layers' fp32 row), not bit for bit.  The
 * element-wise formulas are the 8-lane kernels'.
 */
#define PH_LNW_MAXC 16 /* chunks of 128: d <= 2048 */

/* x, y [rows, d]; g, b [d]; mean, rstd [rows] or NULL.  Block: 256
 * threads = 8 rows; grid: rows * 32 threads.  C: chunks of 128 (128 * C >= d). */
template <int C, typename Y>
static __global__ void __launch_bounds__(PH_LN_THREADS)
ph_layernorm_fwd_warp_kernel(const float *x, const float *g, const float *b, Y *y, float *mean, float *rstd,
			     int rows, int d, float eps)
{
	const int64_t row = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
	if (row >= rows) /* whole warps leave together */
		return;
	const int lane = threadIdx.x & 31;
	const float *xr = x + row * d;
	const float invC = __fdiv_rn(1.0f, (float)d);
	ph_f4 v[C];
#pragma unroll
	for (int c = 0; c < C; c++) {
		const int k = 128 * c + 4 * lane;
		if (k < d)
			v[c] = *(const ph_f4 *)(xr + k);
	}
	float a = 0.0f;
#pragma unroll
	for (int c = 0; c < C; c++)
		if (128 * c + 4 * lane < d)
			a = __fadd_rn(__fadd_rn(__fadd_rn(__fadd_rn(a, v[c].x), v[c].y), v[c].z), v[c].w);
	const float m = __fmul_rn(ph_d_warp_sum(a), invC);
	a = 0.0f;
#pragma unroll
	for (int c = 0; c < C; c++)
		if (128 * c + 4 * lane < d) {
			const float t0 = __fsub_rn(v[c].x, m), t1 = __fsub_rn(v[c].y, m);
			const float t2 = __fsub_rn(v[c].z, m), t3 = __fsub_rn(v[c].w, m);
			a = __fadd_rn(a, __fmul_rn(t0, t0));
			a = __fadd_rn(a, __fmul_rn(t1, t1));
			a = __fadd_rn(a, __fmul_rn(t2, t2));
			a = __fadd_rn(a, __fmul_rn(t3, t3));
		}
	const float var = ph_d_warp_sum(a);
	const float rs = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fmul_rn(var, invC), eps)));
	if (lane == 0) {
		if (mean)
			mean[row] = m;
		if (rstd)
			rstd[row] = rs;
	}
	/* y may alias x: a lane writes only the elements it has read */
	Y *yr = y + row * d;
#pragma unroll
	for (int c = 0; c < C; c++) {
		const int k = 128 * c + 4 * lane;
		if (k < d) {
			const ph_f4 gk = *(const ph_f4 *)(g + k), bk = *(const ph_f4 *)(b + k);
			ph_f4 o;
			o.x = __fadd_rn(__fmul_rn(__fmul_rn(__fsub_rn(v[c].x, m), rs), gk.x), bk.x);
			o.y = __fadd_rn(__fmul_rn(__fmul_rn(__fsub_rn(v[c].y, m), rs), gk.y), bk.y);
			o.z = __fadd_rn(__fmul_rn(__fmul_rn(__fsub_rn(v[c].z, m), rs), gk.z), bk.z);
			o.w = __fadd_rn(__fmul_rn(__fmul_rn(__fsub_rn(v[c].w, m), rs), gk.w), bk.w);
			ph_d_put4(yr + k, o);
		}
	}
}

/* dx = rstd * ((dy*g - mean(dy*g)) - xhat * mean(dy*g * xhat)) (+ res), as
 * ph_layernorm_bwd_input_kernel; dy and x in registers.  Same launch shape
 * as the warp forward.  dx may alias dy or res. */
template <int C>
static __global__ void __launch_bounds__(PH_LN_THREADS)
ph_layernorm_bwd_input_warp_kernel(const float *dy, const float *x, const float *g, const float *mean,
				   const float *rstd, const float *res, float *dx, int rows, int d)
{
	const int64_t row = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
	if (row >= rows)
		return;
	const int lane = threadIdx.x & 31;
	const float *xr = x + row * d, *dyr = dy + row * d;
	const float invC = __fdiv_rn(1.0f, (float)d);
	const float m = mean[row], rs = rstd[row];
	ph_f4 gy[C], xh[C]; /* dy * g and xhat */
#pragma unroll
	for (int c = 0; c < C; c++) {
		const int k = 128 * c + 4 * lane;
		if (k < d) {
			gy[c] = *(const ph_f4 *)(dyr + k);
			xh[c] = *(const ph_f4 *)(xr + k);
		}
	}
	float ag = 0.0f, agx = 0.0f;
#pragma unroll
	for (int c = 0; c < C; c++) {
		const int k = 128 * c + 4 * lane;
		if (k < d) {
			const ph_f4 gk = *(const ph_f4 *)(g + k);
			gy[c].x = __fmul_rn(gy[c].x, gk.x), gy[c].y = __fmul_rn(gy[c].y, gk.y);
			gy[c].z = __fmul_rn(gy[c].z, gk.z), gy[c].w = __fmul_rn(gy[c].w, gk.w);
			xh[c].x = __fmul_rn(__fsub_rn(xh[c].x, m), rs), xh[c].y = __fmul_rn(__fsub_rn(xh[c].y, m), rs);
			xh[c].z = __fmul_rn(__fsub_rn(xh[c].z, m), rs), xh[c].w = __fmul_rn(__fsub_rn(xh[c].w, m), rs);
			ag = __fadd_rn(__fadd_rn(__fadd_rn(__fadd_rn(ag, gy[c].x), gy[c].y), gy[c].z), gy[c].w);
			agx = __fadd_rn(agx, __fmul_rn(gy[c].x, xh[c].x));
			agx = __fadd_rn(agx, __fmul_rn(gy[c].y, xh[c].y));
			agx = __fadd_rn(agx, __fmul_rn(gy[c].z, xh[c].z));
			agx = __fadd_rn(agx, __fmul_rn(gy[c].w, xh[c].w));
		}
	}
	const float mg = __fmul_rn(ph_d_warp_sum(ag), invC), mgx = __fmul_rn(ph_d_warp_sum(agx), invC);
	float *dxr = dx + row * d;
	const float *rr = res ? res + row * d : NULL;
#pragma unroll
	for (int c = 0; c < C; c++) {
		const int k = 128 * c + 4 * lane;
		if (k < d) {
			ph_f4 o;
			o.x = __fmul_rn(rs, __fsub_rn(__fsub_rn(gy[c].x, mg), __fmul_rn(xh[c].x, mgx)));
			o.y = __fmul_rn(rs, __fsub_rn(__fsub_rn(gy[c].y, mg), __fmul_rn(xh[c].y, mgx)));
			o.z = __fmul_rn(rs, __fsub_rn(__fsub_rn(gy[c].z, mg), __fmul_rn(xh[c].z, mgx)));
			o.w = __fmul_rn(rs, __fsub_rn(__fsub_rn(gy[c].w, mg), __fmul_rn(xh[c].w, mgx)));
			if (rr) {
				const ph_f4 r4 = *(const ph_f4 *)(rr + k);
				o.x = __fadd_rn(o.x, r4.x), o.y = __fadd_rn(o.y, r4.y);
				o.z = __fadd_rn(o.z, r4.z), o.w = __fadd_rn(o.w, r4.w);
			}
			ph_d_put4(dxr + k, o);
		}
	}
}

/* Chunks of 128 for the warp kernels: C >= d / 128 from the instantiated
 * set (1..8, 12, 16), or 0 when d or an address does not suit them (the
 * 8-lane kernels then run).  `align16`: the pointers that are read or
 * written 16 bytes at a time, OR-ed; `align8`: those 8 bytes at a time. */
static inline int ph_ln_warp_chunks(int d, uintptr_t align16, uintptr_t align8)
{
	static const int off = ph_env_off("PIPEHOST_LN_WARP"); /* read once (C++ makes that thread-safe) */
	if (off || d <= 0 || d % 4 || d > 128 * PH_LNW_MAXC || (align16 & 15) || (align8 & 7))
		return 0;
	const int c = (d + 127) / 128;
	return c <= 8 ? c : c <= 12 ? 12 : 16;
}

static inline unsigned ph_lnw_grid(int rows)
{
	return (unsigned)(((int64_t)rows * 32 + PH_LN_THREADS - 1) / PH_LN_THREADS);
}

/* launch(ph_lnw_c<N>()) for the instantiated chunk count N == C (from
 * ph_ln_warp_chunks): the one list of the warp kernels' sizes, N a
 * template argument so that the registers of a row are an array the
 * compiler can keep */
template <int N> struct ph_lnw_c {
	static constexpr int value = N;
};

template <typename F>
static inline void ph_lnw_at_chunks(int C, F launch)
{
	switch (C) {
	case 1: launch(ph_lnw_c<1>()); break;
	case 2: launch(ph_lnw_c<2>()); break;
	case 3: launch(ph_lnw_c<3>()); break;
	case 4: launch(ph_lnw_c<4>()); break;
	case 5: launch(ph_lnw_c<5>()); break;
	case 6: launch(ph_lnw_c<6>()); break;
	case 7: launch(ph_lnw_c<7>()); break;
	case 8: launch(ph_lnw_c<8>()); break;
	case 12: launch(ph_lnw_c<12>()); break;
	default: launch(ph_lnw_c<16>()); break;
	}
}

/*
 * Column sums, deterministic: a block of (PH_CS_COLS, PH_CS_ROWS) threads
 * owns PH_CS_COLS adjacent columns (one 32-byte sector per row: a warp
 * reads 4 rows x 8 columns, fully used sectors, and d/8 blocks keep the
 * GPU busy); thread (tx, ty) sums rows ty, ty + PH_CS_ROWS, ... of column
 * PH_CS_COLS * blockIdx.x + tx in row order, then a fixed tree over ty.
 * Grid: ceil(cols / PH_CS_COLS) blocks.
 *
 * ph_colsum_kernel:    x [rows, cols] (fp32 or bf16)  out[j] += sum_i x[i][j]
 *                      (out NULL: none), and x16 = x rounded to bf16 where
 *                      x16 is not NULL (a product's operand, in the same read)
 * ph_ln_dgdb_kernel:   dy, x [rows, d]; mean, rstd [rows]
 *                      dg[j] += sum_i dy[i][j] * xhat[i][j], db[j] += sum_i dy[i][j]
 */
#define PH_CS_COLS 8
#define PH_CS_ROWS 128

/* the tree over ty (ROWS of them, a power of 2) of v in a block of
 * (COLS, ROWS) threads; the result is valid in threads with ty == 0 */
template <int ROWS, int COLS>
static __device__ __forceinline__ float ph_tree_colsum(float v, float (*sm)[COLS])
{
	const int tx = threadIdx.x, ty = threadIdx.y;
	sm[ty][tx] = v;
	__syncthreads();
	for (int h = ROWS / 2; h > 0; h >>= 1) {
		if (ty < h)
			sm[ty][tx] = __fadd_rn(sm[ty][tx], sm[ty + h][tx]);
		__syncthreads();
	}
	float r = sm[0][tx];
	__syncthreads(); /* sm may be reused */
	return r;
}

template <typename TX>
static __global__ void ph_colsum_kernel(const TX *x, int rows, int cols, float *out, __nv_bfloat16 *x16)
{
	__shared__ float sm[PH_CS_ROWS][PH_CS_COLS];
	const int64_t c = (int64_t)blockIdx.x * PH_CS_COLS + threadIdx.x;
	float a = 0.0f;
	if (c < cols)
		for (int64_t i = threadIdx.y; i < rows; i += PH_CS_ROWS) {
			const float v = ph_d_get(x + i * cols + c);
			a = __fadd_rn(a, v);
			if (x16)
				x16[i * cols + c] = __float2bfloat16_rn(v);
		}
	if (!out)
		return; /* the whole block: no barrier follows */
	a = ph_tree_colsum<PH_CS_ROWS, PH_CS_COLS>(a, sm);
	if (threadIdx.y == 0 && c < cols)
		out[c] = __fadd_rn(out[c], a);
}

static __global__ void ph_ln_dgdb_kernel(const float *dy, const float *x, const float *mean,
					 const float *rstd, float *dg, float *db, int rows, int d)
{
	__shared__ float sm[PH_CS_ROWS][PH_CS_COLS];
	const int64_t c = (int64_t)blockIdx.x * PH_CS_COLS + threadIdx.x;
	float ag = 0.0f, ab = 0.0f;
	if (c < d)
		for (int64_t i = threadIdx.y; i < rows; i += PH_CS_ROWS) {
			const float dv = dy[i * d + c];
			ag = __fadd_rn(ag, __fmul_rn(dv, __fmul_rn(__fsub_rn(x[i * d + c], mean[i]), rstd[i])));
			ab = __fadd_rn(ab, dv);
		}
	ag = ph_tree_colsum<PH_CS_ROWS, PH_CS_COLS>(ag, sm);
	ab = ph_tree_colsum<PH_CS_ROWS, PH_CS_COLS>(ab, sm);
	if (threadIdx.y == 0 && c < d) {
		if (dg)
			dg[c] = __fadd_rn(dg[c], ag);
		if (db)
			db[c] = __fadd_rn(db[c], ab);
	}
}

/*
 * The same sums split over row slices, for a GPU's width: a grid of
 * (ceil(cols / PH_CSS_COLS), S) blocks of (PH_CSS_COLS, PH_CSS_LANES)
 * threads.  Block (bx, s) owns PH_CSS_COLS adjacent columns (a warp reads
 * 32 of one row: whole sectors in fp32 and bf16) of the rows
 * [s * span, (s + 1) * span); thread (tx, ty) sums rows s * span + ty,
 * + PH_CSS_LANES, ... of its column in row order (PH_CSS_UNROLL rows' loads
 * issued before their additions), then a fixed tree over ty gives the
 * slice's partial, part[s][c].  A second kernel adds the S partials of a
 * column in slice order and then to out[c].  The order depends on rows
 * alone (ph_colsum_slices), so every run has the same bits.
 *
 * Why: one block per 8 columns (the kernels above) gives GPT-2's 768-wide
 * bias gradients 96 blocks on the H200's 132 SMs, each thread waiting on
 * one load at a time (its bf16 store may alias the next load); these give
 * 24 x S blocks with 4 loads in flight a thread.
 *
 * ph_colsum_part_kernel: x [rows, cols] (fp32 or bf16) -> part [S, cols]
 *                        (part NULL: none) and x16 as ph_colsum_kernel's
 * ph_ln_dgdb_part_kernel: dy, x [rows, d]; mean, rstd [rows]
 *                        -> part [S, d] (dy * xhat), part + S * d [S, d] (dy)
 * ph_colsum_final_kernel: out[c] += sum_s part[s][c], in s order
 * ph_ln_final_kernel:     the same for dg from part, db from part + S * d
 *                         (either NULL: none), in one launch
 */
#define PH_CSS_COLS 32
#define PH_CSS_LANES 8
#define PH_CSS_UNROLL 4
#define PH_CSS_SLICES 64  /* slices at most: the workspace's rows */
#define PH_CSS_MIN_ROWS 32 /* rows a slice takes at least */

template <typename TX>
static __global__ void ph_colsum_part_kernel(const TX *__restrict__ x, int rows, int cols, int span,
					     float *__restrict__ part, __nv_bfloat16 *__restrict__ x16)
{
	__shared__ float sm[PH_CSS_LANES][PH_CSS_COLS];
	const int64_t c = (int64_t)blockIdx.x * PH_CSS_COLS + threadIdx.x;
	const int64_t lo = (int64_t)blockIdx.y * span;
	const int64_t hi = lo + span < rows ? lo + span : rows;
	float a = 0.0f;
	if (c < cols) {
		int64_t i = lo + threadIdx.y;
		for (; i + (PH_CSS_UNROLL - 1) * PH_CSS_LANES < hi; i += PH_CSS_UNROLL * PH_CSS_LANES) {
			float v[PH_CSS_UNROLL];
#pragma unroll
			for (int k = 0; k < PH_CSS_UNROLL; k++)
				v[k] = ph_d_get(x + (i + k * PH_CSS_LANES) * cols + c);
#pragma unroll
			for (int k = 0; k < PH_CSS_UNROLL; k++) {
				a = __fadd_rn(a, v[k]);
				if (x16)
					x16[(i + k * PH_CSS_LANES) * cols + c] = __float2bfloat16_rn(v[k]);
			}
		}
		for (; i < hi; i += PH_CSS_LANES) {
			const float v = ph_d_get(x + i * cols + c);
			a = __fadd_rn(a, v);
			if (x16)
				x16[i * cols + c] = __float2bfloat16_rn(v);
		}
	}
	if (!part)
		return; /* the whole block: no barrier follows */
	a = ph_tree_colsum<PH_CSS_LANES, PH_CSS_COLS>(a, sm);
	if (threadIdx.y == 0 && c < cols)
		part[(int64_t)blockIdx.y * cols + c] = a;
}

static __global__ void ph_ln_dgdb_part_kernel(const float *__restrict__ dy, const float *__restrict__ x,
					      const float *__restrict__ mean, const float *__restrict__ rstd,
					      int rows, int d, int span, float *__restrict__ part)
{
	__shared__ float sm[PH_CSS_LANES][PH_CSS_COLS];
	const int64_t c = (int64_t)blockIdx.x * PH_CSS_COLS + threadIdx.x;
	const int64_t lo = (int64_t)blockIdx.y * span;
	const int64_t hi = lo + span < rows ? lo + span : rows;
	float ag = 0.0f, ab = 0.0f;
	if (c < d) {
		int64_t i = lo + threadIdx.y;
		for (; i + (PH_CSS_UNROLL - 1) * PH_CSS_LANES < hi; i += PH_CSS_UNROLL * PH_CSS_LANES) {
			float dv[PH_CSS_UNROLL], xv[PH_CSS_UNROLL], mv[PH_CSS_UNROLL], rv[PH_CSS_UNROLL];
#pragma unroll
			for (int k = 0; k < PH_CSS_UNROLL; k++) {
				const int64_t r = i + k * PH_CSS_LANES;
				dv[k] = dy[r * d + c];
				xv[k] = x[r * d + c];
				mv[k] = mean[r];
				rv[k] = rstd[r];
			}
#pragma unroll
			for (int k = 0; k < PH_CSS_UNROLL; k++) {
				ag = __fadd_rn(ag, __fmul_rn(dv[k], __fmul_rn(__fsub_rn(xv[k], mv[k]), rv[k])));
				ab = __fadd_rn(ab, dv[k]);
			}
		}
		for (; i < hi; i += PH_CSS_LANES) {
			const float dv = dy[i * d + c];
			ag = __fadd_rn(ag, __fmul_rn(dv, __fmul_rn(__fsub_rn(x[i * d + c], mean[i]), rstd[i])));
			ab = __fadd_rn(ab, dv);
		}
	}
	ag = ph_tree_colsum<PH_CSS_LANES, PH_CSS_COLS>(ag, sm);
	ab = ph_tree_colsum<PH_CSS_LANES, PH_CSS_COLS>(ab, sm);
	if (threadIdx.y == 0 && c < d) {
		part[(int64_t)blockIdx.y * d + c] = ag;
		part[((int64_t)gridDim.y + blockIdx.y) * d + c] = ab;
	}
}

/* out[c] += the slices' partials of column c, in slice order */
static __device__ __forceinline__ void ph_add_partials(const float *part, int slices, int cols, int64_t c,
						       float *out)
{
	float a = 0.0f;
	for (int s = 0; s < slices; s++)
		a = __fadd_rn(a, part[(int64_t)s * cols + c]);
	out[c] = __fadd_rn(out[c], a);
}

static __global__ void ph_colsum_final_kernel(const float *__restrict__ part, int slices, int cols,
					      float *__restrict__ out)
{
	PH_GRID_STRIDE(c, cols)
	ph_add_partials(part, slices, cols, c, out);
}

static __global__ void ph_ln_final_kernel(const float *__restrict__ part, int slices, int d, float *__restrict__ dg,
					  float *__restrict__ db)
{
	PH_GRID_STRIDE(c, d)
	{
		if (dg)
			ph_add_partials(part, slices, d, c, dg);
		if (db)
			ph_add_partials(part + (int64_t)slices * d, slices, d, c, db);
	}
}

/* ph_blocks caps the grid for grid-stride kernels; the row kernels need one
 * thread group per row, so their grid is exact. */
static inline unsigned ph_ln_grid(int rows)
{
	return (unsigned)(((int64_t)rows * 8 + PH_LN_THREADS - 1) / PH_LN_THREADS);
}

/* Y: float, or __nv_bfloat16 (the fp32 result rounded, for a product's input) */
template <typename Y>
static inline cudaError_t ph_k_layernorm_fwd(cudaStream_t s, const float *x, const float *g,
					     const float *b, Y *y, float *mean, float *rstd,
					     int rows, int d, float eps)
{
	if (rows <= 0 || d <= 0)
		return cudaSuccess;
	/* y is stored 16 bytes (fp32) or 8 bytes (bf16) at a time */
	const uintptr_t a16 = (uintptr_t)x | (uintptr_t)g | (uintptr_t)b | (sizeof(Y) == 4 ? (uintptr_t)y : 0);
	const int C = ph_ln_warp_chunks(d, a16, sizeof(Y) == 2 ? (uintptr_t)y : 0);
	if (C)
		ph_lnw_at_chunks(C, [&](auto c) {
			constexpr int n = decltype(c)::value;
			ph_layernorm_fwd_warp_kernel<n, Y><<<ph_lnw_grid(rows), PH_LN_THREADS, 0, s>>>(x, g, b, y, mean,
												    rstd, rows, d, eps);
		});
	else
		ph_layernorm_fwd_kernel<Y><<<ph_ln_grid(rows), PH_LN_THREADS, 0, s>>>(x, g, b, y, mean, rstd, rows,
										      d, eps);
	return cudaGetLastError();
}

/* dx = layernorm's input gradient + res (res NULL: none), the bits of
 * ph_k_layernorm_bwd_input then ph_k_add(dx, res, dx), one pass fewer over
 * [rows, d]. */
static inline cudaError_t ph_k_layernorm_bwd_input_add(cudaStream_t s, const float *dy, const float *x,
						       const float *g, const float *mean, const float *rstd,
						       const float *res, float *dx, int rows, int d)
{
	if (rows <= 0 || d <= 0 || !dx)
		return cudaSuccess;
	const uintptr_t a16 = (uintptr_t)dy | (uintptr_t)x | (uintptr_t)g | (uintptr_t)res | (uintptr_t)dx;
	const int C = ph_ln_warp_chunks(d, a16, 0);
	if (C)
		ph_lnw_at_chunks(C, [&](auto c) {
			constexpr int n = decltype(c)::value;
			ph_layernorm_bwd_input_warp_kernel<n><<<ph_lnw_grid(rows), PH_LN_THREADS, 0, s>>>(
				dy, x, g, mean, rstd, res, dx, rows, d);
		});
	else
		ph_layernorm_bwd_input_kernel<<<ph_ln_grid(rows), PH_LN_THREADS, 0, s>>>(dy, x, g, mean, rstd, res,
											 dx, rows, d);
	return cudaGetLastError();
}

static inline cudaError_t ph_k_layernorm_bwd_input(cudaStream_t s, const float *dy, const float *x,
						   const float *g, const float *mean,
						   const float *rstd, float *dx, int rows, int d)
{
	if (rows <= 0 || d <= 0 || !dx)
		return cudaSuccess;
	return ph_k_layernorm_bwd_input_add(s, dy, x, g, mean, rstd, (const float *)NULL, dx, rows, d);
}

static inline cudaError_t ph_k_layernorm_bwd_weight(cudaStream_t s, const float *dy, const float *x,
						    const float *mean, const float *rstd, float *dg,
						    float *db, int rows, int d)
{
	if (rows <= 0 || d <= 0 || (!dg && !db))
		return cudaSuccess;
	ph_ln_dgdb_kernel<<<(unsigned)((d + PH_CS_COLS - 1) / PH_CS_COLS), dim3(PH_CS_COLS, PH_CS_ROWS), 0,
			    s>>>(dy, x, mean, rstd, dg, db, rows, d);
	return cudaGetLastError();
}

/* Weight half first, then the input half: dx may alias dy, as on the CPU. */
static inline cudaError_t ph_k_layernorm_bwd(cudaStream_t s, const float *dy, const float *x,
					     const float *g, const float *mean, const float *rstd,
					     float *dx, float *dg, float *db, int rows, int d,
					     float *scratch)
{
	(void)scratch; /* needs none */
	cudaError_t e = ph_k_layernorm_bwd_weight(s, dy, x, mean, rstd, dg, db, rows, d);
	if (e != cudaSuccess)
		return e;
	return ph_k_layernorm_bwd_input(s, dy, x, g, mean, rstd, dx, rows, d);
}

/* ------------------------------------------------------------------ */
/* Element-wise kernels: x, y, ... [n], grid-stride.                   */

template <typename Y>
static __global__ void ph_gelu_fwd_kernel(const float *x, Y *y, int64_t n)
{
	PH_GRID_STRIDE(i, n)
		ph_d_put(y + i, ph_d_gelu(x[i]));
}

static __global__ void ph_gelu_bwd_kernel(const float *x, const float *dy, float *dx, int64_t n)
{
	PH_GRID_STRIDE(i, n)
		dx[i] = __fmul_rn(dy[i], ph_d_gelu_grad(x[i]));
}

static __global__ void ph_add_kernel(const float *a, const float *b, float *y, int64_t n)
{
	PH_GRID_STRIDE(i, n)
		y[i] = __fadd_rn(a[i], b[i]);
}

/* Y: float, or __nv_bfloat16 (the fp32 GELU rounded, for a product's input) */
template <typename Y>
static inline cudaError_t ph_k_gelu_fwd(cudaStream_t s, const float *x, Y *y, int64_t n)
{
	if (n <= 0)
		return cudaSuccess;
	ph_gelu_fwd_kernel<Y><<<ph_blocks(n), 256, 0, s>>>(x, y, n);
	return cudaGetLastError();
}

static inline cudaError_t ph_k_gelu_bwd(cudaStream_t s, const float *x, const float *dy, float *dx,
					int64_t n)
{
	if (n <= 0)
		return cudaSuccess;
	ph_gelu_bwd_kernel<<<ph_blocks(n), 256, 0, s>>>(x, dy, dx, n);
	return cudaGetLastError();
}

static inline cudaError_t ph_k_add(cudaStream_t s, const float *a, const float *b, float *y,
				   int64_t n)
{
	if (n <= 0)
		return cudaSuccess;
	ph_add_kernel<<<ph_blocks(n), 256, 0, s>>>(a, b, y, n);
	return cudaGetLastError();
}

template <typename TX>
static inline cudaError_t ph_k_colsum_acc(cudaStream_t s, const TX *x, int rows, int cols, float *out)
{
	if (rows <= 0 || cols <= 0)
		return cudaSuccess;
	ph_colsum_kernel<TX><<<(unsigned)((cols + PH_CS_COLS - 1) / PH_CS_COLS), dim3(PH_CS_COLS, PH_CS_ROWS), 0,
			       s>>>(x, rows, cols, out, (__nv_bfloat16 *)NULL);
	return cudaGetLastError();
}

/* The same sums (out NULL: none) and x16 [rows, cols] = x rounded to bf16,
 * to nearest even as the host's staging would round it for a product:
 * one read of x for both. */
static inline cudaError_t ph_k_colsum_cast(cudaStream_t s, const float *x, int rows, int cols, float *out,
					   __nv_bfloat16 *x16)
{
	if (rows <= 0 || cols <= 0)
		return cudaSuccess;
	ph_colsum_kernel<float><<<(unsigned)((cols + PH_CS_COLS - 1) / PH_CS_COLS), dim3(PH_CS_COLS, PH_CS_ROWS), 0,
				  s>>>(x, rows, cols, out, x16);
	return cudaGetLastError();
}

/* The split sums (ph_colsum_part_kernel): the slices for `rows`, and the
 * workspace a caller passes as `ws` to the _ws wrappers below, floats for
 * `cols` columns (enough for the layernorm's two sums of d = cols too).
 * PIPEHOST_COLSUM_SPLIT=0 (read once) keeps the one-pass kernels above,
 * to time one against the other; so does ws NULL. */
static inline int ph_colsum_slices(int rows)
{
	const int s = (rows + PH_CSS_MIN_ROWS - 1) / PH_CSS_MIN_ROWS;
	return s < 1 ? 1 : s > PH_CSS_SLICES ? PH_CSS_SLICES : s;
}

static inline size_t ph_colsum_ws_floats(size_t cols)
{
	return 2 * (size_t)PH_CSS_SLICES * cols;
}

static inline int ph_colsum_split_on(const float *ws)
{
	static const int off = ph_env_off("PIPEHOST_COLSUM_SPLIT");
	return ws && !off;
}

/* out (NULL: none) += the column sums of x, and x16 (NULL: none) = x in
 * bf16, split over slices into ws (ph_colsum_ws_floats(cols)) */
template <typename TX>
static inline cudaError_t ph_k_colsum_split(cudaStream_t s, const TX *x, int rows, int cols, float *out,
					    __nv_bfloat16 *x16, float *ws)
{
	const int S = ph_colsum_slices(rows), span = (rows + S - 1) / S;
	const dim3 grid((unsigned)((cols + PH_CSS_COLS - 1) / PH_CSS_COLS), (unsigned)S);
	ph_colsum_part_kernel<TX><<<grid, dim3(PH_CSS_COLS, PH_CSS_LANES), 0, s>>>(x, rows, cols, span,
										   out ? ws : (float *)NULL, x16);
	if (out)
		ph_colsum_final_kernel<<<ph_blocks(cols), 256, 0, s>>>(ws, S, cols, out);
	return cudaGetLastError();
}

/* ph_k_colsum_acc and ph_k_colsum_cast with a workspace: split where ws is
 * given and PIPEHOST_COLSUM_SPLIT is not 0 */
template <typename TX>
static inline cudaError_t ph_k_colsum_acc_ws(cudaStream_t s, const TX *x, int rows, int cols, float *out, float *ws)
{
	if (rows <= 0 || cols <= 0 || !out)
		return cudaSuccess;
	if (!ph_colsum_split_on(ws))
		return ph_k_colsum_acc(s, x, rows, cols, out);
	return ph_k_colsum_split(s, x, rows, cols, out, (__nv_bfloat16 *)NULL, ws);
}

static inline cudaError_t ph_k_colsum_cast_ws(cudaStream_t s, const float *x, int rows, int cols, float *out,
					      __nv_bfloat16 *x16, float *ws)
{
	if (rows <= 0 || cols <= 0)
		return cudaSuccess;
	if (!ph_colsum_split_on(ws))
		return ph_k_colsum_cast(s, x, rows, cols, out, x16);
	return ph_k_colsum_split(s, x, rows, cols, out, x16, ws);
}

/* ph_k_layernorm_bwd_weight with a workspace (ph_colsum_ws_floats(d)) */
static inline cudaError_t ph_k_layernorm_bwd_weight_ws(cudaStream_t s, const float *dy, const float *x,
						       const float *mean, const float *rstd, float *dg, float *db,
						       int rows, int d, float *ws)
{
	if (rows <= 0 || d <= 0 || (!dg && !db))
		return cudaSuccess;
	if (!ph_colsum_split_on(ws))
		return ph_k_layernorm_bwd_weight(s, dy, x, mean, rstd, dg, db, rows, d);
	const int S = ph_colsum_slices(rows), span = (rows + S - 1) / S;
	const dim3 grid((unsigned)((d + PH_CSS_COLS - 1) / PH_CSS_COLS), (unsigned)S);
	ph_ln_dgdb_part_kernel<<<grid, dim3(PH_CSS_COLS, PH_CSS_LANES), 0, s>>>(dy, x, mean, rstd, rows, d, span, ws);
	ph_ln_final_kernel<<<ph_blocks(d), 256, 0, s>>>(ws, S, d, dg, db);
	return cudaGetLastError();
}

/* ------------------------------------------------------------------ */
/* Dropout.  Thread q handles elements 4q .. 4q+3, the four draws of     */
/* one Philox call: u_i = ph_rng_uniform(key, i) exactly.               */
/*                                                                     */
/* mode PH_DROP_SELECT (the dropout layer):                             */
/*     out[i] = u_i >= p ? in[i] * scale : 0        (a dropped NaN is 0) */
/* mode PH_DROP_RESID (gpt_block's resid_drop):                         */
/*     out[i] = (base ? base[i] : 0) + M(i) * in[i],                    */
/*     M(i) = drop ? (u_i >= p ? scale : 0) : 1     (0 * NaN is NaN)     */
/* in, base, out [n]; out may alias in or base (each element is read,   */
/* then written, by one thread).                                        */
enum { PH_DROP_SELECT = 0, PH_DROP_RESID = 1 };

static __global__ void ph_dropout_kernel(int mode, uint64_t key, int drop, float p, float scale,
					 const float *base, const float *in, float *out, int64_t n)
{
	const int64_t quads = (n + 3) >> 2;
	PH_GRID_STRIDE(q, quads) {
		ph_philox4 r = { { 0, 0, 0, 0 } };
		if (drop)
			r = ph_philox4x32(key, 0, (uint64_t)q);
#pragma unroll
		for (int k = 0; k < 4; k++) {
			const int64_t i = 4 * q + k;
			if (i >= n)
				break;
			const int keep = !drop || ph_u01(r.v[k]) >= p;
			float v;
			if (mode == PH_DROP_SELECT) {
				v = keep ? __fmul_rn(in[i], scale) : 0.0f;
			} else {
				v = drop ? __fmul_rn(keep ? scale : 0.0f, in[i]) : in[i];
				if (base)
					v = __fadd_rn(base[i], v);
			}
			out[i] = v;
		}
	}
}

static inline cudaError_t ph_k_dropout_launch(cudaStream_t s, int mode, uint64_t key, int drop,
					      float p, float scale, const float *base,
					      const float *in, float *out, int64_t n)
{
	if (n <= 0)
		return cudaSuccess;
	ph_dropout_kernel<<<ph_blocks((n + 3) / 4), 256, 0, s>>>(mode, key, drop, p, scale, base, in,
								  out, n);
	return cudaGetLastError();
}

static inline cudaError_t ph_k_dropout_add(cudaStream_t s, uint64_t key, int drop, float p,
					   float scale, const float *base, const float *in,
					   float *out, int64_t n)
{
	return ph_k_dropout_launch(s, PH_DROP_RESID, key, drop, p, scale, base, in, out, n);
}

static inline float ph_dropout_scale(float p)
{
	return (float)(1.0 / (1.0 - (double)p));
}

static inline cudaError_t ph_k_dropout_fwd_ex(cudaStream_t s, uint64_t key, float p, float scale,
					      const float *x, float *y, int64_t n)
{
	return ph_k_dropout_launch(s, PH_DROP_SELECT, key, 1, p, scale, NULL, x, y, n);
}

static inline cudaError_t ph_k_dropout_bwd_ex(cudaStream_t s, uint64_t key, float p, float scale,
					      const float *dy, float *dx, int64_t n)
{
	return ph_k_dropout_launch(s, PH_DROP_SELECT, key, 1, p, scale, NULL, dy, dx, n);
}

static inline cudaError_t ph_k_dropout_fwd(cudaStream_t s, uint64_t key, float p, const float *x,
					   float *y, int64_t n)
{
	return ph_k_dropout_fwd_ex(s, key, p, ph_dropout_scale(p), x, y, n);
}

static inline cudaError_t ph_k_dropout_bwd(cudaStream_t s, uint64_t key, float p, const float *dy,
					   float *dx, int64_t n)
{
	return ph_k_dropout_bwd_ex(s, key, p, ph_dropout_scale(p), dy, dx, n);
}

#endif /* PH_LAYERS_CUDA_OPS_CUH */
