/* SPDX-License-Identifier: MIT */
/* Test plugin: a layer without its required backward hook. */
#include <pipehost/plugin.h>

static int create(const void *cfg, const ph_shape *in, int max_batch, void **state, ph_err *err)
{
	*state = NULL;
	return PH_OK;
}
static void destroy(void *state) {}
static int meta(const void *state, ph_layer_meta *m, ph_err *err)
{
	return PH_OK;
}
static int forward(void *state, const ph_ctx *ctx, float *const *params, const float *x, float *y, ph_err *err)
{
	return PH_OK;
}

static const ph_layer_ops halfway_ops = {
	.head = PH_HEAD_NOOPT(ph_layer_ops, "halfway", "a layer that forgot its backward"),
	.devices = PH_DEV_CPU,
	.create = create,
	.destroy = destroy,
	.meta = meta,
	.forward = forward,
	.backward = NULL,
};
static const ph_layer_ops *const layers[] = { &halfway_ops, NULL };
PH_PLUGIN(layers, NULL, NULL)
