/* SPDX-License-Identifier: MIT */
/* ep_linear's CUDA twin (ep-linear.c): the same buffers and exchanges
 * (ep-linear_state.h), the same sums in the same order, one thread an
 * output.  The exchanges are the host's (ctx->group on the layer's GPU:
 * device copies between the replicas' GPUs in one process).  The experts'
 * loads go through all_reduce_sum on the device and come back to the host
 * for report (a synchronisation a real layer would avoid; a test's), with
 * the micro-batch's first output for ep.y0.  ep.y0_at is the same float
 * through report_device (ABI 1.8), the way without a synchronisation:
 * given as soon as the kernel that writes it is queued. */
#include <pipehost/cuda.h>

#include "ep-linear_state.h"

/* A [E][C][row] <- x [batch, D] (and dy [batch, D] in the backward) */
static __global__ void pack_kernel(const float *x, const float *dy, float *A, int batch, int D, int E, int C, int base)
{
	const int64_t row = 1 + 2 * (int64_t)D;
	PH_GRID_STRIDE(t, (int64_t)batch * (D + 1)) {
		int i = (int)(t / (D + 1)), d = (int)(t % (D + 1));
		float *r = A + ((int64_t)((base + i) % E) * C + i / E) * row;
		if (d == 0) {
			r[0] = 1.0f;
		} else {
			r[d] = x[(int64_t)i * D + d - 1];
			if (dy)
				r[D + d] = dy[(int64_t)i * D + d - 1];
		}
	}
}

/* The experts here: r[1 + D + o] = W[el] [o, :] . r[1 : 1 + D] for every used row */
static __global__ void expert_fwd_kernel(const float *W, float *B, int R, int El, int C, int D)
{
	const int64_t row = 1 + 2 * (int64_t)D;
	PH_GRID_STRIDE(t, (int64_t)R * El * C * D) {
		int64_t blk = t / D;
		int o = (int)(t % D), el = (int)((blk / C) % El);
		float *r = B + blk * row;
		if (r[0] == 0.0f)
			continue;
		const float *w = W + (int64_t)el * D * D + (int64_t)o * D;
		float acc = 0;
		for (int k = 0; k < D; k++)
			acc += w[k] * r[1 + k];
		r[1 + D + o] = acc;
	}
}

/* y [batch, D] = the products in A + b */
static __global__ void unpack_fwd_kernel(const float *A, const float *b, float *y, int batch, int D, int E, int C,
					 int base)
{
	const int64_t row = 1 + 2 * (int64_t)D;
	PH_GRID_STRIDE(t, (int64_t)batch * D) {
		int i = (int)(t / D), o = (int)(t % D);
		const float *r = A + ((int64_t)((base + i) % E) * C + i / E) * row;
		y[t] = r[1 + D + o] + b[o];
	}
}

/* dW[el] [o, k] += sum over used rows, in (replica, slot) order, dy[o] x[k] */
static __global__ void expert_dw_kernel(const float *B, float *gW, int R, int El, int C, int D)
{
	const int64_t row = 1 + 2 * (int64_t)D;
	PH_GRID_STRIDE(t, (int64_t)El * D * D) {
		int el = (int)(t / ((int64_t)D * D)), o = (int)(t / D % D), k = (int)(t % D);
		float g = gW[t];
		for (int j = 0; j < R; j++)
			for (int c = 0; c < C; c++) {
				const float *r = B + (((int64_t)j * El + el) * C + c) * row;
				if (r[0] != 0.0f)
					g += r[1 + D + o] * r[1 + k];
			}
		gW[t] = g;
	}
}

/* x part <- W[el]^T dy for every used row (after expert_dw_kernel read x) */
static __global__ void expert_dx_kernel(const float *W, float *B, int R, int El, int C, int D)
{
	const int64_t row = 1 + 2 * (int64_t)D;
	PH_GRID_STRIDE(t, (int64_t)R * El * C * D) {
		int64_t blk = t / D;
		int k = (int)(t % D), el = (int)((blk / C) % El);
		float *r = B + blk * row;
		if (r[0] == 0.0f)
			continue;
		const float *w = W + (int64_t)el * D * D;
		float acc = 0;
		for (int o = 0; o < D; o++)
			acc += w[(int64_t)o * D + k] * r[1 + D + o];
		r[1 + k] = acc;
	}
}

/* dx [batch, D] from A; db [D] += sum over samples of dy */
static __global__ void unpack_bwd_kernel(const float *A, float *dx, int batch, int D, int E, int C, int base)
{
	const int64_t row = 1 + 2 * (int64_t)D;
	PH_GRID_STRIDE(t, (int64_t)batch * D) {
		int i = (int)(t / D), k = (int)(t % D);
		dx[t] = A[((int64_t)((base + i) % E) * C + i / E) * row + 1 + k];
	}
}

static __global__ void db_kernel(const float *dy, float *gb, int batch, int D)
{
	PH_GRID_STRIDE(o, (int64_t)D) {
		float g = gb[o];
		for (int i = 0; i < batch; i++)
			g += dy[(int64_t)i * D + o];
		gb[o] = g;
	}
}

static int exchange(const ep_state *s, const ph_ctx *ctx, float *a, float *b, ph_err *err)
{
	const ph_group *g = ctx->group;
	return g->all_to_all(g, ctx, a, b, ep_buf_floats(s) / (size_t)g->size, err);
}

static int ep_cuda_forward(void *state, const ph_ctx *ctx, float *const *params, const float *x, float *y, ph_err *err)
{
	const ep_state *s = (const ep_state *)state;
	const ph_group *g = ctx->group;
	cudaStream_t st = PH_STREAM(ctx);
	int R = g->size, El = s->E / R, base = ep_base(s, ctx), rc;
	if (s->E % R)
		return ph_fail(err, PH_EINVAL, "%d experts over %d replicas", s->E, R);
	float *a = (float *)ctx->scratch, *b = a + ep_buf_floats(s), *load = b + ep_buf_floats(s);
	PH_CUDA_TRY(err, cudaMemsetAsync(a, 0, ep_buf_floats(s) * sizeof(float), st));
	if (ctx->batch > 0) {
		pack_kernel<<<ph_blocks((int64_t)ctx->batch * (s->D + 1)), 256, 0, st>>>(x, (const float *)nullptr, a, ctx->batch, s->D, s->E,
											s->C, base);
		PH_CUDA_CHECK_LAUNCH(err, "ep_linear: pack");
	}
	if ((rc = exchange(s, ctx, a, b, err)))
		return rc;
	expert_fwd_kernel<<<ph_blocks((int64_t)R * El * s->C * s->D), 256, 0, st>>>(params[0], b, R, El, s->C, s->D);
	PH_CUDA_CHECK_LAUNCH(err, "ep_linear: experts");
	if ((rc = exchange(s, ctx, b, a, err)))
		return rc;
	if (ctx->batch > 0) {
		unpack_fwd_kernel<<<ph_blocks((int64_t)ctx->batch * s->D), 256, 0, st>>>(a, params[1], y, ctx->batch, s->D,
											  s->E, s->C, base);
		PH_CUDA_CHECK_LAUNCH(err, "ep_linear: unpack");
		if (ctx->training)
			ph_group_report_at(ctx, "y0_at", y);
	}
	/* the loads: counted here, summed over the replicas on the device */
	float h[4096];
	for (int e = 0; e < s->E; e++)
		h[e] = 0;
	for (int i = 0; i < ctx->batch; i++)
		h[(base + i) % s->E] += 1;
	PH_CUDA_TRY(err, cudaMemcpyAsync(load, h, (size_t)s->E * sizeof(float), cudaMemcpyHostToDevice, st));
	PH_CUDA_TRY(err, cudaStreamSynchronize(st));
	if ((rc = g->all_reduce_sum(g, ctx, load, (size_t)s->E, err)))
		return rc;
	float y0 = 0;
	PH_CUDA_TRY(err, cudaMemcpyAsync(h, load, (size_t)s->E * sizeof(float), cudaMemcpyDeviceToHost, st));
	if (ctx->batch > 0)
		PH_CUDA_TRY(err, cudaMemcpyAsync(&y0, y, sizeof y0, cudaMemcpyDeviceToHost, st));
	PH_CUDA_TRY(err, cudaStreamSynchronize(st));
	if (g->report && ctx->training) {
		double total = 0, most = 0;
		for (int e = 0; e < s->E; e++) {
			total += h[e];
			most = h[e] > most ? h[e] : most;
		}
		g->report(g, ctx, "load_max", total > 0 ? most / total : 0);
		g->report(g, ctx, "tokens", total);
		if (ctx->batch > 0)
			g->report(g, ctx, "y0", y0);
	}
	return PH_OK;
}

static int ep_cuda_backward(void *state, const ph_ctx *ctx, float *const *params, float *const *grads,
			    const float *x, const float *y, const float *dy, float *dx, ph_err *err)
{
	const ep_state *s = (const ep_state *)state;
	const ph_group *g = ctx->group;
	cudaStream_t st = PH_STREAM(ctx);
	int R = g->size, El = s->E / R, base = ep_base(s, ctx), rc;
	(void)y;
	if (s->E % R)
		return ph_fail(err, PH_EINVAL, "%d experts over %d replicas", s->E, R);
	float *a = (float *)ctx->scratch, *b = a + ep_buf_floats(s);
	PH_CUDA_TRY(err, cudaMemsetAsync(a, 0, ep_buf_floats(s) * sizeof(float), st));
	if (ctx->batch > 0) {
		pack_kernel<<<ph_blocks((int64_t)ctx->batch * (s->D + 1)), 256, 0, st>>>(x, dy, a, ctx->batch, s->D, s->E,
											s->C, base);
		PH_CUDA_CHECK_LAUNCH(err, "ep_linear: pack");
		db_kernel<<<ph_blocks(s->D), 256, 0, st>>>(dy, grads[1], ctx->batch, s->D);
		PH_CUDA_CHECK_LAUNCH(err, "ep_linear: bias gradient");
	}
	if ((rc = exchange(s, ctx, a, b, err)))
		return rc;
	expert_dw_kernel<<<ph_blocks((int64_t)El * s->D * s->D), 256, 0, st>>>(b, grads[0], R, El, s->C, s->D);
	PH_CUDA_CHECK_LAUNCH(err, "ep_linear: expert gradients");
	expert_dx_kernel<<<ph_blocks((int64_t)R * El * s->C * s->D), 256, 0, st>>>(params[0], b, R, El, s->C, s->D);
	PH_CUDA_CHECK_LAUNCH(err, "ep_linear: input gradients");
	if ((rc = exchange(s, ctx, b, a, err)))
		return rc;
	if (dx && ctx->batch > 0) {
		unpack_bwd_kernel<<<ph_blocks((int64_t)ctx->batch * s->D), 256, 0, st>>>(a, dx, ctx->batch, s->D, s->E, s->C,
											  base);
		PH_CUDA_CHECK_LAUNCH(err, "ep_linear: unpack");
	}
	return PH_OK;
}

PH_LAYER_CUDA_OPS(ep_linear_cuda_ops) = { .struct_size = sizeof(ph_layer_device_ops),
					  .forward = ep_cuda_forward,
					  .backward = ep_cuda_backward };
