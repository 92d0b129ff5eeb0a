/* SPDX-License-Identifier: MIT */
/*
 * flash_attention.cuh: the causal attention core fused for bf16 runs
 * (FlashAttention-2, Dao 2023), shared by attention_cuda.cu and
 * gpt_block_cuda.cu.  The plain reference is the materialised core in
 * attention_ops.cuh (and the CPU's tf_attn_forward / tf_attn_backward):
 * same layouts, same formulas, same dropout stream; this one never holds
 * the scores [B, H, T, T] in memory.
 *
 * When: ctx->precision == PH_PREC_BF16 and hd a multiple of 16 up to 128
 * (ph_flash_usable).  Any T: tiles past T are zero-filled and masked.
 * Needs sm_80 or newer (bf16 wmma; configure's NVCC_ARCH is sm_90).
 * fp32 keeps the materialised path, which tracks the CPU to rounding;
 * PIPEHOST_ATTN_FLASH=0 in the environment also keeps it (to time one
 * against the other on the same build).
 *
 * Layouts (attention_ops.cuh's): qkv [B, T, 3d] (q | k | v, head h at
 * columns h*hd of each), att [B, T, d].  Instead of P [B, H, T, T] the
 * forward saves, at the start of the P region,
 *   L2 [B, H, T]   log2 of each query row's softmax denominator:
 *                  L2_i = log2 sum_{j<=i} 2^(x_ij),  x_ij = s_ij * log2(e),
 *                  s_ij = q_i . k_j / sqrt(hd)
 * so that P_ij = 2^(x_ij - L2_i) can be recomputed in the backward.  The
 * rest of the region is not touched.
 *
 * Precision: q, k, v, dO are fp32 in memory and rounded to bf16 as their
 * tiles enter shared memory; P and dS are rounded to bf16 before their
 * products; every product accumulates in fp32 on the tensor cores (wmma,
 * 16x16x16), and the softmax statistics, O, D and the gradients stay fp32.
 * That is what the materialised path under bf16 does too (its GEMMs round
 * their inputs), so both sit within the bf16 rows of test-cuda-layers.
 *
 * Dropout on P, when rate > 0, is the materialised path's exactly:
 * element ((b*H + h)*T + i)*T + j is kept iff ph_rng_uniform(key, that
 * index) >= rate, then scaled by 1/(1 - rate); drawn in the kernels
 * (Philox is counter-based), never stored.
 *
 * Forward, one block per (b, h, 64 query rows), 4 warps of 16 rows each;
 * K and V tiles of BC keys (64 for hd <= 64, 32 above, to stay within
 * 48 KiB of static shared memory) stream through shared memory:
 *   S = Q K^T (wmma)  ->  per-warp tile in shared memory  ->  online
 *   softmax by the lanes (2 lanes per row)  ->  P (bf16) in shared memory
 *   ->  O += P V (wmma, O in accumulator fragments).
 * wmma's element layout is unspecified, so anything row-wise (the softmax,
 * rescaling O when a row's running max moves, the final 1/l) happens on
 * tiles stored to shared memory, never on fragment elements by position.
 * The running max m moves only when a tile's max exceeds it by more than
 * 8 (log2 units; the conditional rescaling of FlashAttention-4): p =
 * 2^(x - m) then stays below 256, harmless in fp32 and bf16, O / l is the
 * same mathematically, and the rescale of O (a store and a load of its
 * fragments) is skipped on most tiles.
 *
 * Backward, deterministic, no atomics:
 *   D_i = rowsum(dO_i * O_i)            (ph_fa_rowdot_kernel, fp32)
 *   dK, dV: one block per (b, h, 64 keys), looping over query tiles:
 *     P^T = 2^(K Q^T log2e/sqrt(hd) - L2)   dV += drop(P)^T dO
 *     dP^T = V dO^T (masked)                 dS^T = P^T (dP^T - D)
 *     dK += dS^T Q                           (then dK /= sqrt(hd))
 *   dQ: one block per (b, h, 64 queries), looping over key tiles:
 *     P, dP, dS again;  dQ += dS K           (then dQ /= sqrt(hd))
 * Each output element is written once, by one block, from sums in a fixed
 * order: runs repeat bit for bit, and 4 ranks give 1 rank's bytes.
 */
#ifndef PH_LAYERS_FLASH_ATTENTION_CUH
#define PH_LAYERS_FLASH_ATTENTION_CUH

#include <math.h>

#include <cuda_bf16.h>
#include <mma.h>

#include <pipehost/rng.h>

#include "attention_ops.cuh" /* ph_attn_geom */
#include "cuda_common.cuh"

typedef __nv_bfloat16 ph_bf16;
namespace ph_wmma = nvcuda::wmma;

enum {
	PH_FA_WARPS = 4,                 /* per block */
	PH_FA_THREADS = 32 * PH_FA_WARPS,
	PH_FA_BR = 16 * PH_FA_WARPS      /* rows a block owns: queries (forward, dQ), keys (dK, dV) */
};
#define PH_FA_LOG2E 1.4426950408889634f
#define PH_FA_RESCALE 8.0f /* log2 of how far p may grow before the running max moves */
#define PH_FA_FULL 0xffffffffu

/* Tile sizes for one head dimension (a multiple of 16, at most 128). */
template <int HD> struct ph_fa_dims {
	static_assert(HD % 16 == 0 && HD >= 16 && HD <= 128, "flash attention: hd a multiple of 16 up to 128");
	/* the inner loop's tile: keys (forward, dQ) or queries (dK, dV) */
	static constexpr int BC = HD <= 64 ? 64 : 32;
	/* row strides in elements, padded by 16 bytes or more so that the rows
	 * of a 16x16 fragment fall in different shared-memory banks; wmma
	 * wants them multiples of 8 (bf16) or 4 (float) */
	static constexpr int LDH = HD + 8; /* bf16 [rows][HD] tiles of q, k, v, dO */
	static constexpr int LDS = BC + 8; /* fp32 [16][BC] per warp: S, dP, O on its way out */
	static constexpr int LDP = BC + 8; /* bf16 [16][BC] per warp: P, dS */
	static constexpr int NF = HD / 16; /* fragments across hd */
	static constexpr int NB = BC / 16; /* fragments across BC */
	static constexpr int CH = BC / 8;  /* 4-column chunks per lane of a [16][BC] tile */
	/* the loops fetch their next tile while they compute (ph_fa_tile);
	 * above hd 64 the registers for it run out (ptxas spills), so there
	 * a tile is fetched when it is needed */
	static constexpr bool PF = HD <= 64;
};

/* Shared memory of every kernel here (static, <= 48 KiB: nvcc refuses more
 * without an opt-in).  kv holds two [BC][LDH] tiles (K and V, or Q and dO);
 * before the loop it stages one [PH_FA_BR][LDH] tile (2*BC >= PH_FA_BR)
 * whose rows go into each warp's fragments. */
template <int HD> struct alignas(32) ph_fa_smem {
	typedef ph_fa_dims<HD> D;
	ph_bf16 kv[2 * D::BC * D::LDH];
	float s[PH_FA_WARPS][16 * D::LDS];
	ph_bf16 p[PH_FA_WARPS][16 * D::LDP];
	float lq[D::BC], dd[D::BC]; /* dK/dV: L2 and D of the query tile */
};

/* Loads and stores of 4 elements: ph_f4 (16 bytes) and ph_bf4 (8 bytes)
 * are cuda_ops.cuh's. */
__device__ static inline ph_f4 ph_fa_ld4(const float *p, int vec4)
{
	if (vec4)
		return __ldg((const ph_f4 *)p);
	ph_f4 v;
	v.x = __ldg(p), v.y = __ldg(p + 1), v.z = __ldg(p + 2), v.w = __ldg(p + 3);
	return v;
}

/* 4 values into 4 consecutive elements of an output: fp32, or bf16
 * rounded to nearest even (the staging cast's rounding, so a product
 * reading these gets the bits it got from the fp32 values before); one
 * 16-byte (fp32) or 8-byte (bf16) store where vec4 */
template <typename T>
__device__ static inline void ph_fa_st4(T *p, float a, float b, float c, float d, int vec4)
{
	if (vec4) {
		ph_f4 v;
		v.x = a, v.y = b, v.z = c, v.w = d;
		ph_d_put4(p, v);
	} else {
		ph_d_put(p, a), ph_d_put(p + 1, b), ph_d_put(p + 2, c), ph_d_put(p + 3, d);
	}
}

/* 4 bf16 at an 8-byte-aligned p (the tiles in shared memory) */
__device__ static inline void ph_fa_stbf4(ph_bf16 *p, float a, float b, float c, float d)
{
	ph_fa_st4(p, a, b, c, d, 1);
}

/* An element of an fp32 or bf16 input as fp32 */
__device__ static inline float ph_fa_f32(float x)
{
	return x;
}

__device__ static inline float ph_fa_f32(ph_bf16 x)
{
	return __bfloat162float(x);
}

/*
 * A [ROWS][HD] tile of fp32 rows on its way into shared memory as bf16, in
 * two steps so that the loop kernels can fetch tile n+1 into registers
 * before they compute on tile n (the loads' latency, some 1000 cycles from
 * L2, then hides behind the products instead of stalling every warp at the
 * next barrier; a block has only 4 warps, and at GPT-2's shapes an SM holds
 * one or two blocks):
 *   fetch: rows r0 .. r0+ROWS-1 of src (row stride ld), zeros at or past T
 *          (so masked scores times them stay 0, never 0 * NaN); the whole
 *          block takes part, 4 consecutive floats a thread, so a row's
 *          threads read contiguous memory
 *   put:   dst [ROWS][HD + 8] = those values rounded to bf16 (nearest even)
 */
template <int HD, int ROWS> struct ph_fa_tile {
	static constexpr int G = HD / 4, N = ROWS * G / PH_FA_THREADS;
	static_assert(ROWS * G % PH_FA_THREADS == 0, "tile of whole thread groups");
	ph_f4 v[N];

	__device__ inline void fetch(const float *src, int64_t ld, int r0, int T, int vec4)
	{
#pragma unroll
		for (int it = 0; it < N; it++) {
			const int g = it * PH_FA_THREADS + (int)threadIdx.x, r = r0 + g / G, c = (g % G) * 4;
			if (r < T) {
				v[it] = ph_fa_ld4(src + (int64_t)r * ld + c, vec4);
			} else {
				v[it].x = v[it].y = v[it].z = v[it].w = 0.0f;
			}
		}
	}
	__device__ inline void put(ph_bf16 *dst) const
	{
#pragma unroll
		for (int it = 0; it < N; it++) {
			const int g = it * PH_FA_THREADS + (int)threadIdx.x;
			ph_fa_stbf4(dst + (g / G) * (HD + 8) + (g % G) * 4, v[it].x, v[it].y, v[it].z, v[it].w);
		}
	}
};

/* Both steps at once, for the tiles before a loop. */
template <int HD, int ROWS>
__device__ static inline void ph_fa_load_tile(ph_bf16 *dst, const float *src, int64_t ld, int r0, int T, int vec4)
{
	ph_fa_tile<HD, ROWS> t;
	t.fetch(src, ld, r0, T, vec4);
	t.put(dst);
}

/* Tiles of src (ROWS rows at a time) through shared memory in a loop:
 * with PF the next tile waits in registers while the block works on this
 * one, else each is loaded when its turn comes.  Every thread calls, in
 * this order: first() before the loop; then, per tile, put() before the
 * block's __syncthreads and, after it, ahead() for the next tile if any. */
template <int HD, int ROWS, bool PF> struct ph_fa_stream {
	ph_fa_tile<HD, ROWS> next;
	const float *src;
	int64_t ld;
	int T, vec4;

	__device__ inline void first(const float *s, int64_t l, int r0, int t, int v4)
	{
		src = s;
		ld = l;
		T = t;
		vec4 = v4;
		if (PF)
			next.fetch(src, ld, r0, T, vec4);
	}
	__device__ inline void put(ph_bf16 *dst, int r0)
	{
		if (PF)
			next.put(dst);
		else
			ph_fa_load_tile<HD, ROWS>(dst, src, ld, r0, T, vec4);
	}
	__device__ inline void ahead(int r0)
	{
		if (PF)
			next.fetch(src, ld, r0, T, vec4);
	}
};

/* The dropout factors of 4 consecutive elements idx .. idx+3 of the
 * micro-batch's P: scale where ph_rng_uniform(key, idx + e) >= rate, else 0.
 * One Philox call when idx is a multiple of 4, two otherwise. */
__device__ static inline void ph_fa_keep4(uint64_t key, uint64_t idx, float rate, float scale, float m[4])
{
	const unsigned o = (unsigned)(idx & 3);
	const ph_philox4 a = ph_philox4x32(key, 0, idx >> 2);
	const ph_philox4 b = o ? ph_philox4x32(key, 0, (idx >> 2) + 1) : a;
#pragma unroll
	for (unsigned e = 0; e < 4; e++) {
		const unsigned w = o + e;
		const uint32_t bits = w == 0 ? a.v[0] : w == 1 ? a.v[1] : w == 2 ? a.v[2] : w == 3 ? a.v[3] :
				      w == 4 ? b.v[0] : w == 5 ? b.v[1] : b.v[2];
		m[e] = ph_u01(bits) >= rate ? scale : 0.0f;
	}
}

/* Fragments */
typedef ph_wmma::fragment<ph_wmma::matrix_a, 16, 16, 16, ph_bf16, ph_wmma::row_major> ph_fa_a_row;
typedef ph_wmma::fragment<ph_wmma::matrix_b, 16, 16, 16, ph_bf16, ph_wmma::row_major> ph_fa_b_row;
typedef ph_wmma::fragment<ph_wmma::matrix_b, 16, 16, 16, ph_bf16, ph_wmma::col_major> ph_fa_b_col;
typedef ph_wmma::fragment<ph_wmma::accumulator, 16, 16, 16, float> ph_fa_acc;

/*
 * S [16][16*NB] (fp32, stride LDS, the warp's tile in shared memory) =
 * A [16][HD] (a's NF fragments) . X^T, X [16*NB][HD] bf16 rows in shared
 * memory (stride LDH): q k^T, dO v^T, k q^T and v dO^T are all this.
 */
template <int HD, int NB>
__device__ static inline void ph_fa_abt(float *S, const ph_fa_a_row *a, const ph_bf16 *X)
{
	typedef ph_fa_dims<HD> D;
#pragma unroll
	for (int n = 0; n < NB; n++) {
		ph_fa_acc s;
		ph_wmma::fill_fragment(s, 0.0f);
#pragma unroll
		for (int f = 0; f < D::NF; f++) {
			ph_fa_b_col x; /* (k, n) = X[n][k]: X^T */
			ph_wmma::load_matrix_sync(x, X + 16 * n * D::LDH + 16 * f, D::LDH);
			ph_wmma::mma_sync(s, a[f], x, s);
		}
		ph_wmma::store_matrix_sync(S + 16 * n, s, D::LDS, ph_wmma::mem_row_major);
	}
}

/*
 * acc [16][HD] (NF fragments) += W [16][16*NB] (bf16 in shared memory,
 * stride LDP) . Y [16*NB][HD] (bf16 rows in shared memory, stride LDH):
 * P v, dS k, P^T dO and dS^T q.
 */
template <int HD, int NB>
__device__ static inline void ph_fa_acc_wy(ph_fa_acc *acc, const ph_bf16 *W, const ph_bf16 *Y)
{
	typedef ph_fa_dims<HD> D;
#pragma unroll
	for (int kk = 0; kk < NB; kk++) {
		ph_fa_a_row w;
		ph_wmma::load_matrix_sync(w, W + 16 * kk, D::LDP);
#pragma unroll
		for (int f = 0; f < D::NF; f++) {
			ph_fa_b_row y;
			ph_wmma::load_matrix_sync(y, Y + 16 * kk * D::LDH + 16 * f, D::LDH);
			ph_wmma::mma_sync(acc[f], w, y, acc[f]);
		}
	}
}

/* a[f] = rows 16*warp .. +15 of a staged [PH_FA_BR][LDH] tile */
template <int HD> __device__ static inline void ph_fa_rows_to_a(ph_fa_a_row *a, const ph_bf16 *tile, int warp)
{
	typedef ph_fa_dims<HD> D;
#pragma unroll
	for (int f = 0; f < D::NF; f++)
		ph_wmma::load_matrix_sync(a[f], tile + 16 * warp * D::LDH + 16 * f, D::LDH);
}

/*
 * The warp's 16 rows of acc [16][HD] times a per-row factor, through the
 * warp's S tile (BC columns, so NB fragments at a time):
 *   out == NULL: acc[row] *= mul (in place, reloaded)
 *   out != NULL: out[col] = acc[row][col] * mul, out being the lane's row
 *                in global memory (fp32, or bf16 rounded to nearest even),
 *                when row_ok (the fragments are left alone)
 * Lane layout as everywhere here: row lane >> 1, 4-column chunks
 * c = 8t + 4 (lane & 1).  Starts and ends with __syncwarp: S is free to
 * reuse on both sides.
 */
template <int HD, typename TO>
__device__ static inline void ph_fa_rows_scale(ph_fa_acc *acc, float *S, float mul, TO *out, int row_ok, int vec4)
{
	typedef ph_fa_dims<HD> D;
	const int lane = threadIdx.x & 31, r = lane >> 1, hh = lane & 1;
#pragma unroll
	for (int f0 = 0; f0 < D::NF; f0 += D::NB) {
		__syncwarp();
#pragma unroll
		for (int f = 0; f < D::NB; f++)
			if (f0 + f < D::NF)
				ph_wmma::store_matrix_sync(S + 16 * f, acc[f0 + f], D::LDS, ph_wmma::mem_row_major);
		__syncwarp();
#pragma unroll
		for (int t = 0; t < 2 * D::NB; t++) {
			const int c = 8 * t + 4 * hh;
			if (f0 + t / 2 >= D::NF) /* chunk t is in fragment f0 + t/2: past hd */
				break;
			float *x = S + r * D::LDS + c;
			const ph_f4 v = *(const ph_f4 *)x;
			if (out) {
				if (row_ok)
					ph_fa_st4(out + 16 * f0 + c, v.x * mul, v.y * mul, v.z * mul, v.w * mul, vec4);
			} else {
				ph_f4 w;
				w.x = v.x * mul, w.y = v.y * mul, w.z = v.z * mul, w.w = v.w * mul;
				*(ph_f4 *)x = w;
			}
		}
		if (!out) {
			__syncwarp();
#pragma unroll
			for (int f = 0; f < D::NB; f++)
				if (f0 + f < D::NF)
					ph_wmma::load_matrix_sync(acc[f0 + f], S + 16 * f, D::LDS,
								  ph_wmma::mem_row_major);
		}
	}
	__syncwarp();
}

/* ------------------------------------------------------------------ */
/* Forward.                                                            */

/*
 * grid (B*H, ceil(T / 64)), PH_FA_THREADS threads; the heaviest query
 * tiles (the last, with the most keys) go first.  For b, h, query tile q0:
 *   att[b, i, h*HD ..] = sum_{j<=i} drop(P_ij) v_j,  P_ij = 2^(x_ij - L2_i)
 *   L2[(b*H + h)*T + i] for i in q0 .. q0+63, i < T
 * sl2 = log2(e)/sqrt(hd); b0: the first sample's index in the micro-batch
 * (for the dropout stream).  att is fp32, or bf16 (TO) for a caller whose
 * products read it in bf16 anyway.
 */
template <int HD, typename TO>
__global__ static void __launch_bounds__(PH_FA_THREADS)
ph_fa_fwd_kernel(const float *__restrict__ qkv, TO *__restrict__ att, float *__restrict__ L2, int H, int T, int d,
		 float sl2, int drop, uint64_t key, int b0, float rate, float dscale, int vec4)
{
	typedef ph_fa_dims<HD> D;
	__shared__ ph_fa_smem<HD> sh;
	const int bh = blockIdx.x, b = bh / H, h = bh % H;
	const int q0 = ((int)gridDim.y - 1 - (int)blockIdx.y) * PH_FA_BR;
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, r = lane >> 1, hh = lane & 1;
	const int64_t ld = 3 * (int64_t)d;
	const float *qb = qkv + (int64_t)b * T * ld + h * HD, *kb = qb + d, *vb = qb + 2 * d;
	const int w0 = q0 + 16 * warp, i = w0 + r; /* the warp's first query, the lane's */
	float *S = sh.s[warp];
	ph_bf16 *P = sh.p[warp];
	ph_bf16 *sK = sh.kv, *sV = sh.kv + D::BC * D::LDH;

	/* the warp's 16 query rows, in fragments for the whole loop */
	ph_fa_a_row qf[D::NF];
	ph_fa_load_tile<HD, PH_FA_BR>(sh.kv, qb, ld, q0, T, vec4);
	__syncthreads();
	ph_fa_rows_to_a<HD>(qf, sh.kv, warp);
	__syncthreads();

	ph_fa_acc of[D::NF];
#pragma unroll
	for (int f = 0; f < D::NF; f++)
		ph_wmma::fill_fragment(of[f], 0.0f);
	float m = -INFINITY, l = 0.0f; /* row i's running max (log2 units) and sum, in both its lanes */
	const uint64_t rowidx = ((uint64_t)(b0 + b) * H + h) * (uint64_t)T + (uint64_t)i; /* dropout: (.. + i)*T + j */
	const int kend = min(T, q0 + PH_FA_BR), nkt = (kend + D::BC - 1) / D::BC;
	ph_fa_stream<HD, D::BC, D::PF> ks, vs; /* the K and V tiles */
	ks.first(kb, ld, 0, T, vec4);
	vs.first(vb, ld, 0, T, vec4);
	for (int kt = 0; kt < nkt; kt++) {
		const int k0 = kt * D::BC;
		ks.put(sK, k0);
		vs.put(sV, k0);
		__syncthreads();
		if (kt + 1 < nkt) {
			ks.ahead(k0 + D::BC);
			vs.ahead(k0 + D::BC);
		}
		/* tiles wholly above the warp's rows are masked out: skip them
		 * (k0 and w0 are multiples of 16, so a tile the warp takes has
		 * key k0 <= i for each of its rows: no row is all -inf) */
		if (k0 <= w0 + 15) {
			ph_fa_abt<HD, D::NB>(S, qf, sK); /* S = Q K^T */
			__syncwarp();
			float x[D::BC / 2];
			float mx = -INFINITY;
#pragma unroll
			for (int t = 0; t < D::CH; t++) {
				const int c = 8 * t + 4 * hh;
				const ph_f4 v = *(const ph_f4 *)(S + r * D::LDS + c);
				const float s4[4] = { v.x, v.y, v.z, v.w };
#pragma unroll
				for (int e = 0; e < 4; e++) {
					const float xe = k0 + c + e <= i ? s4[e] * sl2 : -INFINITY; /* causal */
					x[4 * t + e] = xe;
					mx = fmaxf(mx, xe);
				}
			}
			mx = fmaxf(mx, __shfl_xor_sync(PH_FA_FULL, mx, 1));
			const float mnew = mx > m + PH_FA_RESCALE ? mx : m; /* m = -inf: mx */
			const float alpha = exp2f(m - mnew);                /* 1, or 0 on the first tile */
			float rs = 0.0f;
#pragma unroll
			for (int t = 0; t < D::CH; t++) {
				const int c = 8 * t + 4 * hh;
				float p[4], keep[4] = { 1.0f, 1.0f, 1.0f, 1.0f };
#pragma unroll
				for (int e = 0; e < 4; e++) {
					p[e] = exp2f(x[4 * t + e] - mnew);
					rs += p[e]; /* the normaliser counts dropped elements too */
				}
				if (drop)
					ph_fa_keep4(key, rowidx * (uint64_t)T + (uint64_t)(k0 + c), rate, dscale, keep);
				ph_fa_stbf4(P + r * D::LDP + c, p[0] * keep[0], p[1] * keep[1], p[2] * keep[2],
					    p[3] * keep[3]);
			}
			rs += __shfl_xor_sync(PH_FA_FULL, rs, 1); /* a + b == b + a: both lanes agree */
			l = l * alpha + rs;
			/* O *= alpha row-wise, only when some row's max moved (O is 0
			 * before the first tile) */
			const int moved = __any_sync(PH_FA_FULL, mnew != m);
			m = mnew;
			if (kt > 0 && moved)
				ph_fa_rows_scale<HD>(of, S, alpha, (float *)NULL, 0, 0);
			__syncwarp(); /* P complete */
			ph_fa_acc_wy<HD, D::NB>(of, P, sV); /* O += P V */
		}
		__syncthreads(); /* K, V, S and P free for the next tile */
	}
	/* att = O / l, L2 = m + log2 l */
	TO *out = att + ((int64_t)b * T + i) * d + h * HD;
	ph_fa_rows_scale<HD>(of, S, 1.0f / l, out, i < T, vec4);
	if (hh == 0 && i < T)
		L2[(int64_t)bh * T + i] = m + log2f(l);
}

/* ------------------------------------------------------------------ */
/* Backward.                                                           */

/*
 * The backward's work split (PIPEHOST_ATTN_SPLIT, default 256 rows; for
 * grids of fewer than PH_FA_SPLIT_GRID blocks unsplit): each
 * kernel's block owns an outer tile of 64 rows (keys for dK/dV, queries
 * for dQ) and loops over the inner tiles of BC rows that the causal mask
 * lets it see: up to T/BC of them, so at GPT-2's T = 1024 one block runs 16
 * tiles one after another while the lightest runs one, and with one
 * sample of 12 heads the grid holds 192 blocks of 4 warps for 132 SMs.
 * Split, an outer tile with more than qs inner tiles goes to several
 * blocks of at most qs tiles each (qs = split rows / BC), each of which
 * writes its sums unscaled to a partial slot of its own in the scratch;
 * a second kernel adds a tile's partials in slot order and writes the
 * gradient.  Every sum still runs in a fixed order (no atomics): runs
 * repeat bit for bit, and the split depends on T, hd, the heads and the
 * micro-batch's size, never on the ranks or the schedule, so 4 ranks
 * still give 1 rank's bytes.  Tiles with no more than qs inner tiles are
 * written directly, as unsplit.
 *
 * Measured on the H200 (2026-11-28, GPT-2 small, bf16, 8 micro-batches of
 * one sample: 192 blocks unsplit): dK/dV 11.85 -> 7.07 ms and dQ 5.55 ->
 * 4.02 ms of kernel time a step, 150,037 -> 158,147 tokens/s.
 *
 * Block y of a kernel's grid row: the outer tile, its inner tiles
 * [i0, i1), and its partial slot (-1: unsplit), slots numbered per (b, h)
 * in block order.  kv: dK/dV (outer key tiles from 0, the heaviest,
 * inner query tiles from the outer's first key on); else dQ (outer query
 * tiles from the last, the heaviest, inner key tiles from 0).
 */
struct ph_fa_part {
	int tile, i0, i1, slot, slot0, n;
};

__host__ __device__ static inline void ph_fa_inner(int kv, int t, int T, int bc, int *lo, int *hi)
{
	const int q0 = t * PH_FA_BR, end = T < q0 + PH_FA_BR ? T : q0 + PH_FA_BR;
	*lo = kv ? q0 / bc : 0;
	*hi = kv ? (T + bc - 1) / bc : (end + bc - 1) / bc;
}

/* The blocks an outer tile with inner tiles [lo, hi) goes to: at most qs
 * inner tiles each, 1 (unsplit) if it has no more than qs or qs <= 0.
 * One definition for the kernels (ph_fa_part_at), the host
 * (ph_fa_part_count) and the sum kernels, which must agree on every
 * tile's blocks and slots: a sum kernel counting otherwise than the
 * kernels that wrote the partials would add the wrong slots.  (The sum
 * kernels' early return tests the condition here, which is nsplit > 1,
 * without the division: nvcc cannot see that the quotient is then >= 2.) */
__host__ __device__ static inline int ph_fa_nsplit(int lo, int hi, int qs)
{
	return qs > 0 && hi - lo > qs ? (hi - lo + qs - 1) / qs : 1;
}

/* The first block of outer tile t in ph_fa_part_at's order: the blocks of
 * the tiles before it (kv: 0 .. t-1; else the later, heavier ones, nt-1
 * down to t+1), counted in that order.  The sum kernels find a tile's
 * partials with it: ph_fa_part_at(kv, ph_fa_first_block(...)) */
__host__ __device__ static inline int ph_fa_first_block(int kv, int t, int T, int bc, int qs)
{
	const int nt = (T + PH_FA_BR - 1) / PH_FA_BR;
	int y = 0;
	for (int k = kv ? 0 : nt - 1; kv ? k < t : k > t; k += kv ? 1 : -1) {
		int lo, hi;
		ph_fa_inner(kv, k, T, bc, &lo, &hi);
		y += ph_fa_nsplit(lo, hi, qs);
	}
	return y;
}

__host__ __device__ static inline ph_fa_part ph_fa_part_at(int kv, int y, int T, int bc, int qs)
{
	const int nt = (T + PH_FA_BR - 1) / PH_FA_BR;
	ph_fa_part p = { -1, 0, 0, -1, 0, 0 };
	int slot = 0;
	for (int k = 0; k < nt; k++) {
		const int t = kv ? k : nt - 1 - k;
		int lo, hi;
		ph_fa_inner(kv, t, T, bc, &lo, &hi);
		const int ns = ph_fa_nsplit(lo, hi, qs);
		if (y < ns) {
			const int w = ns > 1 ? qs : hi - lo;
			p.tile = t;
			p.i0 = lo + y * w;
			p.i1 = p.i0 + w < hi ? p.i0 + w : hi;
			p.slot = ns > 1 ? slot + y : -1;
			p.slot0 = slot;
			p.n = ns;
			return p;
		}
		y -= ns;
		if (ns > 1)
			slot += ns;
	}
	return p;
}

/* Blocks per (b, h) and partial slots per (b, h) of a split (tile = -1:
 * past the last block) */
static inline void ph_fa_part_count(int kv, int T, int bc, int qs, int *blocks, int *slots)
{
	const int nt = (T + PH_FA_BR - 1) / PH_FA_BR;
	*blocks = *slots = 0;
	for (int t = 0; t < nt; t++) {
		int lo, hi;
		ph_fa_inner(kv, t, T, bc, &lo, &hi);
		const int ns = ph_fa_nsplit(lo, hi, qs);
		*blocks += ns;
		if (ns > 1)
			*slots += ns;
	}
}

/*
 * D[(b*H + h)*T + i] = sum_c dO[b, i, h*hd + c] O[b, i, h*hd + c] for B
 * samples: one warp per (b, i, h), lanes over c, a fixed shuffle tree.
 * (= sum_j P_ij dP_ij with the dropout mask inside, as the materialised
 * softmax backward sums it: O = drop(P) v.)  O as the forward wrote it:
 * fp32 or bf16.
 */
template <typename TO>
__global__ static void ph_fa_rowdot_kernel(const float *__restrict__ dO, const TO *__restrict__ O,
					   float *__restrict__ Dv, int B, int T, int H, int hd, int d)
{
	const int lane = threadIdx.x & 31;
	const int64_t n = (int64_t)B * T * H, warps = (int64_t)gridDim.x * (blockDim.x >> 5);
	for (int64_t w = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); w < n; w += warps) {
		const int h = (int)(w % H);
		const int64_t row = w / H; /* b*T + i */
		const float *a = dO + row * d + h * hd;
		const TO *o = O + row * d + h * hd;
		float s = 0.0f;
		for (int c = lane; c < hd; c += 32)
			s += a[c] * ph_fa_f32(o[c]);
		for (int off = 16; off > 0; off >>= 1)
			s += __shfl_xor_sync(PH_FA_FULL, s, off);
		if (lane == 0)
			Dv[((row / T) * H + h) * T + row % T] = s;
	}
}

/*
 * dK, dV: grid (B*H, ceil(T / 64)), one block per 64 keys (4 warps of 16),
 * key tile 0 (the one every query sees) first.  For the warp's keys j:
 *   dv_j = sum_{i>=j} drop(P_ij) dO_i
 *   dk_j = sm * sum_{i>=j} dS_ij q_i,  dS_ij = P_ij (M_ij dPd_ij - D_i)
 * written to the k and v columns of dqkv (fp32, or bf16: TG).  The
 * per-warp tiles are transposed ([16 keys][BC queries]): the lanes' rows
 * are keys.
 */
template <int HD, typename TG>
__global__ static void __launch_bounds__(PH_FA_THREADS)
ph_fa_dkdv_kernel(const float *__restrict__ qkv, const float *__restrict__ dO, const float *__restrict__ L2,
		  const float *__restrict__ Dv, TG *__restrict__ dqkv, int H, int T, int d, float sl2, float sm,
		  int drop, uint64_t key, int b0, float rate, float dscale, int vec4, int qs,
		  float *__restrict__ part, int nslots)
{
	typedef ph_fa_dims<HD> D;
	__shared__ ph_fa_smem<HD> sh;
	const int bh = blockIdx.x, b = bh / H, h = bh % H;
	const ph_fa_part pt = ph_fa_part_at(1, (int)blockIdx.y, T, D::BC, qs);
	const int k0 = pt.tile * PH_FA_BR;
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, r = lane >> 1, hh = lane & 1;
	const int64_t ld = 3 * (int64_t)d;
	const float *qb = qkv + (int64_t)b * T * ld + h * HD, *kb = qb + d, *vb = qb + 2 * d;
	const float *ob = dO + (int64_t)b * T * d + h * HD;
	const int jw = k0 + 16 * warp, j = jw + r; /* the warp's first key, the lane's */
	float *S = sh.s[warp];
	ph_bf16 *P = sh.p[warp];
	ph_bf16 *sQ = sh.kv, *sO = sh.kv + D::BC * D::LDH;

	/* the warp's 16 keys and values, in fragments for the whole loop */
	ph_fa_a_row kf[D::NF], vf[D::NF];
	ph_fa_load_tile<HD, PH_FA_BR>(sh.kv, kb, ld, k0, T, vec4);
	__syncthreads();
	ph_fa_rows_to_a<HD>(kf, sh.kv, warp);
	__syncthreads();
	ph_fa_load_tile<HD, PH_FA_BR>(sh.kv, vb, ld, k0, T, vec4);
	__syncthreads();
	ph_fa_rows_to_a<HD>(vf, sh.kv, warp);
	__syncthreads();

	ph_fa_acc dkf[D::NF], dvf[D::NF];
#pragma unroll
	for (int f = 0; f < D::NF; f++) {
		ph_wmma::fill_fragment(dkf[f], 0.0f);
		ph_wmma::fill_fragment(dvf[f], 0.0f);
	}
	const uint64_t bhT = ((uint64_t)(b0 + b) * H + h) * (uint64_t)T; /* dropout: (bhT + i)*T + j */
	const float *Lb = L2 + (int64_t)bh * T, *Db = Dv + (int64_t)bh * T;
	/* queries before k0 see none of these keys: the block's query tiles
	 * start at or after the first that does (ph_fa_inner) */
	const int nqt = pt.i1;
	/* the next Q tile (in flight with D::PF; dO is fetched when it is
	 * needed: registers for both spill, with dK, dV, K and V held) */
	ph_fa_stream<HD, D::BC, D::PF> qstr;
	qstr.first(qb, ld, pt.i0 * D::BC, T, vec4);
	for (int qt = pt.i0; qt < nqt; qt++) {
		const int q0 = qt * D::BC;
		qstr.put(sQ, q0);
		ph_fa_load_tile<HD, D::BC>(sO, ob, d, q0, T, vec4);
		for (int c = threadIdx.x; c < D::BC; c += PH_FA_THREADS) {
			const int iq = q0 + c;
			sh.lq[c] = iq < T ? Lb[iq] : INFINITY; /* rows past T: P = 2^-inf = 0 */
			sh.dd[c] = iq < T ? Db[iq] : 0.0f;
		}
		__syncthreads();
		if (qt + 1 < nqt)
			qstr.ahead(q0 + D::BC);
		if (q0 + D::BC - 1 >= jw) { /* some query of the tile sees some key of the warp */
			ph_fa_abt<HD, D::NB>(S, kf, sQ); /* S^T = K Q^T */
			__syncwarp();
			float p[D::BC / 2];
			uint32_t kept = 0; /* bit 4t+e: element kept by dropout */
#pragma unroll
			for (int t = 0; t < D::CH; t++) {
				const int c = 8 * t + 4 * hh;
				const ph_f4 v = *(const ph_f4 *)(S + r * D::LDS + c);
				const ph_f4 lq = *(const ph_f4 *)(sh.lq + c);
				const float s4[4] = { v.x, v.y, v.z, v.w }, l4[4] = { lq.x, lq.y, lq.z, lq.w };
				float pd[4];
#pragma unroll
				for (int e = 0; e < 4; e++) {
					const int iq = q0 + c + e;
					p[4 * t + e] = iq >= j ? exp2f(s4[e] * sl2 - l4[e]) : 0.0f;
					pd[e] = p[4 * t + e];
					if (drop) {
						const int k = ph_rng_uniform(key, (bhT + (uint64_t)iq) * (uint64_t)T +
										  (uint64_t)j) >= rate;
						kept |= (uint32_t)k << (4 * t + e);
						pd[e] = k ? pd[e] * dscale : 0.0f;
					}
				}
				ph_fa_stbf4(P + r * D::LDP + c, pd[0], pd[1], pd[2], pd[3]);
			}
			__syncwarp(); /* P^T complete, S^T read */
			ph_fa_acc_wy<HD, D::NB>(dvf, P, sO); /* dV += drop(P)^T dO */
			ph_fa_abt<HD, D::NB>(S, vf, sO);     /* dP^T = V dO^T */
			__syncwarp();                        /* dP^T complete, P^T read */
#pragma unroll
			for (int t = 0; t < D::CH; t++) {
				const int c = 8 * t + 4 * hh;
				const ph_f4 v = *(const ph_f4 *)(S + r * D::LDS + c);
				const ph_f4 dd = *(const ph_f4 *)(sh.dd + c);
				const float g4[4] = { v.x, v.y, v.z, v.w }, d4[4] = { dd.x, dd.y, dd.z, dd.w };
				float ds[4];
#pragma unroll
				for (int e = 0; e < 4; e++) {
					float g = g4[e];
					if (drop)
						g = (kept >> (4 * t + e)) & 1 ? g * dscale : 0.0f;
					ds[e] = p[4 * t + e] * (g - d4[e]);
				}
				ph_fa_stbf4(P + r * D::LDP + c, ds[0], ds[1], ds[2], ds[3]);
			}
			__syncwarp();                        /* dS^T complete */
			ph_fa_acc_wy<HD, D::NB>(dkf, P, sQ); /* dK += dS^T Q */
		}
		__syncthreads(); /* Q, dO, L2, D, S and P free for the next tile */
	}
	if (pt.slot >= 0) { /* a partial: [2][64][HD] (dK, dV) unscaled, summed by ph_fa_dkdv_sum_kernel */
		float *pk = part + ((int64_t)bh * nslots + pt.slot) * 2 * PH_FA_BR * HD + (16 * warp + r) * HD;
		ph_fa_rows_scale<HD>(dkf, S, 1.0f, pk, 1, 1);
		ph_fa_rows_scale<HD>(dvf, S, 1.0f, pk + PH_FA_BR * HD, 1, 1);
		return;
	}
	TG *dk = dqkv + ((int64_t)b * T + j) * ld + d + h * HD;
	ph_fa_rows_scale<HD>(dkf, S, sm, dk, j < T, vec4);
	ph_fa_rows_scale<HD>(dvf, S, 1.0f, dk + d, j < T, vec4);
}

/*
 * The split tiles' dK, dV: grid (B*H, ceil(T / 64)), block x of row
 * (b, h) adds the partials of key tile y in slot order, if it was split:
 *   dk_j = sm * sum_s part_s.dk_j,  dv_j = sum_s part_s.dv_j
 */
template <int HD, typename TG>
__global__ static void ph_fa_dkdv_sum_kernel(const float *__restrict__ part, TG *__restrict__ dqkv, int H, int T,
					     int d, float sm, int qs, int nslots)
{
	typedef ph_fa_dims<HD> D;
	const int bh = blockIdx.x, b = bh / H, h = bh % H, t = (int)blockIdx.y;
	int lo, hi;
	ph_fa_inner(1, t, T, D::BC, &lo, &hi);
	if (!(qs > 0 && hi - lo > qs)) /* ph_fa_nsplit(lo, hi, qs) == 1: written by the kernel */
		return;
	/* the tile's first block: its first slot and number of partials */
	const ph_fa_part pt = ph_fa_part_at(1, ph_fa_first_block(1, t, T, D::BC, qs), T, D::BC, qs);
	const int64_t ld = 3 * (int64_t)d, tile = 2 * PH_FA_BR * HD;
	const float *p0 = part + ((int64_t)bh * nslots + pt.slot0) * tile;
	for (int e = threadIdx.x; e < PH_FA_BR * HD; e += blockDim.x) {
		const int j = t * PH_FA_BR + e / HD, c = e % HD;
		if (j >= T)
			break;
		float sk = 0.0f, sv = 0.0f;
		for (int s = 0; s < pt.n; s++) {
			sk += p0[s * tile + e];
			sv += p0[s * tile + PH_FA_BR * HD + e];
		}
		TG *dk = dqkv + ((int64_t)b * T + j) * ld + d + h * HD + c;
		ph_d_put(dk, sk * sm);
		ph_d_put(dk + d, sv);
	}
}

/*
 * dQ: grid (B*H, ceil(T / 64)), one block per 64 queries (4 warps of 16),
 * the heaviest first, looping over key tiles as the forward does:
 *   dq_i = sm * sum_{j<=i} dS_ij k_j
 * written to the q columns of dqkv (TG as in ph_fa_dkdv_kernel).
 */
template <int HD, typename TG>
__global__ static void __launch_bounds__(PH_FA_THREADS)
ph_fa_dq_kernel(const float *__restrict__ qkv, const float *__restrict__ dO, const float *__restrict__ L2,
		const float *__restrict__ Dv, TG *__restrict__ dqkv, int H, int T, int d, float sl2, float sm,
		int drop, uint64_t key, int b0, float rate, float dscale, int vec4, int qs, float *__restrict__ part,
		int nslots)
{
	typedef ph_fa_dims<HD> D;
	__shared__ ph_fa_smem<HD> sh;
	const int bh = blockIdx.x, b = bh / H, h = bh % H;
	const ph_fa_part pt = ph_fa_part_at(0, (int)blockIdx.y, T, D::BC, qs);
	const int q0 = pt.tile * PH_FA_BR;
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, r = lane >> 1, hh = lane & 1;
	const int64_t ld = 3 * (int64_t)d;
	const float *qb = qkv + (int64_t)b * T * ld + h * HD, *kb = qb + d, *vb = qb + 2 * d;
	const float *ob = dO + (int64_t)b * T * d + h * HD;
	const int w0 = q0 + 16 * warp, i = w0 + r;
	float *S = sh.s[warp];
	ph_bf16 *P = sh.p[warp];
	ph_bf16 *sK = sh.kv, *sV = sh.kv + D::BC * D::LDH;

	ph_fa_a_row qf[D::NF], of[D::NF]; /* the warp's rows of q and dO */
	ph_fa_load_tile<HD, PH_FA_BR>(sh.kv, qb, ld, q0, T, vec4);
	__syncthreads();
	ph_fa_rows_to_a<HD>(qf, sh.kv, warp);
	__syncthreads();
	ph_fa_load_tile<HD, PH_FA_BR>(sh.kv, ob, d, q0, T, vec4);
	__syncthreads();
	ph_fa_rows_to_a<HD>(of, sh.kv, warp);
	__syncthreads();

	ph_fa_acc dqf[D::NF];
#pragma unroll
	for (int f = 0; f < D::NF; f++)
		ph_wmma::fill_fragment(dqf[f], 0.0f);
	const float li = i < T ? L2[(int64_t)bh * T + i] : INFINITY, di = i < T ? Dv[(int64_t)bh * T + i] : 0.0f;
	const uint64_t rowidx = ((uint64_t)(b0 + b) * H + h) * (uint64_t)T + (uint64_t)i;
	const int nkt = pt.i1; /* the block's key tiles: pt.i0 .. nkt-1 */
	ph_fa_stream<HD, D::BC, D::PF> ks, vs; /* the K and V tiles */
	ks.first(kb, ld, pt.i0 * D::BC, T, vec4);
	vs.first(vb, ld, pt.i0 * D::BC, T, vec4);
	for (int kt = pt.i0; kt < nkt; kt++) {
		const int k0 = kt * D::BC;
		ks.put(sK, k0);
		vs.put(sV, k0);
		__syncthreads();
		if (kt + 1 < nkt) {
			ks.ahead(k0 + D::BC);
			vs.ahead(k0 + D::BC);
		}
		if (k0 <= w0 + 15) {
			ph_fa_abt<HD, D::NB>(S, qf, sK); /* S = Q K^T */
			__syncwarp();
			float p[D::BC / 2];
#pragma unroll
			for (int t = 0; t < D::CH; t++) {
				const int c = 8 * t + 4 * hh;
				const ph_f4 v = *(const ph_f4 *)(S + r * D::LDS + c);
				const float s4[4] = { v.x, v.y, v.z, v.w };
#pragma unroll
				for (int e = 0; e < 4; e++)
					p[4 * t + e] = k0 + c + e <= i ? exp2f(s4[e] * sl2 - li) : 0.0f;
			}
			__syncwarp(); /* S read */
			ph_fa_abt<HD, D::NB>(S, of, sV); /* dP = dO V^T (before the dropout mask) */
			__syncwarp();
#pragma unroll
			for (int t = 0; t < D::CH; t++) {
				const int c = 8 * t + 4 * hh;
				const ph_f4 v = *(const ph_f4 *)(S + r * D::LDS + c);
				float g[4] = { v.x, v.y, v.z, v.w }, keep[4] = { 1.0f, 1.0f, 1.0f, 1.0f };
				if (drop)
					ph_fa_keep4(key, rowidx * (uint64_t)T + (uint64_t)(k0 + c), rate, dscale, keep);
				float ds[4];
#pragma unroll
				for (int e = 0; e < 4; e++)
					ds[e] = p[4 * t + e] * (g[e] * keep[e] - di);
				ph_fa_stbf4(P + r * D::LDP + c, ds[0], ds[1], ds[2], ds[3]);
			}
			__syncwarp();                        /* dS complete */
			ph_fa_acc_wy<HD, D::NB>(dqf, P, sK); /* dQ += dS K */
		}
		__syncthreads();
	}
	if (pt.slot >= 0) { /* a partial: [64][HD] unscaled, summed by ph_fa_dq_sum_kernel */
		float *pq = part + ((int64_t)bh * nslots + pt.slot) * PH_FA_BR * HD + (16 * warp + r) * HD;
		ph_fa_rows_scale<HD>(dqf, S, 1.0f, pq, 1, 1);
		return;
	}
	TG *dq = dqkv + ((int64_t)b * T + i) * ld + h * HD;
	ph_fa_rows_scale<HD>(dqf, S, sm, dq, i < T, vec4);
}

/* The split tiles' dQ (ph_fa_dkdv_sum_kernel's twin): grid (B*H,
 * ceil(T / 64)), query tile y: dq_i = sm * sum_s part_s.dq_i */
template <int HD, typename TG>
__global__ static void ph_fa_dq_sum_kernel(const float *__restrict__ part, TG *__restrict__ dqkv, int H, int T,
					   int d, float sm, int qs, int nslots)
{
	typedef ph_fa_dims<HD> D;
	const int bh = blockIdx.x, b = bh / H, h = bh % H, t = (int)blockIdx.y;
	int lo, hi;
	ph_fa_inner(0, t, T, D::BC, &lo, &hi);
	if (!(qs > 0 && hi - lo > qs)) /* ph_fa_nsplit(lo, hi, qs) == 1: written by the kernel */
		return;
	const ph_fa_part pt = ph_fa_part_at(0, ph_fa_first_block(0, t, T, D::BC, qs), T, D::BC, qs);
	const int64_t ld = 3 * (int64_t)d, tile = PH_FA_BR * HD;
	const float *p0 = part + ((int64_t)bh * nslots + pt.slot0) * tile;
	for (int e = threadIdx.x; e < PH_FA_BR * HD; e += blockDim.x) {
		const int i = t * PH_FA_BR + e / HD, c = e % HD;
		if (i >= T)
			break;
		float sq = 0.0f;
		for (int s = 0; s < pt.n; s++)
			sq += p0[s * tile + e];
		ph_d_put(dqkv + ((int64_t)b * T + i) * ld + h * HD + c, sq * sm);
	}
}

#include "flash_mma.cuh" /* the forward with the scores in registers (PIPEHOST_ATTN_MMA=1) */

/* ------------------------------------------------------------------ */
/* Host side.                                                          */

/* Whether this attention takes the fused path (see the top). */
static inline int ph_flash_usable_at(int precision, const ph_attn_geom *g)
{
	/* PIPEHOST_ATTN_FLASH=0: the materialised path under bf16 too; read
	 * once (C++ makes that thread-safe) */
	static const int off = ph_env_off("PIPEHOST_ATTN_FLASH");
	return !off && precision == PH_PREC_BF16 && g->hd % 16 == 0 && g->hd >= 16 && g->hd <= 128 && g->T > 0;
}

/* The same, for a call: a twin's saved_bytes hook (ABI 1.6) asks the
 * first, with the run's precision, and sizes the P region by it. */
static inline int ph_flash_usable(const ph_ctx *ctx, const ph_attn_geom *g)
{
	return ph_flash_usable_at(ctx->precision, g);
}

static inline int ph_fa_aligned(const void *a, const void *b, const void *c)
{
	return (((uintptr_t)a | (uintptr_t)b | (uintptr_t)c) & 15) == 0;
}

template <int HD, typename TO>
static inline void ph_fa_forward_hd(cudaStream_t st, const ph_attn_geom *g, int batch, int drop, uint64_t key,
				    const float *qkv, float *L2, TO *att, float sl2, int vec4)
{
	static_assert(sizeof(ph_fa_smem<HD>) <= 48 * 1024, "static shared memory over 48 KiB");
	const dim3 grid((unsigned)(batch * g->H), (unsigned)((g->T + PH_FA_BR - 1) / PH_FA_BR));
	ph_fa_fwd_kernel<HD, TO><<<grid, PH_FA_THREADS, 0, st>>>(qkv, att, L2, g->H, g->T, g->d, sl2, drop, key, 0,
								   g->rate, g->scale, vec4);
}

/* The backward's split (see ph_fa_part): inner tiles per block, 0 for
 * none.  PIPEHOST_ATTN_SPLIT=N: N rows (a multiple of the tile), 0 or
 * off: unsplit, one block per outer tile; default 256 rows.  Read once. */
static inline int ph_fa_split_tiles(int hd)
{
	static const int rows = [] {
		const char *v = getenv("PIPEHOST_ATTN_SPLIT");
		if (!v || !*v)
			return 256;
		if (!strcmp(v, "off"))
			return 0;
		const long n = strtol(v, NULL, 10);
		return n > 0 && n <= 1 << 20 ? (int)n : 0;
	}();
	const int bc = hd <= 64 ? 64 : 32;
	return rows > 0 ? (rows + bc - 1) / bc : 0;
}

/* The backward splits only grids of fewer blocks than this, unsplit
 * (batch x heads x 64-row tiles): some 8 a SM on the H100's and H200's
 * 132 */
#define PH_FA_SPLIT_GRID 1024

/* The backward's plan for one group of samples (ph_flash_backward) */
struct ph_fa_bwd_plan {
	int qs;              /* inner tiles per block, 0: unsplit */
	int ykv, skv, yq, sq; /* blocks and partial slots per (b, h): dK/dV, dQ */
};

template <int HD, typename TG>
static inline void ph_fa_backward_hd(cudaStream_t st, const ph_attn_geom *g, int batch, int b0, int drop,
				     uint64_t key, const float *qkv, const float *L2, const float *Dv,
				     const float *datt, TG *dqkv, float sl2, float sm, int vec4,
				     const ph_fa_bwd_plan *pl, float *part)
{
	static_assert(sizeof(ph_fa_smem<HD>) <= 48 * 1024, "static shared memory over 48 KiB");
	const unsigned bh = (unsigned)(batch * g->H), nt = (unsigned)((g->T + PH_FA_BR - 1) / PH_FA_BR);
	float *pq = part + (size_t)bh * pl->skv * 2 * PH_FA_BR * HD; /* dQ's partials after dK/dV's */
	if (ph_fam_on()) {
		ph_fam_backward_kernels<HD, TG>(st, dim3(bh, (unsigned)pl->ykv), dim3(bh, (unsigned)pl->yq), qkv, datt,
						L2, Dv, dqkv, g->H, g->T, g->d, sl2, sm, drop, key, b0, g->rate,
						g->scale, vec4, pl->qs, part, pl->skv, pq, pl->sq);
	} else {
		ph_fa_dkdv_kernel<HD, TG><<<dim3(bh, (unsigned)pl->ykv), PH_FA_THREADS, 0, st>>>(
			qkv, datt, L2, Dv, dqkv, g->H, g->T, g->d, sl2, sm, drop, key, b0, g->rate, g->scale, vec4,
			pl->qs, part, pl->skv);
		ph_fa_dq_kernel<HD, TG><<<dim3(bh, (unsigned)pl->yq), PH_FA_THREADS, 0, st>>>(
			qkv, datt, L2, Dv, dqkv, g->H, g->T, g->d, sl2, sm, drop, key, b0, g->rate, g->scale, vec4,
			pl->qs, pq, pl->sq);
	}
	if (pl->skv)
		ph_fa_dkdv_sum_kernel<HD, TG><<<dim3(bh, nt), 256, 0, st>>>(part, dqkv, g->H, g->T, g->d, sm, pl->qs,
									   pl->skv);
	if (pl->sq)
		ph_fa_dq_sum_kernel<HD, TG><<<dim3(bh, nt), 256, 0, st>>>(pq, dqkv, g->H, g->T, g->d, sm, pl->qs,
									 pl->sq);
}

#define PH_FA_DISPATCH(hd, call)                                                   \
	switch (hd) {                                                              \
	case 16: call(16); break;                                                  \
	case 32: call(32); break;                                                  \
	case 48: call(48); break;                                                  \
	case 64: call(64); break;                                                  \
	case 80: call(80); break;                                                  \
	case 96: call(96); break;                                                  \
	case 112: call(112); break;                                                \
	case 128: call(128); break;                                                \
	default: return ph_fail(err, PH_EINTERNAL, "flash attention: hd = %d", hd); \
	}

/*
 * Forward from the projected qkv of `batch` samples (ph_attn_forward's
 * twin; ph_flash_usable(ctx, g) must hold):
 *   att [B, T, d], L2 [B, H, T] (at the start of the saved P region)
 * att is fp32, or bf16 (TO = ph_bf16) for a caller whose products read it
 * in bf16: the same bits they would read after rounding the fp32 one.
 */
template <typename TO>
static inline int ph_flash_forward(const ph_ctx *ctx, const ph_attn_geom *g, int batch, int drop, uint64_t key,
				   const float *qkv, float *L2, TO *att, ph_err *err)
{
	const float sm = (float)(1.0 / sqrt((double)g->hd)), sl2 = sm * PH_FA_LOG2E;
	const int vec4 = ph_fa_aligned(qkv, att, att);
	const cudaStream_t st = PH_STREAM(ctx);
	if (batch <= 0)
		return PH_OK;
#define PH_FA_FWD(HD) ph_fa_forward_hd<HD, TO>(st, g, batch, drop, key, qkv, L2, att, sl2, vec4)
#define PH_FAM_FWD(HD) ph_fam_forward_hd<HD, TO>(st, g, batch, drop, key, qkv, L2, att, sl2, vec4)
	if (ph_fam_on()) {
		PH_FA_DISPATCH(g->hd, PH_FAM_FWD)
	} else {
		PH_FA_DISPATCH(g->hd, PH_FA_FWD)
	}
#undef PH_FAM_FWD
#undef PH_FA_FWD
	PH_CUDA_CHECK_LAUNCH(err, "flash attention forward");
	return PH_OK;
}

/*
 * Backward (ph_attn_backward's twin): datt [B, T, d] -> dqkv [B, T, 3d]
 * (=), from qkv, L2 and the forward's att (for D; fp32 or bf16 as the
 * forward wrote it).  dqkv is fp32, or bf16 (TG = ph_bf16) for a caller
 * whose products read it in bf16.  tmp: the materialised path's H*T*T
 * floats of scratch; D [b, H, T] takes b*H*T of it, then the split's
 * partials (ph_fa_part) theirs, so the batch goes in groups of as many
 * samples as both fit for (at most T samples unsplit; at GPT-2's T = 1024,
 * hd 64, 3 split).  If not even one sample's partials fit, unsplit.
 */
template <typename TO, typename TG>
static inline int ph_flash_backward(const ph_ctx *ctx, const ph_attn_geom *g, int batch, int drop, uint64_t key,
				    const float *qkv, const float *L2, const TO *att, const float *datt,
				    TG *dqkv, float *tmp, ph_err *err)
{
	const int T = g->T, d = g->d, H = g->H, hd = g->hd, ld = 3 * d;
	const float sm = (float)(1.0 / sqrt((double)hd)), sl2 = sm * PH_FA_LOG2E;
	const cudaStream_t st = PH_STREAM(ctx);
	const int vec4 = ph_fa_aligned(qkv, datt, dqkv);
	const int bc = hd <= 64 ? 64 : 32;
	ph_fa_bwd_plan pl;
	size_t per, room = (size_t)H * T * T; /* floats a sample needs, floats of tmp */
	/* only a small grid is split: with enough blocks unsplit (the batch
	 * as one micro-batch, 8 samples of GPT-2: 1536) the SMs are busy
	 * anyway, and the split's groups, extra launches and partials cost
	 * more than its balance gives (H200: 36.6 ms a step split, 33.0
	 * unsplit) */
	const int small = (int64_t)batch * H * ((T + PH_FA_BR - 1) / PH_FA_BR) < PH_FA_SPLIT_GRID;
	for (pl.qs = small ? ph_fa_split_tiles(hd) : 0;; pl.qs = 0) {
		ph_fa_part_count(1, T, bc, pl.qs, &pl.ykv, &pl.skv);
		ph_fa_part_count(0, T, bc, pl.qs, &pl.yq, &pl.sq);
		/* D, and if split 4 floats of room to align the partials to 16
		 * bytes and those (unsplit, groups of T samples as before) */
		per = (size_t)H * T;
		if (pl.skv || pl.sq)
			per += 4 + (size_t)H * ((size_t)pl.skv * 2 + pl.sq) * PH_FA_BR * hd;
		if (per <= room || !pl.qs)
			break;
	}
	const int group = room / per < (size_t)T ? (int)(room / per) : T;
	for (int b0 = 0; b0 < batch; b0 += group) {
		const int nb = batch - b0 < group ? batch - b0 : group;
		const size_t q = (size_t)b0 * T * ld, o = (size_t)b0 * T * d, l = (size_t)b0 * H * T;
		const int64_t rows = (int64_t)nb * T * H;
		ph_fa_rowdot_kernel<TO><<<ph_attn_row_blocks(rows), 32 * PH_ATTN_ROW_WARPS, 0, st>>>(
			datt + o, att + o, tmp, nb, T, H, hd, d);
		PH_CUDA_CHECK_LAUNCH(err, "flash attention backward: D");
#define PH_FA_BWD(HD)                                                                                         \
	ph_fa_backward_hd<HD, TG>(st, g, nb, b0, drop, key, qkv + q, L2 + l, tmp, datt + o, dqkv + q, sl2, sm, vec4, \
				  &pl, tmp + (((size_t)nb * H * T + 3) & ~(size_t)3))
		PH_FA_DISPATCH(hd, PH_FA_BWD)
#undef PH_FA_BWD
		PH_CUDA_CHECK_LAUNCH(err, "flash attention backward");
	}
	return PH_OK;
}

#endif
