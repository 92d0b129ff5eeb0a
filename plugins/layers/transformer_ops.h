/* SPDX-License-Identifier: MIT */
/*
 * transformer_ops.h: the CPU kernels shared by the transformer layers
 * (layernorm, gelu, attention, and whatever composes them).
 *
 * Header-only, every function static inline: each plugin that includes it
 * compiles its own copy, so every .so stays self-contained and unused
 * kernels cost nothing.  Conventions are the layers': row-major float
 * tensors, parameter gradients accumulate (+=), input gradients are
 * overwritten (=), every reduction runs in a fixed order (deterministic).
 * Callers that need BLAS (attention) include <cblas.h> before this header.
 */
#ifndef PH_TRANSFORMER_OPS_H
#define PH_TRANSFORMER_OPS_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include <pipehost/plugin.h>

/* The element-wise loops run where time goes after the GEMMs: give them
 * AVX-512 and AVX2 clones picked at load time (ifunc), and the baseline for
 * older CPUs.  The avx512f clone may use FMA, so the plugins build with
 * -ffp-contract=off (local.mk): no clone contracts a*b + c, every clone
 * rounds exactly like the baseline, and results are bitwise the same on any
 * x86-64 (tests/test-tf-kernels checks the clones against the scalar
 * references).  A file that includes this header needs that flag too. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TF_HOT __attribute__((target_clones("avx512f", "avx2", "default"), unused))
#else
#define TF_HOT __attribute__((unused))
#endif
/* the plain references the fast kernels are tested against */
#define TF_REF __attribute__((unused))

/* ------------------------------------------------------------------ */
/* Bias helpers shared by the layers' CPU forward and backward.        */

/* rows copies of bias [n] into out [rows, n], for a gemm to accumulate onto
 * (beta = 1): the bias added in the product rather than in a pass after. */
static inline void tf_bias_preload(float *out, const float *bias, int rows, int n)
{
	for (int i = 0; i < rows; i++)
		memcpy(out + (size_t)i * n, bias, (size_t)n * sizeof(float));
}

/* Column sums of m [rows, n] added to acc [n], row by row: a fixed order,
 * so a bias gradient is the same bits however the rows were computed. */
static inline void tf_colsum_add(float *acc, const float *m, int rows, int n)
{
	for (int r = 0; r < rows; r++) {
		const float *mr = m + (size_t)r * n;
		for (int c = 0; c < n; c++)
			acc[c] += mr[c];
	}
}

/* ------------------------------------------------------------------ */
/* Layer normalisation over the last dimension (C) of `rows` rows.     */
/*                                                                     */
/* All in float.  Row sums run in TF_LANES fixed lanes (lane j takes    */
/* elements j, j + TF_LANES, ...; the tail goes last) combined by a     */
/* fixed tree: the order is written down, not left to the vectoriser,  */
/* so results are bitwise the same for any alignment or build.         */

#define TF_LANES 8

static inline float tf_lanes_sum(const float *a)
{
	return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

/* sum of x[0..n) in the fixed lane order */
static inline float tf_row_sum(const float *x, int n)
{
	float acc[TF_LANES] = { 0 };
	int c = 0;
	for (; c + TF_LANES <= n; c += TF_LANES)
#pragma omp simd
		for (int j = 0; j < TF_LANES; j++)
			acc[j] += x[c + j];
	float s = tf_lanes_sum(acc);
	for (; c < n; c++)
		s += x[c];
	return s;
}

/* y = (x - mean) * rstd * w + b; mean and rstd (one per row) are kept for
 * backward.  Two-pass statistics in float, population variance. */
TF_HOT static void tf_layernorm_forward(const float *x, float *y, const float *w,
					const float *b, int64_t rows, int C, float eps,
					float *mean, float *rstd)
{
	const float invC = 1.0f / (float)C;
	for (int64_t r = 0; r < rows; r++) {
		const float *xr = x + r * C;
		float *yr = y + r * C;
		const float m = tf_row_sum(xr, C) * invC;
		float acc[TF_LANES] = { 0 };
		int c = 0;
		for (; c + TF_LANES <= C; c += TF_LANES)
#pragma omp simd
			for (int j = 0; j < TF_LANES; j++) {
				float d = xr[c + j] - m;
				acc[j] += d * d;
			}
		float v = tf_lanes_sum(acc);
		for (; c < C; c++) {
			float d = xr[c] - m;
			v += d * d;
		}
		const float rs = 1.0f / sqrtf(v * invC + eps);
		mean[r] = m;
		rstd[r] = rs;
#pragma omp simd
		for (int k = 0; k < C; k++)
			yr[k] = (xr[k] - m) * rs * w[k] + b[k];
	}
}

/* dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * w   (dx may be NULL) */
TF_HOT static void tf_layernorm_backward_input(const float *x, const float *dy, const float *w,
					       const float *mean, const float *rstd,
					       int64_t rows, int C, float *dx)
{
	if (!dx)
		return;
	const float invC = 1.0f / (float)C;
	for (int64_t r = 0; r < rows; r++) {
		const float *xr = x + r * C, *dyr = dy + r * C;
		float *dxr = dx + r * C;
		const float m = mean[r], rs = rstd[r];
		float ag[TF_LANES] = { 0 }, agx[TF_LANES] = { 0 };
		int c = 0;
		for (; c + TF_LANES <= C; c += TF_LANES)
#pragma omp simd
			for (int j = 0; j < TF_LANES; j++) {
				float g = dyr[c + j] * w[c + j];
				ag[j] += g;
				agx[j] += g * ((xr[c + j] - m) * rs);
			}
		float sg = tf_lanes_sum(ag), sgx = tf_lanes_sum(agx);
		for (; c < C; c++) {
			float g = dyr[c] * w[c];
			sg += g;
			sgx += g * ((xr[c] - m) * rs);
		}
		const float mg = sg * invC, mgx = sgx * invC;
#pragma omp simd
		for (int k = 0; k < C; k++) {
			float xhat = (xr[k] - m) * rs;
			float g = dyr[k] * w[k];
			dxr[k] = rs * (g - mg - xhat * mgx);
		}
	}
}

/* dw += sum over rows of dy * xhat, db += sum over rows of dy (row order) */
TF_HOT static void tf_layernorm_backward_weight(const float *x, const float *dy,
						const float *mean, const float *rstd,
						int64_t rows, int C, float *dw, float *db)
{
	for (int64_t r = 0; r < rows; r++) {
		const float *xr = x + r * C, *dyr = dy + r * C;
		const float m = mean[r], rs = rstd[r];
#pragma omp simd
		for (int c = 0; c < C; c++) {
			dw[c] += dyr[c] * ((xr[c] - m) * rs);
			db[c] += dyr[c];
		}
	}
}

/* Both halves in one pass over each row: dw, db (each may be NULL) as
 * tf_layernorm_backward_weight, dx (may be NULL) as
 * tf_layernorm_backward_input, bitwise the same as calling the two (the
 * same operations in the same order), reading x and dy once per row
 * instead of twice and computing xhat once. */
TF_HOT static void tf_layernorm_backward(const float *x, const float *dy, const float *w,
					 const float *mean, const float *rstd, int64_t rows, int C,
					 float *dx, float *dw, float *db)
{
	if (!dx) {
		if (dw && db)
			tf_layernorm_backward_weight(x, dy, mean, rstd, rows, C, dw, db);
		return;
	}
	if (!dw || !db) {
		tf_layernorm_backward_input(x, dy, w, mean, rstd, rows, C, dx);
		return;
	}
	const float invC = 1.0f / (float)C;
	for (int64_t r = 0; r < rows; r++) {
		const float *xr = x + r * C, *dyr = dy + r * C;
		float *dxr = dx + r * C;
		const float m = mean[r], rs = rstd[r];
		float ag[TF_LANES] = { 0 }, agx[TF_LANES] = { 0 };
		int c = 0;
		for (; c + TF_LANES <= C; c += TF_LANES)
#pragma omp simd
			for (int j = 0; j < TF_LANES; j++) {
				const float xh = (xr[c + j] - m) * rs, g = dyr[c + j] * w[c + j];
				dw[c + j] += dyr[c + j] * xh;
				db[c + j] += dyr[c + j];
				ag[j] += g;
				agx[j] += g * xh;
				dxr[c + j] = xh; /* xhat, kept for the second pass */
			}
		float sg = tf_lanes_sum(ag), sgx = tf_lanes_sum(agx);
		for (; c < C; c++) {
			const float xh = (xr[c] - m) * rs, g = dyr[c] * w[c];
			dw[c] += dyr[c] * xh;
			db[c] += dyr[c];
			sg += g;
			sgx += g * xh;
			dxr[c] = xh;
		}
		const float mg = sg * invC, mgx = sgx * invC;
#pragma omp simd
		for (int k = 0; k < C; k++) {
			const float g = dyr[k] * w[k];
			dxr[k] = rs * (g - mg - dxr[k] * mgx);
		}
	}
}

/* ------------------------------------------------------------------ */
/* GELU, tanh approximation (GPT-2):                                   */
/*   gelu(x) = 0.5 x (1 + tanh(k (x + 0.044715 x^3))), k = sqrt(2/pi) */

#define TF_GELU_K 0.7978845608028654 /* sqrt(2 / pi) */
#define TF_GELU_A 0.044715

/* exp(x) in float, Cephes' polynomial (relative error ~1e-7), branch-free so
 * that loops over it vectorise; round-to-nearest by the 1.5*2^23 trick. */
static inline float tf_expf(float x)
{
	x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
	float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
	float r = x - n * 0.693359375f + n * 2.12194440e-4f;
	float p = 1.9875691500e-4f;
	p = p * r + 1.3981999507e-3f;
	p = p * r + 8.3334519073e-3f;
	p = p * r + 4.1665795894e-2f;
	p = p * r + 1.6666665459e-1f;
	p = p * r + 5.0000001201e-1f;
	p = p * r * r + r + 1.0f;
	int32_t i = ((int32_t)n + 127) << 23;
	float two_n;
	memcpy(&two_n, &i, sizeof two_n);
	return p * two_n;
}

/* gelu(x) = 0.5 x (1 + tanh(y)) = x sigmoid(2y), y = k (x + a x^3): no
 * cancellation for negative x */
static inline float tf_gelu(float x)
{
	float y = 0.7978845608f * (x + 0.044715f * x * x * x);
	return x / (1.0f + tf_expf(-2.0f * y));
}

/* d gelu / dx = s + 2 x s (1 - s) k (1 + 3 a x^2), s = sigmoid(2y) */
static inline float tf_gelu_grad(float x)
{
	float y = 0.7978845608f * (x + 0.044715f * x * x * x);
	float s = 1.0f / (1.0f + tf_expf(-2.0f * y));
	return s + 2.0f * x * s * (1.0f - s) * 0.7978845608f * (1.0f + 3.0f * 0.044715f * x * x);
}


TF_HOT static void tf_gelu_forward(const float *x, float *y, int64_t n)
{
#pragma omp simd
	for (int64_t i = 0; i < n; i++)
		y[i] = tf_gelu(x[i]);
}

/* dx = dy * gelu'(x); dx may alias dy */
TF_HOT static void tf_gelu_backward(const float *x, const float *dy, float *dx, int64_t n)
{
#pragma omp simd
	for (int64_t i = 0; i < n; i++)
		dx[i] = dy[i] * tf_gelu_grad(x[i]);
}

/* ------------------------------------------------------------------ */
/* Causal multi-head self-attention core (needs <cblas.h> first).      */

#ifdef TF_WANT_ATTENTION /* define it, and include <cblas.h>, before this header */

#include "attn_geom.h" /* tf_attn_geom: the shapes and dropout */

/* The geometry of a causal self-attention over a per-sample input [T, d]
 * with `heads` heads and dropout `rate`, or one line naming `layer`: the
 * checks attention and gpt_block share.  Each caller then bounds T and d by
 * its BLAS int sizes before it uses *g (the casts here may truncate). */
static inline int tf_attn_geom_make(const char *layer, const ph_shape *in, int64_t heads, double rate,
				    tf_attn_geom *g, ph_err *err)
{
	if (in->ndim != 2)
		return ph_fail(err, PH_EINVAL, "%s: input has %d dimensions; need 2 ([T, d]) per sample", layer,
			       in->ndim);
	if (in->d[0] < 1 || in->d[1] < 1)
		return ph_fail(err, PH_EINVAL, "%s: input [%lld, %lld]; need both >= 1", layer,
			       (long long)in->d[0], (long long)in->d[1]);
	const int64_t T = in->d[0], d = in->d[1];
	if (heads < 1 || heads > d || d % heads != 0)
		return ph_fail(err, PH_EINVAL, "%s: heads = %lld does not divide the model dimension %lld", layer,
			       (long long)heads, (long long)d);
	if (!(rate >= 0 && rate <= 0.99))
		return ph_fail(err, PH_EINVAL, "%s: dropout %g outside [0, 0.99]", layer, rate);
	*g = (tf_attn_geom){ .T = (int)T, .d = (int)d, .H = (int)heads, .hd = (int)(d / heads),
			     .rate = (float)rate, .scale = (float)(1.0 / (1.0 - rate)) };
	return PH_OK;
}

/* M[e] = keep ? 1/(1 - rate) : 0 for one (sample, head): the dropout mask,
 * drawn from the key every time it is needed, never stored. */
static inline void tf_attn_mask(const tf_attn_geom *g, uint64_t key, int b, int h, float *M)
{
	const int64_t n = (int64_t)g->T * g->T;
	const uint64_t base = ((uint64_t)b * g->H + h) * (uint64_t)n;
	ph_philox4 r = { { 0 } };
	uint64_t have = UINT64_MAX;
	for (int64_t e = 0; e < n; e++) {
		uint64_t i = base + (uint64_t)e; /* == ph_rng_uniform(key, i) */
		if ((i >> 2) != have) {
			have = i >> 2;
			r = ph_philox4x32(key, 0, have);
		}
		M[e] = ph_u01(r.v[i & 3]) >= g->rate ? g->scale : 0.0f;
	}
}

/*
 * The plain reference (tf_attn_forward below is the fast kernel): the full
 * T x T square per (sample, head), softmax row by row in double.
 * Forward for `batch` samples from qkv (already projected).
 * Writes P (pre-dropout) and att.  pd_tmp: T*T floats of scratch, used only
 * when dropping (key is the layer's rng key).
 */
TF_REF static void tf_attn_forward_ref(const tf_attn_geom *g, int batch, int drop, uint64_t key,
				const float *qkv, float *P, float *att, float *pd_tmp)
{
	const int T = g->T, d = g->d, H = g->H, hd = g->hd, ld = 3 * d;
	const float sm = (float)(1.0 / sqrt((double)hd));
	for (int b = 0; b < batch; b++) {
		const float *qkv_b = qkv + (size_t)b * T * ld;
		for (int h = 0; h < H; h++) {
			const float *q = qkv_b + h * hd, *k = q + d, *v = q + 2 * d;
			float *Ph = P + ((size_t)b * H + h) * T * T;
			/* S = q k^T / sqrt(hd), full square; the mask is applied below */
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hd, sm, q, ld,
				    k, ld, 0.0f, Ph, T);
			for (int i = 0; i < T; i++) {
				float *row = Ph + (size_t)i * T;
				float m = row[0];
				for (int j = 1; j <= i; j++)
					if (row[j] > m)
						m = row[j];
				double s = 0;
#pragma omp simd
				for (int j = 0; j <= i; j++)
					row[j] = tf_expf(row[j] - m);
				for (int j = 0; j <= i; j++)
					s += row[j];
				const float inv = (float)(1.0 / s);
				for (int j = 0; j <= i; j++)
					row[j] *= inv;
				for (int j = i + 1; j < T; j++)
					row[j] = 0.0f;
			}
			const float *Pu = Ph;
			if (drop) {
				tf_attn_mask(g, key, b, h, pd_tmp);
				for (int64_t e = 0; e < (int64_t)T * T; e++)
					pd_tmp[e] *= Ph[e];
				Pu = pd_tmp;
			}
			/* att_h = Pd v_h */
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hd, T, 1.0f, Pu, T,
				    v, ld, 0.0f, att + (size_t)b * T * d + h * hd, d);
		}
	}
}

/*
 * The plain reference of tf_attn_backward (full squares).
 * Backward through the core: datt [batch, T, d]  ->  dqkv [batch, T, 3d] (=).
 * tmp: 2*T*T floats of scratch.
 */
TF_REF static void tf_attn_backward_ref(const tf_attn_geom *g, int batch, int drop, uint64_t key,
				 const float *qkv, const float *P, const float *datt,
				 float *dqkv, float *tmp)
{
	const int T = g->T, d = g->d, H = g->H, hd = g->hd, ld = 3 * d;
	const float sm = (float)(1.0 / sqrt((double)hd));
	float *dP = tmp, *Pd = tmp + (size_t)T * T;
	for (int b = 0; b < batch; b++) {
		const float *qkv_b = qkv + (size_t)b * T * ld;
		float *dqkv_b = dqkv + (size_t)b * T * ld;
		const float *datt_b = datt + (size_t)b * T * d;
		for (int h = 0; h < H; h++) {
			const float *q = qkv_b + h * hd, *k = q + d, *v = q + 2 * d;
			float *dq = dqkv_b + h * hd, *dk = dq + d, *dv = dq + 2 * d;
			const float *Ph = P + ((size_t)b * H + h) * T * T;
			const float *da = datt_b + h * hd;
			/* dPd = datt_h v^T */
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hd, 1.0f, da, d,
				    v, ld, 0.0f, dP, T);
			const float *Pu = Ph;
			if (drop) {
				/* the same mask: dP = dPd * M, then Pd = P * M in place */
				tf_attn_mask(g, key, b, h, Pd);
				for (int64_t e = 0; e < (int64_t)T * T; e++) {
					dP[e] *= Pd[e];
					Pd[e] *= Ph[e];
				}
				Pu = Pd;
			}
			/* dv = Pd^T datt_h */
			cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hd, T, 1.0f, Pu, T,
				    da, d, 0.0f, dv, ld);
			/* through the softmax, row by row:
			 * dS[i][j] = P[i][j] (dP[i][j] - sum_k P[i][k] dP[i][k]), j <= i */
			for (int i = 0; i < T; i++) {
				float *row = dP + (size_t)i * T;
				const float *pr = Ph + (size_t)i * T;
				double s = 0;
				for (int j = 0; j <= i; j++)
					s += (double)pr[j] * row[j];
				for (int j = 0; j <= i; j++)
					row[j] = (float)(pr[j] * (row[j] - s));
				for (int j = i + 1; j < T; j++)
					row[j] = 0.0f;
			}
			/* dq = dS k / sqrt(hd); dk = dS^T q / sqrt(hd) */
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hd, T, sm, dP, T,
				    k, ld, 0.0f, dq, ld);
			cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hd, T, sm, dP, T,
				    q, ld, 0.0f, dk, ld);
		}
	}
}
/*
 * The fast kernels.  Causal attention never reads S[i][j] for j > i, so the
 * GEMMs go by blocks of TF_ATT_BS query rows: rows i0..i1 need keys 0..i1
 * only, which skips most of the upper triangle (for T = 128: 62.5% of the
 * square's work).  The softmax is fused (scale in the GEMM, then max, exp,
 * sum, normalise over j <= i only) and vectorised; its sums run in the
 * fixed lane order of tf_row_sum, so results are bitwise reproducible.
 * Same arguments, outputs and scratch as the references above; P keeps its
 * zero upper triangle (the saved layout does not change).
 */
#define TF_ATT_BS 32

/* softmax over row[0..n) in place, n >= 1; row[n..T) = 0 */
__attribute__((always_inline)) static inline void tf_softmax_row(float *row, int n, int T)
{
	float m = row[0];
#pragma omp simd reduction(max : m)
	for (int j = 1; j < n; j++)
		m = row[j] > m ? row[j] : m;
#pragma omp simd
	for (int j = 0; j < n; j++)
		row[j] = tf_expf(row[j] - m);
	const float inv = 1.0f / tf_row_sum(row, n);
#pragma omp simd
	for (int j = 0; j < n; j++)
		row[j] *= inv;
	for (int j = n; j < T; j++)
		row[j] = 0.0f;
}

/* dS = P (dP - sum(P dP)) over row[0..n), in place on dP; row[n..T) = 0 */
__attribute__((always_inline)) static inline void tf_softmax_row_backward(const float *p, float *dp, int n, int T)
{
	float acc[TF_LANES] = { 0 };
	int j = 0;
	for (; j + TF_LANES <= n; j += TF_LANES)
#pragma omp simd
		for (int l = 0; l < TF_LANES; l++)
			acc[l] += p[j + l] * dp[j + l];
	float s = tf_lanes_sum(acc);
	for (; j < n; j++)
		s += p[j] * dp[j];
#pragma omp simd
	for (int k = 0; k < n; k++)
		dp[k] = p[k] * (dp[k] - s);
	for (int k = n; k < T; k++)
		dp[k] = 0.0f;
}

TF_HOT static void tf_attn_forward(const tf_attn_geom *g, int batch, int drop, uint64_t key,
				   const float *qkv, float *P, float *att, float *pd_tmp)
{
	const int T = g->T, d = g->d, H = g->H, hd = g->hd, ld = 3 * d;
	const float sm = (float)(1.0 / sqrt((double)hd));
	for (int b = 0; b < batch; b++) {
		const float *qkv_b = qkv + (size_t)b * T * ld;
		for (int h = 0; h < H; h++) {
			const float *q = qkv_b + h * hd, *k = q + d, *v = q + 2 * d;
			float *Ph = P + ((size_t)b * H + h) * T * T;
			float *ah = att + (size_t)b * T * d + h * hd;
			const float *Pu = Ph;
			if (drop) { /* whole rows of P first, then the mask, then P v */
				for (int i0 = 0; i0 < T; i0 += TF_ATT_BS) {
					const int i1 = i0 + TF_ATT_BS < T ? i0 + TF_ATT_BS : T;
					cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, i1 - i0, i1, hd,
						    sm, q + (size_t)i0 * ld, ld, k, ld, 0.0f,
						    Ph + (size_t)i0 * T, T);
					for (int i = i0; i < i1; i++)
						tf_softmax_row(Ph + (size_t)i * T, i + 1, T);
				}
				tf_attn_mask(g, key, b, h, pd_tmp);
				for (int64_t e = 0; e < (int64_t)T * T; e++)
					pd_tmp[e] *= Ph[e];
				Pu = pd_tmp;
			}
			for (int i0 = 0; i0 < T; i0 += TF_ATT_BS) {
				const int i1 = i0 + TF_ATT_BS < T ? i0 + TF_ATT_BS : T;
				if (!drop) {
					/* S[i0:i1, 0:i1] = q k^T / sqrt(hd), then the causal softmax */
					cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, i1 - i0, i1, hd,
						    sm, q + (size_t)i0 * ld, ld, k, ld, 0.0f,
						    Ph + (size_t)i0 * T, T);
					for (int i = i0; i < i1; i++)
						tf_softmax_row(Ph + (size_t)i * T, i + 1, T);
				}
				/* att_h[i0:i1] = Pd[i0:i1, 0:i1] v_h[0:i1] */
				cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, i1 - i0, hd, i1, 1.0f,
					    Pu + (size_t)i0 * T, T, v, ld, 0.0f, ah + (size_t)i0 * d, d);
			}
		}
	}
}

TF_HOT static void tf_attn_backward(const tf_attn_geom *g, int batch, int drop, uint64_t key,
				    const float *qkv, const float *P, const float *datt,
				    float *dqkv, float *tmp)
{
	const int T = g->T, d = g->d, H = g->H, hd = g->hd, ld = 3 * d;
	const float sm = (float)(1.0 / sqrt((double)hd));
	float *dP = tmp, *Pd = tmp + (size_t)T * T;
	for (int b = 0; b < batch; b++) {
		const float *qkv_b = qkv + (size_t)b * T * ld;
		float *dqkv_b = dqkv + (size_t)b * T * ld;
		const float *datt_b = datt + (size_t)b * T * d;
		for (int h = 0; h < H; h++) {
			const float *q = qkv_b + h * hd, *k = q + d, *v = q + 2 * d;
			float *dq = dqkv_b + h * hd, *dk = dq + d, *dv = dq + 2 * d;
			const float *Ph = P + ((size_t)b * H + h) * T * T;
			const float *da = datt_b + h * hd;
			/* dPd[i0:i1, 0:i1] = datt_h[i0:i1] v_h[0:i1]^T */
			for (int i0 = 0; i0 < T; i0 += TF_ATT_BS) {
				const int i1 = i0 + TF_ATT_BS < T ? i0 + TF_ATT_BS : T;
				cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, i1 - i0, i1, hd, 1.0f,
					    da + (size_t)i0 * d, d, v, ld, 0.0f, dP + (size_t)i0 * T, T);
			}
			const float *Pu = Ph;
			if (drop) {
				/* the same mask: dP = dPd * M, then Pd = P * M, over j <= i
				 * (P is 0 above the diagonal, so Pd is too) */
				tf_attn_mask(g, key, b, h, Pd);
				for (int i = 0; i < T; i++)
					for (int j = 0; j < T; j++) {
						const size_t e = (size_t)i * T + j;
						if (j <= i)
							dP[e] *= Pd[e];
						Pd[e] *= Ph[e];
					}
				Pu = Pd;
			}
			/* dv[j0:j1] = Pd[j0:T, j0:j1]^T datt_h[j0:T]: rows i < j0 of
			 * those columns are 0 */
			for (int j0 = 0; j0 < T; j0 += TF_ATT_BS) {
				const int j1 = j0 + TF_ATT_BS < T ? j0 + TF_ATT_BS : T;
				cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, j1 - j0, hd, T - j0,
					    1.0f, Pu + (size_t)j0 * T + j0, T, da + (size_t)j0 * d, d, 0.0f,
					    dv + (size_t)j0 * ld, ld);
			}
			/* through the softmax: dS = P (dP - sum(P dP)), j <= i, 0 above */
			for (int i = 0; i < T; i++)
				tf_softmax_row_backward(Ph + (size_t)i * T, dP + (size_t)i * T, i + 1, T);
			/* dq[i0:i1] = dS[i0:i1, 0:i1] k[0:i1] / sqrt(hd);
			 * dk[j0:j1] = dS[j0:T, j0:j1]^T q[j0:T] / sqrt(hd) */
			for (int i0 = 0; i0 < T; i0 += TF_ATT_BS) {
				const int i1 = i0 + TF_ATT_BS < T ? i0 + TF_ATT_BS : T;
				cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, i1 - i0, hd, i1, sm,
					    dP + (size_t)i0 * T, T, k, ld, 0.0f, dq + (size_t)i0 * ld, ld);
				cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, i1 - i0, hd, T - i0,
					    sm, dP + (size_t)i0 * T + i0, T, q + (size_t)i0 * ld, ld, 0.0f,
					    dk + (size_t)i0 * ld, ld);
			}
		}
	}
}
#endif /* attention */

#endif /* PH_TRANSFORMER_OPS_H */
