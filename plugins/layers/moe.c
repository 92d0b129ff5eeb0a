/* SPDX-License-Identifier: MIT */
/*
 * moe: a mixture-of-experts MLP as a layer (GShard's gating; docs/moe.md).
 *
 *   x [T, d] (or [d]: T = 1)  ->  y [T, d]
 *   y = x + moe(x)   (residual = yes, the default: a token every expert
 *                     dropped passes through unchanged, as in a block)
 *   y = moe(x)       (residual = no: a dropped token's output is 0)
 *   moe(x)_n = sum over the token's kept choices j of c_j expert_{e_j}(x_n)
 *   expert(x) = gelu(x w1^T + b1) w2^T + b2         d -> h -> d
 *
 * Parameters (moe_core.h):
 *   0 gate_weight     [E, d]       N(0, 0.02^2)   replicated
 *   1 fc_weight       [E, h, d]    N(0, 0.02^2)   sharded over the replicas
 *   2 fc_proj_weight  [E, d, h]    N(0, 0.02^2)   sharded
 *   3 biases          [E h + E d]  zeros, no decay: b1 [E, h], b2 [E, d]
 *
 * The auxiliary load-balancing loss (coefficient aux_coef) is part of the
 * objective: backward adds its gradient, scaled by 1 / the step's tokens
 * (moe_token_scale: ctx->objective_samples, ABI 1.9).  The
 * exchanges over the stage's replicas (expert parallelism) are in
 * moe_mlp.c.  The CUDA twin is moe_cuda.cu (moe_cuda.cuh).
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include <pipehost/plugin.h>
#include "moe_state.h"

PH_LAYER_TWIN(moe_cuda_ops);

typedef struct {
	int64_t experts;
	int64_t top_k;
	int64_t hidden;
	double capacity_factor;
	int64_t group_size;
	int second;        /* 0 random, 1 always */
	double aux_coef;
	int residual;
} moe_config;

static const ph_option moe_options[] = {
	PH_OPT_INT_(moe_config, experts, "experts", "8", 1, MOE_MAX_E, "experts E"),
	PH_OPT_INT_(moe_config, top_k, "top_k", "2", 1, 2,
		    "experts per token: 2 (GShard) or 1 (Switch)"),
	PH_OPT_INT_(moe_config, hidden, "hidden", "0", 0, 1 << 20,
		    "each expert's hidden width; 0 = 4 d"),
	PH_OPT_FLOAT_(moe_config, capacity_factor, "capacity_factor", "2", 0, 1024,
		      "slots per expert and group = ceil(factor k S / E); 0 = dropless (S)"),
	PH_OPT_INT_(moe_config, group_size, "group_size", "0", 0, INT_MAX,
		    "tokens per routing group S, dividing T; 0 = T (a sample's sequence)"),
	PH_OPT_CHOICE_(moe_config, second, "second_expert", "random", "random|always",
		       "top-2's second expert: kept with probability 2 c2 (GShard) or always"),
	PH_OPT_FLOAT_(moe_config, aux_coef, "aux_coef", "0.01", 0, 1000,
		      "coefficient of the load-balancing loss added to the objective"),
	PH_OPT_BOOL_(moe_config, residual, "residual", "yes",
		     "output x + moe(x), so that dropped tokens pass through"),
	PH_OPT_END
};

enum { P_GATE = MOE_P_GATE, P_W1 = MOE_P_W1, P_W2 = MOE_P_W2, P_BIAS = MOE_P_BIAS };

/* Check the options against [T, d]; fill g.  Shared with nothing: the
 * gpt_block checks its own copy of the same rules. */
static int moe_create(const void *config, const ph_shape *in, int max_batch, void **state,
		      ph_err *err)
{
	const moe_config *cfg = config;
	if (in->ndim != 1 && in->ndim != 2)
		return ph_fail(err, PH_EINVAL,
			       "moe: input has %d dimensions; need [T, d] or [d] per sample",
			       in->ndim);
	const int64_t T = in->ndim == 2 ? in->d[0] : 1, d = in->d[in->ndim - 1];
	const int64_t h = cfg->hidden ? cfg->hidden : 4 * d;
	const int64_t S = cfg->group_size ? cfg->group_size : T;
	if (T < 1 || d < 1)
		return ph_fail(err, PH_EINVAL, "moe: input [%lld, %lld]; need both >= 1",
			       (long long)T, (long long)d);
	if (cfg->experts < 1 || cfg->experts > MOE_MAX_E)
		return ph_fail(err, PH_EINVAL, "moe: experts = %lld outside [1, %d]",
			       (long long)cfg->experts, MOE_MAX_E);
	if (cfg->top_k < 1 || cfg->top_k > 2 || cfg->top_k > cfg->experts)
		return ph_fail(err, PH_EINVAL,
			       "moe: top_k = %lld; need 1 or 2, and at most experts (%lld)",
			       (long long)cfg->top_k, (long long)cfg->experts);
	if (S < 1 || T % S != 0)
		return ph_fail(err, PH_EINVAL,
			       "moe: group_size = %lld does not divide the %lld tokens of a sample; "
			       "pick a divisor of T or 0 (= T)",
			       (long long)S, (long long)T);
	if (!(cfg->capacity_factor >= 0 && cfg->capacity_factor <= 1024))
		return ph_fail(err, PH_EINVAL, "moe: capacity_factor %g outside [0, 1024]",
			       cfg->capacity_factor);
	if (max_batch < 1)
		return ph_fail(err, PH_EINVAL, "moe: max_batch %d; need >= 1", max_batch);
	/* BLAS int sizes: rows of one expert block and its operands */
	const int64_t C = moe_capacity(cfg->capacity_factor, (int)cfg->top_k, (int)S,
				       (int)cfg->experts);
	const int64_t rows = (int64_t)max_batch * (T / S) * C;
	if (h > INT_MAX / 8 || d > INT_MAX / 8 || rows * (h > d ? h : d) > INT_MAX ||
	    (int64_t)max_batch * T * d > INT_MAX)
		return ph_fail(err, PH_EINVAL,
			       "moe: T = %lld, d = %lld, hidden %lld, micro-batch %d exceed BLAS int "
			       "sizes; lower the micro-batch size",
			       (long long)T, (long long)d, (long long)h, max_batch);
	moe_state *s = calloc(1, sizeof *s);
	if (!s)
		return ph_fail(err, PH_ENOMEM, "moe: out of memory");
	s->g = (moe_geom){ .T = (int)T, .d = (int)d, .h = (int)h, .E = (int)cfg->experts,
			   .k = (int)cfg->top_k, .S = (int)S, .C = (int)C,
			   .random2 = cfg->second == 0, .aux_coef = (float)cfg->aux_coef };
	s->residual = cfg->residual;
	s->max_batch = max_batch;
	s->ndim = in->ndim;
	*state = s;
	return PH_OK;
}

static void moe_destroy(void *state)
{
	free(state);
}

static void add_param(ph_layer_meta *m, const char *name, ph_shape shape, ph_init_rule init,
		      float arg, int no_decay)
{
	ph_param_desc *p = &m->params[m->nparams++];
	strcpy(p->name, name);
	p->shape = shape;
	p->init = init;
	p->init_arg = arg;
	p->no_decay = no_decay;
}

static int moe_meta(const void *state, ph_layer_meta *m, ph_err *err)
{
	(void)err;
	const moe_state *s = state;
	const moe_geom *g = &s->g;
	*m = (ph_layer_meta){ 0 };
	m->out = s->ndim == 2 ? (ph_shape){ 2, { g->T, g->d } } : (ph_shape){ 1, { g->d } };
	m->fwd_flops = moe_fwd_flops(g) + (s->residual ? (double)g->T * g->d : 0);
	m->bwd_flops = 2.0 * moe_fwd_flops(g) + (s->residual ? (double)g->T * g->d : 0);
	m->saved_bytes = moe_saved_floats(g) * sizeof(float);
	m->scratch_bytes = (size_t)s->max_batch * moe_scratch_floats(g) * sizeof(float);
	m->device_scratch_bytes = (size_t)s->max_batch * moe_device_scratch_floats(g) * sizeof(float);
	const int64_t E = g->E, d = g->d, h = g->h;
	add_param(m, "gate_weight", (ph_shape){ 2, { E, d } }, PH_INIT_NORMAL, 0.02f, 0);
	add_param(m, "fc_weight", (ph_shape){ 3, { E, h, d } }, PH_INIT_NORMAL, 0.02f, 0);
	add_param(m, "fc_proj_weight", (ph_shape){ 3, { E, d, h } }, PH_INIT_NORMAL, 0.02f, 0);
	add_param(m, "biases", (ph_shape){ 1, { E * (h + d) } }, PH_INIT_ZEROS, 0, 1);
	m->sharded_params = (1u << P_W1) | (1u << P_W2);
	return PH_OK;
}

static int check_call(const ph_ctx *ctx, ph_err *err)
{
	if (ctx->batch > 0 && (!ctx->saved || !ctx->scratch))
		return ph_fail(err, PH_EINTERNAL, "moe: called without saved or scratch space");
	return PH_OK;
}

static moe_params params_of(float *const *params)
{
	return (moe_params){ params[P_GATE], params[P_W1], params[P_W2], params[P_BIAS] };
}

static int moe_forward(void *state, const ph_ctx *ctx, float *const *params, const float *x,
		       float *y, ph_err *err)
{
	const moe_state *s = state;
	int rc = check_call(ctx, err);
	if (rc || ctx->batch == 0)
		return rc;
	const size_t n = (size_t)ctx->batch * s->g.T * s->g.d;
	if (s->residual)
		memcpy(y, x, n * sizeof *y);
	moe_params p = params_of(params);
	return moe_mlp_forward(&s->g, ctx, &p, x, y, s->residual, ctx->saved, ctx->scratch, err);
}

static int moe_backward(void *state, const ph_ctx *ctx, float *const *params,
			float *const *grads, const float *x, const float *y, const float *dy,
			float *dx, ph_err *err)
{
	(void)y;
	const moe_state *s = state;
	int rc = check_call(ctx, err);
	if (rc || ctx->batch == 0)
		return rc;
	moe_params p = params_of(params);
	moe_grads gr = { grads[P_GATE], grads[P_W1], grads[P_W2], grads[P_BIAS] };
	rc = moe_mlp_backward(&s->g, ctx, &p, &gr, x, dy, dx, ctx->saved, ctx->scratch, err);
	if (rc == PH_OK && dx && s->residual) {
		const size_t n = (size_t)ctx->batch * s->g.T * s->g.d;
		for (size_t i = 0; i < n; i++)
			dx[i] += dy[i];
	}
	return rc;
}

static const ph_layer_ops moe_ops = {
	.head = PH_HEAD(ph_layer_ops, "moe",
			"mixture-of-experts MLP over [T, d]: GShard top-2 (or top-1) gating, "
			"capacity, load-balancing loss",
			moe_options, moe_config),
	.devices = PH_DEV_CPU,
	.flags = 0,
	.create = moe_create,
	.destroy = moe_destroy,
	.meta = moe_meta,
	.forward = moe_forward,
	.backward = moe_backward,
	.cuda = &moe_cuda_ops,
};

static const ph_layer_ops *const moe_layers[] = { &moe_ops, NULL };
PH_PLUGIN(moe_layers, NULL, NULL)
