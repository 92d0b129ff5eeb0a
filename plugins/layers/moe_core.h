/* SPDX-License-Identifier: MIT */
/*
 * The mixture-of-experts MLP (GShard, Lepikhin et al. 2020; Switch, Fedus et
 * al. 2021) shared by the `moe` layer and gpt_block's `mlp = moe`.  Compiled
 * into both modules (moe_gate.c, moe_dispatch.c, moe_experts.c, moe_mlp.c);
 * docs/moe.md is the user's description.
 *
 * Tokens: a micro-batch of B samples of T tokens of width d, N = B T rows.
 * Groups: S consecutive tokens of one sample (S divides T), G = N / S.
 * Capacity: C slots per expert and group (moe_capacity()).
 *
 * Parameters, the shapes meta declares (E experts, hidden h):
 *   gate    [E, d]         replicated
 *   w1      [E, h, d]      sharded over the R replicas: this one holds
 *                          experts [rank El, (rank + 1) El), El = E / R
 *   w2      [E, d, h]      sharded likewise
 *   biases  [E h + E d]    replicated: b1 [E, h] then b2 [E, d]; a replica
 *                          adds gradients only to its own experts' rows,
 *                          so the host's sum over replicas completes them
 *
 * Buffers (floats; "token side" = laid out by the tokens' replica, "expert
 * side" = after the all_to_all, by the experts' replica):
 *   dispatch, token side  [E][G][C][d]   expert e's slots for every group;
 *                         block j of the all_to_all = experts j El ..
 *   expert side           [R][El][G][C][d]: block q = j El + l holds
 *                         replica j's tokens for local expert l
 * With R = 1 both are [E][G][C][d] and the all_to_all is a copy.
 *
 * Saved per micro-batch, region after region (moe_saved_floats per sample):
 *   probs [N, E]      softmax of the gate
 *   route [N, 6]      e1, e2, p1, p2, c1, c2: the experts, their slots
 *                     (-1: not taken or dropped) and combine weights
 *   xin   [E G C d]   expert inputs, expert side
 *   u     [E G C h]   pre-gelu hidden, expert side
 *   eo    [E G C d]   expert outputs, token side
 */
#ifndef PH_LAYERS_MOE_CORE_H
#define PH_LAYERS_MOE_CORE_H

#include <stdint.h>

#include <pipehost/plugin.h>

#ifdef __cplusplus
extern "C" { /* moe_cuda.cuh's kernels call these from C++ */
#endif

#define MOE_SITE_ROUTE 0x6d6f652d726f7574ull /* "moe-rout": the second expert's draws */
#define MOE_ROUTE_W 6                          /* floats of route per token */
#define MOE_MAX_E 256                          /* experts at most */

typedef struct {
	int T, d, h;        /* tokens per sample, width, expert hidden */
	int E, k;           /* experts, experts per token (1 or 2) */
	int S, C;           /* group size (divides T), capacity per expert and group */
	int random2;        /* 1: keep the second expert with probability 2 c2 (training) */
	float aux_coef;     /* coefficient of the load-balancing loss */
} moe_geom;

/* What the CPU and the CUDA twin (moe_cuda.cuh) share to the bit: the
 * saved layout, the routing of a group and the gate's per-token backward. */
#ifdef __CUDACC__
#define MOE_FN static inline __host__ __device__
#else
#define MOE_FN static inline
#endif

/* A product that a sum then takes: nvcc fuses a * b + c into one FMA in
 * device code (-fmad=true, its default), the host's x86-64 code does not,
 * so on a GPU such a product is rounded on its own (the emulator runs the
 * host's code: it cannot show the difference). */
#ifdef __CUDA_ARCH__
#define MOE_MULF(a, b) __fmul_rn((a), (b))
#define MOE_MULD(a, b) __dmul_rn((a), (b))
#else
#define MOE_MULF(a, b) ((a) * (b))
#define MOE_MULD(a, b) ((a) * (b))
#endif

/* d(objective)/d(a loss per token): 1 / (the step's tokens), the
 * auxiliary loss's scale.  loss_scale is per target of the loss layer,
 * which is this per token only when the loss has one target per token (a
 * language model's); a classifier's softmax_xent has one per sample.  A
 * host older than ABI 1.9 (or a test harness) gives no objective_samples:
 * loss_scale then.  The product in double as the host's loss_scale, so a
 * language model's scale is the same float. */
MOE_FN float moe_token_scale(const moe_geom *g, const ph_ctx *ctx)
{
	return ctx->objective_samples > 0 ? (float)(1.0 / ((double)ctx->objective_samples * g->T)) : ctx->loss_scale;
}

/* Expert slots per sample: E C for each of its T / S groups. */
MOE_FN size_t moe_slots(const moe_geom *g)
{
	return (size_t)g->E * (size_t)(g->T / g->S) * (size_t)g->C;
}

/* The saved regions of B samples (the list above). */
typedef struct {
	float *probs, *route, *xin, *u, *eo;
} moe_saved;

MOE_FN moe_saved moe_saved_views(const moe_geom *g, int B, float *saved)
{
	const size_t N = (size_t)B * g->T, Q = (size_t)B * moe_slots(g);
	moe_saved v;
	v.probs = saved;
	v.route = v.probs + N * g->E;
	v.xin = v.route + N * MOE_ROUTE_W;
	v.u = v.xin + Q * g->d;
	v.eo = v.u + Q * g->h;
	return v;
}

/* The first expert with the largest probability, skipping `skip`. */
MOE_FN int moe_argmax_skip(const float *p, int E, int skip)
{
	int best = -1;
	for (int e = 0; e < E; e++)
		if (e != skip && (best < 0 || p[e] > p[best]))
			best = e;
	return best;
}

/*
 * The routing of one group (moe_gate_forward's description; the GPU runs it
 * a thread per group): route rows [n0, n0 + S) from probs [N, E], n0 the
 * group's first token in the micro-batch, first choices in token order,
 * then the second ones.  count [E] (slots taken) and load [E] (choices
 * before capacity) are set, as are *chosen and *dropped, the group's
 * choices and those dropped for capacity: counts, exact in float and
 * double.  Returns E l_g = E sum_e (m_e / S) (f_e / S), m_e the sum of the
 * probabilities and f_e the first choices of e, each summed in token order.
 */
MOE_FN double moe_route_group(const moe_geom *g, int sample2, uint64_t key, int64_t n0,
			      const float *probs, float *route, int *count, float *load, double *chosen,
			      double *dropped)
{
	const int E = g->E, S = g->S, C = g->C;
	for (int e = 0; e < E; e++)
		count[e] = 0, load[e] = 0;
	double ch = 0, dr = 0;
	for (int t = 0; t < S; t++) {
		const int64_t n = n0 + t;
		const float *pn = probs + n * E;
		float *r = route + n * MOE_ROUTE_W;
		const int e1 = moe_argmax_skip(pn, E, -1);
		int e2 = -1;
		float c1 = pn[e1], c2 = 0;
		if (g->k == 2) {
			e2 = moe_argmax_skip(pn, E, e1);
			const float den = pn[e1] + pn[e2];
			c1 = pn[e1] / den;
			c2 = pn[e2] / den;
		}
		r[0] = (float)e1;
		r[1] = (float)e2;
		r[4] = c1;
		r[5] = c2;
		/* first choice's slot */
		load[e1] += 1;
		ch += 1;
		if (count[e1] < C) {
			r[2] = (float)count[e1]++;
		} else {
			r[2] = -1;
			r[4] = 0;
			dr += 1;
		}
	}
	for (int t = 0; t < S; t++) {
		const int64_t n = n0 + t;
		float *r = route + n * MOE_ROUTE_W;
		r[3] = -1;
		if (g->k != 2)
			continue;
		const int e2 = (int)r[1];
		if (sample2 && !(ph_rng_uniform(key, (uint64_t)n) < 2.0f * r[5])) {
			r[5] = 0;
			continue;
		}
		load[e2] += 1;
		ch += 1;
		if (count[e2] < C) {
			r[3] = (float)count[e2]++;
		} else {
			r[5] = 0;
			dr += 1;
		}
	}
	*chosen = ch;
	*dropped = dr;
	double l = 0;
	for (int e = 0; e < E; e++) {
		double m = 0, f = 0;
		for (int t = 0; t < S; t++) {
			const int64_t n = n0 + t;
			m += probs[n * E + e];
			f += (int)route[n * MOE_ROUTE_W] == e;
		}
		l += MOE_MULD(m / S, f / S);
	}
	return E * l;
}

/* One token's dlogits [E] (k experts, probabilities pn, route r): dp =
 * f (the group's aux gradient) plus the combine weights' gradients dc1,
 * dc2 through the top-k renormalisation, then through the softmax. */
MOE_FN void moe_token_dlogits(int k, int E, const float *pn, const float *r, const float *f, float dc1, float dc2,
			      float *dl)
{
	for (int e = 0; e < E; e++)
		dl[e] = f[e];
	const int e1 = (int)r[0], e2 = (int)r[1];
	if (k == 1) {
		dl[e1] += dc1;
	} else {
		const float p1 = pn[e1], p2 = pn[e2], s = p1 + p2;
		const float inv2 = 1.0f / (s * s);
		dl[e1] += MOE_MULF(p2 * (dc1 - dc2), inv2);
		dl[e2] += MOE_MULF(p1 * (dc2 - dc1), inv2);
	}
	float dot = 0;
	for (int e = 0; e < E; e++)
		dot += MOE_MULF(pn[e], dl[e]);
	for (int e = 0; e < E; e++)
		dl[e] = pn[e] * (dl[e] - dot);
}

/* Parameters of this replica: w1, w2 point at its El experts, gate and
 * biases are whole. */
typedef struct {
	const float *gate, *w1, *w2, *biases;
} moe_params;

/* Their gradients (accumulated); NULL: the input half only. */
typedef struct {
	float *gate, *w1, *w2, *biases;
} moe_grads;

/* C = ceil(cf k S / E), at least 1, at most S; cf = 0: S (dropless). */
int moe_capacity(double cf, int k, int S, int E);

size_t moe_saved_floats(const moe_geom *g);   /* per sample */
size_t moe_scratch_floats(const moe_geom *g); /* per sample */
/* The GPU's (moe_cuda.cuh), per sample: the CPU's with every expert
 * block's GELU (batched products), then the routing's counts and figures. */
size_t moe_device_scratch_floats(const moe_geom *g);
double moe_fwd_flops(const moe_geom *g);      /* per sample */

/* R and rank of ctx's group (1, 0 without one). */
int moe_group_size(const ph_ctx *ctx);
int moe_group_rank(const ph_ctx *ctx);

/* ---- moe_gate.c ---- */

/* Figures of one micro-batch's routing, for ph_group.report. */
typedef struct {
	double aux;            /* mean over groups of E sum_e m_e f_e */
	double load_max_mean;  /* max over experts of assignments / their mean */
	double drop_frac;      /* assignments dropped for capacity / assignments */
} moe_stats;

/* probs [N, E] (softmax of x gate^T) and route [N, 6] for N = batch T
 * tokens; the draws come from ctx's key when random2 and training. */
void moe_gate_forward(const moe_geom *g, const ph_ctx *ctx, const float *x, const float *gate,
		      float *probs, float *route, moe_stats *st);
/* dlogits [N, E] from dc [N, 2] (d objective / d combine weights) and the
 * auxiliary loss scaled by moe_token_scale (1 / the step's tokens). */
void moe_gate_backward(const moe_geom *g, const ph_ctx *ctx, const float *probs,
		       const float *route, const float *dc, float *dlogits);

/* ---- moe_dispatch.c ---- */

/* disp [E][G][C][d] = the tokens at their slots, zeros elsewhere. */
void moe_dispatch(const moe_geom *g, int N, const float *route, const float *x, float *disp);
/* y [N, d] (=, or += when accumulate) the combine-weighted expert outputs. */
void moe_combine(const moe_geom *g, int N, const float *route, const float *eo, float *y,
		 int accumulate);
/* dc [N, 2] = dy . eo at each kept slot; ddisp [E][G][C][d] = c dy there. */
void moe_combine_backward(const moe_geom *g, int N, const float *route, const float *eo,
			  const float *dy, float *dc, float *ddisp);
/* dx [N, d] += the slots' gradients. */
void moe_dispatch_backward(const moe_geom *g, int N, const float *route, const float *ddisp,
			   float *dx);
/* The exchange of [E][G][C][d] buffers over the group (a copy when R = 1). */
int moe_all_to_all(const ph_ctx *ctx, const float *send, float *recv, size_t n, ph_err *err);

/* ---- moe_experts.c ---- */

/* Over the E blocks of rows = G C expert-side rows each. */
void moe_experts_forward(const moe_geom *g, const ph_ctx *ctx, int rows, const moe_params *p,
			 const float *xin, float *u, float *a, float *out);
/* dout is overwritten with nothing; a, dh: [rows, h] scratch each.
 * dxin = d/dxin; grads NULL skips the weights. */
void moe_experts_backward(const moe_geom *g, const ph_ctx *ctx, int rows, const moe_params *p,
			  const moe_grads *gr, const float *xin, const float *u, const float *dout,
			  float *a, float *dh, float *dxin);

/* ---- moe_mlp.c: the whole MLP ---- */

/* y [N, d] = moe(x) (+= when accumulate); saved as above; scratch
 * moe_scratch_floats per sample. */
int moe_mlp_forward(const moe_geom *g, const ph_ctx *ctx, const moe_params *p, const float *x,
		    float *y, int accumulate, float *saved, float *scratch, ph_err *err);
/* dx [N, d] = d/dx (overwritten; NULL skips it, but the exchanges still
 * run); grads NULL: no weight gradients. */
int moe_mlp_backward(const moe_geom *g, const ph_ctx *ctx, const moe_params *p,
		     const moe_grads *gr, const float *x, const float *dy, float *dx, float *saved,
		     float *scratch, ph_err *err);

#ifdef __cplusplus
}
#endif
#endif
