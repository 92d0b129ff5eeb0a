/* The finite-difference gradient check of a CPU layer plugin, driven through
 * its ph_layer_ops as the engine drives it: create, meta, forward, backward.
 * Shared by test-layers.c and test-transformer.c; each includes it once,
 * after <check.h> (it includes layer-harness.h itself).
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
#include "layer-harness.h"

#define GRAD_INIT 0.375f /* starting value of every parameter gradient */

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
	int rc = L->ops->forward(L->state, &L->ctx, L->params, L->x, L->y, &e);
	ck_assert_msg(rc == PH_OK, "%s forward: %s", L->ops->head.name, e.msg);
}

static inline void bwd(inst *L, float *dx)
{
	ph_err e = { { 0 } };
	int rc = L->ops->backward(L->state, &L->ctx, L->params, L->grads, L->x, L->y,
				  L->loss ? NULL : L->r, dx, &e);
	ck_assert_msg(rc == PH_OK, "%s backward: %s", L->ops->head.name, e.msg);
}

/* ------------------------------------------------------------------ */
/* The check.                                                          */

typedef struct {
	float eps;       /* the nominal step */
	double tol;      /* the largest relative error allowed */
	/* 1: extrapolate central differences at eps and 2 eps (Richardson, error
	 * O(eps^4)), which allows a step large enough to drown the float
	 * rounding of deep layers (the gpt_block); 0: plain central difference. */
	int richardson;
	int x_ids;       /* 1: x holds ids, not differentiable: dx must be exactly 0 */
	/* 1: a layer with the split backward must give bitwise the dx and
	 * gradients of backward() from backward_input then backward_weight. */
	int split;
} fd_check;

/* The objective, summed in double. */
static inline double objective(inst *L)
{
	fwd(L);
	double s = 0;
	if (L->loss)
		for (int b = 0; b < L->batch; b++)
			s += L->y[2 * b];
	else
		for (int64_t i = 0; i < L->ny; i++)
			s += (double)L->y[i] * L->r[i];
	return s;
}

/* Central difference of the objective in v[i]; the step actually taken in
 * float is used, not the nominal eps. */
static inline double central(inst *L, float *v, int64_t i, float eps)
{
	float v0 = v[i];
	float vp = v0 + eps, vm = v0 - eps;
	v[i] = vp;
	double lp = objective(L);
	v[i] = vm;
	double lm = objective(L);
	v[i] = v0;
	return (lp - lm) / ((double)vp - (double)vm);
}

static inline double numeric(inst *L, float *v, int64_t i, const fd_check *c)
{
	if (!c->richardson)
		return central(L, v, i, c->eps);
	return (4 * central(L, v, i, c->eps) - central(L, v, i, 2 * c->eps)) / 3;
}

static inline double rel_err(double a, double n)
{
	double d = fmax(fmax(fabs(a), fabs(n)), 1e-3);
	return fabs(a - n) / d;
}

static double worst_seen; /* largest error of the last gradcheck, for tuning */

static inline void check_tensor(inst *L, const char *what, float *v, int64_t n,
				const float *analytic, const fd_check *c)
{
	for (int64_t i = 0; i < n; i++) {
		double a = analytic[i], num = numeric(L, v, i, c);
		double err = rel_err(a, num);
		if (!(err <= c->tol))
			ck_abort_msg("%s: d%s[%lld] analytic %.7g, numeric %.7g (error %.3g > %.3g)",
				     L->ops->head.name, what, (long long)i, a, num, err, c->tol);
		if (err > worst_seen)
			worst_seen = err;
	}
}

/*
 * Full gradient check of one instance, plus the contract:
 *  - forward and backward are bitwise deterministic;
 *  - parameter gradients accumulate, dx is overwritten;
 *  - dx = NULL is accepted and gives the same parameter gradients;
 *  - with c->split, the split backward gives bitwise what backward() gives.
 */
static inline void gradcheck_with(inst *L, const fd_check *c)
{
	worst_seen = 0;
	float *y1 = malloc(L->ny * sizeof(float));
	fwd(L);
	memcpy(y1, L->y, L->ny * sizeof(float));
	fwd(L);
	ck_assert_msg(memcmp(y1, L->y, L->ny * sizeof(float)) == 0,
		      "%s: two forwards differ", L->ops->head.name);

	/* Analytic: grads start at GRAD_INIT, dx at NaN. */
	for (int p = 0; p < L->meta.nparams; p++)
		for (int64_t i = 0; i < L->pn[p]; i++)
			L->grads[p][i] = GRAD_INIT;
	for (int64_t i = 0; i < L->nx; i++)
		L->dx[i] = NAN;
	bwd(L, L->dx);
	float *dx_a = malloc(L->nx * sizeof(float));
	memcpy(dx_a, L->dx, L->nx * sizeof(float));
	float *g_a[PH_MAX_PARAMS], *g_raw[PH_MAX_PARAMS];
	for (int p = 0; p < L->meta.nparams; p++) {
		g_a[p] = malloc(L->pn[p] * sizeof(float));
		g_raw[p] = malloc(L->pn[p] * sizeof(float));
		memcpy(g_raw[p], L->grads[p], L->pn[p] * sizeof(float));
		for (int64_t i = 0; i < L->pn[p]; i++)
			g_a[p][i] = L->grads[p][i] - GRAD_INIT;
	}

	/* Again, bitwise; then with dx = NULL: same parameter gradients. */
	for (int p = 0; p < L->meta.nparams; p++)
		for (int64_t i = 0; i < L->pn[p]; i++)
			L->grads[p][i] = GRAD_INIT;
	for (int64_t i = 0; i < L->nx; i++)
		L->dx[i] = 12345.0f;
	bwd(L, L->dx);
	ck_assert_msg(memcmp(dx_a, L->dx, L->nx * sizeof(float)) == 0,
		      "%s: two backwards give different dx", L->ops->head.name);
	for (int p = 0; p < L->meta.nparams; p++) {
		ck_assert_msg(memcmp(g_raw[p], L->grads[p], L->pn[p] * sizeof(float)) == 0,
			      "%s: two backwards give different d%s", L->ops->head.name,
			      L->meta.params[p].name);
		for (int64_t i = 0; i < L->pn[p]; i++)
			L->grads[p][i] = GRAD_INIT;
	}
	bwd(L, NULL);
	for (int p = 0; p < L->meta.nparams; p++)
		ck_assert_msg(memcmp(g_raw[p], L->grads[p], L->pn[p] * sizeof(float)) == 0,
			      "%s: backward with dx = NULL gives different d%s", L->ops->head.name,
			      L->meta.params[p].name);

	/* The split backward (I then W, as ZB-H1 runs them): bitwise the same. */
	if (c->split && ph_layer_has_split_backward(L->ops)) {
		ph_err e = { { 0 } };
		for (int p = 0; p < L->meta.nparams; p++)
			for (int64_t i = 0; i < L->pn[p]; i++)
				L->grads[p][i] = GRAD_INIT;
		for (int64_t i = 0; i < L->nx; i++)
			L->dx[i] = NAN;
		int rc = L->ops->backward_input(L->state, &L->ctx, L->params, L->x, L->y, L->r,
						L->dx, &e);
		ck_assert_msg(rc == PH_OK, "%s backward_input: %s", L->ops->head.name, e.msg);
		rc = L->ops->backward_weight(L->state, &L->ctx, L->params, L->grads, L->x, L->y,
					     L->r, &e);
		ck_assert_msg(rc == PH_OK, "%s backward_weight: %s", L->ops->head.name, e.msg);
		ck_assert_msg(memcmp(dx_a, L->dx, L->nx * sizeof(float)) == 0,
			      "%s: split backward gives a different dx", L->ops->head.name);
		for (int p = 0; p < L->meta.nparams; p++)
			ck_assert_msg(memcmp(g_raw[p], L->grads[p], L->pn[p] * sizeof(float)) == 0,
				      "%s: split backward gives a different d%s", L->ops->head.name,
				      L->meta.params[p].name);
	}

	/* Numeric. */
	if (!c->x_ids)
		check_tensor(L, "x", L->x, L->nx, dx_a, c);
	else
		for (int64_t i = 0; i < L->nx; i++)
			ck_assert_msg(dx_a[i] == 0.0f, "%s: dx[%lld] = %g, want 0", L->ops->head.name,
				      (long long)i, dx_a[i]);
	for (int p = 0; p < L->meta.nparams; p++)
		check_tensor(L, L->meta.params[p].name, L->params[p], L->pn[p], g_a[p], c);
	if (getenv("PH_TEST_VERBOSE"))
		fprintf(stderr, "%s: worst gradient error %.3g\n", L->ops->head.name, worst_seen);

	for (int p = 0; p < L->meta.nparams; p++)
		free(g_a[p]), free(g_raw[p]);
	free(dx_a);
	free(y1);
}

#endif
