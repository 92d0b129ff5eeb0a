/* SPDX-License-Identifier: MIT */
/*
 * Moving tokens between their rows and the experts' capacity slots
 * (moe_core.h): dispatch [N, d] -> [E][G][C][d], combine back with the
 * gate's weights, both backwards, and the exchange over the replicas.
 * Each token's slots are its own, so every loop here is order-free but
 * for dc, a d-long dot in fixed order.
 */
#include <string.h>

#include "moe_core.h"

/* Where token n's choice j (0, 1) sits in a [E][G][C][d] buffer, or NULL. */
static inline size_t slot_row(const moe_geom *g, int G, int n, const float *r, int j, int *ok)
{
	const int e = (int)r[j], p = (int)r[2 + j];
	*ok = e >= 0 && p >= 0;
	return ((size_t)e * G + (size_t)(n / g->S)) * g->C + (size_t)(p < 0 ? 0 : p);
}

void moe_dispatch(const moe_geom *g, int N, const float *route, const float *x, float *disp)
{
	const int d = g->d, G = N / g->S;
	memset(disp, 0, (size_t)g->E * G * g->C * d * sizeof *disp);
	for (int n = 0; n < N; n++) {
		const float *r = route + (size_t)n * MOE_ROUTE_W;
		for (int j = 0; j < g->k; j++) {
			int ok;
			const size_t row = slot_row(g, G, n, r, j, &ok);
			if (ok)
				memcpy(disp + row * d, x + (size_t)n * d, (size_t)d * sizeof *x);
		}
	}
}

/* y[n] = c1 eo[slot 1] + c2 eo[slot 2] over the kept choices. */
void moe_combine(const moe_geom *g, int N, const float *route, const float *eo, float *y,
		 int accumulate)
{
	const int d = g->d, G = N / g->S;
	for (int n = 0; n < N; n++) {
		const float *r = route + (size_t)n * MOE_ROUTE_W;
		float *yn = y + (size_t)n * d;
		if (!accumulate)
			memset(yn, 0, (size_t)d * sizeof *yn);
		for (int j = 0; j < g->k; j++) {
			int ok;
			const size_t row = slot_row(g, G, n, r, j, &ok);
			if (!ok)
				continue;
			const float c = r[4 + j], *o = eo + row * d;
			for (int i = 0; i < d; i++)
				yn[i] += c * o[i];
		}
	}
}

void moe_combine_backward(const moe_geom *g, int N, const float *route, const float *eo,
			  const float *dy, float *dc, float *ddisp)
{
	const int d = g->d, G = N / g->S;
	memset(ddisp, 0, (size_t)g->E * G * g->C * d * sizeof *ddisp);
	for (int n = 0; n < N; n++) {
		const float *r = route + (size_t)n * MOE_ROUTE_W, *dyn = dy + (size_t)n * d;
		dc[2 * n] = dc[2 * n + 1] = 0;
		for (int j = 0; j < g->k; j++) {
			int ok;
			const size_t row = slot_row(g, G, n, r, j, &ok);
			if (!ok)
				continue;
			const float c = r[4 + j], *o = eo + row * d;
			float *dd = ddisp + row * d, s = 0;
			for (int i = 0; i < d; i++) {
				s += dyn[i] * o[i];
				dd[i] = c * dyn[i];
			}
			dc[2 * n + j] = s;
		}
	}
}

void moe_dispatch_backward(const moe_geom *g, int N, const float *route, const float *ddisp,
			   float *dx)
{
	const int d = g->d, G = N / g->S;
	for (int n = 0; n < N; n++) {
		const float *r = route + (size_t)n * MOE_ROUTE_W;
		float *dxn = dx + (size_t)n * d;
		for (int j = 0; j < g->k; j++) {
			int ok;
			const size_t row = slot_row(g, G, n, r, j, &ok);
			if (!ok)
				continue;
			const float *s = ddisp + row * d;
			for (int i = 0; i < d; i++)
				dxn[i] += s[i];
		}
	}
}

/* n floats in all: R blocks of n / R, block j to replica j. */
int moe_all_to_all(const ph_ctx *ctx, const float *send, float *recv, size_t n, ph_err *err)
{
	const int R = moe_group_size(ctx);
	if (R == 1) {
		memcpy(recv, send, n * sizeof *send);
		return PH_OK;
	}
	if (!ctx->group->all_to_all)
		return ph_fail(err, PH_EINTERNAL, "moe: the host's replica group has no all_to_all");
	return ctx->group->all_to_all(ctx->group, ctx, send, recv, n / (size_t)R, err);
}
