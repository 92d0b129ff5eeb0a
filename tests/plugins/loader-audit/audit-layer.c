/* SPDX-License-Identifier: MIT */
/* A layer broken in one way per build (-DAUDIT=N), each a bug a third
 * audit found that a run or pipehost --check-plugin let through
 * (tests/test-plugin-loader.sh).  y = w * x elementwise, right otherwise:
 *   1 forward FLOPs -1e9         2 backward FLOPs NaN
 *   3 meta's output size 0 (for any input: no --shape fixes it)
 *   4 two options named bias     5 an option named type (the host's key)
 *   6 named relu, like a built-in layer
 *   7 named "trail " (a trailing space: no INI can name it)
 * Kept in a directory of their own: a run that searches tests/plugins/.libs
 * must not meet them. */
#include <math.h>

#include "../test-layer-common.h"

#ifndef AUDIT
#define AUDIT 0
#endif

typedef struct {
	int bias;
	int other;
} audit_config;

#if AUDIT == 4
static const ph_option audit_options[] = {
	PH_OPT_BOOL_(audit_config, bias, "bias", "yes", "unused"),
	PH_OPT_BOOL_(audit_config, other, "bias", "no", "the same name again"),
	PH_OPT_END
};
#elif AUDIT == 5
static const ph_option audit_options[] = {
	PH_OPT_BOOL_(audit_config, bias, "bias", "yes", "unused"),
	PH_OPT_BOOL_(audit_config, other, "type", "no", "a key [layer NAME] reads itself"),
	PH_OPT_END
};
#else
static const ph_option audit_options[] = {
	PH_OPT_BOOL_(audit_config, bias, "bias", "yes", "unused"),
	PH_OPT_END
};
#endif

#if AUDIT == 6
#define AUDIT_NAME "relu"
#elif AUDIT == 7
#define AUDIT_NAME "trail " /* a run's "type = trail " reads "trail" */
#else
#define AUDIT_NAME "audit_scale"
#endif

static int meta(const void *st, ph_layer_meta *m, ph_err *err)
{
	const tl_state *s = st;
	tl_meta_scale(st, m, err);
	m->fwd_flops = (double)s->n;
	m->bwd_flops = 2.0 * (double)s->n;
#if AUDIT == 1
	m->fwd_flops = -1e9;
#elif AUDIT == 2
	m->bwd_flops = NAN;
#elif AUDIT == 3
	m->out.d[0] = 0;
#endif
	return PH_OK;
}

static const ph_layer_ops ops = {
	TL_OPS(PH_HEAD(ph_layer_ops, AUDIT_NAME, "y = w * x, broken one way (a test)", audit_options, audit_config),
	       tl_create, meta, tl_forward_scale, tl_backward_scale),
};
TL_PLUGIN(ops)
