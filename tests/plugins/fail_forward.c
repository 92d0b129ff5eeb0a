/* SPDX-License-Identifier: MIT */
/* Test plugin: a layer that fails at run time on purpose, so a test can
 * make one process of a job fail mid-training (tests/test-mpi.sh: every
 * process must stop, with that process's line, and none hang).
 *
 *   x [B, ...]  ->  y = x [B, ...]
 *
 * $PH_TEST_FAIL_FORWARD=N: the N-th forward call of this process fails;
 * unset, it never does.  Named fail_forward. */
#include <stdlib.h>
#include <string.h>

#include <pipehost/plugin.h>

typedef struct {
	ph_shape shape;
	int64_t numel; /* per sample */
	long fail_at;
} fail_state;

/* The process's count, over all instances (the engine may hold several
 * per layer) and the rank threads that call them. */
static long calls;

static int create(const void *cfg, const ph_shape *in, int max_batch, void **state, ph_err *err)
{
	(void)cfg, (void)max_batch;
	fail_state *s = calloc(1, sizeof *s);
	if (!s)
		return ph_fail(err, PH_ENOMEM, "fail_forward: out of memory");
	const char *n = getenv("PH_TEST_FAIL_FORWARD");
	s->shape = *in;
	s->numel = ph_shape_numel(in);
	s->fail_at = n ? strtol(n, NULL, 10) : 0;
	*state = s;
	return PH_OK;
}
static void destroy(void *state)
{
	free(state);
}
static int meta(const void *state, ph_layer_meta *m, ph_err *err)
{
	(void)err;
	*m = (ph_layer_meta){ 0 };
	m->out = ((const fail_state *)state)->shape;
	return PH_OK;
}
static int forward(void *state, const ph_ctx *ctx, float *const *params, const float *x, float *y, ph_err *err)
{
	(void)params;
	fail_state *s = state;
	const long call = __atomic_add_fetch(&calls, 1, __ATOMIC_SEQ_CST);
	if (call == s->fail_at)
		return ph_fail(err, PH_EINVAL, "fail_forward: failing on purpose at forward call %ld "
			       "(PH_TEST_FAIL_FORWARD)", call);
	if (y != x)
		memcpy(y, x, (size_t)(ctx->batch * s->numel) * sizeof *y);
	return PH_OK;
}
static int backward(void *state, const ph_ctx *ctx, float *const *params, float *const *grads, const float *x,
		    const float *y, const float *dy, float *dx, ph_err *err)
{
	(void)params, (void)grads, (void)x, (void)y, (void)err;
	const fail_state *s = state;
	if (dx && dx != dy)
		memcpy(dx, dy, (size_t)(ctx->batch * s->numel) * sizeof *dx);
	return PH_OK;
}

static const ph_layer_ops fail_forward = {
	.head = PH_HEAD_NOOPT(ph_layer_ops, "fail_forward",
			      "identity that fails at forward call $PH_TEST_FAIL_FORWARD (a test)"),
	.devices = PH_DEV_CPU,
	.create = create,
	.destroy = destroy,
	.meta = meta,
	.forward = forward,
	.backward = backward,
};
static const ph_layer_ops *const layers[] = { &fail_forward, NULL };
PH_PLUGIN(layers, NULL, NULL)
