/* SPDX-License-Identifier: MIT */
/* Test plugin: an identity layer whose forward misbehaves on purpose at
 * its N-th call of the process, the way a broken plugin does: it calls
 * exit() or crashes instead of returning an error (tests/test-plugin-exit.sh:
 * the run must end with one line and a failing status, never 0, never
 * silent).
 *
 *   x [B, ...]  ->  y = x [B, ...]
 *
 * $PH_TEST_MISBEHAVE: exit0, exit3 (exit(0), exit(3)), segv (a NULL
 * dereference), abort, fpe (an integer division by zero), print (a line
 * on stdout from create, as a plugin left with debug output does; for
 * tests/test-errors.sh's --plan=json); unset, it
 * never misbehaves, so a scan of the test plugins loads it harmlessly.
 * $PH_TEST_MISBEHAVE_AT=N: at the N-th forward call (default 2).  Named
 * misbehave. */
#include <stdint.h>
#include <stdio.h>

#include "test-layer-common.h"

/* the process's count, over all instances and the rank threads */
static long calls;

static int create(const void *cfg, const ph_shape *in, int max_batch, void **state, ph_err *err)
{
	(void)cfg, (void)max_batch;
	const char *how = getenv("PH_TEST_MISBEHAVE");
	if (how && !strcmp(how, "print"))
		printf("misbehave: created for input %s\n", "x");
	return tl_new(in, sizeof(tl_state), state, err, "misbehave: out of memory");
}

/* num / zero, left to the CPU's trap: UBSan (the sanitizer build) would
 * report the division and exit 1 before the SIGFPE this test is about */
#if defined(__has_attribute)
#if __has_attribute(no_sanitize)
__attribute__((no_sanitize("integer-divide-by-zero")))
#endif
#endif
static int divide(volatile int num, volatile int zero)
{
	return num / zero;
}

/* a store through p, not checked first: UBSan's null check and ASan (the
 * sanitizer build) would report it and exit 1 before the SIGSEGV this test
 * is about; p comes from a volatile, so the compiler cannot see a NULL and
 * turn the store into a trap (SIGILL) */
#if defined(__has_attribute)
#if __has_attribute(no_sanitize)
__attribute__((no_sanitize("null", "address")))
#endif
#endif
__attribute__((noinline)) static void store_through(volatile int *p)
{
	*p = 1;
}

static void misbehave(const char *how)
{
	if (!strcmp(how, "exit0"))
		exit(0); /* the bug: a "success" in the middle of training */
	if (!strcmp(how, "exit3"))
		exit(3);
	if (!strcmp(how, "segv")) {
		volatile uintptr_t zero = 0;
		store_through((volatile int *)zero);
	}
	if (!strcmp(how, "abort"))
		abort();
	if (!strcmp(how, "fpe")) {
		/* both volatile: 1 / x is computed without a division */
		volatile int q = divide(7, 0);
		(void)q;
	}
}

static int forward(void *state, const ph_ctx *ctx, float *const *params, const float *x, float *y, ph_err *err)
{
	const char *how = getenv("PH_TEST_MISBEHAVE"), *at = getenv("PH_TEST_MISBEHAVE_AT");
	const long call = __atomic_add_fetch(&calls, 1, __ATOMIC_SEQ_CST);
	if (how && call == (at ? strtol(at, NULL, 10) : 2))
		misbehave(how);
	return tl_forward_identity(state, ctx, params, x, y, err);
}

static const ph_layer_ops misbehave_ops = {
	TL_OPS(PH_HEAD_NOOPT(ph_layer_ops, "misbehave",
			     "identity that exits or crashes at forward call $PH_TEST_MISBEHAVE_AT (a test)"),
	       create, tl_meta, forward, tl_backward_identity),
};
TL_PLUGIN(misbehave_ops)
