/* SPDX-License-Identifier: MIT */
/* Test plugin: a layer that fails at run time on purpose, so a test can
 * make one process of a job fail mid-training (tests/test-mpi.sh: every
 * process must stop, with that process's line, and none hang).
 *
 *   x [B, ...]  ->  y = x [B, ...]
 *
 * $PH_TEST_FAIL_FORWARD=N: the N-th forward call of this process fails;
 * unset, it never does.  Named fail_forward. */
#include "test-layer-common.h"

typedef struct {
	tl_state base;
	long fail_at;
} fail_state;

/* The process's count, over all instances (the engine may hold several
 * per layer) and the rank threads that call them. */
static long calls;

static int create(const void *cfg, const ph_shape *in, int max_batch, void **state, ph_err *err)
{
	(void)cfg, (void)max_batch;
	const char *n = getenv("PH_TEST_FAIL_FORWARD");
	const int rc = tl_new(in, sizeof(fail_state), state, err, "fail_forward: out of memory");
	if (rc == PH_OK)
		((fail_state *)*state)->fail_at = n ? strtol(n, NULL, 10) : 0;
	return rc;
}
static int forward(void *state, const ph_ctx *ctx, float *const *params, const float *x, float *y, ph_err *err)
{
	const fail_state *s = state;
	const long call = __atomic_add_fetch(&calls, 1, __ATOMIC_SEQ_CST);
	if (call == s->fail_at)
		return ph_fail(err, PH_EINVAL, "fail_forward: failing on purpose at forward call %ld "
			       "(PH_TEST_FAIL_FORWARD)", call);
	return tl_forward_identity(state, ctx, params, x, y, err);
}

static const ph_layer_ops fail_forward = {
	TL_OPS(PH_HEAD_NOOPT(ph_layer_ops, "fail_forward",
			     "identity that fails at forward call $PH_TEST_FAIL_FORWARD (a test)"),
	       create, tl_meta, forward, tl_backward_identity),
};
TL_PLUGIN(fail_forward)
