/* SPDX-License-Identifier: MIT */
/*
 * The mixture-of-experts MLP on a GPU: moe_core.h's functions as kernels
 * and the host's products, for the moe layer's twin (moe_cuda.cu) and
 * gpt_block's `mlp = moe` (gpt_block_cuda.cu).  Header-only and static, as
 * cuda_ops.cuh, so each module stays self-contained.
 *
 * The same buffers, saved layout and arithmetic as the CPU (moe_gate.c,
 * moe_dispatch.c, moe_experts.c, moe_mlp.c), with these differences:
 *  - the gate's logits [N, E] = x gate^T are one fp32 product (cuBLAS, not
 *    moe_gate.c's d-long dots), whatever the run's precision: the router
 *    stays fp32 under bf16, as Switch Transformer keeps it ("selective
 *    precision"), so that bf16 rounding does not move tokens between
 *    experts.  The gate's two backward products are fp32 too;
 *  - the experts' products run at the run's precision, batched: one
 *    strided product for all El local experts' blocks from each replica
 *    (R products a layer, not E), their biases added by the kernel that
 *    follows (with the GELU after the first); bias gradients are
 *    cuda_ops.cuh's fixed-tree column sums, a block at a time;
 *  - the router's figures (aux_loss, load_max_over_mean, drop_frac) are
 *    computed on the GPU and handed to the host where they lie
 *    (ph_group_report_at, ABI 1.8): nothing waits for them.  They are
 *    rounded to float on the way.
 * Routing itself (choices, capacity slots, the second expert's draws) is
 * moe_core.h's moe_route_group, which moe_gate.c runs too, one GPU thread
 * per group: it is sequential within a group by definition (GShard's
 * position_in_expert), and groups are few.  Given the same probabilities
 * it makes the same choices bit for bit.
 *
 * Device scratch per call (floats; moe_device_scratch_floats per sample):
 *   A, Bf [Q d] as the CPU's; a [Q h] (every block's GELU, where the
 *   CPU keeps one block's: the products are batched; the backward's dh
 *   reuses it once the GELU is spent), dc [2 N], dlog [N E]; then cnt
 *   [G E] (ints: slots taken; the backward's per-group f), loadg [G E]
 *   (choices before capacity), gstat [G 3] (E l_g, choices, drops),
 *   stats [4] (the figures).
 */
#ifndef PH_LAYERS_MOE_CUDA_CUH
#define PH_LAYERS_MOE_CUDA_CUH

#include "cuda_ops.cuh"
#include "moe_core.h"

/* ---- Kernels ---------------------------------------------------------- */

/* probs [N, E]: softmax of the logits in place, a thread per token. */
static __global__ void moe_softmax_kernel(float *probs, int N, int E)
{
	PH_GRID_STRIDE(n, N) {
		float *pn = probs + n * E;
		float mx = -INFINITY;
		for (int e = 0; e < E; e++)
			mx = pn[e] > mx ? pn[e] : mx;
		float z = 0;
		for (int e = 0; e < E; e++) {
			pn[e] = expf(pn[e] - mx);
			z += pn[e];
		}
		for (int e = 0; e < E; e++)
			pn[e] /= z;
	}
}

/* route [N, 6] and the group's figures, a thread per group: moe_core.h's
 * moe_route_group, as moe_gate.c runs it. */
static __global__ void moe_route_kernel(moe_geom g, int G, int sample2, uint64_t key, const float *probs,
					float *route, int *cnt, float *loadg, float *gstat)
{
	PH_GRID_STRIDE(gi, G) {
		double chosen, dropped;
		const double aux = moe_route_group(&g, sample2, key, gi * g.S, probs, route, cnt + gi * g.E,
						   loadg + gi * g.E, &chosen, &dropped);
		gstat[3 * gi] = (float)aux;
		gstat[3 * gi + 1] = (float)chosen;
		gstat[3 * gi + 2] = (float)dropped;
	}
}

/* stats [3] = aux, load_max_over_mean, drop_frac over the G groups (one
 * thread: groups in order, as moe_gate.c sums them). */
static __global__ void moe_stats_kernel(int G, int E, const float *loadg, const float *gstat, float *stats)
{
	if (blockIdx.x || threadIdx.x)
		return;
	double aux = 0, chosen = 0, dropped = 0, mx = 0, sum = 0;
	for (int gi = 0; gi < G; gi++) {
		aux += gstat[3 * gi];
		chosen += gstat[3 * gi + 1];
		dropped += gstat[3 * gi + 2];
	}
	for (int e = 0; e < E; e++) {
		double le = 0;
		for (int gi = 0; gi < G; gi++)
			le += loadg[gi * E + e];
		sum += le;
		mx = le > mx ? le : mx;
	}
	stats[0] = (float)(G ? aux / G : 0);
	stats[1] = (float)(sum > 0 ? mx / (sum / E) : 0);
	stats[2] = (float)(chosen > 0 ? dropped / chosen : 0);
}

/* Row of token n's choice j in a [E][G][C][d] buffer; -1 when not kept. */
static __device__ __forceinline__ int64_t moe_d_slot(const moe_geom &g, int G, int64_t n, const float *route, int j)
{
	const float *r = route + n * MOE_ROUTE_W;
	const int e = (int)r[j], p = (int)r[2 + j];
	if (e < 0 || p < 0)
		return -1;
	return ((int64_t)e * G + n / g.S) * g.C + p;
}

/* disp[slot] = x[n] for every kept choice (disp zeroed before). */
static __global__ void moe_dispatch_kernel(moe_geom g, int N, int G, const float *route, const float *x,
					   float *disp)
{
	const int d = g.d, k = g.k;
	PH_GRID_STRIDE(i, (int64_t)N * k * d) {
		const int64_t n = i / ((int64_t)k * d), j = i / d % k, c = i % d;
		const int64_t row = moe_d_slot(g, G, n, route, (int)j);
		if (row >= 0)
			disp[row * d + c] = x[n * d + c];
	}
}

/* y[n] = (acc ? y[n] : 0) + c1 eo[slot 1] + c2 eo[slot 2], kept choices in
 * order (moe_combine). */
static __global__ void moe_combine_kernel(moe_geom g, int N, int G, const float *route, const float *eo,
					  float *y, int accumulate)
{
	const int d = g.d;
	PH_GRID_STRIDE(i, (int64_t)N * d) {
		const int64_t n = i / d, c = i % d;
		float v = accumulate ? y[i] : 0.0f;
		for (int j = 0; j < g.k; j++) {
			const int64_t row = moe_d_slot(g, G, n, route, j);
			if (row >= 0)
				v = __fadd_rn(v, __fmul_rn(route[n * MOE_ROUTE_W + 4 + j], eo[row * d + c]));
		}
		y[i] = v;
	}
}

/* dc [N, 2] = dy[n] . eo[slot j] (0 where not kept), a thread per choice. */
static __global__ void moe_dc_kernel(moe_geom g, int N, int G, const float *route, const float *eo,
				     const float *dy, float *dc)
{
	const int d = g.d;
	PH_GRID_STRIDE(i, (int64_t)N * 2) {
		const int64_t n = i / 2;
		const int j = (int)(i % 2);
		const int64_t row = j < g.k ? moe_d_slot(g, G, n, route, j) : -1;
		float s = 0;
		if (row >= 0)
			for (int c = 0; c < d; c++)
				s = __fadd_rn(s, __fmul_rn(dy[n * d + c], eo[row * d + c]));
		dc[i] = s;
	}
}

/* ddisp[slot j] = c_j dy[n] (ddisp zeroed before). */
static __global__ void moe_ddisp_kernel(moe_geom g, int N, int G, const float *route, const float *dy,
					float *ddisp)
{
	const int d = g.d, k = g.k;
	PH_GRID_STRIDE(i, (int64_t)N * k * d) {
		const int64_t n = i / ((int64_t)k * d), j = i / d % k, c = i % d;
		const int64_t row = moe_d_slot(g, G, n, route, (int)j);
		if (row >= 0)
			ddisp[row * d + c] = __fmul_rn(route[n * MOE_ROUTE_W + 4 + j], dy[n * d + c]);
	}
}

/* dx[n] += the slots' gradients, choices in order (moe_dispatch_backward). */
static __global__ void moe_undispatch_kernel(moe_geom g, int N, int G, const float *route, const float *ddisp,
					     float *dx)
{
	const int d = g.d;
	PH_GRID_STRIDE(i, (int64_t)N * d) {
		const int64_t n = i / d, c = i % d;
		float v = dx[i];
		for (int j = 0; j < g.k; j++) {
			const int64_t row = moe_d_slot(g, G, n, route, j);
			if (row >= 0)
				v = __fadd_rn(v, ddisp[row * d + c]);
		}
		dx[i] = v;
	}
}

/* f [G, E] = aux_scale * (first choices of e in the group / S), a thread
 * per group (moe_gate_backward's f). */
static __global__ void moe_gate_f_kernel(moe_geom g, int G, float aux_scale, const float *route, float *f)
{
	const int E = g.E, S = g.S;
	PH_GRID_STRIDE(gi, G) {
		float *fg = f + gi * E;
		for (int e = 0; e < E; e++)
			fg[e] = 0;
		for (int t = 0; t < S; t++)
			fg[(int)route[(gi * S + t) * MOE_ROUTE_W]] += 1.0f;
		for (int e = 0; e < E; e++)
			fg[e] = aux_scale * (fg[e] / (float)S);
	}
}

/* dlogits [N, E] from dc and f, a thread per token (moe_gate_backward). */
static __global__ void moe_gate_bwd_kernel(moe_geom g, int N, const float *probs, const float *route,
					   const float *dc, const float *f, float *dlogits)
{
	const int E = g.E, S = g.S;
	PH_GRID_STRIDE(n, N) {
		const float *pn = probs + n * E, *r = route + n * MOE_ROUTE_W, *fg = f + (n / S) * E;
		moe_token_dlogits(g.k, E, pn, r, fg, dc[2 * n], dc[2 * n + 1], dlogits + n * E);
	}
}

/* The experts' biases after a batched product: y [E blocks][rows][n] +=
 * bias [expert of the block][n], where block q holds local expert q % El,
 * global e0 + q % El; with gelu, also a = gelu(y) (the first product's
 * pre-activation stays in y, as its epilogue kept it). */
static __global__ void moe_bias_kernel(int64_t total, int rows, int n, int El, int e0, const float *bias,
				       float *y, float *a)
{
	PH_GRID_STRIDE(i, total) {
		const int64_t q = i / ((int64_t)rows * n);
		const int c = (int)(i % n);
		const float v = __fadd_rn(y[i], bias[(int64_t)(e0 + q % El) * n + c]);
		y[i] = v;
		if (a)
			a[i] = ph_d_gelu(v);
	}
}

static inline cudaError_t moe_k_bias(cudaStream_t st, int E, int rows, int n, int El, int e0, const float *bias,
				     float *y, float *a)
{
	const int64_t total = (int64_t)E * rows * n;
	if (total <= 0)
		return cudaSuccess;
	moe_bias_kernel<<<ph_blocks(total), 256, 0, st>>>(total, rows, n, El, e0, bias, y, a);
	return cudaGetLastError();
}

/* ---- The MLP ---------------------------------------------------------- */

typedef struct {
	float *A, *Bf, *a, *dc, *dlog, *loadg, *gstat, *stats;
	int *cnt;
} moe_d_scratch;

/* The scratch regions for B samples (the header's list). */
static inline moe_d_scratch moe_d_scratch_views(const moe_geom *g, int B, float *scratch)
{
	const size_t N = (size_t)B * g->T, Q = (size_t)B * moe_slots(g), d = g->d, h = g->h;
	const size_t G = N / g->S, E = g->E;
	moe_d_scratch s;
	s.A = scratch;
	s.Bf = s.A + Q * d;
	s.a = s.Bf + Q * d;
	s.dc = s.a + Q * h;
	s.dlog = s.dc + 2 * N;
	s.cnt = (int *)(s.dlog + N * E);
	s.loadg = (float *)s.cnt + G * E;
	s.gstat = s.loadg + G * E;
	s.stats = s.gstat + 3 * G;
	return s;
}

/* ctx at fp32: the router's products (the header). */
static inline ph_ctx moe_d_fp32(const ph_ctx *ctx)
{
	ph_ctx c = *ctx;
	c.precision = PH_PREC_FP32;
	return c;
}

static inline int moe_d_check(const moe_geom *g, const ph_ctx *ctx, ph_err *err)
{
	const int R = moe_group_size(ctx);
	if (!ctx->gpu)
		return ph_fail(err, PH_EINTERNAL, "moe: no GPU services in the call context");
	if (g->E % R != 0)
		return ph_fail(err, PH_EINVAL,
			       "moe: %d experts cannot be split over %d replicas; make the "
			       "experts a multiple of the replicas",
			       g->E, R);
	return PH_OK;
}

/* moe_all_to_all on the GPU: a copy on the stream when R = 1. */
static inline int moe_d_all_to_all(const ph_ctx *ctx, const float *send, float *recv, size_t n, ph_err *err)
{
	const int R = moe_group_size(ctx);
	if (R == 1) {
		PH_CUDA_TRY(err, cudaMemcpyAsync(recv, send, n * sizeof *send, cudaMemcpyDeviceToDevice,
						 PH_STREAM(ctx)));
		return PH_OK;
	}
	if (!ctx->group->all_to_all)
		return ph_fail(err, PH_EINTERNAL, "moe: the host's replica group has no all_to_all");
	return ctx->group->all_to_all(ctx->group, ctx, send, recv, n / (size_t)R, err);
}

/* Expert q's global index: block q = j El + l is local expert l. */
static inline int moe_d_expert(const ph_ctx *ctx, int E, int q)
{
	const int El = E / moe_group_size(ctx);
	return moe_group_rank(ctx) * El + q % El;
}

/* moe_experts_forward over the E blocks of `rows` slots (block q = j El +
 * l: replica j's tokens for local expert l): u = xin w1^T + b1, a =
 * gelu(u), out = a w2^T + b2.  Each product is one strided batch over a
 * replica's El blocks (the weights' stride wraps there), so R products,
 * not E; a holds every block's GELU. */
static inline int moe_d_experts_forward(const moe_geom *g, const ph_ctx *ctx, int rows, const moe_params *p,
					const float *xin, float *u, float *a, float *out, ph_err *err)
{
	const int d = g->d, h = g->h, E = g->E, R = moe_group_size(ctx), El = E / R, e0 = moe_d_expert(ctx, E, 0);
	const int64_t xs = (int64_t)rows * d, hs = (int64_t)rows * h; /* a block's floats */
	const float *b1 = p->biases, *b2 = p->biases + (size_t)E * h;
	cudaStream_t st = PH_STREAM(ctx);
	int rc;
	if (rows <= 0)
		return PH_OK;
	for (int j = 0; j < R; j++)
		if ((rc = ctx->gpu->gemm(ctx, 0, 1, rows, h, d, 1.0f, xin + j * El * xs, d, xs, p->w1, d,
					 (int64_t)h * d, 0.0f, u + j * El * hs, h, hs, El, err)))
			return rc;
	PH_CUDA_TRY(err, moe_k_bias(st, E, rows, h, El, e0, b1, u, a));
	for (int j = 0; j < R; j++)
		if ((rc = ctx->gpu->gemm(ctx, 0, 1, rows, d, h, 1.0f, a + j * El * hs, h, hs, p->w2, h,
					 (int64_t)d * h, 0.0f, out + j * El * xs, d, xs, El, err)))
			return rc;
	PH_CUDA_TRY(err, moe_k_bias(st, E, rows, d, El, e0, b2, out, NULL));
	return PH_OK;
}

/* moe_experts_backward, batched as the forward; dxin distinct from dout.
 * a [E rows h] is the GELU for dw2, then dh (the same floats). */
static inline int moe_d_experts_backward(const moe_geom *g, const ph_ctx *ctx, int rows, const moe_params *p,
					 const moe_grads *gr, const float *xin, const float *u,
					 const float *dout, float *a, float *dxin, ph_err *err)
{
	const int d = g->d, h = g->h, E = g->E, R = moe_group_size(ctx), El = E / R;
	const int64_t xs = (int64_t)rows * d, hs = (int64_t)rows * h, w = (int64_t)h * d;
	const ph_gpu_api *gp = ctx->gpu;
	cudaStream_t st = PH_STREAM(ctx);
	float *dh = a;
	int rc;
	if (rows <= 0)
		return PH_OK;
	if (gr) { /* dw2 [d, h] += dout^T gelu(u);  db2 += colsum dout */
		PH_CUDA_TRY(err, ph_k_gelu_fwd(st, u, a, (int64_t)E * hs));
		for (int j = 0; j < R; j++)
			if ((rc = gp->gemm(ctx, 1, 0, d, h, rows, 1.0f, dout + j * El * xs, d, xs, a + j * El * hs, h,
					   hs, 1.0f, gr->w2, h, w, El, err)))
				return rc;
		for (int q = 0; q < E; q++)
			PH_CUDA_TRY(err, ph_k_colsum_acc(st, dout + q * xs, rows, d,
							 gr->biases + (size_t)E * h + (size_t)moe_d_expert(ctx, E, q) * d));
	}
	/* dh [rows, h] = dout w2, then * gelu'(u) */
	for (int j = 0; j < R; j++)
		if ((rc = gp->gemm(ctx, 0, 0, rows, h, d, 1.0f, dout + j * El * xs, d, xs, p->w2, h, w, 0.0f,
				   dh + j * El * hs, h, hs, El, err)))
			return rc;
	PH_CUDA_TRY(err, ph_k_gelu_bwd(st, u, dh, dh, (int64_t)E * hs));
	if (gr) { /* dw1 [h, d] += du^T xin;  db1 += colsum du */
		for (int j = 0; j < R; j++)
			if ((rc = gp->gemm(ctx, 1, 0, h, d, rows, 1.0f, dh + j * El * hs, h, hs, xin + j * El * xs, d,
					   xs, 1.0f, gr->w1, d, w, El, err)))
				return rc;
		for (int q = 0; q < E; q++)
			PH_CUDA_TRY(err, ph_k_colsum_acc(st, dh + q * hs, rows, h,
							 gr->biases + (size_t)moe_d_expert(ctx, E, q) * h));
	}
	/* dxin [rows, d] = du w1 */
	for (int j = 0; j < R; j++)
		if ((rc = gp->gemm(ctx, 0, 0, rows, d, h, 1.0f, dh + j * El * hs, h, hs, p->w1, d, w, 0.0f,
				   dxin + j * El * xs, d, xs, El, err)))
			return rc;
	return PH_OK;
}

/* The router's figures to the host, where they lie (training forward). */
static inline void moe_d_report(const ph_ctx *ctx, const float *stats)
{
	if (!ctx->training)
		return;
	ph_group_report_at(ctx, "aux_loss", stats);
	ph_group_report_at(ctx, "load_max_over_mean", stats + 1);
	ph_group_report_at(ctx, "drop_frac", stats + 2);
}

/* moe_mlp_forward: y [N, d] = moe(x) (+= when accumulate). */
static inline int moe_d_mlp_forward(const moe_geom *g, const ph_ctx *ctx, const moe_params *p, const float *x,
				    float *y, int accumulate, float *saved, float *scratch, ph_err *err)
{
	int rc = moe_d_check(g, ctx, err);
	if (rc || ctx->batch == 0)
		return rc;
	const int B = ctx->batch, N = B * g->T, G = N / g->S, rows = G * g->C, E = g->E, d = g->d;
	const size_t Q = (size_t)B * moe_slots(g);
	const moe_saved v = moe_saved_views(g, B, saved);
	const moe_d_scratch s = moe_d_scratch_views(g, B, scratch);
	const ph_ctx c32 = moe_d_fp32(ctx);
	cudaStream_t st = PH_STREAM(ctx);
	const uint64_t key = ph_mix64(ph_rng_key(ctx->seed, ctx->step, ctx->microbatch, ctx->layer) ^
				      MOE_SITE_ROUTE);
	const int sample2 = g->k == 2 && g->random2 && ctx->training;

	/* gate: logits [N, E] = x gate^T (fp32), softmax, routing, figures */
	if ((rc = ctx->gpu->gemm(&c32, 0, 1, N, E, d, 1.0f, x, d, 0, p->gate, d, 0, 0.0f, v.probs, E, 0, 1, err)))
		return rc;
	moe_softmax_kernel<<<ph_blocks(N, 128), 128, 0, st>>>(v.probs, N, E);
	PH_CUDA_CHECK_LAUNCH(err, "moe: softmax");
	moe_route_kernel<<<ph_blocks(G, 64), 64, 0, st>>>(*g, G, sample2, key, v.probs, v.route, s.cnt, s.loadg,
							  s.gstat);
	PH_CUDA_CHECK_LAUNCH(err, "moe: routing");
	if (ctx->training) {
		moe_stats_kernel<<<1, 1, 0, st>>>(G, E, s.loadg, s.gstat, s.stats);
		PH_CUDA_CHECK_LAUNCH(err, "moe: figures");
		moe_d_report(ctx, s.stats);
	}

	/* dispatch, exchange, experts, exchange back, combine */
	PH_CUDA_TRY(err, cudaMemsetAsync(s.A, 0, Q * d * sizeof(float), st));
	moe_dispatch_kernel<<<ph_blocks((int64_t)N * g->k * d), 256, 0, st>>>(*g, N, G, v.route, x, s.A);
	PH_CUDA_CHECK_LAUNCH(err, "moe: dispatch");
	if ((rc = moe_d_all_to_all(ctx, s.A, v.xin, Q * d, err)))
		return rc;
	if ((rc = moe_d_experts_forward(g, ctx, rows, p, v.xin, v.u, s.a, s.Bf, err)))
		return rc;
	if ((rc = moe_d_all_to_all(ctx, s.Bf, v.eo, Q * d, err)))
		return rc;
	moe_combine_kernel<<<ph_blocks((int64_t)N * d), 256, 0, st>>>(*g, N, G, v.route, v.eo, y, accumulate);
	PH_CUDA_CHECK_LAUNCH(err, "moe: combine");
	return PH_OK;
}

/* moe_mlp_backward: dx [N, d] = d/dx (overwritten; NULL skips it, the
 * exchanges still run); gr NULL: no weight gradients. */
static inline int moe_d_mlp_backward(const moe_geom *g, const ph_ctx *ctx, const moe_params *p,
				     const moe_grads *gr, const float *x, const float *dy, float *dx, float *saved,
				     float *scratch, ph_err *err)
{
	int rc = moe_d_check(g, ctx, err);
	if (rc || ctx->batch == 0)
		return rc;
	const int B = ctx->batch, N = B * g->T, G = N / g->S, rows = G * g->C, E = g->E, d = g->d;
	const size_t Q = (size_t)B * moe_slots(g);
	const moe_saved v = moe_saved_views(g, B, saved);
	const moe_d_scratch s = moe_d_scratch_views(g, B, scratch);
	const ph_ctx c32 = moe_d_fp32(ctx);
	cudaStream_t st = PH_STREAM(ctx);
	float *f = (float *)s.cnt; /* [G, E]: the routing's counts are spent */

	moe_dc_kernel<<<ph_blocks((int64_t)N * 2, 128), 128, 0, st>>>(*g, N, G, v.route, v.eo, dy, s.dc);
	PH_CUDA_CHECK_LAUNCH(err, "moe: combine backward");
	PH_CUDA_TRY(err, cudaMemsetAsync(s.A, 0, Q * d * sizeof(float), st));
	moe_ddisp_kernel<<<ph_blocks((int64_t)N * g->k * d), 256, 0, st>>>(*g, N, G, v.route, dy, s.A);
	PH_CUDA_CHECK_LAUNCH(err, "moe: combine backward");
	if ((rc = moe_d_all_to_all(ctx, s.A, s.Bf, Q * d, err)))
		return rc;
	if ((rc = moe_d_experts_backward(g, ctx, rows, p, gr, v.xin, v.u, s.Bf, s.a, s.A, err)))
		return rc;
	if ((rc = moe_d_all_to_all(ctx, s.A, s.Bf, Q * d, err)))
		return rc;
	moe_gate_f_kernel<<<ph_blocks(G, 64), 64, 0, st>>>(*g, G, moe_token_scale(g, ctx) * g->aux_coef * (float)E, v.route,
							   f);
	PH_CUDA_CHECK_LAUNCH(err, "moe: gate backward");
	moe_gate_bwd_kernel<<<ph_blocks(N, 128), 128, 0, st>>>(*g, N, v.probs, v.route, s.dc, f, s.dlog);
	PH_CUDA_CHECK_LAUNCH(err, "moe: gate backward");
	if (gr && (rc = ctx->gpu->gemm(&c32, 1, 0, E, d, N, 1.0f, s.dlog, E, 0, x, d, 0, 1.0f, gr->gate, d, 0, 1,
				       err))) /* dgate [E, d] += dlogits^T x */
		return rc;
	if (dx) { /* dx = dlogits gate + the slots' gradients */
		if ((rc = ctx->gpu->gemm(&c32, 0, 0, N, d, E, 1.0f, s.dlog, E, 0, p->gate, d, 0, 0.0f, dx, d, 0, 1,
					 err)))
			return rc;
		moe_undispatch_kernel<<<ph_blocks((int64_t)N * d), 256, 0, st>>>(*g, N, G, v.route, s.Bf, dx);
		PH_CUDA_CHECK_LAUNCH(err, "moe: dispatch backward");
	}
	return PH_OK;
}

#endif
