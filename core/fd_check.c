/* SPDX-License-Identifier: MIT */
/* Finite-difference gradient checks of a layer instance (fd_check.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fd_check.h"

static int same_bits(const float *a, const float *b, int64_t n)
{
	return memcmp(a, b, (size_t)n * sizeof(float)) == 0;
}

static void set_grads(ph_layer_inst *L, float v)
{
	for (int p = 0; p < L->meta.nparams; p++)
		for (int64_t i = 0; i < L->pn[p]; i++)
			L->grads[p][i] = v;
}

static void set_dx(ph_layer_inst *L, float v)
{
	for (int64_t i = 0; i < L->nx; i++)
		L->dx[i] = v;
}

void ph_fd_grads_free(ph_fd_grads *a)
{
	free(a->dx);
	for (int p = 0; p < PH_MAX_PARAMS; p++)
		free(a->g[p]), free(a->g_raw[p]);
	memset(a, 0, sizeof *a);
}

int ph_fd_analytic(ph_layer_inst *L, ph_fd_grads *a, ph_err *err)
{
	memset(a, 0, sizeof *a);
	const char *name = L->ops->head.name;
	float *y1 = malloc((size_t)L->ny * sizeof(float));
	if (!y1)
		return ph_fail(err, PH_ENOMEM, "out of memory");
	int rc = ph_layer_inst_forward(L, err);
	if (!rc) {
		memcpy(y1, L->y, (size_t)L->ny * sizeof(float));
		rc = ph_layer_inst_forward(L, err);
	}
	if (!rc && !same_bits(y1, L->y, L->ny))
		rc = ph_fail(err, PH_EINVAL, "%s: two forwards differ", name);
	free(y1);
	if (rc)
		return rc;

	set_grads(L, PH_FD_GRAD_INIT);
	set_dx(L, NAN);
	if ((rc = ph_layer_inst_backward(L, L->dx, err)))
		return rc;
	if (!(a->dx = malloc((size_t)L->nx * sizeof(float))))
		return ph_fail(err, PH_ENOMEM, "out of memory");
	memcpy(a->dx, L->dx, (size_t)L->nx * sizeof(float));
	for (int p = 0; p < L->meta.nparams; p++) {
		a->g[p] = malloc((size_t)L->pn[p] * sizeof(float));
		a->g_raw[p] = malloc((size_t)L->pn[p] * sizeof(float));
		if (!a->g[p] || !a->g_raw[p]) {
			ph_fd_grads_free(a);
			return ph_fail(err, PH_ENOMEM, "out of memory");
		}
		memcpy(a->g_raw[p], L->grads[p], (size_t)L->pn[p] * sizeof(float));
		for (int64_t i = 0; i < L->pn[p]; i++)
			a->g[p][i] = L->grads[p][i] - PH_FD_GRAD_INIT;
	}
	return PH_OK;
}

/* The gradients and dx of the last backward (dx in `dx`) against *a. */
static int same_as(ph_layer_inst *L, const ph_fd_grads *a, const float *dx, const char *how, ph_err *err)
{
	if (!same_bits(a->dx, dx, L->nx))
		return ph_fail(err, PH_EINVAL, "%s: backward %s gives another dx", L->ops->head.name, how);
	for (int p = 0; p < L->meta.nparams; p++)
		if (!same_bits(a->g_raw[p], L->grads[p], L->pn[p]))
			return ph_fail(err, PH_EINVAL, "%s: backward %s gives another d%s", L->ops->head.name, how,
				       L->meta.params[p].name);
	return PH_OK;
}

int ph_fd_check_repeat(ph_layer_inst *L, const ph_fd_grads *a, ph_err *err)
{
	set_grads(L, PH_FD_GRAD_INIT);
	set_dx(L, 12345.0f);
	int rc = ph_layer_inst_backward(L, L->dx, err);
	if (rc || (rc = same_as(L, a, L->dx, "run twice", err)))
		return rc;
	/* dx = NULL writes no dx: L->dx keeps the bits just compared */
	set_grads(L, PH_FD_GRAD_INIT);
	if ((rc = ph_layer_inst_backward(L, NULL, err)))
		return rc;
	return same_as(L, a, L->dx, "with dx = NULL", err);
}

int ph_fd_check_split(ph_layer_inst *L, const ph_fd_grads *a, ph_err *err)
{
	if (!ph_layer_has_split_backward(L->ops))
		return PH_OK;
	const char *name = L->ops->head.name;
	ph_err e = { { 0 } };
	set_grads(L, PH_FD_GRAD_INIT);
	set_dx(L, NAN);
	const float *dy = L->loss ? NULL : L->r;
	int rc = L->ops->backward_input(L->state, &L->ctx, L->params, L->x, L->y, dy, L->dx, &e);
	if (rc)
		return ph_fail(err, rc, "%s backward_input: %s", name, e.msg);
	rc = L->ops->backward_weight(L->state, &L->ctx, L->params, L->grads, L->x, L->y, dy, &e);
	if (rc)
		return ph_fail(err, rc, "%s backward_weight: %s", name, e.msg);
	return same_as(L, a, L->dx, "split (backward_input, then backward_weight)", err);
}

/* PH_LAYER_BACKWARD_NO_Y: the host may have written the next layer's
 * input gradient over y, so backward must give its bits with y all NaN. */
static int check_no_y(ph_layer_inst *L, const ph_fd_grads *a, float *keep, ph_err *err)
{
	const char *how = "with y all NaN (PH_LAYER_BACKWARD_NO_Y says it never reads y)";
	const float *dy = L->loss ? NULL : L->r;
	ph_err e = { { 0 } };
	memcpy(keep, L->y, (size_t)L->ny * sizeof(float));
	for (int64_t i = 0; i < L->ny; i++)
		L->y[i] = NAN;
	set_grads(L, PH_FD_GRAD_INIT);
	set_dx(L, NAN);
	int rc = ph_layer_inst_backward(L, L->dx, err);
	if (!rc)
		rc = same_as(L, a, L->dx, how, err);
	if (!rc && ph_layer_has_split_backward(L->ops)) {
		set_grads(L, PH_FD_GRAD_INIT);
		set_dx(L, NAN);
		if ((rc = L->ops->backward_input(L->state, &L->ctx, L->params, L->x, L->y, dy, L->dx, &e)) ||
		    (rc = L->ops->backward_weight(L->state, &L->ctx, L->params, L->grads, L->x, L->y, dy, &e)))
			rc = ph_fail(err, rc, "%s split backward: %s", L->ops->head.name, e.msg);
		else
			rc = same_as(L, a, L->dx, "split, with y all NaN (PH_LAYER_BACKWARD_NO_Y)", err);
	}
	memcpy(L->y, keep, (size_t)L->ny * sizeof(float));
	return rc;
}

/* PH_LAYER_DX_OVER_X: the host may hand x itself as dx. */
static int check_dx_over_x(ph_layer_inst *L, const ph_fd_grads *a, float *keep, ph_err *err)
{
	memcpy(keep, L->x, (size_t)L->nx * sizeof(float));
	set_grads(L, PH_FD_GRAD_INIT);
	int rc = ph_layer_inst_backward(L, L->x, err);
	if (!rc)
		rc = same_as(L, a, L->x, "with dx = x (PH_LAYER_DX_OVER_X says it reads x before writing over it)",
			     err);
	memcpy(L->x, keep, (size_t)L->nx * sizeof(float));
	return rc;
}

int ph_fd_check_in_place(ph_layer_inst *L, const ph_fd_grads *a, ph_err *err)
{
	const uint32_t f = L->ops->flags;
	if (!(f & (PH_LAYER_BACKWARD_NO_Y | PH_LAYER_DX_OVER_X)))
		return PH_OK;
	float *keep = malloc((size_t)(L->nx > L->ny ? L->nx : L->ny) * sizeof(float));
	if (!keep)
		return ph_fail(err, PH_ENOMEM, "out of memory");
	int rc = PH_OK;
	if (f & PH_LAYER_BACKWARD_NO_Y)
		rc = check_no_y(L, a, keep, err);
	if (!rc && (f & PH_LAYER_DX_OVER_X))
		rc = check_dx_over_x(L, a, keep, err);
	free(keep);
	return rc;
}

/* The objective, summed in double. */
static int objective(ph_layer_inst *L, double *out, ph_err *err)
{
	int rc = ph_layer_inst_forward(L, err);
	if (rc)
		return rc;
	double s = 0;
	if (L->loss)
		for (int b = 0; b < L->batch; b++)
			s += L->y[2 * b];
	else
		for (int64_t i = 0; i < L->ny; i++)
			s += (double)L->y[i] * L->r[i];
	*out = s;
	return PH_OK;
}

/* The objective with v[i] moved by d (restored after); *step: the move
 * actually taken in float. */
static int moved(ph_layer_inst *L, float *v, int64_t i, float d, double *l, double *step, ph_err *err)
{
	float v0 = v[i];
	v[i] = v0 + d;
	*step = (double)v[i] - (double)v0;
	int rc = objective(L, l, err);
	v[i] = v0;
	return rc;
}

/* Central difference of the objective in v[i]; the step actually taken in
 * float is used, not the nominal eps. */
static int central(ph_layer_inst *L, float *v, int64_t i, float eps, double *out, ph_err *err)
{
	double lp, lm, sp, sm;
	int rc = moved(L, v, i, eps, &lp, &sp, err);
	if (!rc)
		rc = moved(L, v, i, -eps, &lm, &sm, err);
	if (!rc)
		*out = (lp - lm) / (sp - sm);
	return rc;
}

static int richardson(ph_layer_inst *L, float *v, int64_t i, float eps, double *out, ph_err *err)
{
	double c1, c2;
	int rc = central(L, v, i, eps, &c1, err);
	if (!rc)
		rc = central(L, v, i, 2 * eps, &c2, err);
	if (!rc)
		*out = (4 * c1 - c2) / 3;
	return rc;
}

static double rel_err_floor(double a, double n, double floor)
{
	double d = fmax(fmax(fabs(a), fabs(n)), fmax(floor, 1e-3));
	return fabs(a - n) / d;
}

/* The error of the analytic value a against the differences at v[i]: the
 * check's own estimate, and with c->kinks the smallest of the others' too;
 * floor: the least denominator (tensor_floor). */
static int element_error(ph_layer_inst *L, float *v, int64_t i, double a, const ph_fd_check *c, double floor,
			 double *num, double *error, ph_err *err)
{
	int rc = c->richardson ? richardson(L, v, i, c->eps, num, err) : central(L, v, i, c->eps, num, err);
	if (rc)
		return rc;
	*error = rel_err_floor(a, *num, floor);
	if (!c->kinks || *error <= c->tol)
		return PH_OK;
	double alt, l0, lp, lm, sp, sm;
	if ((rc = richardson(L, v, i, 10 * c->eps, &alt, err)))
		return rc;
	*error = fmin(*error, rel_err_floor(a, alt, floor));
	if ((rc = objective(L, &l0, err)) || (rc = moved(L, v, i, c->eps, &lp, &sp, err)) ||
	    (rc = moved(L, v, i, -c->eps, &lm, &sm, err)))
		return rc;
	*error = fmin(*error, fmin(rel_err_floor(a, (lp - l0) / sp, floor), rel_err_floor(a, (lm - l0) / sm, floor)));
	return PH_OK;
}

static int check_tensor(ph_layer_inst *L, const char *what, float *v, int64_t n, const float *analytic,
			const ph_fd_check *c, double *worst, ph_err *err)
{
	double floor = 0;
	if (c->tensor_floor > 0)
		for (int64_t i = 0; i < n; i++)
			floor = fmax(floor, c->tensor_floor * fabs(analytic[i]));
	int64_t probes = ph_fd_probes(c, n);
	for (int64_t k = 0; k < probes; k++) {
		/* evenly spread: 0, ..., n - 1 when sampling */
		int64_t i = probes == n ? k : (probes > 1 ? k * (n - 1) / (probes - 1) : 0);
		double a = analytic[i], num, error;
		int rc = element_error(L, v, i, a, c, floor, &num, &error, err);
		if (rc)
			return rc;
		if (!(error <= c->tol))
			return ph_fail(err, PH_EINVAL, "%s: d%s[%lld] analytic %.7g, numeric %.7g (error %.3g > %.3g)",
				       L->ops->head.name, what, (long long)i, a, num, error, c->tol);
		if (error > *worst)
			*worst = error;
	}
	return PH_OK;
}

int ph_fd_check_numeric(ph_layer_inst *L, const ph_fd_grads *a, const ph_fd_check *c, double *worst, ph_err *err)
{
	*worst = 0;
	int rc = PH_OK;
	if (!c->x_ids)
		rc = check_tensor(L, "x", L->x, L->nx, a->dx, c, worst, err);
	else
		for (int64_t i = 0; i < L->nx && !rc; i++)
			if (a->dx[i] != 0.0f)
				rc = ph_fail(err, PH_EINVAL, "%s: dx[%lld] = %g, want 0", L->ops->head.name, (long long)i,
					     a->dx[i]);
	for (int p = 0; p < L->meta.nparams && !rc; p++)
		rc = check_tensor(L, L->meta.params[p].name, L->params[p], L->pn[p], a->g[p], c, worst, err);
	return rc;
}

int ph_fd_gradcheck(ph_layer_inst *L, const ph_fd_check *c, double *worst, ph_err *err)
{
	ph_fd_grads a;
	*worst = 0;
	int rc = ph_fd_analytic(L, &a, err);
	if (!rc)
		rc = ph_fd_check_repeat(L, &a, err);
	if (!rc && c->split)
		rc = ph_fd_check_split(L, &a, err);
	if (!rc)
		rc = ph_fd_check_in_place(L, &a, err);
	if (!rc)
		rc = ph_fd_check_numeric(L, &a, c, worst, err);
	ph_fd_grads_free(&a);
	return rc;
}
