/* SPDX-License-Identifier: MIT */
/* Test plugin: a layer "bad_meta" that passes its input through but
 * reports, as [layer] field = ..., one absurd size in its meta: the host
 * must refuse it before multiplying it by the batch (core/model.c). */
#include <stdint.h>
#include <string.h>

#include <pipehost/plugin.h>

typedef struct {
	int field;
} bad_cfg;

enum { F_SAVED, F_SCRATCH, F_SHAPE, F_PARAM, F_NONE };

static const ph_option options[] = {
	PH_OPT_CHOICE_(bad_cfg, field, "field", "saved", "saved|scratch|shape|param|none", "which size to break"),
	PH_OPT_END
};

typedef struct {
	ph_shape in;
	int field;
} bad_state;

static bad_state the_state;

static int create(const void *cfg, const ph_shape *in, int max_batch, void **state, ph_err *err)
{
	(void)max_batch;
	(void)err;
	the_state.in = *in;
	the_state.field = ((const bad_cfg *)cfg)->field;
	*state = &the_state;
	return PH_OK;
}
static void destroy(void *state) { (void)state; }
static int meta(const void *state, ph_layer_meta *m, ph_err *err)
{
	const bad_state *s = state;
	(void)err;
	m->out = s->in;
	switch (s->field) {
	case F_SAVED: m->saved_bytes = SIZE_MAX / 2; break; /* times any batch: wraps */
	case F_SCRATCH: m->scratch_bytes = SIZE_MAX - 7; break;
	case F_SHAPE: /* 2^40 x 2^40 elements: the product wraps int64 */
		m->out = (ph_shape){ 2, { (int64_t)1 << 40, (int64_t)1 << 40 } };
		break;
	case F_PARAM:
		m->nparams = 1;
		strcpy(m->params[0].name, "weight");
		m->params[0].shape = (ph_shape){ 3, { (int64_t)1 << 30, (int64_t)1 << 30, (int64_t)1 << 30 } };
		break;
	default: break;
	}
	return PH_OK;
}
static int forward(void *state, const ph_ctx *ctx, float *const *params, const float *x, float *y, ph_err *err)
{
	(void)state, (void)ctx, (void)params, (void)x, (void)y, (void)err;
	return PH_OK;
}
static int backward(void *state, const ph_ctx *ctx, float *const *params, float *const *grads, const float *x,
		    const float *y, const float *dy, float *dx, ph_err *err)
{
	(void)state, (void)ctx, (void)params, (void)x, (void)y, (void)dy, (void)dx, (void)grads, (void)err;
	return PH_OK;
}

static const ph_layer_ops bad_meta_ops = {
	.head = PH_HEAD(ph_layer_ops, "bad_meta", "a layer whose meta reports an absurd size", options, bad_cfg),
	.devices = PH_DEV_CPU,
	.create = create,
	.destroy = destroy,
	.meta = meta,
	.forward = forward,
	.backward = backward,
};
static const ph_layer_ops *const layers[] = { &bad_meta_ops, NULL };
PH_PLUGIN(layers, NULL, NULL)
