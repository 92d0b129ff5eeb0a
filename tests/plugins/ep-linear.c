/* SPDX-License-Identifier: MIT */
/* ep_linear: a tiny expert-parallel layer for the host's replica groups
 * (plugin ABI 1.5; tests/test-expert-parallel.sh).  E experts, each a
 * D x D matrix; sample g of the whole batch goes to expert g mod E (a fixed
 * routing, so that every R routes every token the same way):
 *     y = W[e] x + b
 * W [E, D, D] is sharded over the R replicas of the stage (each holds E/R
 * experts), b [D] is not.  Forward: the tokens go to the replica of their
 * expert (all_to_all), the products come back (all_to_all); backward: the
 * same two exchanges carry (x, dy) out and dx back, and the expert's owner
 * adds dW.  all_reduce_sum gives the experts' loads over every replica,
 * reported as ep.load_max (the busiest expert's share) and ep.tokens.
 * The micro-batch's first output, a figure that differs with every call,
 * goes both through report (ep.y0) and through report_device (ep.y0_at,
 * plugin ABI 1.8): the host must average both the same way.
 *
 * Buffers [E][C][1 + 2D] (C = max_batch tokens an expert, so none is
 * dropped): row = [used, x (D), dy or product (D)].  Block j of R, for
 * replica j, is experts [j E/R, (j+1) E/R): the layout is the same for
 * every R, and so is the scratch. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include <pipehost/plugin.h>

#include "ep-linear_state.h"

/* ep-linear_cuda.cu; NULL in a build without CUDA */
PH_LAYER_TWIN(ep_linear_cuda_ops);

typedef struct {
	int64_t experts;
} ep_config;

static const ph_option ep_options[] = {
	PH_OPT_INT_(ep_config, experts, "experts", "4", 1, 4096, "experts, split over the replicas of the stage"),
	PH_OPT_END
};

typedef ep_state state;

static int create(const void *config, const ph_shape *in, int max_batch, void **st, ph_err *err)
{
	const ep_config *c = config;
	if (in->ndim != 1)
		return ph_fail(err, PH_EINVAL, "ep_linear takes [features] samples; put a flatten layer before it");
	state *s = calloc(1, sizeof *s);
	if (!s)
		return ph_fail(err, PH_ENOMEM, "out of memory");
	s->E = (int)c->experts;
	s->D = (int)in->d[0];
	s->C = max_batch;
	s->in = *in;
	*st = s;
	return PH_OK;
}

static void destroy(void *st)
{
	free(st);
}

#define row ep_row
#define buf_floats ep_buf_floats

static int meta(const void *st, ph_layer_meta *m, ph_err *err)
{
	const state *s = st;
	(void)err;
	*m = (ph_layer_meta){ 0 };
	m->out = s->in;
	m->nparams = 2;
	m->params[0] = (ph_param_desc){ .name = "weight", .shape = { 3, { s->E, s->D, s->D } }, .init = PH_INIT_NORMAL,
					.init_arg = 0.3f };
	m->params[1] = (ph_param_desc){ .name = "bias", .shape = { 1, { s->D } }, .init = PH_INIT_ZEROS, .no_decay = 1 };
	m->sharded_params = 1u << 0;
	m->scratch_bytes = 2 * buf_floats(s) * sizeof(float) + (size_t)s->E * sizeof(float);
	return PH_OK;
}

/* Sample i's expert and its slot in that expert's rows (ep-linear_state.h). */
static void route(const state *s, const ph_ctx *ctx, int *expert, int *slot)
{
	int base = ep_base(s, ctx);
	for (int i = 0; i < ctx->batch; i++) {
		expert[i] = (base + i) % s->E;
		slot[i] = i / s->E;
	}
}

static int check_group(const state *s, const ph_ctx *ctx, ph_err *err)
{
	if (s->E % ctx->group->size)
		return ph_fail(err, PH_EINVAL, "%d experts over %d replicas", s->E, ctx->group->size);
	return PH_OK;
}

/* Out: the rows of this replica's samples to their experts' replicas, the
 * experts' work on what arrived (fn), and the rows back in a.  Returns
 * the status of the exchanges. */
static int exchange(const state *s, const ph_ctx *ctx, float *a, float *b, ph_err *err)
{
	const ph_group *g = ctx->group;
	size_t per = buf_floats(s) / (size_t)g->size;
	return g->all_to_all(g, ctx, a, b, per, err);
}

static int forward(void *st, const ph_ctx *ctx, float *const *params, const float *x, float *y, ph_err *err)
{
	const state *s = st;
	const ph_group *g = ctx->group;
	int rc, D = s->D, R = g->size, El = s->E / (R ? R : 1);
	if ((rc = check_group(s, ctx, err)))
		return rc;
	float *a = ctx->scratch, *b = a + buf_floats(s), *load = b + buf_floats(s);
	int *ex = malloc(sizeof(int) * (size_t)(ctx->batch ? ctx->batch : 1)),
	    *sl = malloc(sizeof(int) * (size_t)(ctx->batch ? ctx->batch : 1));
	if (!ex || !sl) {
		free(ex), free(sl);
		return ph_fail(err, PH_ENOMEM, "out of memory");
	}
	route(s, ctx, ex, sl);
	memset(a, 0, buf_floats(s) * sizeof(float));
	memset(load, 0, (size_t)s->E * sizeof(float));
	for (int i = 0; i < ctx->batch; i++) {
		float *r = a + ((size_t)ex[i] * s->C + sl[i]) * row(s);
		r[0] = 1;
		memcpy(r + 1, x + (size_t)i * D, (size_t)D * sizeof(float));
		load[ex[i]] += 1;
	}
	/* out: block j of b is what replica j sent to this replica's experts */
	if ((rc = exchange(s, ctx, a, b, err)))
		goto out;
	for (int j = 0; j < R; j++)
		for (int el = 0; el < El; el++)
			for (int c = 0; c < s->C; c++) {
				float *r = b + (((size_t)j * El + el) * s->C + c) * row(s);
				if (r[0] == 0)
					continue;
				const float *w = params[0] + (size_t)el * D * D;
				for (int o = 0; o < D; o++) {
					float acc = 0;
					for (int k = 0; k < D; k++)
						acc += w[(size_t)o * D + k] * r[1 + k];
					r[1 + D + o] = acc;
				}
			}
	/* back: a's rows hold their products */
	if ((rc = exchange(s, ctx, b, a, err)))
		goto out;
	for (int i = 0; i < ctx->batch; i++) {
		const float *r = a + ((size_t)ex[i] * s->C + sl[i]) * row(s);
		for (int o = 0; o < D; o++)
			y[(size_t)i * D + o] = r[1 + D + o] + params[1][o];
	}
	/* the experts' loads over every replica, in the same order everywhere */
	if ((rc = g->all_reduce_sum(g, ctx, load, (size_t)s->E, err)))
		goto out;
	if (g->report && ctx->training) {
		double total = 0, most = 0;
		for (int e = 0; e < s->E; e++) {
			total += load[e];
			most = load[e] > most ? load[e] : most;
		}
		g->report(g, ctx, "load_max", total > 0 ? most / total : 0);
		g->report(g, ctx, "tokens", total);
		if (ctx->batch > 0) { /* (every micro-batch of ep.ini is full) */
			g->report(g, ctx, "y0", y[0]);
			ph_group_report_at(ctx, "y0_at", y);
		}
	}
out:
	free(ex);
	free(sl);
	return rc;
}

static int backward(void *st, const ph_ctx *ctx, float *const *params, float *const *grads, const float *x,
		    const float *y, const float *dy, float *dx, ph_err *err)
{
	const state *s = st;
	const ph_group *g = ctx->group;
	int rc, D = s->D, R = g->size, El = s->E / (R ? R : 1);
	(void)y;
	if ((rc = check_group(s, ctx, err)))
		return rc;
	float *a = ctx->scratch, *b = a + buf_floats(s);
	int *ex = malloc(sizeof(int) * (size_t)(ctx->batch ? ctx->batch : 1)),
	    *sl = malloc(sizeof(int) * (size_t)(ctx->batch ? ctx->batch : 1));
	if (!ex || !sl) {
		free(ex), free(sl);
		return ph_fail(err, PH_ENOMEM, "out of memory");
	}
	route(s, ctx, ex, sl);
	memset(a, 0, buf_floats(s) * sizeof(float));
	for (int i = 0; i < ctx->batch; i++) {
		float *r = a + ((size_t)ex[i] * s->C + sl[i]) * row(s);
		r[0] = 1;
		memcpy(r + 1, x + (size_t)i * D, (size_t)D * sizeof(float));
		memcpy(r + 1 + D, dy + (size_t)i * D, (size_t)D * sizeof(float));
		for (int o = 0; o < D; o++)
			grads[1][o] += dy[(size_t)i * D + o];
	}
	if ((rc = exchange(s, ctx, a, b, err)))
		goto out;
	/* the experts' owner: dW[e] += dy x^T, and dx = W[e]^T dy into the x part */
	for (int j = 0; j < R; j++)
		for (int el = 0; el < El; el++)
			for (int c = 0; c < s->C; c++) {
				float *r = b + (((size_t)j * El + el) * s->C + c) * row(s);
				if (r[0] == 0)
					continue;
				const float *w = params[0] + (size_t)el * D * D;
				float *gw = grads[0] + (size_t)el * D * D;
				for (int o = 0; o < D; o++)
					for (int k = 0; k < D; k++)
						gw[(size_t)o * D + k] += r[1 + D + o] * r[1 + k];
				for (int k = 0; k < D; k++) {
					float acc = 0;
					for (int o = 0; o < D; o++)
						acc += w[(size_t)o * D + k] * r[1 + D + o];
					r[1 + k] = acc;
				}
			}
	if ((rc = exchange(s, ctx, b, a, err)))
		goto out;
	for (int i = 0; dx && i < ctx->batch; i++) {
		const float *r = a + ((size_t)ex[i] * s->C + sl[i]) * row(s);
		memcpy(dx + (size_t)i * D, r + 1, (size_t)D * sizeof(float));
	}
out:
	free(ex);
	free(sl);
	return rc;
}

static const ph_layer_ops ops = {
	.head = PH_HEAD(ph_layer_ops, "ep_linear", "y = W[sample mod E] x + b, experts split over replicas (a test)",
			ep_options, ep_config),
	.devices = PH_DEV_CPU,
	.create = create,
	.destroy = destroy,
	.meta = meta,
	.forward = forward,
	.backward = backward,
	.cuda = &ep_linear_cuda_ops,
};

static const ph_layer_ops *const layers[] = { &ops, NULL };
PH_PLUGIN(layers, NULL, NULL)
