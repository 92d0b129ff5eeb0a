/* SPDX-License-Identifier: MIT */
/* What the CPU test layers of tests/plugins/ and tests/plugins/loader-audit/
 * share: a state that keeps the input's shape, create/destroy/meta, an
 * identity and a y = w * x (elementwise) forward and backward, and the
 * descriptor's fields.  Each of those plugins is there to be wrong in one
 * deliberate way; with the plumbing here, its file holds only that, so a
 * reader sees at once what it tests, and the plumbing is fixed once.
 *
 * Header-only and static inline, so that each plugin stays one .c file and
 * one .so with nothing more to link, and a plugin that leaves a helper
 * unused draws no warning.  A plugin includes it by a path relative to its
 * own file ("test-layer-common.h", "../test-layer-common.h"), which the
 * compiler finds next to the source in any build directory.  Built with
 * the tests only; shipped by tests/core.mk's EXTRA_DIST. */
#ifndef PH_TEST_LAYER_COMMON_H
#define PH_TEST_LAYER_COMMON_H

#include <stdlib.h>
#include <string.h>

#include <pipehost/plugin.h>

/* A layer's state: its input's shape and floats a sample.  A plugin that
 * keeps more puts this first in a struct of its own and allocates that
 * with tl_new (tl_destroy and tl_meta work on it as they are). */
typedef struct {
	ph_shape shape;
	int64_t n;
} tl_state;

/* Allocate `size` zeroed bytes that start with a tl_state for `in`;
 * failing, the error says `oom`. */
static inline int tl_new(const ph_shape *in, size_t size, void **st, ph_err *err, const char *oom)
{
	tl_state *s = calloc(1, size);
	if (!s)
		return ph_fail(err, PH_ENOMEM, "%s", oom);
	s->shape = *in;
	s->n = ph_shape_numel(in);
	*st = s;
	return PH_OK;
}

static inline int tl_create(const void *config, const ph_shape *in, int max_batch, void **st, ph_err *err)
{
	(void)config, (void)max_batch;
	return tl_new(in, sizeof(tl_state), st, err, "out of memory");
}

static inline void tl_destroy(void *st)
{
	free(st);
}

/* the output has the input's shape; no parameters */
static inline int tl_meta(const void *st, ph_layer_meta *m, ph_err *err)
{
	(void)err;
	*m = (ph_layer_meta){ 0 };
	m->out = ((const tl_state *)st)->shape;
	return PH_OK;
}

/* y = w * x: tl_meta and one parameter, "weight", of the input's shape, all ones */
static inline int tl_meta_scale(const void *st, ph_layer_meta *m, ph_err *err)
{
	tl_meta(st, m, err);
	m->nparams = 1;
	m->params[0] = (ph_param_desc){ .name = "weight", .shape = m->out, .init = PH_INIT_ONES };
	return PH_OK;
}

/* y = x (y may be x) */
static inline int tl_forward_identity(void *st, const ph_ctx *ctx, float *const *params, const float *x, float *y,
				      ph_err *err)
{
	(void)params, (void)err;
	const tl_state *s = st;
	if (y != x)
		memmove(y, x, (size_t)(ctx->batch * s->n) * sizeof *y);
	return PH_OK;
}

/* dx = dy; dx is NULL for a first layer, whose input needs no gradient */
static inline int tl_backward_identity(void *st, const ph_ctx *ctx, float *const *params, float *const *grads,
				       const float *x, const float *y, const float *dy, float *dx, ph_err *err)
{
	(void)params, (void)grads, (void)x, (void)y, (void)err;
	const tl_state *s = st;
	if (dx && dx != dy)
		memmove(dx, dy, (size_t)(ctx->batch * s->n) * sizeof *dx);
	return PH_OK;
}

static inline int tl_forward_scale(void *st, const ph_ctx *ctx, float *const *params, const float *x, float *y,
				   ph_err *err)
{
	(void)err;
	const tl_state *s = st;
	for (int64_t i = 0; i < ctx->batch * s->n; i++)
		y[i] = params[0][i % s->n] * x[i];
	return PH_OK;
}

/* y = w * x's backward with the weight gradient `factor` times the true
 * one (1 is right): dweight += factor * dy * x, dx = w * dy */
static inline int tl_scale_backward(void *st, const ph_ctx *ctx, float *const *params, float *const *grads,
				    const float *x, const float *dy, float *dx, float factor)
{
	const tl_state *s = st;
	for (int64_t i = 0; i < ctx->batch * s->n; i++) {
		grads[0][i % s->n] += factor * dy[i] * x[i];
		if (dx)
			dx[i] = params[0][i % s->n] * dy[i];
	}
	return PH_OK;
}

static inline int tl_backward_scale(void *st, const ph_ctx *ctx, float *const *params, float *const *grads,
				    const float *x, const float *y, const float *dy, float *dx, ph_err *err)
{
	(void)y, (void)err;
	return tl_scale_backward(st, ctx, params, grads, x, dy, dx, 1.0f);
}

/* A CPU layer's descriptor, destroy being tl_destroy:
 *   static const ph_layer_ops ops = { TL_OPS(PH_HEAD_NOOPT(...), tl_create, tl_meta, fwd, bwd) }; */
#define TL_OPS(head_, create_, meta_, forward_, backward_)                                                  \
	.head = head_, .devices = PH_DEV_CPU, .create = (create_), .destroy = tl_destroy, .meta = (meta_), \
	.forward = (forward_), .backward = (backward_)

/* The exported descriptor of a plugin of one layer, `ops_`. */
#define TL_PLUGIN(ops_)                                                    \
	static const ph_layer_ops *const tl_layers[] = { &(ops_), NULL }; \
	PH_PLUGIN(tl_layers, NULL, NULL)

#endif /* PH_TEST_LAYER_COMMON_H */
