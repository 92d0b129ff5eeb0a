/* SPDX-License-Identifier: MIT */
/* A layer whose forward dereferences NULL: pipehost --check-plugin must
 * report it as a FAIL of the check under way (it checks each plugin in a
 * child process) and go on, never crash itself (tests/test-check-plugin.sh). */
#include <stdlib.h>

#include <pipehost/plugin.h>

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
	float *nowhere = (float *)ctx->stream; /* NULL on the CPU, which the compiler cannot know */
	nowhere[0] = x[0];                     /* the bug */
	return PH_OK;
}

static int backward(void *st, const ph_ctx *ctx, float *const *params, float *const *grads, const float *x,
		    const float *y, const float *dy, float *dx, ph_err *err)
{
	return PH_OK;
}

static const ph_layer_ops ops = {
	.head = PH_HEAD_NOOPT(ph_layer_ops, "check_crash", "forward writes through NULL (a test)"),
	.devices = PH_DEV_CPU,
	.create = create,
	.destroy = destroy,
	.meta = meta,
	.forward = forward,
	.backward = backward,
};

static const ph_layer_ops *const layers[] = { &ops, NULL };
PH_PLUGIN(layers, NULL, NULL)
