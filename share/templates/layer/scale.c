/* SPDX-License-Identifier: MIT */
/*
 * scale: a template layer plugin.  y = gain * x + bias, one gain and one
 * bias per input element, any input shape:
 *
 *   x [B, ...]  ->  y [B, ...]       parameters: gain [...], bias [...]
 *
 * Copy this directory, rename the layer, change the arithmetic; keep the
 * contract (include/pipehost/plugin.h): the host owns all memory, a hook
 * never prints or exits but returns a status and one line in err,
 * parameter gradients accumulate (+=), dx is overwritten (=).
 * Build: make (see Makefile); test: make check.
 */
#include <stdlib.h>

#include <pipehost/plugin.h>

#include "scale.h"

static const ph_option scale_options[] = {
	PH_OPT_BOOL_(scale_config, bias, "bias", "yes", "add a learned bias"),
	PH_OPT_END
};

typedef struct {
	ph_shape shape;
	int64_t numel; /* per sample */
	int max_batch;
	int bias;
} scale_state;

static int scale_create(const void *config, const ph_shape *in, int max_batch, void **state, ph_err *err)
{
	const scale_config *c = config;
	if (in->ndim < 1 || in->ndim > PH_MAX_DIMS)
		return ph_fail(err, PH_EINVAL, "scale: input has %d dimensions; need 1 to %d", in->ndim, PH_MAX_DIMS);
	scale_state *s = calloc(1, sizeof *s);
	if (!s)
		return ph_fail(err, PH_ENOMEM, "scale: out of memory");
	s->shape = *in;
	s->numel = ph_shape_numel(in);
	s->max_batch = max_batch;
	s->bias = c->bias;
	*state = s;
	return PH_OK;
}

static void scale_destroy(void *state)
{
	free(state);
}

static int scale_meta(const void *state, ph_layer_meta *m, ph_err *err)
{
	const scale_state *s = state;
	*m = (ph_layer_meta){ 0 };
	m->out = s->shape;
	m->fwd_flops = 2.0 * (double)s->numel;
	m->bwd_flops = 4.0 * (double)s->numel;
	m->nparams = s->bias ? 2 : 1;
	m->params[0] = (ph_param_desc){ .name = "gain", .shape = s->shape, .init = PH_INIT_ONES };
	if (s->bias)
		m->params[1] = (ph_param_desc){ .name = "bias", .shape = s->shape, .init = PH_INIT_ZEROS, .no_decay = 1 };
	return PH_OK;
}

static int scale_forward(void *state, const ph_ctx *ctx, float *const *params, const float *x, float *y,
			 ph_err *err)
{
	const scale_state *s = state;
	if (ctx->batch < 0 || ctx->batch > s->max_batch)
		return ph_fail(err, PH_EINTERNAL, "scale: batch %d outside [0, %d] given at create", ctx->batch,
			       s->max_batch);
	const float *gain = params[0], *bias = s->bias ? params[1] : NULL;
	for (int b = 0; b < ctx->batch; b++)
		for (int64_t i = 0; i < s->numel; i++) {
			int64_t k = b * s->numel + i;
			y[k] = gain[i] * x[k] + (bias ? bias[i] : 0.0f);
		}
	return PH_OK;
}

static int scale_backward(void *state, const ph_ctx *ctx, float *const *params, float *const *grads,
			  const float *x, const float *y, const float *dy, float *dx, ph_err *err)
{
	const scale_state *s = state;
	const float *gain = params[0];
	float *dgain = grads[0], *dbias = s->bias ? grads[1] : NULL;
	for (int b = 0; b < ctx->batch; b++)
		for (int64_t i = 0; i < s->numel; i++) {
			int64_t k = b * s->numel + i;
			dgain[i] += dy[k] * x[k];          /* parameter gradients: += */
			if (dbias)
				dbias[i] += dy[k];
			if (dx)
				dx[k] = dy[k] * gain[i];   /* input gradient: =, and only when asked */
		}
	return PH_OK;
}

static const ph_layer_ops scale_ops = {
	.head = PH_HEAD(ph_layer_ops, "scale", "y = gain * x + bias, elementwise (a template)", scale_options,
			scale_config),
	.devices = PH_DEV_CPU,
	.create = scale_create,
	.destroy = scale_destroy,
	.meta = scale_meta,
	.forward = scale_forward,
	.backward = scale_backward,
};

static const ph_layer_ops *const layers[] = { &scale_ops, NULL };
PH_PLUGIN(layers, NULL, NULL)
