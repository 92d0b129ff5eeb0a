/* SPDX-License-Identifier: MIT */
/* The finite-difference gradient check of a CPU layer plugin, driven through
 * its ph_layer_ops as the engine drives it: create, meta, forward, backward.
 * Shared by test-layers.c and test-transformer.c; each includes it once,
 * after <check.h> (it includes layer-harness.h itself).  The check itself
 * is the host's (core/fd_check.h, which pipehost --check-plugin runs on
 * third-party layers); this file turns its errors into test failures.
 *
 * L = sum(y .* r) for a random r (for a loss layer, L = the summed loss with
 * loss_scale 1).  backward(dy = r) must give dL/dx and dL/dparams; they are
 * compared with central differences (L(v + eps) - L(v - eps)) / (2 eps),
 * error measured as |a - n| / max(|a|, |n|, 1e-3).  Gradients start at a
 * nonzero value to catch "=" where "+=" is due, and dx starts as NaN to
 * catch "+=" where "=" is due.
 *
 * What differs between the two binaries is a parameter: how inst_open_k()
 * draws a loss layer's targets (fd_classes), and what gradcheck_with()
 * checks besides the central differences (fd_check: Richardson
 * extrapolation, an input of ids, the split backward). */
#ifndef PH_TESTS_FD_HARNESS_H
#define PH_TESTS_FD_HARNESS_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pipehost/plugin.h>
#include "fd_check.h"
#include "layer-harness.h"

#define GRAD_INIT PH_FD_GRAD_INIT /* starting value of every parameter gradient */

/* Create with max_batch 4; returns the status, the message in *e. */
static inline int try_create(const char *type, const char *const *kv, ph_shape in, ph_err *e)
{
	const ph_layer_ops *ops = load_layer(type);
	void *cfg = make_config(ops, kv);
	void *state = NULL;
	memset(e, 0, sizeof *e);
	int rc = ops->create(cfg, &in, 4, &state, e);
	if (rc == PH_OK)
		ops->destroy(state);
	free(cfg);
	return rc;
}

/* ------------------------------------------------------------------ */
/* The instance (layer-harness.h's inst), drawn as the checks need.    */

/* The classes a loss layer's targets are drawn from. */
typedef enum {
	FD_CLASSES_NUMEL,    /* every element of the input: a [K] input (softmax_xent) */
	FD_CLASSES_LAST_DIM, /* its last dimension: [T, V], a target per position (seq_xent) */
} fd_classes;

/* x, r and the parameters U(-1, 1); a CPU training context, loss_scale 1. */
static inline void inst_open_k(inst *L, const char *type, const char *const *kv, ph_shape in,
			       int batch, fd_classes classes)
{
	inst_create(L, type, kv, in, batch,
		    (ph_ctx){ .batch = batch, .training = 1, .seed = 1234, .step = 7,
			      .microbatch = 3, .layer = 2, .device = PH_DEV_CPU, .loss_scale = 1.0f });
	fill_uniform(L->x, L->nx, -1, 1);
	inst_draw(L, 1.0f, classes == FD_CLASSES_LAST_DIM ? in.d[in.ndim - 1] : ph_shape_numel(&in));
}

static inline void fwd(inst *L)
{
	ph_err e = { { 0 } };
	int rc = ph_layer_inst_forward(L, &e);
	ck_assert_msg(rc == PH_OK, "%s", e.msg);
}

static inline void bwd(inst *L, float *dx)
{
	ph_err e = { { 0 } };
	int rc = ph_layer_inst_backward(L, dx, &e);
	ck_assert_msg(rc == PH_OK, "%s", e.msg);
}

/* ------------------------------------------------------------------ */
/* The check: core/fd_check.h's, as a test.                            */

typedef ph_fd_check fd_check;

static double worst_seen; /* largest error of the last gradcheck, for tuning */

/*
 * Full gradient check of one instance, plus the contract:
 *  - forward and backward are bitwise deterministic;
 *  - parameter gradients accumulate, dx is overwritten;
 *  - dx = NULL is accepted and gives the same parameter gradients;
 *  - with c->split, the split backward gives bitwise what backward() gives.
 */
static inline void gradcheck_with(inst *L, const fd_check *c)
{
	ph_err e = { { 0 } };
	int rc = ph_fd_gradcheck(L, c, &worst_seen, &e);
	ck_assert_msg(rc == PH_OK, "%s", e.msg);
	if (getenv("PH_TEST_VERBOSE"))
		fprintf(stderr, "%s: worst gradient error %.3g\n", L->ops->head.name, worst_seen);
}

#endif
