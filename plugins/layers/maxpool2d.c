/* SPDX-License-Identifier: MIT */
/*
 * maxpool2d: max over size x size windows of each channel, no padding.
 *
 *   x [B, C, H, W]  ->  y [B, C, OH, OW],  OH = (H - size) / stride + 1
 *   saved [B, C, OH, OW] int32: where each max came from, as an index into
 *                               the sample's x (c*H*W + h*W + w)
 *
 * Ties go to the first maximum in row-major window order, and a NaN wins
 * over numbers so that divergence shows up in the loss instead of hiding.
 * Backward scatters dy to the saved positions; windows may overlap
 * (stride < size), so dx is zeroed and then accumulated.
 *
 * size = stride = 2 (the usual pool) takes a vectorised path, bitwise the
 * same as the plain one (pool_forward_ref, pool_backward_ref), which serves
 * every other shape.
 */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <pipehost/plugin.h>
#include "maxpool2d_state.h"

/* maxpool2d_cuda.cu, the argmax in ctx->saved as here; NULL in a build
 * without CUDA */
PH_LAYER_TWIN(maxpool2d_cuda_ops);

typedef struct {
	int64_t size, stride;
} maxpool2d_config;

static const ph_option maxpool2d_options[] = {
	PH_OPT_INT_(maxpool2d_config, size, "size", "2", 1, 4096, "window height and width"),
	PH_OPT_INT_(maxpool2d_config, stride, "stride", "0", 0, 4096,
		    "step between windows; 0 = size (windows do not overlap)"),
	PH_OPT_END
};


static int maxpool2d_create(const void *config, const ph_shape *in, int max_batch,
			    void **state, ph_err *err)
{
	const maxpool2d_config *cfg = config;
	if (in->ndim != 3)
		return ph_fail(err, PH_EINVAL,
			       "maxpool2d: input has %d dimension%s; need 3 ([channels, height, width]) "
			       "per sample", in->ndim, in->ndim == 1 ? "" : "s");
	for (int i = 0; i < 3; i++)
		if (in->d[i] < 1)
			return ph_fail(err, PH_EINVAL, "maxpool2d: input dimension %d is %lld; need >= 1",
				       i, (long long)in->d[i]);
	/* The saved argmax is an int32 index into one sample. */
	if (ph_shape_numel(in) > INT32_MAX)
		return ph_fail(err, PH_EINVAL, "maxpool2d: %lld values per sample; at most %d",
			       (long long)ph_shape_numel(in), INT32_MAX);
	int64_t size = cfg->size, stride = cfg->stride ? cfg->stride : cfg->size;
	if (size < 1 || size > 4096 || stride < 1 || stride > 4096)
		return ph_fail(err, PH_EINVAL, "maxpool2d: size %lld, stride %lld out of range",
			       (long long)cfg->size, (long long)cfg->stride);
	if (in->d[1] < size || in->d[2] < size)
		return ph_fail(err, PH_EINVAL,
			       "maxpool2d: window %lldx%lld larger than input %lldx%lld; lower size",
			       (long long)size, (long long)size, (long long)in->d[1],
			       (long long)in->d[2]);
	maxpool2d_state *s = calloc(1, sizeof *s);
	if (!s)
		return ph_fail(err, PH_ENOMEM, "maxpool2d: out of memory");
	*s = (maxpool2d_state){ .C = (int)in->d[0], .H = (int)in->d[1], .W = (int)in->d[2],
				.size = (int)size, .stride = (int)stride,
				.OH = (int)((in->d[1] - size) / stride + 1),
				.OW = (int)((in->d[2] - size) / stride + 1) };
	*state = s;
	return PH_OK;
}

static void maxpool2d_destroy(void *state)
{
	free(state);
}

static int maxpool2d_meta(const void *state, ph_layer_meta *m, ph_err *err)
{
	const maxpool2d_state *s = state;
	*m = (ph_layer_meta){ 0 };
	m->out = (ph_shape){ 3, { s->C, s->OH, s->OW } };
	double out_n = (double)s->C * s->OH * s->OW;
	m->fwd_flops = out_n * s->size * s->size;  /* one compare per window element */
	m->bwd_flops = (double)s->C * s->H * s->W + out_n;
	m->saved_bytes = (size_t)out_n * sizeof(int32_t);
	return PH_OK;
}

/*
 * The plain kernels, any size and stride: the definition, and what the fast
 * 2x2 case below must match bit for bit (tests/test-cnn-kernels.c checks).
 *   x [n, C, H, W] -> y [n, C, OH, OW], arg [n, C, OH, OW] (NULL: not kept)
 */
static void pool_forward_ref(const maxpool2d_state *s, int n, const float *x, float *y,
			     int32_t *arg)
{
	const size_t in_n = (size_t)s->C * s->H * s->W, out_n = (size_t)s->C * s->OH * s->OW;
	for (int b = 0; b < n; b++) {
		const float *xs = x + b * in_n;
		float *ys = y + b * out_n;
		int32_t *as = arg ? arg + b * out_n : NULL;
		size_t o = 0;
		for (int c = 0; c < s->C; c++)
			for (int oh = 0; oh < s->OH; oh++)
				for (int ow = 0; ow < s->OW; ow++, o++) {
					/* top-left corner of the window */
					const int32_t corner = (int32_t)(((size_t)c * s->H +
									  (size_t)oh * s->stride) * s->W +
									 (size_t)ow * s->stride);
					int32_t best_i = corner;
					float best = xs[corner];
					for (int i = 0; i < s->size; i++)
						for (int j = 0; j < s->size; j++) {
							int32_t idx = corner + i * s->W + j;
							float v = xs[idx];
							/* strict >: ties keep the first */
							if (v > best || (isnan(v) && !isnan(best))) {
								best = v;
								best_i = idx;
							}
						}
					ys[o] = best;
					if (as)
						as[o] = best_i;
				}
	}
}

/* dx [n, C, H, W] = 0, then dx[arg] += dy: windows may overlap. */
static void pool_backward_ref(const maxpool2d_state *s, int n, const int32_t *arg,
			      const float *dy, float *dx)
{
	const size_t in_n = (size_t)s->C * s->H * s->W, out_n = (size_t)s->C * s->OH * s->OW;
	memset(dx, 0, (size_t)n * in_n * sizeof *dx);
	for (int b = 0; b < n; b++) {
		const int32_t *as = arg + b * out_n;
		const float *dys = dy + b * out_n;
		float *dxs = dx + b * in_n;
		for (size_t o = 0; o < out_n; o++)
			dxs[as[o]] += dys[o];
	}
}

/*
 * The fast case, size 2 and stride 2 (the CNN's pools; 20% of a step when
 * it went through the plain loop above, whose data-dependent branches
 * mispredict half the time).  Four windows at once in SSE-sized GCC
 * vectors (every x86-64 has SSE2; elsewhere gcc lowers them): rows 2*oh and
 * 2*oh+1 are loaded eight floats each and split into even and odd columns,
 * the window's four values a b / c d.  The running max takes v when
 *   !(v <= best) && best == best
 * i.e. v > best, or v NaN while best is not: the plain loop's rule, so ties
 * keep the first and a NaN wins, with the same bits and argmax.
 */
typedef float v4f __attribute__((vector_size(16)));
typedef int32_t v4i __attribute__((vector_size(16)));

static inline v4f loadu4(const float *p)
{
	v4f v;
	memcpy(&v, p, sizeof v);
	return v;
}

static inline void storeu4(float *p, v4f v)
{
	memcpy(p, &v, sizeof v);
}

static inline void take4(v4f v, v4i off_v, v4f *best, v4i *off)
{
	v4i t = ~(v <= *best) & (*best == *best);
	*best = (v4f)(((v4i)v & t) | ((v4i)*best & ~t));
	*off = (off_v & t) | (*off & ~t);
}

/* Four windows ow .. ow+3 of one output row: y, arg [ow .. ow+3]. */
static inline void pool2x2_quad(const float *r0, const float *r1, float *y, int32_t *a,
				int32_t base, int32_t W, int ow)
{
	const v4i step = { 0, 2, 4, 6 }, zero = { 0 }, one = zero + 1, w = zero + W,
		  w1 = zero + W + 1;
	v4f p0 = loadu4(r0 + 2 * ow), p1 = loadu4(r0 + 2 * ow + 4);
	v4f q0 = loadu4(r1 + 2 * ow), q1 = loadu4(r1 + 2 * ow + 4);
	v4f va = __builtin_shuffle(p0, p1, (v4i){ 0, 2, 4, 6 });
	v4f vb = __builtin_shuffle(p0, p1, (v4i){ 1, 3, 5, 7 });
	v4f vc = __builtin_shuffle(q0, q1, (v4i){ 0, 2, 4, 6 });
	v4f vd = __builtin_shuffle(q0, q1, (v4i){ 1, 3, 5, 7 });
	v4f best = va;
	v4i off = zero;
	take4(vb, one, &best, &off);
	take4(vc, w, &best, &off);
	take4(vd, w1, &best, &off);
	storeu4(y + ow, best);
	v4i idx = off + step + (base + 2 * ow);
	memcpy(a + ow, &idx, sizeof idx);
}

/* One output row: y [OW], arg [OW] from input rows r0, r1 (r1 = r0 + W);
 * base is r0's index in the sample.  A row whose OW is not a multiple of
 * four ends with a block that overlaps the one before: it writes the same
 * values again, and no scalar tail with its branches is needed. */
static void pool2x2_row(const float *r0, const float *r1, float *restrict y,
			int32_t *restrict a, int32_t base, int32_t W, int OW)
{
	if (OW >= 4) {
		for (int ow = 0; ow + 4 <= OW; ow += 4)
			pool2x2_quad(r0, r1, y, a, base, W, ow);
		if (OW % 4)
			pool2x2_quad(r0, r1, y, a, base, W, OW - 4);
		return;
	}
	for (int ow = 0; ow < OW; ow++) {
		const int32_t c0 = 2 * ow;
		float best = r0[c0];
		int32_t bi = c0;
		const float v[3] = { r0[c0 + 1], r1[c0], r1[c0 + 1] };
		const int32_t vi[3] = { c0 + 1, c0 + W, c0 + W + 1 };
		for (int k = 0; k < 3; k++)
			if (!(v[k] <= best) && best == best)
				best = v[k], bi = vi[k];
		y[ow] = best;
		a[ow] = base + bi;
	}
}

/* x [n, C, H, W] -> y, arg [n, C, OH, OW], size = stride = 2.  Without arg
 * (eval) the indices go to a row of scratch on the stack. */
static void pool2x2_forward(const maxpool2d_state *s, int n, const float *x, float *y,
			    int32_t *arg)
{
	const size_t H = (size_t)s->H, W = (size_t)s->W, OW = (size_t)s->OW;
	int32_t tmp[128];
	for (size_t pl = 0; pl < (size_t)n * s->C; pl++) {     /* plane: sample, channel */
		const float *xp = x + pl * H * W;
		const int32_t c0 = (int32_t)((pl % (size_t)s->C) * H * W);
		for (int oh = 0; oh < s->OH; oh++) {
			size_t o = (pl * s->OH + oh) * OW;
			const float *r0 = xp + 2 * oh * W;
			const int32_t base = c0 + (int32_t)(2 * oh * W);
			if (arg) {
				pool2x2_row(r0, r0 + W, y + o, arg + o, base, (int32_t)W, (int)OW);
				continue;
			}
			for (size_t ow = 0; ow < OW; ow += 128) {
				int m = OW - ow < 128 ? (int)(OW - ow) : 128;
				pool2x2_row(r0 + 2 * ow, r0 + W + 2 * ow, y + o + ow, tmp, 0,
					    (int32_t)W, m);
			}
		}
	}
}

/* dx of four windows ow .. ow+3: rows r0, r1 [2*ow .. 2*ow+8). */
static inline void unpool2x2_quad(const int32_t *a, const float *d, float *r0, float *r1,
				  int32_t base, int32_t W, int ow)
{
	const v4i step = { 0, 2, 4, 6 }, zero = { 0 }, one = zero + 1, w = zero + W, w1 = w + 1;
	v4i idx;
	memcpy(&idx, a + ow, sizeof idx);
	v4i off = idx - step - (base + 2 * ow);
	v4i g = (v4i)(loadu4(d + ow) + 0.0f);
	v4f ga = (v4f)(g & (off == zero)), gb = (v4f)(g & (off == one));
	v4f gc = (v4f)(g & (off == w)), gd = (v4f)(g & (off == w1));
	storeu4(r0 + 2 * ow, __builtin_shuffle(ga, gb, (v4i){ 0, 4, 1, 5 }));
	storeu4(r0 + 2 * ow + 4, __builtin_shuffle(ga, gb, (v4i){ 2, 6, 3, 7 }));
	storeu4(r1 + 2 * ow, __builtin_shuffle(gc, gd, (v4i){ 0, 4, 1, 5 }));
	storeu4(r1 + 2 * ow + 4, __builtin_shuffle(gc, gd, (v4i){ 2, 6, 3, 7 }));
}

/*
 * dx [n, C, H, W] from dy and arg [n, C, OH, OW], size = stride = 2: the
 * windows tile the image, so each dx element is written once, no zeroing
 * pass: dy + 0 at the window's argmax (+0 as the plain kernel's 0 + dy gives:
 * -0 becomes +0), 0 at its other three, and 0 in the last row or column
 * that no window covers (odd H or W).  Rows end with an overlapping block,
 * as in forward.
 */
static void pool2x2_backward(const maxpool2d_state *s, int n, const int32_t *arg,
			     const float *dy, float *dx)
{
	const size_t H = (size_t)s->H, W = (size_t)s->W, OW = (size_t)s->OW, OH = (size_t)s->OH;
	for (size_t pl = 0; pl < (size_t)n * s->C; pl++) {
		float *dp = dx + pl * H * W;
		const int32_t c0 = (int32_t)((pl % (size_t)s->C) * H * W);
		for (size_t oh = 0; oh < OH; oh++) {
			const size_t o = (pl * OH + oh) * OW;
			const int32_t *a = arg + o;
			const float *d = dy + o;
			float *r0 = dp + 2 * oh * W, *r1 = r0 + W;
			const int32_t base = c0 + (int32_t)(2 * oh * W);
			if (OW >= 4) {
				for (size_t ow = 0; ow + 4 <= OW; ow += 4)
					unpool2x2_quad(a, d, r0, r1, base, (int32_t)W, (int)ow);
				if (OW % 4)
					unpool2x2_quad(a, d, r0, r1, base, (int32_t)W, (int)OW - 4);
			} else {
				for (size_t ow = 0; ow < OW; ow++) {
					int32_t off = a[ow] - base - 2 * (int32_t)ow;
					float g = d[ow] + 0.0f;
					r0[2 * ow] = off == 0 ? g : 0.0f;
					r0[2 * ow + 1] = off == 1 ? g : 0.0f;
					r1[2 * ow] = off == (int32_t)W ? g : 0.0f;
					r1[2 * ow + 1] = off == (int32_t)W + 1 ? g : 0.0f;
				}
			}
			if (W & 1)
				r0[W - 1] = r1[W - 1] = 0.0f;
		}
		if (H & 1)
			memset(dp + (H - 1) * W, 0, W * sizeof *dp);
	}
}

static int fast2x2(const maxpool2d_state *s)
{
	return s->size == 2 && s->stride == 2;
}

static int maxpool2d_forward(void *state, const ph_ctx *ctx, float *const *params,
			     const float *x, float *y, ph_err *err)
{
	const maxpool2d_state *s = state;
	int32_t *arg = ctx->saved;  /* may be NULL when the host keeps nothing (eval) */
	if (fast2x2(s))
		pool2x2_forward(s, ctx->batch, x, y, arg);
	else
		pool_forward_ref(s, ctx->batch, x, y, arg);
	return PH_OK;
}

static int maxpool2d_backward(void *state, const ph_ctx *ctx, float *const *params,
			      float *const *grads, const float *x, const float *y,
			      const float *dy, float *dx, ph_err *err)
{
	const maxpool2d_state *s = state;
	if (!dx)
		return PH_OK;
	if (!ctx->saved && ctx->batch > 0)
		return ph_fail(err, PH_EINTERNAL,
			       "maxpool2d: backward without the saved argmax from forward");
	if (fast2x2(s))
		pool2x2_backward(s, ctx->batch, ctx->saved, dy, dx);
	else
		pool_backward_ref(s, ctx->batch, ctx->saved, dy, dx);
	return PH_OK;
}

static const ph_layer_ops maxpool2d_ops = {
	.head = PH_HEAD(ph_layer_ops, "maxpool2d",
			"2-D max pooling over [channels, height, width], no padding",
			maxpool2d_options, maxpool2d_config),
	.devices = PH_DEV_CPU,
	.flags = 0,
	.create = maxpool2d_create,
	.destroy = maxpool2d_destroy,
	.meta = maxpool2d_meta,
	.forward = maxpool2d_forward,
	.backward = maxpool2d_backward,
	.cuda = &maxpool2d_cuda_ops,
};

/* A named array: a braced list inside PH_PLUGIN() would split at its comma. */
static const ph_layer_ops *const maxpool2d_layers[] = { &maxpool2d_ops, NULL };
PH_PLUGIN(maxpool2d_layers, NULL, NULL)
