/* SPDX-License-Identifier: MIT */
/*
 * conv2d: 2-D convolution (cross-correlation, as in PyTorch), square kernel.
 *
 *   x [B, C, H, W]  ->  y [B, F, OH, OW]
 *   weight [F, C, k, k],  bias [F]
 *   OH = (H + 2p - k) / s + 1,  OW likewise;  P = OH*OW,  CKK = C*k*k
 *
 * im2col unrolls a sample into P columns of a column matrix,
 *   cols[(c*k + i)*k + j][n*P + oh*OW + ow] = x[n][c][oh*s - p + i][ow*s - p + j]
 * (zero outside the image), with the columns of all samples of a group side
 * by side, so that ONE gemm per group covers the whole micro-batch:
 *   Y_all [F, G*P] = W [F, CKK] . cols [CKK, G*P]
 * and y [G, F, P] is Y_all with its (F, G) axes swapped (+ bias).  One wide
 * gemm (N = G*P, 6272 for 32 samples of 14x14) instead of G thin ones (N = P,
 * 196) pays the BLAS call and packing overheads once and gives a threaded
 * BLAS room to split the work.  (With one OpenBLAS 0.3.21 thread on Zen the
 * thin gemms were already near peak; the time went to im2col, col2im and the
 * bias sums, hence the shifted-plane fast case and the blocked loops below.)
 *
 * The group G is the create() max_batch, so a micro-batch is one group,
 * unless max_batch samples' scratch would pass CONV2D_SCRATCH_CAP: then G
 * shrinks (to 1 at worst, the old one-sample-at-a-time scheme) and a
 * micro-batch takes ceil(batch / G) groups, in sample order.  Large images
 * lose little by that: their P alone makes the gemm wide enough.
 *
 * Scratch, G samples' worth, shared by forward and both backward halves:
 *   cols [CKK, G*P]   im2col of the group; dcols in backward_input
 *   buf  [F, G*P]     Y_all in forward, dY_all in backward (G = 1: dy read in place)
 *
 * Backward is split (ABI 1.1) into backward_weight (im2col, dW, db) and
 * backward_input (dcols, col2im); backward() runs the one, then the other.
 * Scratch is only valid during one call, so each half regathers dY_all.
 *
 * Backward recomputes cols with im2col instead of keeping them in
 * ctx->saved: saved state is held per in-flight micro-batch (CKK*P floats
 * per sample, 9x the input for a 3x3 kernel, e.g. 7.2 MB per micro-batch of
 * 32 for 32->64 on 14x14), while scratch is one buffer per rank.  im2col is
 * a copy next to the gemms: about a tenth of backward for that layer.
 *
 * Determinism: no threads of our own; every sum runs in a fixed order, and
 * the group size depends on max_batch only, not on the call.
 *
 * On a GPU the host calls conv2d_cuda.cu's hooks (conv2d_cuda_ops) instead
 * (cuDNN; its workspace is the device scratch, CONV2D_CUDA_WORKSPACE); its
 * release() frees the cuDNN descriptors they hang on the state.
 */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>
#include <pipehost/plugin.h>

#include "conv2d_state.h"

PH_LAYER_TWIN(conv2d_cuda_ops); /* conv2d_cuda.cu; NULL in a build without CUDA */

typedef struct {
	int64_t filters, kernel, stride, padding;
	int bias;
} conv2d_config;

static const ph_option conv2d_options[] = {
	PH_OPT_INT_(conv2d_config, filters, "filters", NULL, 1, INT_MAX,
		    "output channels"),
	PH_OPT_INT_(conv2d_config, kernel, "kernel", NULL, 1, 4096,
		    "kernel height and width (square)"),
	PH_OPT_INT_(conv2d_config, stride, "stride", "1", 1, 4096, "step between windows"),
	PH_OPT_INT_(conv2d_config, padding, "padding", "0", 0, 4096,
		    "zeros added on every side of the image"),
	PH_OPT_BOOL_(conv2d_config, bias, "bias", "yes", "add a learned bias per filter"),
	PH_OPT_END
};

/* conv2d_state: conv2d_state.h, shared with the CUDA twin (conv2d_cuda.cu). */

/* Most scratch bytes worth spending on wide gemms; past it the group shrinks. */
#ifndef CONV2D_SCRATCH_CAP
#define CONV2D_SCRATCH_CAP ((size_t)512 << 10) /* measured: small groups stay in cache and beat one big GEMM */
#endif

static int conv2d_create(const void *config, const ph_shape *in, int max_batch,
			 void **state, ph_err *err)
{
	const conv2d_config *cfg = config;
	if (in->ndim != 3)
		return ph_fail(err, PH_EINVAL,
			       "conv2d: input has %d dimension%s; need 3 ([channels, height, width]) "
			       "per sample", in->ndim, in->ndim == 1 ? "" : "s");
	for (int i = 0; i < 3; i++)
		if (in->d[i] < 1 || in->d[i] > INT_MAX)
			return ph_fail(err, PH_EINVAL, "conv2d: input dimension %d is %lld; need 1 to %d",
				       i, (long long)in->d[i], INT_MAX);
	if (cfg->filters < 1 || cfg->filters > INT_MAX || cfg->kernel < 1 ||
	    cfg->stride < 1 || cfg->padding < 0 || cfg->kernel > 4096 ||
	    cfg->stride > 4096 || cfg->padding > 4096)
		return ph_fail(err, PH_EINVAL,
			       "conv2d: filters %lld, kernel %lld, stride %lld, padding %lld out of range",
			       (long long)cfg->filters, (long long)cfg->kernel,
			       (long long)cfg->stride, (long long)cfg->padding);
	int64_t C = in->d[0], H = in->d[1], W = in->d[2];
	int64_t k = cfg->kernel, st = cfg->stride, p = cfg->padding;
	if (H + 2 * p < k || W + 2 * p < k)
		return ph_fail(err, PH_EINVAL,
			       "conv2d: kernel %lld larger than padded input %lldx%lld; "
			       "lower kernel or add padding",
			       (long long)k, (long long)(H + 2 * p), (long long)(W + 2 * p));
	int64_t OH = (H + 2 * p - k) / st + 1, OW = (W + 2 * p - k) / st + 1;
	int64_t ckk = C * k * k, ohw = OH * OW;
	/* CBLAS takes int dimensions; the column matrix's sides must fit. */
	if (ckk > INT_MAX || ohw > INT_MAX)
		return ph_fail(err, PH_EINVAL,
			       "conv2d: column matrix %lld x %lld exceeds BLAS int sizes; "
			       "use fewer channels or a smaller image", (long long)ckk, (long long)ohw);

	/* G samples per gemm: all of max_batch, unless that needs more than
	 * CONV2D_SCRATCH_CAP of scratch, or G*P passes BLAS int sizes. */
	size_t per_sample = (size_t)(ckk + cfg->filters) * (size_t)ohw * sizeof(float);
	int64_t group = max_batch < 1 ? 1 : max_batch;
	if ((size_t)group * per_sample > CONV2D_SCRATCH_CAP)
		group = (int64_t)(CONV2D_SCRATCH_CAP / per_sample);
	if (group > INT_MAX / ohw)
		group = INT_MAX / ohw;
	if (group < 1)
		group = 1;

	conv2d_state *s = calloc(1, sizeof *s);
	if (!s)
		return ph_fail(err, PH_ENOMEM, "conv2d: out of memory");
	*s = (conv2d_state){ .C = (int)C, .H = (int)H, .W = (int)W, .F = (int)cfg->filters,
			     .k = (int)k, .s = (int)st, .p = (int)p, .OH = (int)OH, .OW = (int)OW,
			     .ckk = (int)ckk, .ohw = (int)ohw, .bias = cfg->bias,
			     .group = (int)group,
			     .scratch = (size_t)group * per_sample };
	*state = s;
	return PH_OK;
}

static void conv2d_destroy(void *state)
{
	free(state);
}

static int conv2d_meta(const void *state, ph_layer_meta *m, ph_err *err)
{
	const conv2d_state *s = state;
	*m = (ph_layer_meta){ 0 };
	m->out = (ph_shape){ 3, { s->F, s->OH, s->OW } };
	double mm = 2.0 * s->F * (double)s->ckk * s->ohw;
	double b = s->bias ? (double)s->F * s->ohw : 0;
	m->fwd_flops = mm + b;
	m->bwd_flops = 2 * mm + b;  /* dW and dx gemms; im2col/col2im are moves */
	/* PyTorch's default bound for both tensors: 1/sqrt(fan_in). */
	float bound = 1.0f / sqrtf((float)s->ckk);
	ph_param_desc *w = &m->params[m->nparams++];
	strcpy(w->name, "weight");
	w->shape = (ph_shape){ 4, { s->F, s->C, s->k, s->k } };
	w->init = PH_INIT_UNIFORM;
	w->init_arg = bound;
	if (s->bias) {
		ph_param_desc *bd = &m->params[m->nparams++];
		strcpy(bd->name, "bias");
		bd->shape = (ph_shape){ 1, { s->F } };
		bd->init = PH_INIT_UNIFORM;
		bd->init_arg = bound;
		bd->no_decay = 1;
	}
	m->scratch_bytes = s->scratch;
	/* On a GPU: cuDNN's workspace instead of im2col's columns. */
	m->device_scratch_bytes = CONV2D_CUDA_WORKSPACE;
	return PH_OK;
}

/* Output positions whose window tap lands inside the image, along one axis:
 * o*s - p + t is in [0, n) exactly for o in [*lo, *hi), o < nout. */
static void valid_range(int n, int nout, int s, int p, int t, int *lo, int *hi)
{
	int a = p - t;                     /* need o*s >= a */
	int l = a <= 0 ? 0 : (a + s - 1) / s;
	int b = n - 1 + p - t;             /* need o*s <= b */
	int h = b < 0 ? 0 : b / s + 1;
	if (h > nout)
		h = nout;
	if (l > h)
		l = h;
	*lo = l, *hi = h;
}

/* Small loops written in blocks of 8 so that gcc -O2 vectorizes them. */

/* dst[i] += src[i] */
static void add_to(float *restrict dst, const float *restrict src, size_t n)
{
	size_t i = 0;
	for (; i + 8 <= n; i += 8)
		for (int l = 0; l < 8; l++)
			dst[i + l] += src[i + l];
	for (; i < n; i++)
		dst[i] += src[i];
}

/* dst[i] = src[i] + b */
static void copy_add(float *restrict dst, const float *restrict src, float b, size_t n)
{
	size_t i = 0;
	for (; i + 8 <= n; i += 8)
		for (int l = 0; l < 8; l++)
			dst[i + l] = src[i + l] + b;
	for (; i < n; i++)
		dst[i] = src[i] + b;
}

/* dst[i] = v */
static void fill(float *restrict dst, float v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		dst[i] = v;
}

/* sum of v[0 .. n): 8 interleaved partial sums, added pairwise at the end.
 * A fixed order (reproducible), without one long serial chain of adds. */
static float sum8(const float *restrict v, size_t n)
{
	float acc[8] = { 0 };
	size_t i = 0;
	for (; i + 8 <= n; i += 8)
		for (int l = 0; l < 8; l++)
			acc[l] += v[i + l];
	for (int l = 0; i < n; i++, l++)
		acc[l] += v[i];
	return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

/*
 * The fast case: stride 1 and OW == W (a "same" convolution, k = 2p + 1).
 * Then for tap (i, j) the whole output plane o = oh*OW + ow reads the input
 * plane at o + d, d = (i - p)*W + (j - p): one contiguous run, wrong only in
 * the columns ow outside [clo, chi) of each row, where the shifted run wraps
 * into the neighbouring image row instead of reading the zero padding.
 * Run: o in [o_lo, o_hi), the valid rows' outputs whose source lies in the plane.
 */
static int same_shift(const conv2d_state *s)
{
	return s->s == 1 && s->OW == s->W;
}

static void shift_run(const conv2d_state *s, int i, int j, ptrdiff_t *d, size_t *o_lo,
		      size_t *o_hi, int *rlo, int *rhi, int *clo, int *chi)
{
	valid_range(s->H, s->OH, 1, s->p, i, rlo, rhi);
	valid_range(s->W, s->OW, 1, s->p, j, clo, chi);
	*d = (ptrdiff_t)(i - s->p) * s->W + (j - s->p);
	ptrdiff_t lo = (ptrdiff_t)*rlo * s->OW, hi = (ptrdiff_t)*rhi * s->OW;
	if (lo < -*d)
		lo = -*d;
	if (hi > (ptrdiff_t)s->H * s->W - *d)
		hi = (ptrdiff_t)s->H * s->W - *d;
	if (hi < lo)  /* no valid row, or nothing of it in the plane */
		lo = hi = (ptrdiff_t)*rlo * s->OW;
	*o_lo = (size_t)lo, *o_hi = (size_t)hi;
}

/* One sample x [C, H, W] -> its P columns of cols [CKK, ld] (at col, which
 * points at the sample's first column); padding reads as zero.  The fast
 * case loops over taps outside channels so that shift_run (divisions) runs
 * k*k times a sample, not C*k*k times: it was 1% of a CNN step. */
static void im2col(const conv2d_state *s, const float *x, float *col, size_t ld)
{
	const int k = s->k, st = s->s, OH = s->OH, OW = s->OW;
	const size_t P = (size_t)s->ohw, HW = (size_t)s->H * s->W;
	if (same_shift(s)) {
		for (int i = 0; i < k; i++)
			for (int j = 0; j < k; j++) {
				int rlo, rhi, clo, chi;
				ptrdiff_t d;
				size_t o_lo, o_hi;
				shift_run(s, i, j, &d, &o_lo, &o_hi, &rlo, &rhi, &clo, &chi);
				for (int c = 0; c < s->C; c++) {
					float *row = col + (size_t)((c * k + i) * k + j) * ld;  /* [OH*OW] */
					const float *xc = x + (size_t)c * HW;                   /* [H, W] */
					memset(row, 0, o_lo * sizeof *row);
					memcpy(row + o_lo, xc + (ptrdiff_t)o_lo + d,
					       (o_hi - o_lo) * sizeof *row);
					memset(row + o_hi, 0, (P - o_hi) * sizeof *row);
					for (int oh = rlo; oh < rhi; oh++) {
						float *out = row + (size_t)oh * OW;
						for (int ow = 0; ow < clo; ow++)
							out[ow] = 0.0f;
						for (int ow = chi; ow < OW; ow++)
							out[ow] = 0.0f;
					}
				}
			}
		return;
	}
	for (int c = 0; c < s->C; c++)
		for (int i = 0; i < k; i++)
			for (int j = 0; j < k; j++) {
				float *row = col + (size_t)((c * k + i) * k + j) * ld;  /* [OH*OW] */
				const float *xc = x + (size_t)c * HW;                   /* [H, W] */
				int clo, chi;
				valid_range(s->W, OW, st, s->p, j, &clo, &chi);
				for (int oh = 0; oh < OH; oh++) {
					int h = oh * st - s->p + i;
					float *out = row + (size_t)oh * OW;
					if (h < 0 || h >= s->H) {
						memset(out, 0, (size_t)OW * sizeof *out);
						continue;
					}
					const float *xr = xc + (size_t)h * s->W;  /* x[c][h][:] */
					for (int ow = 0; ow < clo; ow++)
						out[ow] = 0.0f;
					for (int ow = clo; ow < chi; ow++)
						out[ow] = xr[ow * st - s->p + j];
					for (int ow = chi; ow < OW; ow++)
						out[ow] = 0.0f;
				}
			}
}

/* The adjoint of im2col: dx [C, H, W] += scatter of one sample's P columns
 * of dcols [CKK, ld].  Overlapping windows hit the same pixel; the fixed loop
 * order keeps the sums bitwise reproducible.  Clobbers the padding entries
 * of dcol (the fast case zeroes them so that its contiguous run can add them). */
static void col2im_add(const conv2d_state *s, float *dcol, size_t ld, float *restrict dx)
{
	const int k = s->k, st = s->s, OH = s->OH, OW = s->OW;
	const size_t HW = (size_t)s->H * s->W;
	if (same_shift(s)) {
		/* Taps outside channels, as in im2col.  A dx element of channel c
		 * still receives its taps in (i, j) order: the same sums. */
		for (int i = 0; i < k; i++)
			for (int j = 0; j < k; j++) {
				int rlo, rhi, clo, chi;
				ptrdiff_t d;
				size_t o_lo, o_hi;
				shift_run(s, i, j, &d, &o_lo, &o_hi, &rlo, &rhi, &clo, &chi);
				for (int c = 0; c < s->C; c++) {
					float *row = dcol + (size_t)((c * k + i) * k + j) * ld;  /* [OH*OW] */
					float *dxc = dx + (size_t)c * HW;                        /* [H, W] */
					for (int oh = rlo; oh < rhi; oh++) {
						float *in = row + (size_t)oh * OW;
						for (int ow = 0; ow < clo; ow++)
							in[ow] = 0.0f;
						for (int ow = chi; ow < OW; ow++)
							in[ow] = 0.0f;
					}
					add_to(dxc + (ptrdiff_t)o_lo + d, row + o_lo, o_hi - o_lo);
				}
			}
		return;
	}
	for (int c = 0; c < s->C; c++)
		for (int i = 0; i < k; i++)
			for (int j = 0; j < k; j++) {
				float *row = dcol + (size_t)((c * k + i) * k + j) * ld;  /* [OH*OW] */
				float *dxc = dx + (size_t)c * HW;                        /* [H, W] */
				int clo, chi;
				valid_range(s->W, OW, st, s->p, j, &clo, &chi);
				for (int oh = 0; oh < OH; oh++) {
					int h = oh * st - s->p + i;
					if (h < 0 || h >= s->H)
						continue;
					const float *in = row + (size_t)oh * OW;
					float *xr = dxc + (size_t)h * s->W;  /* dx[c][h][:] */
					for (int ow = clo; ow < chi; ow++)
						xr[ow * st - s->p + j] += in[ow];
				}
			}
}

static int check_call(const conv2d_state *s, const ph_ctx *ctx, ph_err *err)
{
	if (!ctx->scratch && ctx->batch > 0)
		return ph_fail(err, PH_EINTERNAL, "conv2d: no scratch buffer (meta asked for %zu bytes)",
			       s->scratch);
	return PH_OK;
}

/*
 * Per group of n <= G samples (one group for a whole micro-batch unless the
 * scratch cap split it), N = n*P:
 *   cols  [CKK, N]  = im2col of samples b0 .. b0+n-1, side by side
 *   Y_all [F, N]    = W [F, CKK] . cols                       (one gemm)
 *   y [b0+q, f, :]  = Y_all[f, q*P .. q*P+P) (+ b[f])          (transpose copy)
 */
static int conv2d_forward(void *state, const ph_ctx *ctx, float *const *params,
			  const float *x, float *y, ph_err *err)
{
	const conv2d_state *s = state;
	int rc = check_call(s, ctx, err);
	if (rc)
		return rc;
	const size_t P = (size_t)s->ohw;
	const size_t in_n = (size_t)s->C * s->H * s->W, out_n = (size_t)s->F * P;
	float *cols = ctx->scratch;                                  /* [CKK, G*P] */
	float *yall = cols + (size_t)s->ckk * s->group * P;          /* [F, G*P] */
	for (int b0 = 0; b0 < ctx->batch; b0 += s->group) {
		const int n = ctx->batch - b0 < s->group ? ctx->batch - b0 : s->group;
		const size_t N = (size_t)n * P;
		for (int q = 0; q < n; q++)
			im2col(s, x + (size_t)(b0 + q) * in_n, cols + q * P, N);
		if (n == 1) {
			/* A group of one (the 32->64 conv of the CNN, whose samples
			 * each fill the scratch cap): y's [F, P] block is Y_all
			 * itself, so the gemm writes it directly, onto the bias
			 * (beta = 1), with no Y_all and no copy.  The same bits
			 * as Y_all + b while OpenBLAS keeps C*k*k in one K block
			 * (GEMM_Q, >= 256 on x86-64; 288 for the CNN's conv2 was
			 * checked): it adds the finished dot product to C once
			 * (alpha = 1), and acc + b == b + acc.  Past that, partial
			 * sums meet the bias in another order: other bits, as
			 * reproducible. */
			float *ys = y + (size_t)b0 * out_n;
			if (s->bias)
				for (int f = 0; f < s->F; f++)
					fill(ys + (size_t)f * P, params[1][f], P);
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s->F, (int)N, s->ckk,
				    1.0f, params[0], s->ckk, cols, (int)N, s->bias ? 1.0f : 0.0f,
				    ys, (int)N);
			continue;
		}
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s->F, (int)N, s->ckk,
			    1.0f, params[0], s->ckk, cols, (int)N, 0.0f, yall, (int)N);
		for (int q = 0; q < n; q++)
			for (int f = 0; f < s->F; f++) {
				const float *src = yall + (size_t)f * N + q * P;
				float *dst = y + (size_t)(b0 + q) * out_n + (size_t)f * P;
				if (s->bias)
					copy_add(dst, src, params[1][f], P);
				else
					memcpy(dst, src, P * sizeof *dst);
			}
	}
	return PH_OK;
}

/*
 * dY_all [F, N] of the group b0 .. b0+n-1, N = n*P:
 *   dY_all[f, q*P + i] = dy[b0+q, f, i]
 * gathered into buf; a group of one sample is dy's own [F, P] block, used
 * in place.  Each backward half redoes this: scratch lives for one call.
 */
static const float *gather_dy(const conv2d_state *s, const float *dy, int b0, int n, float *buf)
{
	const size_t P = (size_t)s->ohw, out_n = (size_t)s->F * P, N = (size_t)n * P;
	if (n == 1)
		return dy + (size_t)b0 * out_n;
	for (int q = 0; q < n; q++)
		for (int f = 0; f < s->F; f++)
			memcpy(buf + (size_t)f * N + q * P, dy + (size_t)(b0 + q) * out_n + (size_t)f * P,
			       P * sizeof *buf);
	return buf;
}

/*
 * The W half.  Per group of n samples, N = n*P, groups in sample order (so
 * gradient sums are reproducible):
 *   cols   [CKK, N]  = im2col of the group               (recomputed, not saved)
 *   dY_all [F, N]    = gather_dy()
 *   dW [F, CKK]     += dY_all . cols^T [N, CKK]          (one gemm, beta = 1)
 *   db [F]          += row sums of dY_all
 */
static int conv2d_backward_weight(void *state, const ph_ctx *ctx, float *const *params,
				  float *const *grads, const float *x, const float *y,
				  const float *dy, ph_err *err)
{
	const conv2d_state *s = state;
	int rc = check_call(s, ctx, err);
	if (rc)
		return rc;
	const size_t P = (size_t)s->ohw, in_n = (size_t)s->C * s->H * s->W;
	float *cols = ctx->scratch;                                  /* [CKK, G*P] */
	float *buf = cols + (size_t)s->ckk * s->group * P;           /* [F, G*P] */
	for (int b0 = 0; b0 < ctx->batch; b0 += s->group) {
		const int n = ctx->batch - b0 < s->group ? ctx->batch - b0 : s->group;
		const size_t N = (size_t)n * P;
		for (int q = 0; q < n; q++)
			im2col(s, x + (size_t)(b0 + q) * in_n, cols + q * P, N);
		const float *dyall = gather_dy(s, dy, b0, n, buf);
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, s->F, s->ckk, (int)N,
			    1.0f, dyall, (int)N, cols, (int)N, 1.0f, grads[0], s->ckk);
		if (s->bias)
			for (int f = 0; f < s->F; f++)
				grads[1][f] += sum8(dyall + (size_t)f * N, N);
	}
	return PH_OK;
}

/*
 * The I half.  Per group of n samples, N = n*P (dx NULL: nothing to do):
 *   dY_all [F, N]    = gather_dy()
 *   dcols [CKK, N]   = W^T [CKK, F] . dY_all             (one gemm, into cols)
 *   dx [b0+q]        = col2im(dcols columns q*P ..)      (zeroed, then scattered)
 */
static int conv2d_backward_input(void *state, const ph_ctx *ctx, float *const *params,
				 const float *x, const float *y, const float *dy, float *dx,
				 ph_err *err)
{
	const conv2d_state *s = state;
	int rc = check_call(s, ctx, err);
	if (rc || !dx)
		return rc;
	const size_t P = (size_t)s->ohw, in_n = (size_t)s->C * s->H * s->W;
	float *cols = ctx->scratch;                                  /* [CKK, G*P] */
	float *buf = cols + (size_t)s->ckk * s->group * P;           /* [F, G*P] */
	for (int b0 = 0; b0 < ctx->batch; b0 += s->group) {
		const int n = ctx->batch - b0 < s->group ? ctx->batch - b0 : s->group;
		const size_t N = (size_t)n * P;
		const float *dyall = gather_dy(s, dy, b0, n, buf);
		cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, s->ckk, (int)N, s->F,
			    1.0f, params[0], s->ckk, dyall, (int)N, 0.0f, cols, (int)N);
		for (int q = 0; q < n; q++) {
			float *dxs = dx + (size_t)(b0 + q) * in_n;
			memset(dxs, 0, in_n * sizeof *dxs);
			col2im_add(s, cols + q * P, N, dxs);
		}
	}
	return PH_OK;
}

/* The full backward is the two halves, so a split run (either order) gives
 * bitwise the same dx and gradients. */
static int conv2d_backward(void *state, const ph_ctx *ctx, float *const *params,
			   float *const *grads, const float *x, const float *y,
			   const float *dy, float *dx, ph_err *err)
{
	int rc = conv2d_backward_weight(state, ctx, params, grads, x, y, dy, err);
	return rc ? rc : conv2d_backward_input(state, ctx, params, x, y, dy, dx, err);
}

static const ph_layer_ops conv2d_ops = {
	.head = PH_HEAD(ph_layer_ops, "conv2d",
			"2-D convolution over [channels, height, width] (im2col + gemm)",
			conv2d_options, conv2d_config),
	.devices = PH_DEV_CPU,
	.flags = 0,
	.create = conv2d_create,
	.destroy = conv2d_destroy,
	.meta = conv2d_meta,
	.forward = conv2d_forward,
	.backward = conv2d_backward,
	.backward_input = conv2d_backward_input,
	.backward_weight = conv2d_backward_weight,
	.cuda = &conv2d_cuda_ops,
};

/* A named array: a braced list inside PH_PLUGIN() would split at its comma. */
static const ph_layer_ops *const conv2d_layers[] = { &conv2d_ops, NULL };
PH_PLUGIN(conv2d_layers, NULL, NULL)
