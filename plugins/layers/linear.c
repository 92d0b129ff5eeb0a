/* SPDX-License-Identifier: MIT */
/*
 * linear: y = x W^T + b over the LAST dimension of the input.
 *
 *   x [B, ..., in]  ->  y [B, ..., units]
 *   weight [units, in]   (PyTorch layout)
 *   bias   [units]
 *
 * Every leading dimension (batch included) is folded into "rows", so the same
 * layer serves an MLP ([in]) and a transformer ([T, C]): rows = B * prod(...).
 * Both products go to one cblas_sgemm each; the bias is a plain loop.
 * On a GPU the host calls linear_cuda.cu's hooks (linear_cuda_ops) instead.
 */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>
#include <pipehost/plugin.h>

#include "linear_state.h"

/* linear_cuda.cu, the same products through the host's GEMM; NULL in a
 * build without CUDA */
PH_LAYER_TWIN(linear_cuda_ops);

typedef struct {
	int64_t units;
	int bias;
} linear_config;

static const ph_option linear_options[] = {
	PH_OPT_INT_(linear_config, units, "units", NULL, 1, INT_MAX,
		    "output features (size of the new last dimension)"),
	PH_OPT_BOOL_(linear_config, bias, "bias", "yes", "add a learned bias"),
	PH_OPT_END
};


static int linear_create(const void *config, const ph_shape *in, int max_batch,
			 void **state, ph_err *err)
{
	const linear_config *cfg = config;
	if (in->ndim < 1 || in->ndim > PH_MAX_DIMS)
		return ph_fail(err, PH_EINVAL, "linear: input has %d dimensions; need 1 to %d",
			       in->ndim, PH_MAX_DIMS);
	for (int i = 0; i < in->ndim; i++)
		if (in->d[i] < 1)
			return ph_fail(err, PH_EINVAL, "linear: input dimension %d is %lld; need >= 1",
				       i, (long long)in->d[i]);
	if (cfg->units < 1 || cfg->units > INT_MAX)
		return ph_fail(err, PH_EINVAL, "linear: units = %lld; need 1 to %d",
			       (long long)cfg->units, INT_MAX);
	int64_t in_f = in->d[in->ndim - 1];
	int64_t lead = ph_shape_numel(in) / in_f;
	/* CBLAS takes int dimensions: every gemm size must fit. */
	if (in_f > INT_MAX || (int64_t)max_batch * lead > INT_MAX)
		return ph_fail(err, PH_EINVAL,
			       "linear: %lld rows of %lld features exceed BLAS int sizes; "
			       "lower the micro-batch size", (long long)((int64_t)max_batch * lead),
			       (long long)in_f);

	linear_state *s = calloc(1, sizeof *s);
	if (!s)
		return ph_fail(err, PH_ENOMEM, "linear: out of memory");
	s->in = *in;
	s->out = *in;
	s->out.d[in->ndim - 1] = cfg->units;
	s->lead = lead;
	s->in_f = (int)in_f;
	s->units = (int)cfg->units;
	s->bias = cfg->bias;
	*state = s;
	return PH_OK;
}

static void linear_destroy(void *state)
{
	free(state);
}

static int linear_meta(const void *state, ph_layer_meta *m, ph_err *err)
{
	const linear_state *s = state;
	memset(m, 0, sizeof *m);
	m->out = s->out;
	double mm = 2.0 * (double)s->lead * s->in_f * s->units;
	m->fwd_flops = mm + (s->bias ? (double)s->lead * s->units : 0);
	m->bwd_flops = 2 * mm + (s->bias ? (double)s->lead * s->units : 0);
	/* PyTorch's default: U(-1/sqrt(in), 1/sqrt(in)) for weight and bias. */
	float bound = 1.0f / sqrtf((float)s->in_f);
	ph_param_desc *w = &m->params[m->nparams++];
	strcpy(w->name, "weight");
	w->shape = (ph_shape){ 2, { s->units, s->in_f } };
	w->init = PH_INIT_UNIFORM;
	w->init_arg = bound;
	if (s->bias) {
		ph_param_desc *b = &m->params[m->nparams++];
		strcpy(b->name, "bias");
		b->shape = (ph_shape){ 1, { s->units } };
		b->init = PH_INIT_UNIFORM;
		b->init_arg = bound;
		b->no_decay = 1;
	}
	return PH_OK;
}

/* y [rows, units] = x [rows, in] . W^T [in, units] (+ b) */
static int linear_forward(void *state, const ph_ctx *ctx, float *const *params,
			  const float *x, float *y, ph_err *err)
{
	const linear_state *s = state;
	if (ctx->batch == 0)
		return PH_OK;
	const int rows = (int)(ctx->batch * s->lead), in = s->in_f, out = s->units;
	const float *w = params[0];
	float beta = 0.0f;
	if (s->bias) {
		/* Preload the bias and let gemm accumulate onto it. */
		const float *b = params[1];
		for (int r = 0; r < rows; r++)
			memcpy(y + (size_t)r * out, b, (size_t)out * sizeof *y);
		beta = 1.0f;
	}
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, out, in,
		    1.0f, x, in, w, in, beta, y, out);
	return PH_OK;
}

/* dx [rows, in] = dy [rows, units] . W [units, in]          (the I half) */
static int linear_backward_input(void *state, const ph_ctx *ctx, float *const *params,
				 const float *x, const float *y, const float *dy, float *dx,
				 ph_err *err)
{
	const linear_state *s = state;
	if (ctx->batch == 0 || !dx)
		return PH_OK;
	const int rows = (int)(ctx->batch * s->lead), in = s->in_f, out = s->units;
	/* beta = 0: BLAS never reads C, so whatever dx held is irrelevant. */
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, in, out,
		    1.0f, dy, out, params[0], in, 0.0f, dx, in);
	return PH_OK;
}

/*
 * dW [units, in] += dy^T [units, rows] . x [rows, in]      (the W half)
 * db [units]     += sum over rows of dy
 */
static int linear_backward_weight(void *state, const ph_ctx *ctx, float *const *params,
				  float *const *grads, const float *x, const float *y,
				  const float *dy, ph_err *err)
{
	const linear_state *s = state;
	if (ctx->batch == 0)
		return PH_OK;
	const int rows = (int)(ctx->batch * s->lead), in = s->in_f, out = s->units;
	cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, in, rows,
		    1.0f, dy, out, x, in, 1.0f, grads[0], in);
	if (s->bias) {
		/* Row by row, in order: the sum is the same every run. */
		float *db = grads[1];
		for (int r = 0; r < rows; r++) {
			const float *d = dy + (size_t)r * out;
			for (int u = 0; u < out; u++)
				db[u] += d[u];
		}
	}
	return PH_OK;
}

/* The full backward is the two halves: bitwise the same as a split run. */
static int linear_backward(void *state, const ph_ctx *ctx, float *const *params,
			   float *const *grads, const float *x, const float *y,
			   const float *dy, float *dx, ph_err *err)
{
	int rc = linear_backward_weight(state, ctx, params, grads, x, y, dy, err);
	return rc ? rc : linear_backward_input(state, ctx, params, x, y, dy, dx, err);
}

static const ph_layer_ops linear_ops = {
	.head = PH_HEAD(ph_layer_ops, "linear",
			"fully connected layer over the last dimension: y = x W^T + b",
			linear_options, linear_config),
	.devices = PH_DEV_CPU,
	/* y is never read back (nor by the CUDA twin): a loss after it may
	 * write its gradient there */
	.flags = PH_LAYER_BACKWARD_NO_Y,
	.create = linear_create,
	.destroy = linear_destroy,
	.meta = linear_meta,
	.forward = linear_forward,
	.backward = linear_backward,
	.backward_input = linear_backward_input,
	.backward_weight = linear_backward_weight,
	.cuda = &linear_cuda_ops,
};

/* A named array: a braced list inside PH_PLUGIN() would split at its comma. */
static const ph_layer_ops *const linear_layers[] = { &linear_ops, NULL };
PH_PLUGIN(linear_layers, NULL, NULL)
