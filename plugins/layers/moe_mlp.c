/* SPDX-License-Identifier: MIT */
/*
 * The mixture-of-experts MLP end to end (moe_core.h): gate, dispatch,
 * exchange, experts, exchange back, combine; and the reverse.
 *
 * Forward                                     Backward
 *   probs, route = gate(x)                      dc, A = combine'(dy, eo)
 *   A = dispatch(x)          token side         B = exchange(A)     expert side
 *   xin = exchange(A)        expert side        A = experts'(B)     (grads +=)
 *   u, B = experts(xin)                         B = exchange(A)     token side
 *   eo = exchange(B)         token side         dx = dispatch'(B) + gate'(dc) gate
 *   y = combine(eo)
 * Every replica makes the same exchanges in the same order with the same
 * counts, as ph_group requires (the micro-batch size must be the same on
 * every replica of the stage).
 */
#include <string.h>

#include <cblas.h>
#include "moe_core.h"

size_t moe_saved_floats(const moe_geom *g)
{
	const size_t T = g->T, E = g->E, d = g->d, h = g->h;
	return T * E + T * MOE_ROUTE_W + moe_slots(g) * (2 * d + h);
}

size_t moe_scratch_floats(const moe_geom *g)
{
	const size_t T = g->T, E = g->E, d = g->d, h = g->h;
	const size_t per_expert = (size_t)(g->T / g->S) * g->C; /* rows of one block */
	return 2 * moe_slots(g) * d + 2 * per_expert * h + 2 * T + T * E;
}

size_t moe_device_scratch_floats(const moe_geom *g)
{
	const size_t T = g->T, E = g->E, d = g->d, h = g->h, groups = (size_t)(g->T / g->S);
	/* moe_cuda.cuh's list: A, Bf [slots d], a [slots h] (every block's
	 * GELU: the products are batched), dc [2 T], dlog [T E]; then cnt and
	 * loadg [G, E], gstat [G, 3], and 4 for the figures (a sample's
	 * share: at least one sample calls) */
	return 2 * moe_slots(g) * d + moe_slots(g) * h + 2 * T + T * E + groups * (2 * E + 3) + 4;
}

/* The routed FLOPs of one sample: the gate (2 d E a token, softmax ~5 E),
 * every expert at capacity (4 d h a slot, gelu ~10 h, biases d + h),
 * dispatch and combine (~3 d a slot). */
double moe_fwd_flops(const moe_geom *g)
{
	const double T = g->T, E = g->E, d = g->d, h = g->h, Q = (double)moe_slots(g);
	return T * (2.0 * d * E + 5.0 * E) + Q * (4.0 * d * h + 11.0 * h + 4.0 * d);
}

static int check_group(const moe_geom *g, const ph_ctx *ctx, ph_err *err)
{
	const int R = moe_group_size(ctx);
	if (g->E % R != 0)
		return ph_fail(err, PH_EINVAL,
			       "moe: %d experts cannot be split over %d replicas; make the "
			       "experts a multiple of the replicas",
			       g->E, R);
	return PH_OK;
}

int moe_mlp_forward(const moe_geom *g, const ph_ctx *ctx, const moe_params *p, const float *x,
		    float *y, int accumulate, float *saved, float *scratch, ph_err *err)
{
	int rc = check_group(g, ctx, err);
	if (rc)
		return rc;
	const int B = ctx->batch, N = B * g->T, rows = N / g->S * g->C;
	const size_t Q = (size_t)B * moe_slots(g);
	moe_saved v = moe_saved_views(g, B, saved);
	float *A = scratch, *Bf = A + Q * g->d, *a = Bf + Q * g->d; /* a: [rows, h] */
	moe_stats st;

	moe_gate_forward(g, ctx, x, p->gate, v.probs, v.route, &st);
	moe_dispatch(g, N, v.route, x, A);
	if ((rc = moe_all_to_all(ctx, A, v.xin, Q * g->d, err)))
		return rc;
	moe_experts_forward(g, ctx, rows, p, v.xin, v.u, a, Bf);
	if ((rc = moe_all_to_all(ctx, Bf, v.eo, Q * g->d, err)))
		return rc;
	moe_combine(g, N, v.route, v.eo, y, accumulate);
	if (ctx->training && ctx->group && ctx->group->report) {
		ctx->group->report(ctx->group, ctx, "aux_loss", st.aux);
		ctx->group->report(ctx->group, ctx, "load_max_over_mean", st.load_max_mean);
		ctx->group->report(ctx->group, ctx, "drop_frac", st.drop_frac);
	}
	return PH_OK;
}

int moe_mlp_backward(const moe_geom *g, const ph_ctx *ctx, const moe_params *p,
		     const moe_grads *gr, const float *x, const float *dy, float *dx, float *saved,
		     float *scratch, ph_err *err)
{
	int rc = check_group(g, ctx, err);
	if (rc)
		return rc;
	const int B = ctx->batch, N = B * g->T, rows = N / g->S * g->C, E = g->E, d = g->d;
	const size_t Q = (size_t)B * moe_slots(g);
	moe_saved v = moe_saved_views(g, B, saved);
	float *A = scratch, *Bf = A + Q * d, *a = Bf + Q * d, *dh = a + (size_t)rows * g->h;
	float *dc = dh + (size_t)rows * g->h, *dlog = dc + 2 * (size_t)N;

	moe_combine_backward(g, N, v.route, v.eo, dy, dc, A);
	if ((rc = moe_all_to_all(ctx, A, Bf, Q * d, err)))
		return rc;
	moe_experts_backward(g, ctx, rows, p, gr, v.xin, v.u, Bf, a, dh, A);
	if ((rc = moe_all_to_all(ctx, A, Bf, Q * d, err)))
		return rc;
	moe_gate_backward(g, ctx, v.probs, v.route, dc, dlog);
	if (gr) /* dgate [E, d] += dlogits^T x */
		cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, E, d, N, 1.0f, dlog, E, x, d,
			    1.0f, gr->gate, d);
	if (dx) { /* dx = dlogits gate + the slots' gradients */
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, d, E, 1.0f, dlog, E,
			    p->gate, d, 0.0f, dx, d);
		moe_dispatch_backward(g, N, v.route, Bf, dx);
	}
	return PH_OK;
}
