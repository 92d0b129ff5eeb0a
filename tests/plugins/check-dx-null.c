/* SPDX-License-Identifier: MIT */
/* A layer whose backward writes dx even when the host passes dx = NULL (a
 * first layer's input needs no gradient): pipehost --check-plugin must
 * name that hook and that dx in its FAIL, not only the check it was in
 * (tests/test-check-plugin.sh). */
#include "test-layer-common.h"

static int backward(void *st, const ph_ctx *ctx, float *const *params, float *const *grads, const float *x,
		    const float *y, const float *dy, float *dx, ph_err *err)
{
	(void)params, (void)grads, (void)x, (void)y, (void)err;
	const tl_state *s = st;
	for (int64_t i = 0; i < ctx->batch * s->n; i++)
		dx[i] = dy[i]; /* the bug: no test for dx == NULL */
	return PH_OK;
}

static const ph_layer_ops ops = {
	TL_OPS(PH_HEAD_NOOPT(ph_layer_ops, "check_dx_null", "backward writes through dx = NULL (a test)"), tl_create,
	       tl_meta, tl_forward_identity, backward),
};
TL_PLUGIN(ops)
