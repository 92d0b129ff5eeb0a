/* SPDX-License-Identifier: MIT */
/* A layer with a CUDA twin (check-twin_cuda.cu) for pipehost --check-plugin's
 * twin check (tests/test-check-plugin.sh): y = w * x, one parameter w of
 * `width` values broadcast over the samples.  Its twin is right unless
 * $PH_TEST_BAD_TWIN names a bug, read by the twin at create time:
 *   scale  the forward is 10% off
 *   past   the forward writes one float past y
 * Built with the twin only where the build has CUDA (tests/adopt.mk). */
#include <stdlib.h>
#include <string.h>

#include <pipehost/plugin.h>

#include "check-twin_state.h"

PH_LAYER_TWIN(check_twin_cuda_ops); /* NULL in a build without CUDA */

static int create(const void *config, const ph_shape *in, int max_batch, void **st, ph_err *err)
{
	twin_state *s = calloc(1, sizeof *s);
	if (!s)
		return ph_fail(err, PH_ENOMEM, "out of memory");
	s->shape = *in;
	s->n = ph_shape_numel(in);
	const char *bug = getenv("PH_TEST_BAD_TWIN");
	s->bug = !bug ? 0 : !strcmp(bug, "scale") ? 1 : !strcmp(bug, "past") ? 2 : 0;
	*st = s;
	return PH_OK;
}

static void destroy(void *st)
{
	free(st);
}

static int meta(const void *st, ph_layer_meta *m, ph_err *err)
{
	const twin_state *s = st;
	*m = (ph_layer_meta){ 0 };
	m->out = s->shape;
	m->nparams = 1;
	m->params[0] = (ph_param_desc){ .name = "w", .shape = { 1, { s->n } }, .init = PH_INIT_ONES };
	m->fwd_flops = (double)s->n;
	m->bwd_flops = 3.0 * (double)s->n;
	return PH_OK;
}

/* y [B, n] = w [n] * x [B, n] */
static int forward(void *st, const ph_ctx *ctx, float *const *params, const float *x, float *y, ph_err *err)
{
	const twin_state *s = st;
	for (int64_t i = 0; i < (int64_t)ctx->batch * s->n; i++)
		y[i] = params[0][i % s->n] * x[i];
	return PH_OK;
}

/* dx = w * dy; dw += sum over the samples of x * dy */
static int backward(void *st, const ph_ctx *ctx, float *const *params, float *const *grads, const float *x,
		    const float *y, const float *dy, float *dx, ph_err *err)
{
	const twin_state *s = st;
	for (int64_t j = 0; j < s->n; j++) {
		float acc = 0;
		for (int b = 0; b < ctx->batch; b++)
			acc += x[(int64_t)b * s->n + j] * dy[(int64_t)b * s->n + j];
		grads[0][j] += acc;
	}
	if (dx)
		for (int64_t i = 0; i < (int64_t)ctx->batch * s->n; i++)
			dx[i] = params[0][i % s->n] * dy[i];
	return PH_OK;
}

static const ph_layer_ops ops = {
	.head = PH_HEAD_NOOPT(ph_layer_ops, "check_twin", "y = w * x, with a CUDA twin that may be broken (a test)"),
	.devices = PH_DEV_CPU,
	.create = create,
	.destroy = destroy,
	.meta = meta,
	.forward = forward,
	.backward = backward,
	.cuda = &check_twin_cuda_ops,
};

static const ph_layer_ops *const layers[] = { &ops, NULL };
PH_PLUGIN(layers, NULL, NULL)
