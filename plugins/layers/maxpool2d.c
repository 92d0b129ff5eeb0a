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

static int maxpool2d_forward(void *state, const ph_ctx *ctx, float *const *params,
			     const float *x, float *y, ph_err *err)
{
	const maxpool2d_state *s = state;
	const size_t in_n = (size_t)s->C * s->H * s->W, out_n = (size_t)s->C * s->OH * s->OW;
	int32_t *arg = ctx->saved;  /* may be NULL when the host keeps nothing (eval) */
	for (int b = 0; b < ctx->batch; b++) {
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
	const size_t in_n = (size_t)s->C * s->H * s->W, out_n = (size_t)s->C * s->OH * s->OW;
	const int32_t *arg = ctx->saved;
	memset(dx, 0, (size_t)ctx->batch * in_n * sizeof *dx);
	for (int b = 0; b < ctx->batch; b++) {
		const int32_t *as = arg + b * out_n;
		const float *dys = dy + b * out_n;
		float *dxs = dx + b * in_n;
		for (size_t o = 0; o < out_n; o++)
			dxs[as[o]] += dys[o];
	}
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
