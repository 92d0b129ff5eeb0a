/* SPDX-License-Identifier: MIT */
/* A layer broken in one way per build (-DAUDIT=N), each a bug a third
 * audit found that a run or pipehost --check-plugin let through
 * (tests/test-plugin-loader.sh).  y = w * x elementwise, right otherwise:
 *   1 forward FLOPs -1e9         2 backward FLOPs NaN
 *   3 meta's output size 0 (for any input: no --shape fixes it)
 *   4 two options named bias     5 an option named type (the host's key)
 *   6 named relu, like a built-in layer
 * Kept in a directory of their own: a run that searches tests/plugins/.libs
 * must not meet them. */
#include <math.h>
#include <stdlib.h>

#include <pipehost/plugin.h>

#ifndef AUDIT
#define AUDIT 0
#endif

typedef struct {
	int bias;
	int other;
} audit_config;

#if AUDIT == 4
static const ph_option audit_options[] = {
	PH_OPT_BOOL_(audit_config, bias, "bias", "yes", "unused"),
	PH_OPT_BOOL_(audit_config, other, "bias", "no", "the same name again"),
	PH_OPT_END
};
#elif AUDIT == 5
static const ph_option audit_options[] = {
	PH_OPT_BOOL_(audit_config, bias, "bias", "yes", "unused"),
	PH_OPT_BOOL_(audit_config, other, "type", "no", "a key [layer NAME] reads itself"),
	PH_OPT_END
};
#else
static const ph_option audit_options[] = {
	PH_OPT_BOOL_(audit_config, bias, "bias", "yes", "unused"),
	PH_OPT_END
};
#endif

#if AUDIT == 6
#define AUDIT_NAME "relu"
#else
#define AUDIT_NAME "audit_scale"
#endif

typedef struct {
	ph_shape shape;
	int64_t n;
} state;

static int create(const void *config, const ph_shape *in, int max_batch, void **st, ph_err *err)
{
	(void)config;
	(void)max_batch;
	state *s = calloc(1, sizeof *s);
	if (!s)
		return ph_fail(err, PH_ENOMEM, "out of memory");
	s->shape = *in;
	s->n = ph_shape_numel(in);
	*st = s;
	return PH_OK;
}

static void destroy(void *st)
{
	free(st);
}

static int meta(const void *st, ph_layer_meta *m, ph_err *err)
{
	(void)err;
	const state *s = st;
	*m = (ph_layer_meta){ 0 };
	m->out = s->shape;
	m->fwd_flops = (double)s->n;
	m->bwd_flops = 2.0 * (double)s->n;
#if AUDIT == 1
	m->fwd_flops = -1e9;
#elif AUDIT == 2
	m->bwd_flops = NAN;
#elif AUDIT == 3
	m->out.d[0] = 0;
#endif
	m->nparams = 1;
	m->params[0] = (ph_param_desc){ .name = "weight", .shape = s->shape, .init = PH_INIT_ONES };
	return PH_OK;
}

static int forward(void *st, const ph_ctx *ctx, float *const *params, const float *x, float *y, ph_err *err)
{
	(void)err;
	const state *s = st;
	for (int64_t i = 0; i < ctx->batch * s->n; i++)
		y[i] = params[0][i % s->n] * x[i];
	return PH_OK;
}

static int backward(void *st, const ph_ctx *ctx, float *const *params, float *const *grads, const float *x,
		    const float *y, const float *dy, float *dx, ph_err *err)
{
	(void)y;
	(void)err;
	const state *s = st;
	for (int64_t i = 0; i < ctx->batch * s->n; i++) {
		grads[0][i % s->n] += dy[i] * x[i];
		if (dx)
			dx[i] = params[0][i % s->n] * dy[i];
	}
	return PH_OK;
}

static const ph_layer_ops ops = {
	.head = PH_HEAD(ph_layer_ops, AUDIT_NAME, "y = w * x, broken one way (a test)", audit_options, audit_config),
	.devices = PH_DEV_CPU,
	.create = create,
	.destroy = destroy,
	.meta = meta,
	.forward = forward,
	.backward = backward,
};

static const ph_layer_ops *const layers[] = { &ops, NULL };
PH_PLUGIN(layers, NULL, NULL)
