/* SPDX-License-Identifier: MIT */
/* A layer whose backward is wrong: y = w * x elementwise, but its weight
 * gradient is twice the true one.  Its dx is right and its meta matches its
 * forward, so pipehost --check-plugin must fail it on the gradient check
 * alone, naming dweight (tests/test-check-plugin.sh). */
#include "test-layer-common.h"

static int backward(void *st, const ph_ctx *ctx, float *const *params, float *const *grads, const float *x,
		    const float *y, const float *dy, float *dx, ph_err *err)
{
	return tl_scale_backward(st, ctx, params, grads, x, dy, dx, 2.0f); /* the bug: the factor 2 */
}

static const ph_layer_ops ops = {
	TL_OPS(PH_HEAD_NOOPT(ph_layer_ops, "check_bad_backward", "y = w * x with a wrong weight gradient (a test)"),
	       tl_create, tl_meta_scale, tl_forward_scale, backward),
};
TL_PLUGIN(ops)
