/* SPDX-License-Identifier: MIT */
/*
 * embedding: token plus learned position embedding (GPT-2's wte + wpe).
 *
 *   x [B, T] token ids held as floats  ->  y [B, T, dim]
 *   y[b][t] = tokens[id(b, t)] + positions[t]
 *   tokens    [vocab, dim]  N(0, 0.02^2)
 *   positions [T, dim]      N(0, 0.01^2)
 *
 * An id must be an exact integer in [0, vocab); anything else (a fraction,
 * a negative, NaN) is refused with PH_EINVAL naming the sample, position and
 * value.  The ids are not differentiable: dx, when asked for, is 0.
 * Backward adds dy rows into token rows one by one in (b, t) order, so
 * repeated tokens accumulate in the same order every run.
 */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <pipehost/plugin.h>
#include "embedding_state.h"

/* embedding_cuda.cu; NULL in a build without CUDA.  Its ids stay on the
 * device, unchecked (bad ones give NaN). */
PH_LAYER_TWIN(embedding_cuda_ops);

typedef struct {
	int64_t vocab, dim;
} embedding_config;

static const ph_option embedding_options[] = {
	PH_OPT_INT_(embedding_config, vocab, "vocab", NULL, 1, INT_MAX,
		    "number of token ids (ids run 0 .. vocab-1); at most 2^24 (ids travel as floats)"),
	PH_OPT_INT_(embedding_config, dim, "dim", NULL, 1, INT_MAX,
		    "embedding width (the model dimension)"),
	PH_OPT_END
};


static int embedding_create(const void *config, const ph_shape *in, int max_batch,
			    void **state, ph_err *err)
{
	const embedding_config *cfg = config;
	if (in->ndim != 1)
		return ph_fail(err, PH_EINVAL,
			       "embedding: input has %d dimensions; need 1 ([T] token ids) per sample",
			       in->ndim);
	if (in->d[0] < 1 || in->d[0] > INT_MAX)
		return ph_fail(err, PH_EINVAL, "embedding: sequence length %lld; need 1 to %d",
			       (long long)in->d[0], INT_MAX);
	if (cfg->vocab < 1 || cfg->vocab > INT_MAX)
		return ph_fail(err, PH_EINVAL, "embedding: vocab = %lld; need 1 to %d",
			       (long long)cfg->vocab, INT_MAX);
	if (cfg->dim < 1 || cfg->dim > INT_MAX)
		return ph_fail(err, PH_EINVAL, "embedding: dim = %lld; need 1 to %d",
			       (long long)cfg->dim, INT_MAX);
	if (cfg->vocab > (1 << 24))
		return ph_fail(err, PH_EINVAL,
			       "embedding: vocab = %lld; ids travel as floats, exact only up to 2^24",
			       (long long)cfg->vocab);
	embedding_state *s = calloc(1, sizeof *s);
	if (!s)
		return ph_fail(err, PH_ENOMEM, "embedding: out of memory");
	s->T = (int)in->d[0];
	s->vocab = (int)cfg->vocab;
	s->dim = (int)cfg->dim;
	*state = s;
	return PH_OK;
}

static void embedding_destroy(void *state)
{
	free(state);
}

static int embedding_meta(const void *state, ph_layer_meta *m, ph_err *err)
{
	const embedding_state *s = state;
	*m = (ph_layer_meta){ 0 };
	m->out = (ph_shape){ 2, { s->T, s->dim } };
	m->fwd_flops = (double)s->T * s->dim;         /* one add per element */
	m->bwd_flops = 2.0 * (double)s->T * s->dim;   /* two accumulations */
	ph_param_desc *tk = &m->params[m->nparams++];
	strcpy(tk->name, "tokens");
	tk->shape = (ph_shape){ 2, { s->vocab, s->dim } };
	tk->init = PH_INIT_NORMAL;
	tk->init_arg = 0.02f;
	ph_param_desc *ps = &m->params[m->nparams++];
	strcpy(ps->name, "positions");
	ps->shape = (ph_shape){ 2, { s->T, s->dim } };
	ps->init = PH_INIT_NORMAL;
	ps->init_arg = 0.01f;
	/* CUDA: the first row of each token, for a deterministic backward */
	m->device_scratch_bytes = (size_t)s->vocab * sizeof(int32_t);
	return PH_OK;
}

/* Check every id before touching any output. */
static int check_call(const embedding_state *s, const ph_ctx *ctx, const float *x, ph_err *err)
{
	for (int b = 0; b < ctx->batch; b++)
		for (int t = 0; t < s->T; t++) {
			float v = x[(size_t)b * s->T + t];
			if (!(v >= 0.0f && v < (float)s->vocab && v == floorf(v)))
				return ph_fail(err, PH_EINVAL,
					       "embedding: sample %d position %d holds %g; need an "
					       "integer token id in [0, %d)", b, t, (double)v, s->vocab);
		}
	return PH_OK;
}

static int embedding_forward(void *state, const ph_ctx *ctx, float *const *params,
			     const float *x, float *y, ph_err *err)
{
	const embedding_state *s = state;
	int rc = check_call(s, ctx, x, err);
	if (rc)
		return rc;
	const int T = s->T, D = s->dim;
	const float *tok = params[0], *pos = params[1];
	for (int b = 0; b < ctx->batch; b++)
		for (int t = 0; t < T; t++) {
			const float *e = tok + (size_t)x[(size_t)b * T + t] * D, *p = pos + (size_t)t * D;
			float *yr = y + ((size_t)b * T + t) * D;
			for (int c = 0; c < D; c++)
				yr[c] = e[c] + p[c];
		}
	return PH_OK;
}

/* dx = 0: the ids are not differentiable.   (the I half) */
static int embedding_backward_input(void *state, const ph_ctx *ctx, float *const *params,
				    const float *x, const float *y, const float *dy, float *dx,
				    ph_err *err)
{
	const embedding_state *s = state;
	int rc = check_call(s, ctx, x, err);
	if (rc || !dx)
		return rc;
	memset(dx, 0, (size_t)ctx->batch * s->T * sizeof *dx);
	return PH_OK;
}

/* dtokens[id] += dy row, dpositions[t] += dy row, in (b, t) order.   (the W half) */
static int embedding_backward_weight(void *state, const ph_ctx *ctx, float *const *params,
				     float *const *grads, const float *x, const float *y,
				     const float *dy, ph_err *err)
{
	const embedding_state *s = state;
	int rc = check_call(s, ctx, x, err);
	if (rc)
		return rc;
	const int T = s->T, D = s->dim;
	float *gtok = grads[0], *gpos = grads[1];
	for (int b = 0; b < ctx->batch; b++)
		for (int t = 0; t < T; t++) {
			const float *d = dy + ((size_t)b * T + t) * D;
			float *ge = gtok + (size_t)x[(size_t)b * T + t] * D, *gp = gpos + (size_t)t * D;
			for (int c = 0; c < D; c++) {
				ge[c] += d[c];
				gp[c] += d[c];
			}
		}
	return PH_OK;
}

static int embedding_backward(void *state, const ph_ctx *ctx, float *const *params,
			      float *const *grads, const float *x, const float *y,
			      const float *dy, float *dx, ph_err *err)
{
	int rc = embedding_backward_weight(state, ctx, params, grads, x, y, dy, err);
	return rc ? rc : embedding_backward_input(state, ctx, params, x, y, dy, dx, err);
}

static const ph_layer_ops embedding_ops = {
	.head = PH_HEAD(ph_layer_ops, "embedding",
			"token + learned position embedding: [T] float token ids -> [T, dim]",
			embedding_options, embedding_config),
	.devices = PH_DEV_CPU,
	.flags = 0,
	.create = embedding_create,
	.destroy = embedding_destroy,
	.meta = embedding_meta,
	.forward = embedding_forward,
	.backward = embedding_backward,
	.backward_input = embedding_backward_input,
	.backward_weight = embedding_backward_weight,
	.cuda = &embedding_cuda_ops,
};

/* A named array: a braced list inside PH_PLUGIN() would split at its comma. */
static const ph_layer_ops *const embedding_layers[] = { &embedding_ops, NULL };
PH_PLUGIN(embedding_layers, NULL, NULL)
