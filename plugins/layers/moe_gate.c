/* SPDX-License-Identifier: MIT */
/*
 * GShard's gating (moe_core.h, docs/moe.md): softmax gate, top-1 or top-2,
 * capacity per expert and group, the second expert at random or always,
 * and the auxiliary load-balancing loss.  Everything here is per token or
 * per group, in token order, so it is deterministic.
 */
#include <math.h>
#include <string.h>

#include "moe_core.h"

int moe_capacity(double cf, int k, int S, int E)
{
	if (cf <= 0)
		return S;
	double c = ceil(cf * k * (double)S / E - 1e-9);
	if (c < 1)
		c = 1;
	return c > S ? S : (int)c;
}

int moe_group_size(const ph_ctx *ctx)
{
	return ctx->group && ctx->group->size > 0 ? ctx->group->size : 1;
}

int moe_group_rank(const ph_ctx *ctx)
{
	return ctx->group && ctx->group->size > 1 ? ctx->group->rank : 0;
}

/*
 * probs [N, E] = softmax(x gate^T); per token of route [N, 6]:
 *   e1 = argmax, c1 = p[e1]                                 (top-1, Switch)
 *   e2 = argmax of the rest, c1 = p1 / (p1 + p2), c2 = p2 / (p1 + p2)   (top-2)
 * The second is taken always, or (random2, training) iff u < 2 c2 with
 * u = ph_rng_uniform(key, n), key = mix(ph_rng_key(...) ^ MOE_SITE_ROUTE),
 * n the token's index in the micro-batch.  Slots: within a group, first
 * choices take slots in token order, then second choices, each expert's
 * count going on from its first choices (GShard); past C a choice is
 * dropped (slot -1, combine weight 0).
 */
void moe_gate_forward(const moe_geom *g, const ph_ctx *ctx, const float *x, const float *gate,
		      float *probs, float *route, moe_stats *st)
{
	const int E = g->E, d = g->d, S = g->S;
	const int N = ctx->batch * g->T, G = N / S;
	const uint64_t key = ph_mix64(ph_rng_key(ctx->seed, ctx->step, ctx->microbatch, ctx->layer) ^
				      MOE_SITE_ROUTE);
	const int sample2 = g->k == 2 && g->random2 && ctx->training;

	/* logits and softmax, one token at a time (d-long dots, fixed order) */
	for (int n = 0; n < N; n++) {
		const float *xn = x + (size_t)n * d;
		float *pn = probs + (size_t)n * E;
		float mx = -INFINITY;
		for (int e = 0; e < E; e++) {
			const float *we = gate + (size_t)e * d;
			float s = 0;
			for (int c = 0; c < d; c++)
				s += xn[c] * we[c];
			pn[e] = s;
			mx = s > mx ? s : mx;
		}
		float z = 0;
		for (int e = 0; e < E; e++) {
			pn[e] = expf(pn[e] - mx);
			z += pn[e];
		}
		for (int e = 0; e < E; e++)
			pn[e] /= z;
	}

	/* routing, a group at a time (moe_core.h); the figures' sums */
	int count[MOE_MAX_E];
	float gload[MOE_MAX_E];
	double load[MOE_MAX_E] = { 0 };
	double aux = 0, chosen = 0, dropped = 0;
	for (int gi = 0; gi < G; gi++) {
		double gchosen, gdropped;
		aux += moe_route_group(g, sample2, key, (int64_t)gi * S, probs, route, count, gload, &gchosen,
				       &gdropped);
		chosen += gchosen;
		dropped += gdropped;
		for (int e = 0; e < E; e++)
			load[e] += gload[e];
	}
	if (st) {
		double mx = 0, sum = 0;
		for (int e = 0; e < E; e++) {
			sum += load[e];
			mx = load[e] > mx ? load[e] : mx;
		}
		st->aux = G ? aux / G : 0;
		st->load_max_mean = sum > 0 ? mx / (sum / E) : 0;
		st->drop_frac = chosen > 0 ? dropped / chosen : 0;
	}
}

/*
 * dlogits [N, E] from dc [N, 2] and the auxiliary loss.
 * The combine weights: top-1 c1 = p1; top-2 c1 = p1 / s, c2 = p2 / s with
 * s = p1 + p2 (a dropped or skipped choice has weight 0 whatever p, so its
 * dc is 0 and nothing flows).  The auxiliary loss adds to the objective
 * coef x the mean of l_g over the step's groups: ts S coef l_g per group,
 * ts = 1 / (the step's tokens) (moe_token_scale), so d/dp[n, e] +=
 * ts coef E f_e, f_e = the fraction of the group's tokens whose first
 * choice is e.  Then the softmax: dlogit = p (dp - sum p dp).
 */
void moe_gate_backward(const moe_geom *g, const ph_ctx *ctx, const float *probs,
		       const float *route, const float *dc, float *dlogits)
{
	const int E = g->E, S = g->S;
	const int N = ctx->batch * g->T, G = N / S;
	const float aux_scale = moe_token_scale(g, ctx) * g->aux_coef * (float)E;
	float f[MOE_MAX_E];
	for (int gi = 0; gi < G; gi++) {
		memset(f, 0, (size_t)E * sizeof *f);
		for (int t = 0; t < S; t++)
			f[(int)route[(size_t)(gi * S + t) * MOE_ROUTE_W]] += 1.0f;
		for (int e = 0; e < E; e++)
			f[e] = aux_scale * (f[e] / (float)S);
		for (int t = 0; t < S; t++) {
			const int n = gi * S + t;
			const float *pn = probs + (size_t)n * E, *r = route + (size_t)n * MOE_ROUTE_W;
			moe_token_dlogits(g->k, E, pn, r, f, dc[2 * n], dc[2 * n + 1], dlogits + (size_t)n * E);
		}
	}
}
