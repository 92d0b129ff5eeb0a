/* SPDX-License-Identifier: MIT */
/*
 * gpt_block: one GPT-2 pre-LN transformer block as a single layer.
 *
 *   x [B, T, d]  ->  y [B, T, d]
 *   h1 = ln1(x)                                   layernorm, eps 1e-5
 *   qkv = h1 qkv_weight^T + qkv_bias              [T, 3d]: q | k | v
 *   att = causal multi-head attention(qkv)        dropout on the probabilities
 *   x1 = x + drop(att proj_weight^T + proj_bias)
 *   h2 = ln2(x1)
 *   u  = h2 fc_weight^T + fc_bias                 [T, r d], r = mlp_ratio
 *   g  = gelu(u)                                  tanh approximation
 *   y  = x1 + drop(g fc_proj_weight^T + fc_proj_bias)
 *
 * Parameters (7 tensors; PH_MAX_PARAMS is 8, so the ten of GPT-2 are packed):
 *   0 ln_weight      [2, d]       ones,  no decay: row 0 ln1 gain, row 1 ln2 gain
 *   1 ln_bias        [2, d]       zeros, no decay: row 0 ln1 bias, row 1 ln2 bias
 *   2 qkv_weight     [3d, d]      N(0, 0.02^2)
 *   3 proj_weight    [d, d]       N(0, 0.02^2) (GPT-2 scales it by 1/sqrt(2 n_layer);
 *                                 a single layer cannot know n_layer)
 *   4 fc_weight      [r d, d]     N(0, 0.02^2)
 *   5 fc_proj_weight [d, r d]     N(0, 0.02^2)
 *   6 biases         [(5 + r) d]  zeros, no decay, packed one after the other:
 *                                 qkv_bias [3d] at 0, proj_bias [d] at 3d,
 *                                 fc_bias [r d] at 4d, fc_proj_bias [d] at (4 + r) d
 * For r = 4 that is 12 d^2 + 13 d parameters, GPT-2's count per block.
 *
 * Dropout (training only, `dropout` > 0) at three sites, each with its own
 * key: key_site = ph_mix64(ph_rng_key(seed, step, micro-batch, layer) ^ SITE),
 * SITE = GPT_SITE_ATTN, GPT_SITE_RESID1, GPT_SITE_RESID2 below.
 *  - attention probabilities: element ((b*heads + h)*T + i)*T + j of the
 *    micro-batch, exactly as the attention layer (transformer_ops.h);
 *  - the two residual branches: element (b*T + t)*d + c of the micro-batch.
 * An element is kept iff ph_rng_uniform(key_site, index) >= (float)dropout,
 * and then scaled by (float)(1/(1 - dropout)).  Masks are drawn again in
 * backward, never stored.
 *
 * Saved (the micro-batch's, region after region, each [B, ...]):
 *   h1 [T, d], mean1 [T], rstd1 [T], qkv [T, 3d], P [heads, T, T] (before
 *   dropout), att [T, d], x1 [T, d], h2 [T, d], mean2 [T], rstd2 [T],
 *   u [T, r d] (pre-gelu), g [T, r d].
 * Backward recomputes nothing but the dropout masks.
 *
 * The split backward: both halves run the same chain of input gradients
 * (every weight gradient needs it); the weight half adds the parameter
 * gradients, the input half only finishes dx through ln1.  backward() runs
 * the same code once with both, so the results are bitwise the same.
 *
 * On a GPU the host calls gpt_block_cuda.cu's hooks (gpt_block_cuda_ops)
 * instead, with the same saved layout, keys and sites (gpt_block_state.h).
 *
 * mlp = moe (issue #27, docs/moe.md): the MLP is a mixture of experts
 * (moe_core.h, shared with the moe layer): y = x1 + drop(moe(h2)), each
 * expert d -> h gelu -> d with h = moe_hidden (default mlp_ratio d / k: the
 * same active FLOPs per token as the dense MLP).  Tensors 4..7 become
 *   4 gate_weight            [E, d]         N(0, 0.02^2)
 *   5 expert_fc_weight       [E, h, d]      N(0, 0.02^2), sharded
 *   6 biases                 [4d + E h + E d] zeros, no decay: qkv_bias,
 *                            proj_bias as above, then the experts' b1, b2
 *   7 expert_fc_proj_weight  [E, d, h]      N(0, 0.02^2), sharded
 * Saved: the dense layout without u and g, then the MoE's (moe_core.h);
 * scratch: the dense backward's without its [R, rd], then the MoE's.
 * CPU only: the CUDA twin refuses it (a follow-up).
 */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>
#include <pipehost/plugin.h>
#define TF_WANT_ATTENTION 1
#include "transformer_ops.h"
#include "gpt_block_state.h" /* gpt_state, GPT_LN_EPS, GPT_SITE_* */
#include "moe_core.h"        /* mlp = moe */

PH_LAYER_TWIN(gpt_block_cuda_ops); /* gpt_block_cuda.cu; NULL in a build without CUDA */

typedef struct {
	int64_t heads;
	double dropout;
	int64_t mlp_ratio;
	int mlp; /* 0 dense, 1 moe */
	int64_t moe_experts, moe_top_k, moe_hidden, moe_group_size;
	double moe_capacity_factor, moe_aux_coef;
	int moe_second;
} gpt_block_config;

static const ph_option gpt_block_options[] = {
	PH_OPT_INT_(gpt_block_config, heads, "heads", NULL, 1, INT_MAX,
		    "attention heads; must divide the model dimension"),
	PH_OPT_FLOAT_(gpt_block_config, dropout, "dropout", "0", 0, 0.99,
		      "dropout on the attention probabilities and both residual branches"),
	PH_OPT_INT_(gpt_block_config, mlp_ratio, "mlp_ratio", "4", 1, 64,
		    "hidden width of the MLP as a multiple of the model dimension"),
	PH_OPT_CHOICE_(gpt_block_config, mlp, "mlp", "dense", "dense|moe",
		       "the MLP: dense, or a mixture of experts (docs/moe.md)"),
	PH_OPT_INT_(gpt_block_config, moe_experts, "moe_experts", "8", 1, MOE_MAX_E,
		    "mlp = moe: experts E"),
	PH_OPT_INT_(gpt_block_config, moe_top_k, "moe_top_k", "2", 1, 2,
		    "mlp = moe: experts per token, 2 (GShard) or 1 (Switch)"),
	PH_OPT_INT_(gpt_block_config, moe_hidden, "moe_hidden", "0", 0, 1 << 20,
		    "mlp = moe: each expert's hidden width; 0 = mlp_ratio d / top_k"),
	PH_OPT_FLOAT_(gpt_block_config, moe_capacity_factor, "moe_capacity_factor", "2", 0, 1024,
		      "mlp = moe: slots per expert and group = ceil(f k S / E); 0 = dropless"),
	PH_OPT_INT_(gpt_block_config, moe_group_size, "moe_group_size", "0", 0, INT_MAX,
		    "mlp = moe: tokens per routing group, dividing T; 0 = T"),
	PH_OPT_CHOICE_(gpt_block_config, moe_second, "moe_second_expert", "random", "random|always",
		       "mlp = moe: the second expert kept with probability 2 c2, or always"),
	PH_OPT_FLOAT_(gpt_block_config, moe_aux_coef, "moe_aux_coef", "0.01", 0, 1000,
		      "mlp = moe: coefficient of the load-balancing loss"),
	PH_OPT_END
};

enum { P_LNW, P_LNB, P_QKV, P_PROJ, P_FC, P_FCPROJ, P_BIAS, P_COUNT };
enum { P_GATE = 4, P_EFC = 5, P_EFCPROJ = 7 }; /* mlp = moe */

/* mlp = moe: check the options against [T, d] into *mg. */
static int moe_geom_of(const gpt_block_config *cfg, int64_t T, int64_t d, int max_batch,
		       moe_geom *mg, ph_err *err)
{
	const int64_t E = cfg->moe_experts, k = cfg->moe_top_k;
	const int64_t S = cfg->moe_group_size ? cfg->moe_group_size : T;
	const int64_t h = cfg->moe_hidden ? cfg->moe_hidden : (cfg->mlp_ratio * d + k - 1) / k;
	if (E < 1 || E > MOE_MAX_E || k < 1 || k > 2 || k > E)
		return ph_fail(err, PH_EINVAL,
			       "gpt_block: moe_experts = %lld, moe_top_k = %lld; need 1 or 2 experts "
			       "per token and at least that many experts (at most %d)",
			       (long long)E, (long long)k, MOE_MAX_E);
	if (S < 1 || T % S != 0)
		return ph_fail(err, PH_EINVAL,
			       "gpt_block: moe_group_size = %lld does not divide the %lld tokens of a "
			       "sample; pick a divisor of T or 0 (= T)",
			       (long long)S, (long long)T);
	const int C = moe_capacity(cfg->moe_capacity_factor, (int)k, (int)S, (int)E);
	if (h > INT_MAX / 8 || (int64_t)max_batch * (T / S) * C * (h > d ? h : d) > INT_MAX)
		return ph_fail(err, PH_EINVAL,
			       "gpt_block: moe_hidden %lld, micro-batch %d exceed BLAS int sizes",
			       (long long)h, max_batch);
	*mg = (moe_geom){ .T = (int)T, .d = (int)d, .h = (int)h, .E = (int)E, .k = (int)k,
			  .S = (int)S, .C = C, .random2 = cfg->moe_second == 0,
			  .aux_coef = (float)cfg->moe_aux_coef };
	return PH_OK;
}

static int gpt_create(const void *config, const ph_shape *in, int max_batch, void **state,
		      ph_err *err)
{
	const gpt_block_config *cfg = config;
	tf_attn_geom g;
	if (tf_attn_geom_make("gpt_block", in, cfg->heads, cfg->dropout, &g, err))
		return PH_EINVAL;
	const int64_t T = in->d[0], d = in->d[1];
	if (cfg->mlp_ratio < 1 || cfg->mlp_ratio > 64)
		return ph_fail(err, PH_EINVAL, "gpt_block: mlp_ratio %lld outside [1, 64]",
			       (long long)cfg->mlp_ratio);
	if (max_batch < 1)
		return ph_fail(err, PH_EINVAL, "gpt_block: max_batch %d; need >= 1", max_batch);
	/* CBLAS takes int dimensions and leading dimensions (T and d first:
	 * T * T must not overflow). */
	if (T > INT_MAX || d > INT_MAX || cfg->mlp_ratio * d > INT_MAX / 8 || T * T > INT_MAX ||
	    (int64_t)max_batch * T > INT_MAX)
		return ph_fail(err, PH_EINVAL,
			       "gpt_block: T = %lld, d = %lld, micro-batch %d exceed BLAS int sizes",
			       (long long)T, (long long)d, max_batch);
	moe_geom mg = { 0 };
	if (cfg->mlp == 1 && moe_geom_of(cfg, T, d, max_batch, &mg, err))
		return PH_EINVAL;
	gpt_moe_state *ms = calloc(1, sizeof *ms);
	if (!ms)
		return ph_fail(err, PH_ENOMEM, "gpt_block: out of memory");
	gpt_state *s = &ms->b;
	s->moe = cfg->mlp == 1;
	ms->mg = mg;
	s->g = g;
	s->r = (int)cfg->mlp_ratio;
	s->max_batch = max_batch;
	*state = s;
	return PH_OK;
}

static void gpt_destroy(void *state)
{
	free(state);
}

static void add_param(ph_layer_meta *m, const char *name, int ndim, int64_t d0, int64_t d1,
		      ph_init_rule init, float arg, int no_decay)
{
	ph_param_desc *p = &m->params[m->nparams++];
	strcpy(p->name, name);
	p->shape = ndim == 2 ? (ph_shape){ 2, { d0, d1 } } : (ph_shape){ 1, { d0 } };
	p->init = init;
	p->init_arg = arg;
	p->no_decay = no_decay;
}

static const moe_geom *moe_of(const gpt_state *s)
{
	return &((const gpt_moe_state *)s)->mg;
}

/* Floats of saved state per sample. */
static size_t saved_floats(const gpt_state *s)
{
	const size_t T = s->g.T, d = s->g.d, H = s->g.H, r = s->moe ? 0 : s->r;
	return T * d * 7 + T * 4 + H * T * T + 2 * T * r * d +
	       (s->moe ? moe_saved_floats(moe_of(s)) : 0);
}

/* Floats of scratch per call: backward's (forward needs less: rows*d + T*T). */
static size_t scratch_floats(const gpt_state *s)
{
	const size_t R = (size_t)s->max_batch * s->g.T, d = s->g.d, r = s->moe ? 0 : s->r;
	const size_t T = s->g.T;
	return R * d * (7 + r) + 2 * T * T;
}

/* mlp = moe: the MoE's scratch, after the block's own. */
static size_t scratch_all_floats(const gpt_state *s)
{
	return scratch_floats(s) +
	       (s->moe ? (size_t)s->max_batch * moe_scratch_floats(moe_of(s)) : 0);
}

/* mlp = moe: the MLP's FLOPs, tensors 4..7 and the sharded experts; the
 * attention's part of the meta is set already. */
static int moe_meta(const gpt_state *s, ph_layer_meta *m)
{
	const moe_geom *mg = moe_of(s);
	const double T = s->g.T, d = s->g.d, r = s->r;
	/* take the dense MLP's matmuls and gelu out, the routed MLP in */
	const double dense = 4.0 * r * T * d * d + 10.0 * r * T * d + r * T * d;
	m->fwd_flops += moe_fwd_flops(mg) - dense;
	m->bwd_flops = 2.0 * m->fwd_flops;
	const int64_t D = s->g.d, E = mg->E, h = mg->h;
	add_param(m, "gate_weight", 2, E, D, PH_INIT_NORMAL, 0.02f, 0);
	ph_param_desc *p = &m->params[m->nparams++];
	*p = (ph_param_desc){ .name = "expert_fc_weight", .shape = { 3, { E, h, D } },
			      .init = PH_INIT_NORMAL, .init_arg = 0.02f };
	add_param(m, "biases", 1, 4 * D + E * (h + D), 0, PH_INIT_ZEROS, 0, 1);
	p = &m->params[m->nparams++];
	*p = (ph_param_desc){ .name = "expert_fc_proj_weight", .shape = { 3, { E, D, h } },
			      .init = PH_INIT_NORMAL, .init_arg = 0.02f };
	m->sharded_params = (1u << P_EFC) | (1u << P_EFCPROJ);
	return PH_OK;
}

static int gpt_meta(const void *state, ph_layer_meta *m, ph_err *err)
{
	(void)err;
	const gpt_state *s = state;
	const double T = s->g.T, d = s->g.d, H = s->g.H, r = s->r;
	*m = (ph_layer_meta){ 0 };
	m->out = (ph_shape){ 2, { s->g.T, s->g.d } };
	/* Matmuls: qkv 6 T d^2, proj 2 T d^2, fc and fc_proj 2 r T d^2 each.
	 * Attention: q k^T and P v, 2 T^2 d each, over the FULL T x T square
	 * (the kernels compute it all; no causal halving).  Softmax and its
	 * dropout ~5 per score; two layernorms ~8 per element; gelu ~10 per
	 * hidden element; biases, dropouts and residual adds ~6 per element. */
	const double mm = (8.0 + 4.0 * r) * T * d * d, core = 4.0 * T * T * d;
	const double elem = 5.0 * H * T * T + 16.0 * T * d + 10.0 * r * T * d +
			    (6.0 + r) * T * d;
	m->fwd_flops = mm + core + elem;
	m->bwd_flops = 2.0 * m->fwd_flops;
	m->saved_bytes = saved_floats(s) * sizeof(float);
	m->scratch_bytes = scratch_all_floats(s) * sizeof(float);
	/* The GPU batches the heads of a sample: backward's [R, d] and [R, rd]
	 * buffers as on the CPU, then dP [heads, T, T], and Pd [heads, T, T]
	 * when there is dropout (forward needs [R, d] and Pd). */
	m->device_scratch_bytes = gpt_device_scratch_floats((size_t)s->max_batch, (size_t)s->g.T, (size_t)s->g.d,
							    (size_t)s->r, (size_t)s->g.H, s->g.rate > 0.0f) *
				  sizeof(float);
	if (s->moe) /* the block without its dense MLP, then the MoE's (moe_cuda.cuh) */
		m->device_scratch_bytes = (gpt_moe_scratch_at(s) + (size_t)s->max_batch *
						  moe_device_scratch_floats(moe_of(s))) * sizeof(float);
	const int64_t D = s->g.d, rd = (int64_t)s->r * s->g.d;
	add_param(m, "ln_weight", 2, 2, D, PH_INIT_ONES, 0, 1);
	add_param(m, "ln_bias", 2, 2, D, PH_INIT_ZEROS, 0, 1);
	add_param(m, "qkv_weight", 2, 3 * D, D, PH_INIT_NORMAL, 0.02f, 0);
	add_param(m, "proj_weight", 2, D, D, PH_INIT_NORMAL, 0.02f, 0);
	if (s->moe)
		return moe_meta(s, m);
	add_param(m, "fc_weight", 2, rd, D, PH_INIT_NORMAL, 0.02f, 0);
	add_param(m, "fc_proj_weight", 2, D, rd, PH_INIT_NORMAL, 0.02f, 0);
	add_param(m, "biases", 1, (5 + (int64_t)s->r) * D, 0, PH_INIT_ZEROS, 0, 1);
	return PH_OK;
}

static int check_call(const gpt_state *s, const ph_ctx *ctx, ph_err *err)
{
	if (ctx->batch > 0 && (!ctx->saved || !ctx->scratch))
		return ph_fail(err, PH_EINTERNAL, "gpt_block: called without saved or scratch space");
	return PH_OK;
}

/* The saved regions of this micro-batch. */
typedef struct {
	float *h1, *mean1, *rstd1, *qkv, *P, *att, *x1, *h2, *mean2, *rstd2, *u, *g;
	float *moe; /* mlp = moe: the MoE's saved regions */
} gpt_saved;

static gpt_saved saved_views(const gpt_state *s, const ph_ctx *ctx)
{
	const size_t B = (size_t)ctx->batch, T = s->g.T, d = s->g.d, H = s->g.H;
	const size_t R = B * T, r = s->moe ? 0 : s->r;
	gpt_saved v;
	v.h1 = ctx->saved;
	v.mean1 = v.h1 + R * d;
	v.rstd1 = v.mean1 + R;
	v.qkv = v.rstd1 + R;
	v.P = v.qkv + R * 3 * d;
	v.att = v.P + B * H * T * T;
	v.x1 = v.att + R * d;
	v.h2 = v.x1 + R * d;
	v.mean2 = v.h2 + R * d;
	v.rstd2 = v.mean2 + R;
	v.u = v.rstd2 + R;
	v.g = v.u + R * r * d;
	v.moe = v.g + R * r * d;
	return v;
}

static uint64_t site_key(const ph_ctx *ctx, uint64_t site)
{
	return ph_mix64(ph_rng_key(ctx->seed, ctx->step, ctx->microbatch, ctx->layer) ^ site);
}

/*
 * Residual-branch dropout over n elements of the micro-batch:
 *   out[i] = (base ? base[i] : 0) + M(i) * in[i],  M(i) = keep ? scale : 0
 * (drop == 0: M = 1).  out may alias in.
 */
static void resid_drop(const tf_attn_geom *g, int drop, uint64_t key, int64_t n,
		       const float *base, const float *in, float *out)
{
	if (!drop) {
		for (int64_t i = 0; i < n; i++)
			out[i] = base ? base[i] + in[i] : in[i];
		return;
	}
	ph_philox4 rr = { { 0 } };
	for (int64_t i = 0; i < n; i++) {
		if ((i & 3) == 0)
			rr = ph_philox4x32(key, 0, (uint64_t)i >> 2);
		const float m = ph_u01(rr.v[i & 3]) >= g->rate ? g->scale : 0.0f;
		out[i] = base ? base[i] + m * in[i] : m * in[i];
	}
}

/* mlp = moe: tensors 4..7 as the MoE takes them. */
static moe_params moe_params_of(float *const *params, int d)
{
	return (moe_params){ params[P_GATE], params[P_EFC], params[P_EFCPROJ],
			     params[P_BIAS] + 4 * (size_t)d };
}

static int gpt_forward(void *state, const ph_ctx *ctx, float *const *params, const float *x,
		       float *y, ph_err *err)
{
	const gpt_state *s = state;
	int rc = check_call(s, ctx, err);
	if (rc || ctx->batch == 0)
		return rc;
	const int T = s->g.T, d = s->g.d, rd = s->r * d, R = ctx->batch * T;
	const int64_t n = (int64_t)R * d;
	gpt_saved v = saved_views(s, ctx);
	const int drop = ctx->training && s->g.rate > 0.0f;
	const float *lnw = params[P_LNW], *lnb = params[P_LNB], *bias = params[P_BIAS];
	float *tmp = ctx->scratch, *pd_tmp = tmp + n; /* [R, d], then T*T */

	/* attention branch */
	tf_layernorm_forward(x, v.h1, lnw, lnb, R, d, GPT_LN_EPS, v.mean1, v.rstd1);
	tf_bias_preload(v.qkv, bias, R, 3 * d);
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, R, 3 * d, d, 1.0f, v.h1, d,
		    params[P_QKV], d, 1.0f, v.qkv, 3 * d);
	tf_attn_forward(&s->g, ctx->batch, drop, site_key(ctx, GPT_SITE_ATTN), v.qkv, v.P, v.att,
			pd_tmp);
	tf_bias_preload(tmp, bias + 3 * d, R, d);
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, R, d, d, 1.0f, v.att, d,
		    params[P_PROJ], d, 1.0f, tmp, d);
	resid_drop(&s->g, drop, site_key(ctx, GPT_SITE_RESID1), n, x, tmp, v.x1);

	/* MLP branch */
	tf_layernorm_forward(v.x1, v.h2, lnw + d, lnb + d, R, d, GPT_LN_EPS, v.mean2, v.rstd2);
	if (s->moe) {
		const moe_params mp = moe_params_of(params, d);
		rc = moe_mlp_forward(moe_of(s), ctx, &mp, v.h2, tmp, 0, v.moe,
				     (float *)ctx->scratch + scratch_floats(s), err);
		if (rc == PH_OK)
			resid_drop(&s->g, drop, site_key(ctx, GPT_SITE_RESID2), n, v.x1, tmp, y);
		return rc;
	}
	tf_bias_preload(v.u, bias + 4 * d, R, rd);
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, R, rd, d, 1.0f, v.h2, d,
		    params[P_FC], d, 1.0f, v.u, rd);
	tf_gelu_forward(v.u, v.g, (int64_t)R * rd);
	tf_bias_preload(tmp, bias + 4 * d + rd, R, d);
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, R, d, rd, 1.0f, v.g, rd,
		    params[P_FCPROJ], rd, 1.0f, tmp, d);
	resid_drop(&s->g, drop, site_key(ctx, GPT_SITE_RESID2), n, v.x1, tmp, y);
	return PH_OK;
}

/* The whole backward; grads == NULL skips the weight half, dx == NULL the end of
 * the input half.  The chain in between runs the same either way. */
static int gpt_bwd(const gpt_state *s, const ph_ctx *ctx, float *const *params,
		   float *const *grads, const float *x, const float *dy, float *dx, ph_err *err)
{
	int rc = check_call(s, ctx, err);
	if (rc || ctx->batch == 0 || (!grads && !dx))
		return rc;
	const int T = s->g.T, d = s->g.d, rd = (s->moe ? 0 : s->r) * d, R = ctx->batch * T;
	const int64_t n = (int64_t)R * d;
	gpt_saved v = saved_views(s, ctx);
	const int drop = ctx->training && s->g.rate > 0.0f;
	const float *lnw = params[P_LNW];
	float *dx1 = ctx->scratch;       /* [R, d] */
	float *dbr = dx1 + n;            /* [R, d]: d(branch) = mask * d(residual) */
	float *dh = dbr + n;             /* [R, d]: dh2, then datt */
	float *dh1 = dh + n;             /* [R, d] */
	float *dgu = dh1 + n;            /* [R, rd]: dg, then du in place */
	float *dqkv = dgu + (size_t)R * rd; /* [R, 3d] */
	float *tmp = dqkv + (size_t)R * 3 * d; /* 2 T*T */

	/* ---- MLP branch: y = x1 + drop(g Wp^T + bp) ---- */
	resid_drop(&s->g, drop, site_key(ctx, GPT_SITE_RESID2), n, NULL, dy, dbr);
	if (s->moe) { /* dh = d moe(h2) / d h2 */
		const moe_params mp = moe_params_of(params, d);
		const moe_grads mg = grads ? (moe_grads){ grads[P_GATE], grads[P_EFC],
							 grads[P_EFCPROJ], grads[P_BIAS] + 4 * d }
					   : (moe_grads){ 0 };
		rc = moe_mlp_backward(moe_of(s), ctx, &mp, grads ? &mg : NULL, v.h2, dbr, dh, v.moe,
				      (float *)ctx->scratch + scratch_floats(s), err);
		if (rc)
			return rc;
	} else if (grads) {
		cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, d, rd, R, 1.0f, dbr, d, v.g,
			    rd, 1.0f, grads[P_FCPROJ], rd);
		tf_colsum_add(grads[P_BIAS] + 4 * d + rd, dbr, R, d);
	}
	if (!s->moe) {
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, R, rd, d, 1.0f, dbr, d,
			    params[P_FCPROJ], rd, 0.0f, dgu, rd);
		tf_gelu_backward(v.u, dgu, dgu, (int64_t)R * rd);
		if (grads) {
			cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, rd, d, R, 1.0f, dgu, rd, v.h2,
				    d, 1.0f, grads[P_FC], d);
			tf_colsum_add(grads[P_BIAS] + 4 * d, dgu, R, rd);
		}
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, R, d, rd, 1.0f, dgu, rd,
			    params[P_FC], d, 0.0f, dh, d);
	} /* dense MLP */
	tf_layernorm_backward(v.x1, dh, lnw + d, v.mean2, v.rstd2, R, d, dx1,
			      grads ? grads[P_LNW] + d : NULL, grads ? grads[P_LNB] + d : NULL);
	for (int64_t i = 0; i < n; i++)
		dx1[i] += dy[i];

	/* ---- attention branch: x1 = x + drop(att Wo^T + bo) ---- */
	resid_drop(&s->g, drop, site_key(ctx, GPT_SITE_RESID1), n, NULL, dx1, dbr);
	if (grads) {
		cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, d, d, R, 1.0f, dbr, d, v.att,
			    d, 1.0f, grads[P_PROJ], d);
		tf_colsum_add(grads[P_BIAS] + 3 * d, dbr, R, d);
	}
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, R, d, d, 1.0f, dbr, d,
		    params[P_PROJ], d, 0.0f, dh, d); /* datt */
	tf_attn_backward(&s->g, ctx->batch, drop, site_key(ctx, GPT_SITE_ATTN), v.qkv, v.P, dh,
			 dqkv, tmp);
	if (grads) {
		cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, 3 * d, d, R, 1.0f, dqkv, 3 * d,
			    v.h1, d, 1.0f, grads[P_QKV], d);
		tf_colsum_add(grads[P_BIAS], dqkv, R, 3 * d);
	}
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, R, d, 3 * d, 1.0f, dqkv, 3 * d,
		    params[P_QKV], d, 0.0f, dh1, d);
	tf_layernorm_backward(x, dh1, lnw, v.mean1, v.rstd1, R, d, dx, grads ? grads[P_LNW] : NULL,
			      grads ? grads[P_LNB] : NULL);
	if (dx)
		for (int64_t i = 0; i < n; i++)
			dx[i] += dx1[i];
	return PH_OK;
}

static int gpt_backward(void *state, const ph_ctx *ctx, float *const *params,
			float *const *grads, const float *x, const float *y, const float *dy,
			float *dx, ph_err *err)
{
	(void)y;
	return gpt_bwd(state, ctx, params, grads, x, dy, dx, err);
}

static int gpt_backward_input(void *state, const ph_ctx *ctx, float *const *params,
			      const float *x, const float *y, const float *dy, float *dx,
			      ph_err *err)
{
	(void)y;
	return gpt_bwd(state, ctx, params, NULL, x, dy, dx, err);
}

static int gpt_backward_weight(void *state, const ph_ctx *ctx, float *const *params,
			       float *const *grads, const float *x, const float *y,
			       const float *dy, ph_err *err)
{
	(void)y;
	return gpt_bwd(state, ctx, params, grads, x, dy, NULL, err);
}

static const ph_layer_ops gpt_block_ops = {
	.head = PH_HEAD(ph_layer_ops, "gpt_block",
			"GPT-2 pre-LN transformer block over [T, d]: causal attention and a gelu MLP",
			gpt_block_options, gpt_block_config),
	.devices = PH_DEV_CPU,
	.flags = 0,
	.create = gpt_create,
	.destroy = gpt_destroy,
	.meta = gpt_meta,
	.forward = gpt_forward,
	.backward = gpt_backward,
	.backward_input = gpt_backward_input,
	.backward_weight = gpt_backward_weight,
	.cuda = &gpt_block_cuda_ops,
};

/* A named array: a braced list inside PH_PLUGIN() would split at its comma. */
static const ph_layer_ops *const gpt_block_layers[] = { &gpt_block_ops, NULL };
PH_PLUGIN(gpt_block_layers, NULL, NULL)
