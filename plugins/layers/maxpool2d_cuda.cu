/* SPDX-License-Identifier: MIT */
/* maxpool2d's CUDA twin (maxpool2d.c), bit for bit the CPU's results.
 *
 *   x [B, C, H, W]  ->  y [B, C, OH, OW],  arg [B, C, OH, OW] int32 (ctx->saved,
 *   may be NULL in forward): index of the max in the sample's x, c*H*W + h*W + w.
 *
 * Forward: one thread per output; ties keep the first maximum in row-major
 * window order, a NaN wins over numbers.
 * Backward: one thread per input element gathers, instead of the CPU's
 * scatter, the dy of every window that chose it, windows in increasing
 * output order starting from 0.0f: the same additions in the same order as
 * the CPU's memset-then-accumulate, and no atomics. */
#include "cuda_common.cuh"
#include "maxpool2d_state.h"

typedef struct {
	int C, H, W, size, stride, OH, OW;
} mp_geom;

/* x [B, C*H*W] -> y, arg [B, C*OH*OW]; n = B * C*OH*OW */
static __global__ void mp_fwd_kernel(mp_geom g, const float *x, float *y, int32_t *arg, int64_t n)
{
	const int64_t out_n = (int64_t)g.C * g.OH * g.OW, in_n = (int64_t)g.C * g.H * g.W;
	PH_GRID_STRIDE(e, n) {
		const int64_t b = e / out_n, o = e % out_n;
		const int ow = (int)(o % g.OW), oh = (int)((o / g.OW) % g.OH), c = (int)(o / ((int64_t)g.OW * g.OH));
		const float *xs = x + b * in_n;
		const int32_t corner = (int32_t)(((int64_t)c * g.H + (int64_t)oh * g.stride) * g.W +
						 (int64_t)ow * g.stride);
		int32_t best_i = corner;
		float best = xs[corner];
		for (int i = 0; i < g.size; i++)
			for (int j = 0; j < g.size; j++) {
				const int32_t idx = corner + i * g.W + j;
				const float v = xs[idx];
				if (v > best || (v != v && best == best)) {
					best = v;
					best_i = idx;
				}
			}
		y[e] = best;
		if (arg)
			arg[e] = best_i;
	}
}

/* first window (oh or ow) that covers h: ceil((h - size + 1) / stride), >= 0 */
static __device__ __forceinline__ int mp_first(int h, int size, int stride)
{
	const int a = h - size + 1;
	return a <= 0 ? 0 : (a + stride - 1) / stride;
}

/* dy, arg [B, C*OH*OW] -> dx [B, C*H*W] (=); n = B * C*H*W */
static __global__ void mp_bwd_kernel(mp_geom g, const float *dy, const int32_t *arg, float *dx, int64_t n)
{
	const int64_t out_n = (int64_t)g.C * g.OH * g.OW, in_n = (int64_t)g.C * g.H * g.W;
	PH_GRID_STRIDE(e, n) {
		const int64_t b = e / in_n;
		const int32_t idx = (int32_t)(e % in_n);
		const int w = idx % g.W, h = (idx / g.W) % g.H, c = idx / (g.W * g.H);
		const int oh0 = mp_first(h, g.size, g.stride), ow0 = mp_first(w, g.size, g.stride);
		const int oh1 = min(h / g.stride, g.OH - 1), ow1 = min(w / g.stride, g.OW - 1);
		const int32_t *as = arg + b * out_n;
		const float *dys = dy + b * out_n;
		float acc = 0.0f;
		for (int oh = oh0; oh <= oh1; oh++)
			for (int ow = ow0; ow <= ow1; ow++) {
				const int64_t o = ((int64_t)c * g.OH + oh) * g.OW + ow;
				if (as[o] == idx)
					acc = __fadd_rn(acc, dys[o]);
			}
		dx[e] = acc;
	}
}

static mp_geom geom_of(const maxpool2d_state *s)
{
	const mp_geom g = { s->C, s->H, s->W, s->size, s->stride, s->OH, s->OW };
	return g;
}

static int maxpool2d_cuda_forward(void *state, const ph_ctx *ctx, float *const *params, const float *x, float *y,
				  ph_err *err)
{
	const mp_geom g = geom_of((const maxpool2d_state *)state);
	const int64_t n = (int64_t)ctx->batch * g.C * g.OH * g.OW;
	if (n <= 0)
		return PH_OK;
	mp_fwd_kernel<<<ph_blocks(n), 256, 0, PH_STREAM(ctx)>>>(g, x, y, (int32_t *)ctx->saved, n);
	PH_CUDA_CHECK_LAUNCH(err, "maxpool2d: forward");
	return PH_OK;
}

/* reads the argmax forward left in ctx->saved */
static int maxpool2d_cuda_backward(void *state, const ph_ctx *ctx, float *const *params, float *const *grads,
				   const float *x, const float *y, const float *dy, float *dx, ph_err *err)
{
	if (!dx)
		return PH_OK;
	if (!ctx->saved && ctx->batch > 0)
		return ph_fail(err, PH_EINTERNAL, "maxpool2d: backward without the saved argmax from forward");
	const mp_geom g = geom_of((const maxpool2d_state *)state);
	const int64_t n = (int64_t)ctx->batch * g.C * g.H * g.W;
	if (n <= 0)
		return PH_OK;
	mp_bwd_kernel<<<ph_blocks(n), 256, 0, PH_STREAM(ctx)>>>(g, dy, (const int32_t *)ctx->saved, dx, n);
	PH_CUDA_CHECK_LAUNCH(err, "maxpool2d: backward");
	return PH_OK;
}

PH_LAYER_CUDA_OPS(maxpool2d_cuda_ops) = { .struct_size = sizeof(ph_layer_device_ops),
					  .forward = maxpool2d_cuda_forward,
					  .backward = maxpool2d_cuda_backward };
