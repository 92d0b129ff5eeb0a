/* SPDX-License-Identifier: MIT */
/*
 * attention_ops.cuh: the causal multi-head attention core on CUDA, shared by
 * attention_cuda.cu and gpt_block_cuda.cu.  The twin of tf_attn_forward /
 * tf_attn_backward in transformer_ops.h: same layouts, same formulas, same
 * dropout stream; header-only and static, so each module stays whole.
 *
 * Materialised: the scores of one sample's heads, [H, T, T], lie in memory
 * (saved P, scratch dP).  Matrix products go through the host's GEMM
 * (ctx->gpu), batched over the heads of one sample: head h's q, k, v are the
 * columns h*hd .. h*hd+hd of a [T, 3d] row block, so the heads are a
 * strided batch (stride hd), but samples are not (stride T*3d between
 * samples breaks the pattern); hence one call per sample.
 *
 * Layouts, per sample (B samples side by side in each):
 *   qkv [T, 3d]   q | k | v, head h at columns h*hd of each
 *   P   [H, T, T] softmax(q k^T / sqrt(hd)), causal (0 above the diagonal),
 *                 BEFORE dropout
 *   att [T, d]    heads side by side
 * Dropout: element ((b*H + h)*T + i)*T + j of the micro-batch is kept iff
 * ph_rng_uniform(key, index) >= rate, then scaled by `scale`; the mask is
 * drawn again wherever it is needed, never stored.
 *
 * Every reduction is a warp's fixed shuffle tree: results repeat run to run.
 *
 * Under bf16, flash_attention.cuh fuses this core (no [B, H, T, T] in
 * memory) for hd a multiple of 16 up to 128; this one stays the fp32 path
 * and the reference.
 */
#ifndef PH_LAYERS_ATTENTION_OPS_CUH
#define PH_LAYERS_ATTENTION_OPS_CUH

#include <math.h>

#include <pipehost/rng.h>

#include "cuda_common.cuh"
#include "cuda_ops.cuh" /* ph_d_expf: tf_expf bit for bit */

/* The geometry of one attention (tf_attn_geom's twin, without cblas.h). */
typedef struct {
	int T, d, H, hd;
	float rate;  /* dropout on P; 0 = none */
	float scale; /* 1 / (1 - rate) */
} ph_attn_geom;

/* Warps per block of the row kernels (one warp per row of scores). */
#define PH_ATTN_ROW_WARPS 8

static inline unsigned ph_attn_row_blocks(int64_t rows)
{
	int64_t b = (rows + PH_ATTN_ROW_WARPS - 1) / PH_ATTN_ROW_WARPS;
	if (b < 1)
		b = 1;
	return (unsigned)(b > 65535 * 8 ? 65535 * 8 : b);
}

/* ------------------------------------------------------------------ */
/* Kernels.                                                            */

/*
 * Causal softmax in place, one warp per row, tf_attn_forward's arithmetic:
 *   P [rows, T]: row `row` is query i = row % T of some (sample, head); on
 *   entry the scaled scores S (the full square, as the GEMM wrote it), on
 *   exit P[i][j] = e_j / sum_k e_k with e_j = exp(S[i][j] - max_k S[i][k])
 *   for j <= i (tf_expf's polynomial, the sum in double, times the float
 *   1/sum), and 0 for j > i.
 * Three passes over the row (max; exp and sum; scale), each lane touching
 * only its own columns j = lane mod 32, so no barrier between them; the row
 * is re-read from L1/L2.  Only the sum's order differs from the CPU's (a
 * shuffle tree of 32 lane sums, in double): last-bit differences at most.
 */
__global__ static void ph_attn_softmax_fwd_kernel(float *P, int64_t rows, int T)
{
	const int lane = threadIdx.x & 31;
	const int64_t warps = (int64_t)gridDim.x * (blockDim.x >> 5);
	for (int64_t row = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); row < rows;
	     row += warps) {
		float *r = P + row * T;
		const int i = (int)(row % T);
		float m = -INFINITY; /* lane 0 always has column 0: the max is real */
		for (int j = lane; j <= i; j += 32)
			m = fmaxf(m, r[j]);
		for (int off = 16; off > 0; off >>= 1)
			m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
		double s = 0.0;
		for (int j = lane; j <= i; j += 32) {
			const float e = ph_d_expf(__fsub_rn(r[j], m));
			r[j] = e;
			s += (double)e;
		}
		for (int off = 16; off > 0; off >>= 1)
			s += __shfl_xor_sync(0xffffffffu, s, off);
		const float inv = (float)(1.0 / s); /* the xor tree leaves the same s in every lane */
		for (int j = lane; j < T; j += 32)
			r[j] = j <= i ? __fmul_rn(r[j], inv) : 0.0f;
	}
}

/*
 * Through the softmax, one warp per row, in place on dP (tf_attn_backward's
 * arithmetic: the dot product and the update in double):
 *   dS[i][j] = P[i][j] (dP[i][j] - sum_k P[i][k] dP[i][k])   for j <= i
 *   dS[i][j] = 0                                              for j > i
 * P, dP [rows, T]; dP holds d(loss)/d(P) (after the dropout mask) on entry.
 */
__global__ static void ph_attn_softmax_bwd_kernel(const float *P, float *dP, int64_t rows, int T)
{
	const int lane = threadIdx.x & 31;
	const int64_t warps = (int64_t)gridDim.x * (blockDim.x >> 5);
	for (int64_t row = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); row < rows;
	     row += warps) {
		const float *p = P + row * T;
		float *g = dP + row * T;
		const int i = (int)(row % T);
		double s = 0.0;
		for (int j = lane; j <= i; j += 32)
			s += (double)p[j] * (double)g[j]; /* exact product: fused or not, the same */
		for (int off = 16; off > 0; off >>= 1)
			s += __shfl_xor_sync(0xffffffffu, s, off);
		for (int j = lane; j < T; j += 32)
			g[j] = j <= i ? (float)((double)p[j] * ((double)g[j] - s)) : 0.0f;
	}
}

/*
 * The dropout mask on n elements of the micro-batch's P, starting at global
 * element `base` (b*H*T*T for sample b):
 *   M[e]  = ph_rng_uniform(key, base + e) >= rate ? scale : 0
 *   Pd[e] = M[e] * P[e]
 *   dP[e] = M[e] * dP[e]      (backward only; dP NULL in forward)
 * A thread takes one aligned group of 4 global indices: one Philox call
 * gives all four words, as ph_rng_uniform would draw them one by one.
 */
__global__ static void ph_attn_dropout_kernel(const float *P, float *Pd, float *dP, int64_t n, uint64_t key,
					      uint64_t base, float rate, float scale)
{
	const uint64_t g0 = base >> 2, g1 = (base + (uint64_t)n + 3) >> 2; /* groups [g0, g1) */
	PH_GRID_STRIDE(t, (int64_t)(g1 - g0)) {
		const uint64_t grp = g0 + (uint64_t)t;
		const ph_philox4 r = ph_philox4x32(key, 0, grp);
		for (int c = 0; c < 4; c++) {
			const uint64_t idx = grp * 4 + (uint64_t)c;
			if (idx < base || idx >= base + (uint64_t)n)
				continue;
			const int64_t e = (int64_t)(idx - base);
			const float m = ph_u01(r.v[c]) >= rate ? scale : 0.0f;
			Pd[e] = __fmul_rn(m, P[e]);
			if (dP)
				dP[e] = __fmul_rn(dP[e], m);
		}
	}
}

/* ------------------------------------------------------------------ */
/* Host side: the core forward and backward for a micro-batch.         */

/* The pointer to head 0 of sample b in a [B, T, ld] tensor, column col. */
#define PH_ATTN_AT(base, b, T, ld, col) ((base) + (size_t)(b) * (T) * (ld) + (col))

static inline int ph_attn_dropout(const ph_ctx *ctx, const ph_attn_geom *g, uint64_t key, int b, const float *P,
				  float *Pd, float *dP, ph_err *err)
{
	const int64_t n = (int64_t)g->H * g->T * g->T;
	const uint64_t base = (uint64_t)b * (uint64_t)n;
	ph_attn_dropout_kernel<<<ph_blocks(n / 4 + 2), 256, 0, PH_STREAM(ctx)>>>(P, Pd, dP, n, key, base, g->rate,
										   g->scale);
	PH_CUDA_CHECK_LAUNCH(err, "attention dropout");
	return PH_OK;
}

/*
 * Forward from the projected qkv of `batch` samples:
 *   P   [B, H, T, T] = causal softmax(q k^T * sm), sm = 1/sqrt(hd)  (saved, pre-dropout)
 *   att [B, T, d]    = drop(P) v, heads side by side
 * pd: H*T*T floats of scratch, read only when drop (one sample's Pd).
 */
static inline int ph_attn_forward(const ph_ctx *ctx, const ph_attn_geom *g, int batch, int drop, uint64_t key,
				  const float *qkv, float *P, float *att, float *pd, ph_err *err)
{
	const int T = g->T, d = g->d, H = g->H, hd = g->hd, ld = 3 * d;
	const int64_t TT = (int64_t)T * T;
	const float sm = (float)(1.0 / sqrt((double)hd)); /* as the CPU: rounded from double */
	int rc;
	/* S_h [T, T] = sm * q_h [T, hd] . k_h^T [hd, T], per sample, heads batched */
	for (int b = 0; b < batch; b++) {
		const float *q = PH_ATTN_AT(qkv, b, T, ld, 0), *k = q + d;
		rc = ctx->gpu->gemm(ctx, 0, 1, T, T, hd, sm, q, ld, hd, k, ld, hd, 0.0f, P + (size_t)b * H * TT, T, TT,
				    H, err);
		if (rc)
			return rc;
	}
	/* P [B*H*T rows, T] = causal softmax, in place */
	const int64_t rows = (int64_t)batch * H * T;
	ph_attn_softmax_fwd_kernel<<<ph_attn_row_blocks(rows), 32 * PH_ATTN_ROW_WARPS, 0, PH_STREAM(ctx)>>>(P, rows,
													   T);
	PH_CUDA_CHECK_LAUNCH(err, "attention softmax");
	/* att_h [T, hd] = Pd_h [T, T] . v_h [T, hd], written at columns h*hd of att [T, d] */
	for (int b = 0; b < batch; b++) {
		const float *Pb = P + (size_t)b * H * TT, *Pu = Pb;
		if (drop) {
			if ((rc = ph_attn_dropout(ctx, g, key, b, Pb, pd, NULL, err)))
				return rc;
			Pu = pd;
		}
		const float *v = PH_ATTN_AT(qkv, b, T, ld, 2 * d);
		rc = ctx->gpu->gemm(ctx, 0, 0, T, hd, T, 1.0f, Pu, T, TT, v, ld, hd, 0.0f, PH_ATTN_AT(att, b, T, d, 0),
				    d, hd, H, err);
		if (rc)
			return rc;
	}
	return PH_OK;
}

/*
 * Backward through the core: datt [B, T, d]  ->  dqkv [B, T, 3d] (=), from
 * the saved qkv and P.  Per sample, heads batched:
 *   dPd_h [T, T] = datt_h . v_h^T
 *   dP = M * dPd, Pd = M * P                       (drop; else Pd = P)
 *   dv_h [T, hd] = Pd_h^T . datt_h
 *   dS = softmax backward(P, dP)                   (in place in dP)
 *   dq_h = sm * dS . k_h;   dk_h = sm * dS^T . q_h
 * tmp: H*T*T floats (dP), plus H*T*T more (Pd) when drop.
 */
static inline int ph_attn_backward(const ph_ctx *ctx, const ph_attn_geom *g, int batch, int drop, uint64_t key,
				   const float *qkv, const float *P, const float *datt, float *dqkv, float *tmp,
				   ph_err *err)
{
	const int T = g->T, d = g->d, H = g->H, hd = g->hd, ld = 3 * d;
	const int64_t TT = (int64_t)T * T, rows = (int64_t)H * T;
	const float sm = (float)(1.0 / sqrt((double)hd));
	float *dP = tmp, *Pd = tmp + (size_t)H * TT;
	int rc;
	for (int b = 0; b < batch; b++) {
		const float *q = PH_ATTN_AT(qkv, b, T, ld, 0), *k = q + d, *v = q + 2 * d;
		float *dq = PH_ATTN_AT(dqkv, b, T, ld, 0), *dk = dq + d, *dv = dq + 2 * d;
		const float *da = PH_ATTN_AT(datt, b, T, d, 0);
		const float *Pb = P + (size_t)b * H * TT, *Pu = Pb;
		if ((rc = ctx->gpu->gemm(ctx, 0, 1, T, T, hd, 1.0f, da, d, hd, v, ld, hd, 0.0f, dP, T, TT, H, err)))
			return rc;
		if (drop) {
			if ((rc = ph_attn_dropout(ctx, g, key, b, Pb, Pd, dP, err)))
				return rc;
			Pu = Pd;
		}
		if ((rc = ctx->gpu->gemm(ctx, 1, 0, T, hd, T, 1.0f, Pu, T, TT, da, d, hd, 0.0f, dv, ld, hd, H, err)))
			return rc;
		ph_attn_softmax_bwd_kernel<<<ph_attn_row_blocks(rows), 32 * PH_ATTN_ROW_WARPS, 0, PH_STREAM(ctx)>>>(
			Pb, dP, rows, T);
		PH_CUDA_CHECK_LAUNCH(err, "attention softmax backward");
		if ((rc = ctx->gpu->gemm(ctx, 0, 0, T, hd, T, sm, dP, T, TT, k, ld, hd, 0.0f, dq, ld, hd, H, err)))
			return rc;
		if ((rc = ctx->gpu->gemm(ctx, 1, 0, T, hd, T, sm, dP, T, TT, q, ld, hd, 0.0f, dk, ld, hd, H, err)))
			return rc;
	}
	return PH_OK;
}

#endif
