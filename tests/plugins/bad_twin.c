/* SPDX-License-Identifier: MIT */
/* Test plugin: a layer whose CUDA hooks (ABI 1.4) are broken in the way
 * BAD_TWIN picks, which the loader must refuse:
 *   1  the table's struct_size is too small for forward and backward
 *   2  no CUDA backward
 *   3  the layer splits its backward, its CUDA hooks do not */
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
static int backward(void *state, const ph_ctx *ctx, float *const *params, float *const *grads, const float *x,
		    const float *y, const float *dy, float *dx, ph_err *err)
{
	return PH_OK;
}
static int backward_input(void *state, const ph_ctx *ctx, float *const *params, const float *x, const float *y,
			  const float *dy, float *dx, ph_err *err)
{
	return PH_OK;
}
static int backward_weight(void *state, const ph_ctx *ctx, float *const *params, float *const *grads,
			   const float *x, const float *y, const float *dy, ph_err *err)
{
	return PH_OK;
}

static const ph_layer_device_ops twin = {
	.struct_size = BAD_TWIN == 1 ? (uint32_t)sizeof(uint32_t) : (uint32_t)sizeof(ph_layer_device_ops),
	.forward = forward,
	.backward = BAD_TWIN == 2 ? NULL : backward,
};

static const ph_layer_ops twin_ops = {
	.head = PH_HEAD_NOOPT(ph_layer_ops, "twinned", "a layer with broken CUDA hooks"),
	.devices = PH_DEV_CPU,
	.create = create,
	.destroy = destroy,
	.meta = meta,
	.forward = forward,
	.backward = backward,
	.backward_input = BAD_TWIN == 3 ? backward_input : NULL,
	.backward_weight = BAD_TWIN == 3 ? backward_weight : NULL,
	.cuda = &twin,
};
static const ph_layer_ops *const layers[] = { &twin_ops, NULL };
PH_PLUGIN(layers, NULL, NULL)
