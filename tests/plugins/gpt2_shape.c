/* SPDX-License-Identifier: MIT */
/*
 * gpt2_shape: a shape and cost stand-in for GPT-2 small, for partitioner
 * tests and benchmarks until the real transformer layers exist.
 *
 * Only the meta is real: output shapes, parameter tensors, FLOPs and the
 * bytes a layer keeps for its backward.  forward and backward write zeros
 * (outputs, input gradients) and leave parameter gradients alone, so a
 * "training" run moves nothing; use this plugin with --plan, --simulate and
 * cost = profile (which then measures memory traffic only), never to learn.
 *
 * Three layer types (T tokens per sample, d model width, V vocabulary):
 *
 *   gpt2_embedding  [T] token ids (floats)  ->  [T, d]
 *       token table [V, d] + position table [positions, d]
 *       fwd T*d FLOPs (add the position), bwd 2*T*d (scatter into both tables)
 *
 *   gpt2_block      [T, d]  ->  [T, d]   one pre-norm transformer block
 *       ln1 [2, d] (gain; bias), qkv.weight [3d, d], attn.proj.weight [d, d],
 *       ln2 [2, d], fc.weight [4d, d], mlp.proj.weight [d, 4d],
 *       biases [3d + d + 4d + d] (qkv, attn.proj, fc, mlp.proj packed: the ABI
 *       allows PH_MAX_PARAMS = 8 tensors per layer).  12 d^2 + 13 d in all:
 *       7,087,872 for d = 768, as in GPT-2 small.
 *       fwd = 2*T*(12 d^2)  (the four matmuls)  +  2*2*T*T*d  (Q K^T and
 *       P V, full T x T: the causal mask is not discounted, as Megatron counts),
 *       bwd = 2 * fwd.  Element-wise work (norms, GELU, softmax) is not counted.
 *       Kept for backward, per sample: 14*T*d floats (ln1 out, q k v, attention
 *       out, ln2 out, fc out, GELU out) + heads*T*T (softmax probabilities).
 *
 *   gpt2_head       [T, d]  ->  [2]   linear d -> V without bias, plus the
 *       cross-entropy: the model's loss layer (PH_LAYER_LOSS), T targets per
 *       sample.  weight [V, d]; fwd 2*T*d*V FLOPs, bwd 2 * fwd; keeps the
 *       T x V softmax probabilities per sample for its backward.
 *
 * Options: gpt2_embedding: vocab (50257), d_model (768), positions (1024);
 * gpt2_block: heads (12); gpt2_head: vocab (50257).  T and d come from the
 * input shape everywhere else.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <pipehost/plugin.h>

typedef struct {
	int64_t vocab, d_model, positions;
} emb_config;

typedef struct {
	int64_t heads;
} block_config;

typedef struct {
	int64_t vocab;
} head_config;

static const ph_option emb_options[] = {
	PH_OPT_INT_(emb_config, vocab, "vocab", "50257", 1, 1 << 24, "vocabulary size V"),
	PH_OPT_INT_(emb_config, d_model, "d_model", "768", 1, 1 << 16, "model width d"),
	PH_OPT_INT_(emb_config, positions, "positions", "1024", 1, 1 << 20, "rows of the position table (T <= positions)"),
	PH_OPT_END
};

static const ph_option block_options[] = {
	PH_OPT_INT_(block_config, heads, "heads", "12", 1, 1024, "attention heads (must divide d)"),
	PH_OPT_END
};

static const ph_option head_options[] = {
	PH_OPT_INT_(head_config, vocab, "vocab", "50257", 1, 1 << 24, "vocabulary size V"),
	PH_OPT_END
};

typedef enum { EMB, BLOCK, HEAD } kind_t;

typedef struct {
	kind_t kind;
	int64_t T, d, V, positions, heads;
	int max_batch;
	ph_shape in, out;
} g_state;

static int g_create(kind_t kind, const void *config, const ph_shape *in, int max_batch, void **state, ph_err *err)
{
	static const char *const names[] = { "gpt2_embedding", "gpt2_block", "gpt2_head" };
	g_state s = { .kind = kind, .max_batch = max_batch, .in = *in };
	if (kind == EMB) {
		const emb_config *c = config;
		if (in->ndim != 1)
			return ph_fail(err, PH_EINVAL, "gpt2_embedding: input must be [T] token ids, got %d dimensions",
				       in->ndim);
		s.T = in->d[0];
		s.d = c->d_model;
		s.V = c->vocab;
		s.positions = c->positions;
		if (s.T > s.positions)
			return ph_fail(err, PH_EINVAL, "gpt2_embedding: %lld tokens per sample, more than positions = %lld",
				       (long long)s.T, (long long)s.positions);
		s.out = (ph_shape){ 2, { s.T, s.d } };
	} else {
		if (in->ndim != 2)
			return ph_fail(err, PH_EINVAL, "%s: input must be [T, d], got %d dimensions", names[kind], in->ndim);
		s.T = in->d[0];
		s.d = in->d[1];
		if (kind == BLOCK) {
			s.heads = ((const block_config *)config)->heads;
			if (s.d % s.heads)
				return ph_fail(err, PH_EINVAL, "gpt2_block: heads = %lld does not divide d = %lld",
					       (long long)s.heads, (long long)s.d);
			s.out = *in;
		} else {
			s.V = ((const head_config *)config)->vocab;
			s.out = (ph_shape){ 1, { 2 } };
		}
	}
	g_state *p = malloc(sizeof *p);
	if (!p)
		return ph_fail(err, PH_ENOMEM, "%s: out of memory", names[kind]);
	*p = s;
	*state = p;
	return PH_OK;
}

static int emb_create(const void *c, const ph_shape *in, int mb, void **st, ph_err *err)
{
	return g_create(EMB, c, in, mb, st, err);
}
static int block_create(const void *c, const ph_shape *in, int mb, void **st, ph_err *err)
{
	return g_create(BLOCK, c, in, mb, st, err);
}
static int head_create(const void *c, const ph_shape *in, int mb, void **st, ph_err *err)
{
	return g_create(HEAD, c, in, mb, st, err);
}

static void g_destroy(void *state)
{
	free(state);
}

static void param(ph_layer_meta *m, const char *name, int ndim, int64_t a, int64_t b, ph_init_rule init,
		  float arg, int no_decay)
{
	ph_param_desc *p = &m->params[m->nparams++];
	snprintf(p->name, sizeof p->name, "%s", name);
	p->shape = (ph_shape){ ndim, { a, b } };
	p->init = init;
	p->init_arg = arg;
	p->no_decay = no_decay;
}

static int g_meta(const void *state, ph_layer_meta *m, ph_err *err)
{
	const g_state *s = state;
	double T = (double)s->T, d = (double)s->d;
	memset(m, 0, sizeof *m);
	m->out = s->out;
	switch (s->kind) {
	case EMB:
		param(m, "wte", 2, s->V, s->d, PH_INIT_NORMAL, 0.02f, 0);
		param(m, "wpe", 2, s->positions, s->d, PH_INIT_NORMAL, 0.01f, 0);
		m->fwd_flops = T * d;
		m->bwd_flops = 2 * T * d;
		break;
	case BLOCK:
		param(m, "ln1", 2, 2, s->d, PH_INIT_ONES, 0, 1);
		param(m, "qkv.weight", 2, 3 * s->d, s->d, PH_INIT_NORMAL, 0.02f, 0);
		param(m, "attn.proj.weight", 2, s->d, s->d, PH_INIT_NORMAL, 0.02f, 0);
		param(m, "ln2", 2, 2, s->d, PH_INIT_ONES, 0, 1);
		param(m, "fc.weight", 2, 4 * s->d, s->d, PH_INIT_NORMAL, 0.02f, 0);
		param(m, "mlp.proj.weight", 2, s->d, 4 * s->d, PH_INIT_NORMAL, 0.02f, 0);
		param(m, "biases", 1, 9 * s->d, 0, PH_INIT_ZEROS, 0, 1);
		m->fwd_flops = 2 * T * (12 * d * d) + 2 * 2 * T * T * d;
		m->bwd_flops = 2 * m->fwd_flops;
		m->saved_bytes = sizeof(float) * (size_t)(14 * s->T * s->d + s->heads * s->T * s->T);
		break;
	case HEAD:
		param(m, "weight", 2, s->V, s->d, PH_INIT_NORMAL, 0.02f, 0);
		m->fwd_flops = 2 * T * d * (double)s->V;
		m->bwd_flops = 2 * m->fwd_flops;
		m->saved_bytes = sizeof(float) * (size_t)(s->T * s->V);
		m->targets_per_sample = (int)s->T;
		break;
	}
	return PH_OK;
}

static int g_forward(void *state, const ph_ctx *ctx, float *const *params, const float *x, float *y, ph_err *err)
{
	const g_state *s = state;
	if (ctx->batch < 0 || ctx->batch > s->max_batch)
		return ph_fail(err, PH_EINTERNAL, "gpt2 stand-in: batch %d outside [0, %d]", ctx->batch, s->max_batch);
	memset(y, 0, sizeof(float) * (size_t)ctx->batch * (size_t)ph_shape_numel(&s->out));
	return PH_OK;
}

static int g_backward(void *state, const ph_ctx *ctx, float *const *params, float *const *grads, const float *x,
		      const float *y, const float *dy, float *dx, ph_err *err)
{
	const g_state *s = state;
	if (ctx->batch < 0 || ctx->batch > s->max_batch)
		return ph_fail(err, PH_EINTERNAL, "gpt2 stand-in: batch %d outside [0, %d]", ctx->batch, s->max_batch);
	if (dx)
		memset(dx, 0, sizeof(float) * (size_t)ctx->batch * (size_t)ph_shape_numel(&s->in));
	return PH_OK;
}

static const ph_layer_ops emb_ops = {
	.head = PH_HEAD(ph_layer_ops, "gpt2_embedding",
			"GPT-2 token + position embedding, shape/cost stand-in (tests only: computes zeros)",
			emb_options, emb_config),
	.devices = PH_DEV_CPU,
	.create = emb_create, .destroy = g_destroy, .meta = g_meta, .forward = g_forward, .backward = g_backward,
};

static const ph_layer_ops block_ops = {
	.head = PH_HEAD(ph_layer_ops, "gpt2_block",
			"GPT-2 transformer block, shape/cost stand-in (tests only: computes zeros)",
			block_options, block_config),
	.devices = PH_DEV_CPU,
	.create = block_create, .destroy = g_destroy, .meta = g_meta, .forward = g_forward, .backward = g_backward,
};

static const ph_layer_ops head_ops = {
	.head = PH_HEAD(ph_layer_ops, "gpt2_head",
			"GPT-2 LM head + cross-entropy loss, shape/cost stand-in (tests only: computes zeros)",
			head_options, head_config),
	.devices = PH_DEV_CPU,
	.flags = PH_LAYER_LOSS,
	.create = head_create, .destroy = g_destroy, .meta = g_meta, .forward = g_forward, .backward = g_backward,
};

static const ph_layer_ops *const layers[] = { &emb_ops, &block_ops, &head_ops, NULL };
PH_PLUGIN(layers, NULL, NULL)
