/* SPDX-License-Identifier: MIT */
/*
 * flash_mma.cuh: the fused attention core (flash_attention.cuh's forward,
 * dK/dV and dQ kernels) with its tiles kept in registers, FlashAttention-2's
 * layout; included by flash_attention.cuh.  Off by default until a GPU has
 * timed it: PIPEHOST_ATTN_MMA=1 takes it (read at each call, so a test can
 * take both paths in one process).
 *
 * Why: the wmma fragments of ph_fa_*_kernel have no documented element
 * layout, so each score tile goes to shared memory and back (a store,
 * __syncwarp, the softmax or dS by lanes, P or dS stored as bf16, loaded
 * again as a fragment), and O the same way when a row's max moves.  With
 * mma.sync.m16n8k16 the PTX ISA documents where each element lives: the
 * softmax and dS run on the accumulators themselves and go from them into
 * the next product's operand without leaving the registers.  On the H200
 * (2026-11-28) our wmma kernels took 11.1 ms of a GPT-2 step's backward
 * where cuDNN's fused one took 2.95.
 *
 * Same inputs, outputs, formulas, dropout stream and work split
 * (ph_fa_part) as the kernels they stand for, one difference: the
 * forward's running max moves to every tile's max (rescaling O is a
 * multiply in registers here), so P is at most 1.  The tiles a product
 * reads along its k dimension by pairs are stored transposed in shared
 * memory as they load (V in the forward; Q and dO for dK/dV; K for dQ).
 *
 * Registers (ptxas, CUDA 13, sm_90, hd 64): forward 208, dK/dV 243, dQ
 * 228, none spilled.  The forward and dK/dV spill at hd 112 (64 and 52
 * bytes) and hd 128 (196 and 164 bytes); GPT-2's hd is 64.
 *
 * The fragments of mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32
 * (PTX ISA, "Matrix fragments for mma.m16n8k16"), lane = 4g + q:
 *   A [16][16] (row): a[0] = A[g][2q, 2q+1],   a[1] = A[g+8][2q, 2q+1],
 *                     a[2] = A[g][2q+8, +9],   a[3] = A[g+8][2q+8, +9]
 *   B [16][8]  (col): b[0] = B[2q, 2q+1][g],   b[1] = B[2q+8, +9][g]
 *   C [16][8]  fp32:  c[0], c[1] = C[g][2q, 2q+1], c[2], c[3] = C[g+8][2q, 2q+1]
 * (each a[] and b[] a pair of bf16, the lower index in the low half).  So
 * C's tiles j and j+1 of a [16][16k] product are, lane by lane, the A
 * operand of the next product's k-step k: P never moves.
 *
 * The emulator (tests/cuemu, CUEMU) has no PTX: there ph_mma_16816 gathers
 * the operands it needs from the other lanes with shuffles, by the layout
 * above, and sums in fp32 in k order; a kernel that indexes its fragments
 * otherwise fails the emulator's comparisons with the CPU (swapping a[1]
 * and a[2] in ph_mma_a failed every case of test-cuda-layers that takes
 * these kernels).  That the layout above is the hardware's, only a GPU
 * can show: test-cuda-layers' cases marked .mma there.
 */
#ifndef PH_LAYERS_FLASH_MMA_CUH
#define PH_LAYERS_FLASH_MMA_CUH

#include <stdint.h>
#include <string.h>

/* Two floats as a bf16 pair, rounded to nearest even: lo in the low half */
__device__ static inline uint32_t ph_mma_pack(float lo, float hi)
{
	const ph_bf16 a = __float2bfloat16(lo), b = __float2bfloat16(hi);
	uint16_t ua, ub;
	memcpy(&ua, &a, 2);
	memcpy(&ub, &b, 2);
	return (uint32_t)ua | (uint32_t)ub << 16;
}

/* A bf16 pair from shared memory (an even element index: 4-byte aligned) */
__device__ static inline uint32_t ph_mma_ld2(const ph_bf16 *p)
{
	return *(const uint32_t *)p;
}

#ifdef CUEMU
__device__ static inline float ph_mma_lo(uint32_t v)
{
	uint16_t u = (uint16_t)(v & 0xffffu);
	ph_bf16 b;
	memcpy(&b, &u, 2);
	return __bfloat162float(b);
}

__device__ static inline float ph_mma_hi(uint32_t v)
{
	return ph_mma_lo(v >> 16);
}
#endif

/* d [16][8] += a [16][16] . b [16][8], the fragments above */
__device__ static inline void ph_mma_16816(float d[4], const uint32_t a[4], const uint32_t b[2])
{
#ifdef CUEMU
	const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
	float A[2][16], B[2][16]; /* rows g, g+8 of a; columns 2q, 2q+1 of b */
	for (int t = 0; t < 4; t++) {
		/* lane 4g + t holds a's rows g and g+8 at k = 2t, 2t+1, 2t+8, 2t+9 */
		uint32_t r[4];
		for (int i = 0; i < 4; i++)
			r[i] = __shfl_sync(PH_FA_FULL, a[i], 4 * g + t);
		A[0][2 * t] = ph_mma_lo(r[0]), A[0][2 * t + 1] = ph_mma_hi(r[0]);
		A[1][2 * t] = ph_mma_lo(r[1]), A[1][2 * t + 1] = ph_mma_hi(r[1]);
		A[0][2 * t + 8] = ph_mma_lo(r[2]), A[0][2 * t + 9] = ph_mma_hi(r[2]);
		A[1][2 * t + 8] = ph_mma_lo(r[3]), A[1][2 * t + 9] = ph_mma_hi(r[3]);
		/* lane 4n + t holds b's column n at k = 2t, 2t+1, 2t+8, 2t+9 */
		for (int c = 0; c < 2; c++) {
			const uint32_t b0 = __shfl_sync(PH_FA_FULL, b[0], 4 * (2 * q + c) + t);
			const uint32_t b1 = __shfl_sync(PH_FA_FULL, b[1], 4 * (2 * q + c) + t);
			B[c][2 * t] = ph_mma_lo(b0), B[c][2 * t + 1] = ph_mma_hi(b0);
			B[c][2 * t + 8] = ph_mma_lo(b1), B[c][2 * t + 9] = ph_mma_hi(b1);
		}
	}
	for (int i = 0; i < 4; i++) {
		const float *x = A[i >> 1], *y = B[i & 1];
		float s = 0.0f;
		for (int k = 0; k < 16; k++)
			s += x[k] * y[k];
		d[i] += s;
	}
#else
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
		     "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
		     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
		     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

/* The A fragment of rows r0 .. r0+15, columns c0 .. c0+15 of a bf16 tile
 * in shared memory (row stride ld, even) */
__device__ static inline void ph_mma_a(uint32_t a[4], const ph_bf16 *tile, int ld, int r0, int c0)
{
	const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
	const ph_bf16 *p = tile + (r0 + g) * ld + c0 + 2 * q;
	a[0] = ph_mma_ld2(p);
	a[1] = ph_mma_ld2(p + 8 * ld);
	a[2] = ph_mma_ld2(p + 8);
	a[3] = ph_mma_ld2(p + 8 * ld + 8);
}

/* The B fragment (k 16 x n 8) whose column n is row n0 + n of a bf16 tile
 * stored [n][k] (stride ld, even), k from k0: X^T for rows X of K or V^T */
__device__ static inline void ph_mma_bt(uint32_t b[2], const ph_bf16 *tile, int ld, int n0, int k0)
{
	const int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
	const ph_bf16 *p = tile + (n0 + g) * ld + k0 + 2 * q;
	b[0] = ph_mma_ld2(p);
	b[1] = ph_mma_ld2(p + 8);
}

/* A [ROWS][HD] fp32 tile into shared memory as bf16, transposed:
 * dst[c * ldt + r] = src row r0 + r, column c (zeros at or past T) */
template <int HD, int ROWS>
__device__ static inline void ph_mma_load_t(ph_bf16 *dst, int ldt, const float *src, int64_t ld, int r0, int T,
					    int vec4)
{
	ph_fa_tile<HD, ROWS> t;
	t.fetch(src, ld, r0, T, vec4);
	constexpr int G = HD / 4;
#pragma unroll
	for (int it = 0; it < ph_fa_tile<HD, ROWS>::N; it++) {
		const int g = it * PH_FA_THREADS + (int)threadIdx.x, r = g / G, c = (g % G) * 4;
		dst[(c + 0) * ldt + r] = __float2bfloat16(t.v[it].x);
		dst[(c + 1) * ldt + r] = __float2bfloat16(t.v[it].y);
		dst[(c + 2) * ldt + r] = __float2bfloat16(t.v[it].z);
		dst[(c + 3) * ldt + r] = __float2bfloat16(t.v[it].w);
	}
}

template <int HD> struct ph_fam_dims {
	static constexpr int BC = 64;      /* keys a tile */
	static constexpr int LDK = HD + 8; /* sQ, sK: [rows][HD] */
	static constexpr int LDV = BC + 8; /* sVt: [HD][BC] */
	static constexpr int KS = HD / 16; /* k-steps across hd */
	static constexpr int NO = HD / 8;  /* O's n-tiles */
};

/* a[ks] = rows 16*warp .. +15 of a staged [PH_FA_BR][LDK] tile, the A
 * fragments of its k-steps (ph_fa_rows_to_a's twin) */
template <int HD> __device__ static inline void ph_mma_rows_to_a(uint32_t (*a)[4], const ph_bf16 *tile, int warp)
{
	typedef ph_fam_dims<HD> D;
#pragma unroll
	for (int ks = 0; ks < D::KS; ks++)
		ph_mma_a(a[ks], tile, D::LDK, 16 * warp, 16 * ks);
}

template <int HD> struct alignas(16) ph_fam_smem {
	typedef ph_fam_dims<HD> D;
	ph_bf16 k[D::BC * D::LDK]; /* also Q's staging before the loop */
	ph_bf16 vt[HD * D::LDV];
};

/*
 * grid (B*H, ceil(T / 64)), PH_FA_THREADS threads, heaviest query tiles
 * first, as ph_fa_fwd_kernel (same arguments).  Warp w owns query rows
 * q0 + 16w .. +15; lane 4g + q holds rows g and g+8 of them (r = 0, 1 in
 * the arrays below), keys 8j + 2q, +1 of each 8-key tile j.
 */
template <int HD, typename TO>
__global__ static void __launch_bounds__(PH_FA_THREADS)
ph_fam_fwd_kernel(const float *__restrict__ qkv, TO *__restrict__ att, float *__restrict__ L2, int H, int T,
		  int d, float sl2, int drop, uint64_t key, int b0, float rate, float dscale, int vec4)
{
	typedef ph_fam_dims<HD> D;
	__shared__ ph_fam_smem<HD> sh;
	const int bh = blockIdx.x, b = bh / H, h = bh % H;
	const int q0 = ((int)gridDim.y - 1 - (int)blockIdx.y) * PH_FA_BR;
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
	const int64_t ld = 3 * (int64_t)d;
	const float *qb = qkv + (int64_t)b * T * ld + h * HD, *kb = qb + d, *vb = qb + 2 * d;
	const int w0 = q0 + 16 * warp, row[2] = { w0 + g, w0 + g + 8 };

	/* the warp's 16 query rows as A fragments for the whole loop */
	uint32_t qa[D::KS][4];
	ph_fa_load_tile<HD, PH_FA_BR>(sh.k, qb, ld, q0, T, vec4);
	__syncthreads();
	ph_mma_rows_to_a<HD>(qa, sh.k, warp);
	__syncthreads();

	float o[D::NO][4];
#pragma unroll
	for (int n = 0; n < D::NO; n++)
		o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
	float m[2] = { -INFINITY, -INFINITY }, l[2] = { 0.0f, 0.0f };
	const uint64_t bhT = ((uint64_t)(b0 + b) * H + h) * (uint64_t)T; /* dropout: (bhT + i)*T + j */
	const int kend = min(T, q0 + PH_FA_BR), nkt = (kend + D::BC - 1) / D::BC;
	for (int kt = 0; kt < nkt; kt++) {
		const int k0 = kt * D::BC;
		ph_fa_load_tile<HD, D::BC>(sh.k, kb, ld, k0, T, vec4);
		ph_mma_load_t<HD, D::BC>(sh.vt, D::LDV, vb, ld, k0, T, vec4);
		__syncthreads();
		/* k0 and w0 are multiples of 64 and 16: a tile the warp takes
		 * has key k0 <= each of its rows, so no row is all -inf */
		if (k0 <= w0 + 15) {
			float s[D::BC / 8][4]; /* S = Q K^T, then P */
#pragma unroll
			for (int j = 0; j < D::BC / 8; j++) {
				s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
				for (int ks = 0; ks < D::KS; ks++) {
					uint32_t kf[2];
					ph_mma_bt(kf, sh.k, D::LDK, 8 * j, 16 * ks);
					ph_mma_16816(s[j], qa[ks], kf);
				}
			}
			float mx[2] = { -INFINITY, -INFINITY };
#pragma unroll
			for (int j = 0; j < D::BC / 8; j++)
#pragma unroll
				for (int e = 0; e < 4; e++) {
					const int r = e >> 1, kj = k0 + 8 * j + 2 * q + (e & 1);
					s[j][e] = kj <= row[r] ? s[j][e] * sl2 : -INFINITY; /* causal */
					mx[r] = fmaxf(mx[r], s[j][e]);
				}
			float alpha[2], rs[2] = { 0.0f, 0.0f };
#pragma unroll
			for (int r = 0; r < 2; r++) {
				mx[r] = fmaxf(mx[r], __shfl_xor_sync(PH_FA_FULL, mx[r], 1));
				mx[r] = fmaxf(mx[r], __shfl_xor_sync(PH_FA_FULL, mx[r], 2));
				const float mnew = fmaxf(m[r], mx[r]);
				alpha[r] = exp2f(m[r] - mnew); /* 0 on the first tile (m = -inf) */
				m[r] = mnew;
			}
#pragma unroll
			for (int j = 0; j < D::BC / 8; j++)
#pragma unroll
				for (int e = 0; e < 4; e++) {
					const int r = e >> 1;
					float p = exp2f(s[j][e] - m[r]);
					rs[r] += p; /* the normaliser counts dropped elements too */
					if (drop) {
						const uint64_t kj = (uint64_t)(k0 + 8 * j + 2 * q + (e & 1));
						p = ph_rng_uniform(key, (bhT + (uint64_t)row[r]) * (uint64_t)T + kj) >= rate
							    ? p * dscale
							    : 0.0f;
					}
					s[j][e] = p;
				}
#pragma unroll
			for (int r = 0; r < 2; r++) {
				rs[r] += __shfl_xor_sync(PH_FA_FULL, rs[r], 1);
				rs[r] += __shfl_xor_sync(PH_FA_FULL, rs[r], 2);
				l[r] = l[r] * alpha[r] + rs[r];
			}
#pragma unroll
			for (int n = 0; n < D::NO; n++) {
				o[n][0] *= alpha[0], o[n][1] *= alpha[0];
				o[n][2] *= alpha[1], o[n][3] *= alpha[1];
			}
			/* O += P V: k-step kk of P is S's tiles 2kk and 2kk+1 */
#pragma unroll
			for (int kk = 0; kk < D::BC / 16; kk++) {
				const uint32_t pa[4] = { ph_mma_pack(s[2 * kk][0], s[2 * kk][1]),
							 ph_mma_pack(s[2 * kk][2], s[2 * kk][3]),
							 ph_mma_pack(s[2 * kk + 1][0], s[2 * kk + 1][1]),
							 ph_mma_pack(s[2 * kk + 1][2], s[2 * kk + 1][3]) };
#pragma unroll
				for (int n = 0; n < D::NO; n++) {
					uint32_t vf[2];
					ph_mma_bt(vf, sh.vt, D::LDV, 8 * n, 16 * kk);
					ph_mma_16816(o[n], pa, vf);
				}
			}
		}
		__syncthreads(); /* K and V free for the next tile */
	}
	/* att = O / l, L2 = m + log2 l */
#pragma unroll
	for (int r = 0; r < 2; r++) {
		if (row[r] >= T)
			continue;
		const float inv = 1.0f / l[r];
		TO *out = att + ((int64_t)b * T + row[r]) * d + h * HD + 2 * q;
#pragma unroll
		for (int n = 0; n < D::NO; n++) {
			ph_d_put(out + 8 * n, o[n][2 * r] * inv);
			ph_d_put(out + 8 * n + 1, o[n][2 * r + 1] * inv);
		}
		if (q == 0)
			L2[(int64_t)bh * T + row[r]] = m[r] + log2f(l[r]);
	}
}

/* ------------------------------------------------------------------ */
/* Backward, the same split and outputs as ph_fa_dkdv_kernel and        */
/* ph_fa_dq_kernel (same arguments), the tiles in registers.            */

template <int HD> struct ph_famb_dims {
	static constexpr int BC = HD <= 64 ? 64 : 32; /* inner tile: ph_fa_dims' BC, for the split */
	static constexpr int LDK = HD + 8;             /* [rows][HD] tiles */
	static constexpr int LDT = BC + 8;             /* [HD][BC] tiles: transposed */
	static constexpr int KS = HD / 16, NO = HD / 8, NJ = BC / 8, KK = BC / 16;
	static_assert(BC == ph_fa_dims<HD>::BC, "the split's tiles");
	static_assert(LDK == ph_fam_dims<HD>::LDK && KS == ph_fam_dims<HD>::KS, "ph_mma_rows_to_a's tiles");
};

/* the lane's 2 rows x HD columns of acc [16][HD] (rows g and g+8 of the
 * warp's 16, r = 0, 1) times mul, to dst: row r at dst + r*8*ldr (element
 * pointer of the lane's row g, column 2q), if row_ok[r] */
template <int HD, typename TG>
__device__ static inline void ph_famb_put(const float (*acc)[4], float mul, TG *dst, int64_t ldr, const int row_ok[2])
{
#pragma unroll
	for (int r = 0; r < 2; r++) {
		if (!row_ok[r])
			continue;
		TG *out = dst + (int64_t)r * 8 * ldr;
#pragma unroll
		for (int n = 0; n < HD / 8; n++) {
			ph_d_put(out + 8 * n, acc[n][2 * r] * mul);
			ph_d_put(out + 8 * n + 1, acc[n][2 * r + 1] * mul);
		}
	}
}

template <int HD> struct alignas(16) ph_famb_kv_smem {
	typedef ph_famb_dims<HD> D;
	/* the Q tile, then the dO tile; before the loop the staging of K's and
	 * V's 64 rows (2*BC >= 64) */
	ph_bf16 qo[2 * D::BC * D::LDK];
	ph_bf16 qt[HD * D::LDT], ot[HD * D::LDT];     /* the same, transposed */
	float lq[D::BC], dd[D::BC];
};

/*
 * dK, dV: warp w owns keys k0 + 16w .. +15 (lane: keys g and g+8, r = 0,
 * 1), looping over the block's query tiles; element (r, j, e) of a
 * [16 keys][BC queries] tile is key row[r], query q0 + 8j + 2q + (e & 1).
 */
template <int HD, typename TG>
__global__ static void __launch_bounds__(PH_FA_THREADS)
ph_fam_dkdv_kernel(const float *__restrict__ qkv, const float *__restrict__ dO, const float *__restrict__ L2,
		   const float *__restrict__ Dv, TG *__restrict__ dqkv, int H, int T, int d, float sl2, float sm,
		   int drop, uint64_t key, int b0, float rate, float dscale, int vec4, int qs,
		   float *__restrict__ part, int nslots)
{
	typedef ph_famb_dims<HD> D;
	__shared__ ph_famb_kv_smem<HD> sh;
	const int bh = blockIdx.x, b = bh / H, h = bh % H;
	const ph_fa_part pt = ph_fa_part_at(1, (int)blockIdx.y, T, D::BC, qs);
	const int k0 = pt.tile * PH_FA_BR;
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
	const int64_t ld = 3 * (int64_t)d;
	const float *qb = qkv + (int64_t)b * T * ld + h * HD, *kb = qb + d, *vb = qb + 2 * d;
	const float *ob = dO + (int64_t)b * T * d + h * HD;
	const int jw = k0 + 16 * warp, row[2] = { jw + g, jw + g + 8 };
	ph_bf16 *sQ = sh.qo, *sO = sh.qo + D::BC * D::LDK;

	/* the warp's 16 keys and values as A fragments for the whole loop */
	uint32_t ka[D::KS][4], va[D::KS][4];
	ph_fa_load_tile<HD, PH_FA_BR>(sh.qo, kb, ld, k0, T, vec4);
	__syncthreads();
	ph_mma_rows_to_a<HD>(ka, sh.qo, warp);
	__syncthreads();
	ph_fa_load_tile<HD, PH_FA_BR>(sh.qo, vb, ld, k0, T, vec4);
	__syncthreads();
	ph_mma_rows_to_a<HD>(va, sh.qo, warp);
	__syncthreads();

	float dk[D::NO][4], dv[D::NO][4];
#pragma unroll
	for (int n = 0; n < D::NO; n++)
#pragma unroll
		for (int e = 0; e < 4; e++)
			dk[n][e] = dv[n][e] = 0.0f;
	const uint64_t bhT = ((uint64_t)(b0 + b) * H + h) * (uint64_t)T; /* dropout: (bhT + i)*T + j */
	const float *Lb = L2 + (int64_t)bh * T, *Db = Dv + (int64_t)bh * T;
	for (int qt = pt.i0; qt < pt.i1; qt++) {
		const int q0 = qt * D::BC;
		ph_fa_load_tile<HD, D::BC>(sQ, qb, ld, q0, T, vec4);
		ph_fa_load_tile<HD, D::BC>(sO, ob, d, q0, T, vec4);
		ph_mma_load_t<HD, D::BC>(sh.qt, D::LDT, qb, ld, q0, T, vec4);
		ph_mma_load_t<HD, D::BC>(sh.ot, D::LDT, ob, d, q0, T, vec4);
		for (int c = threadIdx.x; c < D::BC; c += PH_FA_THREADS) {
			const int iq = q0 + c;
			sh.lq[c] = iq < T ? Lb[iq] : INFINITY; /* rows past T: P = 2^-inf = 0 */
			sh.dd[c] = iq < T ? Db[iq] : 0.0f;
		}
		__syncthreads();
		if (q0 + D::BC - 1 >= jw) { /* some query of the tile sees some key of the warp */
			/* P^T = 2^(S^T sl2 - L2) (masked), in place of S^T; one
			 * array of [16][BC] at a time, to stay in registers */
			float p[D::NJ][4];
			uint32_t kept = ~0u; /* bit 4j+e: element kept by dropout */
#pragma unroll
			for (int j = 0; j < D::NJ; j++) {
				p[j][0] = p[j][1] = p[j][2] = p[j][3] = 0.0f;
#pragma unroll
				for (int ks = 0; ks < D::KS; ks++) {
					uint32_t bq[2];
					ph_mma_bt(bq, sQ, D::LDK, 8 * j, 16 * ks);
					ph_mma_16816(p[j], ka[ks], bq); /* S^T = K Q^T */
				}
#pragma unroll
				for (int e = 0; e < 4; e++) {
					const int r = e >> 1, c = 8 * j + 2 * q + (e & 1), iq = q0 + c;
					p[j][e] = iq >= row[r] ? exp2f(p[j][e] * sl2 - sh.lq[c]) : 0.0f;
					if (drop && ph_rng_uniform(key, (bhT + (uint64_t)iq) * (uint64_t)T +
									(uint64_t)row[r]) < rate)
						kept &= ~(1u << (4 * j + e));
				}
			}
			/* dV += drop(P)^T dO, dropout applied as P^T packs */
#define PH_FAM_PD(j, e) ((kept >> (4 * (j) + (e))) & 1 ? p[j][e] * (drop ? dscale : 1.0f) : 0.0f)
#pragma unroll
			for (int kk = 0; kk < D::KK; kk++) {
				const uint32_t pa[4] = { ph_mma_pack(PH_FAM_PD(2 * kk, 0), PH_FAM_PD(2 * kk, 1)),
							 ph_mma_pack(PH_FAM_PD(2 * kk, 2), PH_FAM_PD(2 * kk, 3)),
							 ph_mma_pack(PH_FAM_PD(2 * kk + 1, 0), PH_FAM_PD(2 * kk + 1, 1)),
							 ph_mma_pack(PH_FAM_PD(2 * kk + 1, 2), PH_FAM_PD(2 * kk + 1, 3)) };
#pragma unroll
				for (int n = 0; n < D::NO; n++) {
					uint32_t bo[2];
					ph_mma_bt(bo, sh.ot, D::LDT, 8 * n, 16 * kk);
					ph_mma_16816(dv[n], pa, bo);
				}
			}
#undef PH_FAM_PD
			/* dP^T = V dO^T, 8 queries at a time, into dS^T = P^T (M dP^T - D)
			 * in place of P^T */
#pragma unroll
			for (int j = 0; j < D::NJ; j++) {
				float dp[4] = { 0.0f, 0.0f, 0.0f, 0.0f };
#pragma unroll
				for (int ks = 0; ks < D::KS; ks++) {
					uint32_t bo[2];
					ph_mma_bt(bo, sO, D::LDK, 8 * j, 16 * ks);
					ph_mma_16816(dp, va[ks], bo);
				}
#pragma unroll
				for (int e = 0; e < 4; e++) {
					const int c = 8 * j + 2 * q + (e & 1);
					const float g2 = (kept >> (4 * j + e)) & 1 ? (drop ? dp[e] * dscale : dp[e]) : 0.0f;
					p[j][e] = p[j][e] * (g2 - sh.dd[c]);
				}
			}
			/* dK += dS^T Q */
#pragma unroll
			for (int kk = 0; kk < D::KK; kk++) {
				const uint32_t sa[4] = { ph_mma_pack(p[2 * kk][0], p[2 * kk][1]),
							 ph_mma_pack(p[2 * kk][2], p[2 * kk][3]),
							 ph_mma_pack(p[2 * kk + 1][0], p[2 * kk + 1][1]),
							 ph_mma_pack(p[2 * kk + 1][2], p[2 * kk + 1][3]) };
#pragma unroll
				for (int n = 0; n < D::NO; n++) {
					uint32_t bq[2];
					ph_mma_bt(bq, sh.qt, D::LDT, 8 * n, 16 * kk);
					ph_mma_16816(dk[n], sa, bq);
				}
			}
		}
		__syncthreads(); /* the tiles free for the next */
	}
	if (pt.slot >= 0) { /* a partial: [2][64][HD] (dK, dV) unscaled, summed by ph_fa_dkdv_sum_kernel */
		float *pk = part + ((int64_t)bh * nslots + pt.slot) * 2 * PH_FA_BR * HD + (16 * warp + g) * HD + 2 * q;
		const int all[2] = { 1, 1 };
		ph_famb_put<HD>(dk, 1.0f, pk, HD, all);
		ph_famb_put<HD>(dv, 1.0f, pk + PH_FA_BR * HD, HD, all);
		return;
	}
	const int ok[2] = { row[0] < T, row[1] < T };
	TG *dkp = dqkv + ((int64_t)b * T + row[0]) * ld + d + h * HD + 2 * q;
	ph_famb_put<HD>(dk, sm, dkp, ld, ok);
	ph_famb_put<HD>(dv, 1.0f, dkp + d, ld, ok);
}

template <int HD> struct alignas(16) ph_famb_q_smem {
	typedef ph_famb_dims<HD> D;
	/* the K tile, then the V tile; before the loop the staging of Q's and
	 * dO's 64 rows (2*BC >= 64) */
	ph_bf16 kv[2 * D::BC * D::LDK];
	ph_bf16 kt[HD * D::LDT];                      /* K transposed */
};

/*
 * dQ: warp w owns queries q0 + 16w .. +15 (lane: rows g and g+8), looping
 * over the block's key tiles; element (r, j, e) of a [16 queries][BC keys]
 * tile is query row[r], key k0 + 8j + 2q + (e & 1).
 */
template <int HD, typename TG>
__global__ static void __launch_bounds__(PH_FA_THREADS)
ph_fam_dq_kernel(const float *__restrict__ qkv, const float *__restrict__ dO, const float *__restrict__ L2,
		 const float *__restrict__ Dv, TG *__restrict__ dqkv, int H, int T, int d, float sl2, float sm,
		 int drop, uint64_t key, int b0, float rate, float dscale, int vec4, int qs, float *__restrict__ part,
		 int nslots)
{
	typedef ph_famb_dims<HD> D;
	__shared__ ph_famb_q_smem<HD> sh;
	const int bh = blockIdx.x, b = bh / H, h = bh % H;
	const ph_fa_part pt = ph_fa_part_at(0, (int)blockIdx.y, T, D::BC, qs);
	const int q0 = pt.tile * PH_FA_BR;
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
	const int64_t ld = 3 * (int64_t)d;
	const float *qb = qkv + (int64_t)b * T * ld + h * HD, *kb = qb + d, *vb = qb + 2 * d;
	const float *ob = dO + (int64_t)b * T * d + h * HD;
	const int w0 = q0 + 16 * warp, row[2] = { w0 + g, w0 + g + 8 };
	ph_bf16 *sK = sh.kv, *sV = sh.kv + D::BC * D::LDK;

	uint32_t qa[D::KS][4], oa[D::KS][4]; /* the warp's rows of q and dO */
	ph_fa_load_tile<HD, PH_FA_BR>(sh.kv, qb, ld, q0, T, vec4);
	__syncthreads();
	ph_mma_rows_to_a<HD>(qa, sh.kv, warp);
	__syncthreads();
	ph_fa_load_tile<HD, PH_FA_BR>(sh.kv, ob, d, q0, T, vec4);
	__syncthreads();
	ph_mma_rows_to_a<HD>(oa, sh.kv, warp);
	__syncthreads();

	float dq[D::NO][4];
#pragma unroll
	for (int n = 0; n < D::NO; n++)
		dq[n][0] = dq[n][1] = dq[n][2] = dq[n][3] = 0.0f;
	float li[2], di[2];
#pragma unroll
	for (int r = 0; r < 2; r++) {
		li[r] = row[r] < T ? L2[(int64_t)bh * T + row[r]] : INFINITY;
		di[r] = row[r] < T ? Dv[(int64_t)bh * T + row[r]] : 0.0f;
	}
	const uint64_t bhT = ((uint64_t)(b0 + b) * H + h) * (uint64_t)T;
	for (int kt = pt.i0; kt < pt.i1; kt++) {
		const int k0 = kt * D::BC;
		ph_fa_load_tile<HD, D::BC>(sK, kb, ld, k0, T, vec4);
		ph_fa_load_tile<HD, D::BC>(sV, vb, ld, k0, T, vec4);
		ph_mma_load_t<HD, D::BC>(sh.kt, D::LDT, kb, ld, k0, T, vec4);
		__syncthreads();
		if (k0 <= w0 + 15) {
			/* per 8 keys: S = Q K^T and dP = dO V^T, then dS in place of S */
			float s[D::NJ][4];
#pragma unroll
			for (int j = 0; j < D::NJ; j++) {
				float dp[4] = { 0.0f, 0.0f, 0.0f, 0.0f };
				s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
				for (int ks = 0; ks < D::KS; ks++) {
					uint32_t bk[2], bv[2];
					ph_mma_bt(bk, sK, D::LDK, 8 * j, 16 * ks);
					ph_mma_16816(s[j], qa[ks], bk);
					ph_mma_bt(bv, sV, D::LDK, 8 * j, 16 * ks);
					ph_mma_16816(dp, oa[ks], bv);
				}
#pragma unroll
				for (int e = 0; e < 4; e++) {
					const int r = e >> 1, kj = k0 + 8 * j + 2 * q + (e & 1);
					const float pv = kj <= row[r] ? exp2f(s[j][e] * sl2 - li[r]) : 0.0f;
					float g2 = dp[e];
					if (drop)
						g2 = ph_rng_uniform(key, (bhT + (uint64_t)row[r]) * (uint64_t)T +
									 (uint64_t)kj) >= rate
							     ? g2 * dscale
							     : 0.0f;
					s[j][e] = pv * (g2 - di[r]); /* dS */
				}
			}
#pragma unroll
			for (int kk = 0; kk < D::KK; kk++) {
				const uint32_t sa[4] = { ph_mma_pack(s[2 * kk][0], s[2 * kk][1]),
							 ph_mma_pack(s[2 * kk][2], s[2 * kk][3]),
							 ph_mma_pack(s[2 * kk + 1][0], s[2 * kk + 1][1]),
							 ph_mma_pack(s[2 * kk + 1][2], s[2 * kk + 1][3]) };
#pragma unroll
				for (int n = 0; n < D::NO; n++) {
					uint32_t bk[2];
					ph_mma_bt(bk, sh.kt, D::LDT, 8 * n, 16 * kk);
					ph_mma_16816(dq[n], sa, bk); /* dQ += dS K */
				}
			}
		}
		__syncthreads();
	}
	if (pt.slot >= 0) { /* a partial: [64][HD] unscaled, summed by ph_fa_dq_sum_kernel */
		float *pq = part + ((int64_t)bh * nslots + pt.slot) * PH_FA_BR * HD + (16 * warp + g) * HD + 2 * q;
		const int all[2] = { 1, 1 };
		ph_famb_put<HD>(dq, 1.0f, pq, HD, all);
		return;
	}
	const int ok[2] = { row[0] < T, row[1] < T };
	ph_famb_put<HD>(dq, sm, dqkv + ((int64_t)b * T + row[0]) * ld + h * HD + 2 * q, ld, ok);
}

/* Whether this call takes the kernels here (PIPEHOST_ATTN_MMA=1) */
static inline int ph_fam_on(void)
{
	const char *v = getenv("PIPEHOST_ATTN_MMA");
	return v && !strcmp(v, "1");
}

template <int HD, typename TG>
static inline void ph_fam_backward_kernels(cudaStream_t st, dim3 gkv, dim3 gq, const float *qkv, const float *datt,
					   const float *L2, const float *Dv, TG *dqkv, int H, int T, int d, float sl2,
					   float sm, int drop, uint64_t key, int b0, float rate, float dscale, int vec4,
					   int qs, float *part, int skv, float *pq, int sq)
{
	static_assert(sizeof(ph_famb_kv_smem<HD>) <= 48 * 1024, "static shared memory over 48 KiB");
	static_assert(sizeof(ph_famb_q_smem<HD>) <= 48 * 1024, "static shared memory over 48 KiB");
	ph_fam_dkdv_kernel<HD, TG><<<gkv, PH_FA_THREADS, 0, st>>>(qkv, datt, L2, Dv, dqkv, H, T, d, sl2, sm, drop,
								    key, b0, rate, dscale, vec4, qs, part, skv);
	ph_fam_dq_kernel<HD, TG><<<gq, PH_FA_THREADS, 0, st>>>(qkv, datt, L2, Dv, dqkv, H, T, d, sl2, sm, drop, key,
								 b0, rate, dscale, vec4, qs, pq, sq);
}

template <int HD, typename TO>
static inline void ph_fam_forward_hd(cudaStream_t st, const ph_attn_geom *g, int batch, int drop, uint64_t key,
				     const float *qkv, float *L2, TO *att, float sl2, int vec4)
{
	static_assert(sizeof(ph_fam_smem<HD>) <= 48 * 1024, "static shared memory over 48 KiB");
	const dim3 grid((unsigned)(batch * g->H), (unsigned)((g->T + PH_FA_BR - 1) / PH_FA_BR));
	ph_fam_fwd_kernel<HD, TO><<<grid, PH_FA_THREADS, 0, st>>>(qkv, att, L2, g->H, g->T, g->d, sl2, drop, key, 0,
								    g->rate, g->scale, vec4);
}

#endif
