/* SPDX-License-Identifier: MIT */
/* Test plugin: a layer as a plugin built against plugin ABI 1.3 left it,
 * its ops struct ending before ABI 1.4's `cuda` field (head.abi_minor 3,
 * head.struct_size to backward_weight).  The host must load it and run it
 * without reading past its struct.  ReLU, named relu_abi13. */
#include <stddef.h>
#include <stdlib.h>

#include <pipehost/plugin.h>

typedef struct {
	ph_shape shape;
} relu13;

static int create(const void *cfg, const ph_shape *in, int max_batch, void **state, ph_err *err)
{
	relu13 *s = malloc(sizeof *s);
	if (!s)
		return ph_fail(err, PH_ENOMEM, "relu_abi13: out of memory");
	s->shape = *in;
	*state = s;
	return PH_OK;
}
static void destroy(void *state)
{
	free(state);
}
static int meta(const void *state, ph_layer_meta *m, ph_err *err)
{
	m->out = ((const relu13 *)state)->shape;
	return PH_OK;
}
static int forward(void *state, const ph_ctx *ctx, float *const *params, const float *x, float *y, ph_err *err)
{
	const int64_t n = ctx->batch * ph_shape_numel(&((const relu13 *)state)->shape);
	for (int64_t i = 0; i < n; i++)
		y[i] = x[i] > 0.0f ? x[i] : 0.0f;
	return PH_OK;
}
static int backward(void *state, const ph_ctx *ctx, float *const *params, float *const *grads, const float *x,
		    const float *y, const float *dy, float *dx, ph_err *err)
{
	const int64_t n = ctx->batch * ph_shape_numel(&((const relu13 *)state)->shape);
	for (int64_t i = 0; dx && i < n; i++)
		dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
	return PH_OK;
}

/* Followed in memory by a pointer that is not a table of hooks: a host
 * that read `cuda` past struct_size would crash or call it. */
static const struct {
	ph_layer_ops ops;
} old = { {
	.head = { PH_ABI_MAJOR, 3, (uint32_t)offsetof(ph_layer_ops, cuda), "relu_abi13", "ReLU, as ABI 1.3 built it",
		  NULL, 0 },
	.devices = PH_DEV_CPU,
	.create = create,
	.destroy = destroy,
	.meta = meta,
	.forward = forward,
	.backward = backward,
	.cuda = (const ph_layer_device_ops *)(uintptr_t)0x5a5a5a5a5a5a5a5aull,
} };
static const ph_layer_ops *const layers[] = { &old.ops, NULL };
PH_PLUGIN(layers, NULL, NULL)
