/* SPDX-License-Identifier: MIT */
/*
 * test-scale: the scale layer's finite-difference gradient test.
 *
 *     ./test-scale ./scale.so
 *
 * Loads the plugin as the host does (dlopen, the pipehost_plugin symbol),
 * runs forward and backward on random numbers, and compares every input
 * and parameter gradient with a central difference of the objective
 * L = sum(y .* r):  (L(v + eps) - L(v - eps)) / (2 eps).  The gradients
 * start at GRAD0 and dx at NaN, as the host's buffers may: backward must add
 * to the gradients (+=) and overwrite dx (=), and a swap of the two fails
 * here.  Prints one line and exits 0 when all agree, 1 otherwise.  `pipehost --check-plugin` runs
 * this check and more on any plugin; keep this file as the start of your
 * layer's own tests (forward values against a reference, edge cases).
 */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pipehost/plugin.h>

#include "scale.h"

#define B 2        /* batch */
#define EPS 1e-2f
#define TOL 1e-2
#define GRAD0 0.375f /* what the gradients hold before backward: it must add to it */

static float urand(void)
{
	return 2.0f * (float)rand() / (float)RAND_MAX - 1.0f;
}

static const ph_layer_ops *ops;
static void *st;
static float *params[PH_MAX_PARAMS];
static ph_ctx ctx = { .batch = B, .training = 1, .device = PH_DEV_CPU };

static double objective(const float *x, float *y, const float *r, int64_t ny)
{
	ph_err err = { { 0 } };
	if (ops->forward(st, &ctx, params, x, y, &err)) {
		fprintf(stderr, "test-scale: forward: %s\n", err.msg);
		exit(1);
	}
	double s = 0;
	for (int64_t i = 0; i < ny; i++)
		s += (double)y[i] * r[i];
	return s;
}

/* Compare analytic[i] - base with the central difference in v[i], for every i. */
static int check(const char *what, float *v, int64_t n, const float *analytic, float base, const float *x,
		 float *y, const float *r, int64_t ny)
{
	for (int64_t i = 0; i < n; i++) {
		float v0 = v[i];
		v[i] = v0 + EPS;
		double lp = objective(x, y, r, ny);
		v[i] = v0 - EPS;
		double lm = objective(x, y, r, ny);
		v[i] = v0;
		double num = (lp - lm) / (2.0 * EPS), a = (double)analytic[i] - base;
		double err = fabs(a - num) / fmax(fmax(fabs(a), fabs(num)), 1e-3);
		if (!(err <= TOL)) { /* not `>`: a NaN left in dx must fail */
			if (base != 0)
				printf("FAIL d%s[%lld]: backward added %.6g to the %g there before (gradients: +=), "
				       "finite difference %.6g\n", what, (long long)i, a, base, num);
			else
				printf("FAIL d%s[%lld]: backward %.6g (dx starts as NaN: backward writes it, =), "
				       "finite difference %.6g\n", what, (long long)i, a, num);
			return 1;
		}
	}
	return 0;
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: test-scale ./scale.so\n");
		return 2;
	}
	void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	ph_plugin_fn fn = h ? (ph_plugin_fn)dlsym(h, PH_PLUGIN_SYMBOL) : NULL;
	if (!fn) {
		fprintf(stderr, "test-scale: %s: %s\n", argv[1], h ? "no pipehost_plugin symbol" : dlerror());
		return 1;
	}
	ops = fn()->layers[0];

	scale_config cfg = { .bias = 1 };
	ph_shape in = { 2, { 3, 4 } };
	ph_err err = { { 0 } };
	ph_layer_meta m;
	if (ops->create(&cfg, &in, B, &st, &err) || ops->meta(st, &m, &err)) {
		fprintf(stderr, "test-scale: %s\n", err.msg);
		return 1;
	}
	int64_t nx = B * ph_shape_numel(&in), ny = B * ph_shape_numel(&m.out), pn[PH_MAX_PARAMS];
	float *x = malloc(nx * sizeof(float)), *dx = malloc(nx * sizeof(float));
	float *y = malloc(ny * sizeof(float)), *r = malloc(ny * sizeof(float));
	float *grads[PH_MAX_PARAMS];
	srand(1);
	for (int64_t i = 0; i < nx; i++)
		x[i] = urand();
	for (int64_t i = 0; i < ny; i++)
		r[i] = urand(); /* dL/dy */
	for (int p = 0; p < m.nparams; p++) {
		pn[p] = ph_shape_numel(&m.params[p].shape);
		params[p] = malloc(pn[p] * sizeof(float));
		grads[p] = malloc(pn[p] * sizeof(float));
		for (int64_t i = 0; i < pn[p]; i++) {
			params[p][i] = urand();
			grads[p][i] = GRAD0; /* from an earlier micro-batch: backward adds to it */
		}
	}
	for (int64_t i = 0; i < nx; i++)
		dx[i] = NAN; /* stale: backward overwrites every element */
	objective(x, y, r, ny);
	if (ops->backward(st, &ctx, params, grads, x, y, r, dx, &err)) {
		fprintf(stderr, "test-scale: backward: %s\n", err.msg);
		return 1;
	}
	int bad = check("x", x, nx, dx, 0.0f, x, y, r, ny);
	for (int p = 0; p < m.nparams && !bad; p++)
		bad = check(m.params[p].name, params[p], pn[p], grads[p], GRAD0, x, y, r, ny);
	if (!bad)
		printf("ok: dx (=) and %d parameter gradient(s) (+=) agree with finite differences\n", m.nparams);
	ops->destroy(st);
	return bad;
}
