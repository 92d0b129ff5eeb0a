/* SPDX-License-Identifier: MIT */
/* A layer whose meta disagrees with its forward: y = w * x elementwise,
 * right in forward and backward, but meta announces one output float a
 * sample fewer than forward writes, so forward writes past y.  pipehost
 * --check-plugin must fail its meta check (tests/test-check-plugin.sh). */
#include "test-layer-common.h"

static int meta(const void *st, ph_layer_meta *m, ph_err *err)
{
	tl_meta_scale(st, m, err);
	/* the bug: one float a sample fewer than forward writes */
	m->out = (ph_shape){ 1, { ((const tl_state *)st)->n - 1 } };
	return PH_OK;
}

static const ph_layer_ops ops = {
	TL_OPS(PH_HEAD_NOOPT(ph_layer_ops, "check_bad_meta", "y = w * x, meta one output short (a test)"), tl_create,
	       meta, tl_forward_scale, tl_backward_scale),
};
TL_PLUGIN(ops)
