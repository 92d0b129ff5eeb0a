/* SPDX-License-Identifier: MIT */
/* A plugin whose constructor calls exit() when $PH_TEST_CTOR_EXIT is set:
 * pipehost --check-plugin must report that as a FAIL of loading it, with
 * its own count line, not vanish with the plugin's exit status
 * (tests/test-check-plugin.sh).  Unset, it is a plain identity layer, so
 * a scan of the test plugins' folder loads it harmlessly. */
#include <stdlib.h>
#include <string.h>

#include <pipehost/plugin.h>

__attribute__((constructor)) static void leave(void)
{
	if (getenv("PH_TEST_CTOR_EXIT"))
		exit(3); /* the bug */
}

static int create(const void *config, const ph_shape *in, int max_batch, void **st, ph_err *err)
{
	ph_shape *s = malloc(sizeof *s);
	if (!s)
		return ph_fail(err, PH_ENOMEM, "out of memory");
	*s = *in;
	*st = s;
	return PH_OK;
}

static void destroy(void *st)
{
	free(st);
}

static int meta(const void *st, ph_layer_meta *m, ph_err *err)
{
	*m = (ph_layer_meta){ 0 };
	m->out = *(const ph_shape *)st;
	return PH_OK;
}

static int forward(void *st, const ph_ctx *ctx, float *const *params, const float *x, float *y, ph_err *err)
{
	size_t n = (size_t)ctx->batch * ph_shape_numel((const ph_shape *)st);
	memmove(y, x, n * sizeof *y);
	return PH_OK;
}

static int backward(void *st, const ph_ctx *ctx, float *const *params, float *const *grads, const float *x,
		    const float *y, const float *dy, float *dx, ph_err *err)
{
	size_t n = (size_t)ctx->batch * ph_shape_numel((const ph_shape *)st);
	if (dx) /* NULL for a first layer, whose input needs no gradient */
		memmove(dx, dy, n * sizeof *dx);
	return PH_OK;
}

static const ph_layer_ops ops = {
	.head = PH_HEAD_NOOPT(ph_layer_ops, "check_ctor_exit", "a constructor that may call exit (a test)"),
	.devices = PH_DEV_CPU,
	.create = create,
	.destroy = destroy,
	.meta = meta,
	.forward = forward,
	.backward = backward,
};

static const ph_layer_ops *const layers[] = { &ops, NULL };
PH_PLUGIN(layers, NULL, NULL)
