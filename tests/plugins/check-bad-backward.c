/* SPDX-License-Identifier: MIT */
/* A layer whose backward is wrong: y = w * x elementwise, but its weight
 * gradient is twice the true one.  Its dx is right and its meta matches its
 * forward, so pipehost --check-plugin must fail it on the gradient check
 * alone, naming dweight (tests/test-check-plugin.sh). */
#include <stdlib.h>

#include <pipehost/plugin.h>

typedef struct {
	ph_shape shape;
	int64_t n;
	int max_batch;
} state;

static int create(const void *config, const ph_shape *in, int max_batch, void **st, ph_err *err)
{
	state *s = calloc(1, sizeof *s);
	if (!s)
		return ph_fail(err, PH_ENOMEM, "out of memory");
	s->shape = *in;
	s->n = ph_shape_numel(in);
	s->max_batch = max_batch;
	*st = s;
	return PH_OK;
}

static void destroy(void *st)
{
	free(st);
}

static int meta(const void *st, ph_layer_meta *m, ph_err *err)
{
	const state *s = st;
	*m = (ph_layer_meta){ 0 };
	m->out = s->shape;
	m->nparams = 1;
	m->params[0] = (ph_param_desc){ .name = "weight", .shape = s->shape, .init = PH_INIT_ONES };
	return PH_OK;
}

static int forward(void *st, const ph_ctx *ctx, float *const *params, const float *x, float *y, ph_err *err)
{
	const state *s = st;
	for (int64_t i = 0; i < ctx->batch * s->n; i++)
		y[i] = params[0][i % s->n] * x[i];
	return PH_OK;
}

static int backward(void *st, const ph_ctx *ctx, float *const *params, float *const *grads, const float *x,
		    const float *y, const float *dy, float *dx, ph_err *err)
{
	const state *s = st;
	for (int64_t i = 0; i < ctx->batch * s->n; i++) {
		grads[0][i % s->n] += 2.0f * dy[i] * x[i]; /* the bug: the factor 2 */
		if (dx)
			dx[i] = params[0][i % s->n] * dy[i];
	}
	return PH_OK;
}

static const ph_layer_ops ops = {
	.head = PH_HEAD_NOOPT(ph_layer_ops, "check_bad_backward", "y = w * x with a wrong weight gradient (a test)"),
	.devices = PH_DEV_CPU,
	.create = create,
	.destroy = destroy,
	.meta = meta,
	.forward = forward,
	.backward = backward,
};

static const ph_layer_ops *const layers[] = { &ops, NULL };
PH_PLUGIN(layers, NULL, NULL)
