/* SPDX-License-Identifier: MIT */
/* A layer whose forward dereferences NULL: pipehost --check-plugin must
 * report it as a FAIL of the check under way (it checks each plugin in a
 * child process) and go on, never crash itself (tests/test-check-plugin.sh). */
#include "test-layer-common.h"

static int forward(void *st, const ph_ctx *ctx, float *const *params, const float *x, float *y, ph_err *err)
{
	float *nowhere = (float *)ctx->stream; /* NULL on the CPU, which the compiler cannot know */
	nowhere[0] = x[0];                     /* the bug */
	return PH_OK;
}

/* does nothing (forward has crashed before it could run) */
static int backward(void *st, const ph_ctx *ctx, float *const *params, float *const *grads, const float *x,
		    const float *y, const float *dy, float *dx, ph_err *err)
{
	return PH_OK;
}

static const ph_layer_ops ops = {
	TL_OPS(PH_HEAD_NOOPT(ph_layer_ops, "check_crash", "forward writes through NULL (a test)"), tl_create, tl_meta,
	       forward, backward),
};
TL_PLUGIN(ops)
