/* SPDX-License-Identifier: MIT */
/* Optimizers and the learning-rate schedule against hand formulas (in
 * double) and against numbers from torch.optim. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "optim.h"
#include "unit-harness.h"

#define N 5
static const float w0[N] = { 0.5f, -1.25f, 2.0f, 0.0f, -0.75f };
static const float grads[3][N] = {
	{ 0.1f, -0.2f, 0.3f, -0.4f, 0.05f },
	{ -0.3f, 0.1f, 0.2f, 0.0f, -0.5f },
	{ 0.25f, 0.25f, -0.1f, 0.6f, 0.0f },
};

/* Produced once, by hand, with torch 2.15.0 on the CPU (not a dependency):
 *   import torch
 *   def run(make):
 *       p = torch.nn.Parameter(torch.tensor(w0, dtype=torch.float32))
 *       opt = make([p])
 *       for g in grads:
 *           p.grad = torch.tensor(g, dtype=torch.float32); opt.step()
 *       print(", ".join("%.9ef" % x for x in p.detach().tolist()))
 *   run(lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9,
 *                                  weight_decay=0.01, foreach=False))
 * and likewise for each optimizer named beside its numbers. */
static const float torch_sgd_mom[N] = { /* SGD(lr=0.1, momentum=0.9, weight_decay=0.01) */
	5.021053553e-01f, -1.232859373e+00f, 1.879623652e+00f, 4.824803397e-02f,
	-6.643770933e-01f };
static const float torch_sgd_nesterov[N] = { /* same, nesterov=True */
	4.953870475e-01f, -1.245945811e+00f, 1.845940709e+00f, 2.314834483e-02f,
	-6.257976890e-01f };
static const float torch_sgd_plain[N] = { /* SGD(lr=0.1) */
	4.950000346e-01f, -1.264999986e+00f, 1.960000038e+00f, -1.999999955e-02f,
	-7.049999833e-01f };
static const float torch_adamw[N] = { /* AdamW(lr=1e-2, betas=(.9,.999), eps=1e-8, weight_decay=0.1) */
	4.924914837e-01f, -1.237004519e+00f, 1.968813419e+00f, 1.422812510e-02f,
	-7.457923889e-01f };
static const float torch_adamw_nodecay[N] = { /* same, weight_decay=0 */
	4.939749241e-01f, -1.240728140e+00f, 1.974777579e+00f, 1.425481681e-02f,
	-7.480533719e-01f };

/* The configs under test; every field not named is 0: a constant lr, no
 * warm-up, no clipping. */
static ph_optim_config sgd_cfg(double mom, int nesterov, double wd)
{
	return (ph_optim_config){ .type = PH_OPTIM_SGD, .lr = 0.1, .momentum = mom,
				  .nesterov = nesterov, .weight_decay = wd };
}

static ph_optim_config adamw_cfg(double wd)
{
	return (ph_optim_config){ .type = PH_OPTIM_ADAMW, .lr = 1e-2, .beta1 = 0.9, .beta2 = 0.999,
				  .eps = 1e-8, .weight_decay = wd };
}

static ph_optim_config lion_cfg(double wd)
{
	return (ph_optim_config){ .type = PH_OPTIM_LION, .lr = 1e-2, .beta1 = 0.9, .beta2 = 0.99,
				  .weight_decay = wd };
}

/* Three steps of the optimizer on w0 with grads, at a constant lr. */
static void run3(const ph_optim_config *c, int decay, float *w, float *s)
{
	memcpy(w, w0, sizeof w0);
	memset(s, 0, 2 * N * sizeof *s);
	for (int t = 1; t <= 3; t++)
		ph_optim_update(c, t, c->lr, w, grads[t - 1], s, N, decay);
}

/* The same three steps, written out from the formulas in double. */
static void ref_sgd(double lr, double mom, int nesterov, double wd, double *w)
{
	double v[N] = { 0 };
	for (int i = 0; i < N; i++)
		w[i] = w0[i];
	for (int t = 0; t < 3; t++)
		for (int i = 0; i < N; i++) {
			double g = grads[t][i] + wd * w[i];
			v[i] = mom * v[i] + g;
			w[i] -= lr * (nesterov ? g + mom * v[i] : v[i]);
		}
}

static void ref_adamw(double lr, double b1, double b2, double eps, double wd, double *w,
		      double *m, double *v)
{
	for (int i = 0; i < N; i++)
		w[i] = w0[i], m[i] = v[i] = 0;
	for (int t = 1; t <= 3; t++)
		for (int i = 0; i < N; i++) {
			double g = grads[t - 1][i];
			w[i] -= lr * wd * w[i];
			m[i] = b1 * m[i] + (1 - b1) * g;
			v[i] = b2 * v[i] + (1 - b2) * g * g;
			double mhat = m[i] / (1 - pow(b1, t)), vhat = v[i] / (1 - pow(b2, t));
			w[i] -= lr * mhat / (sqrt(vhat) + eps);
		}
}

/* Float against double: a few float roundings per step, three steps. */
static void near_d(const float *got, const double *want, double tol)
{
	for (int i = 0; i < N; i++)
		ck_assert_msg(fabs(got[i] - want[i]) <= tol * fmax(1.0, fabs(want[i])),
			      "element %d: %.9g, expected %.9g", i, got[i], want[i]);
}

/* Against torch: same float arithmetic, possibly in another order. */
static void near_f(const float *got, const float *want)
{
	for (int i = 0; i < N; i++)
		ck_assert_msg(fabsf(got[i] - want[i]) <= 4e-7f * fmaxf(1.f, fabsf(want[i])),
			      "element %d: %.9g, torch says %.9g", i, got[i], want[i]);
}

START_TEST(test_sgd_plain)
{
	/* No momentum, no decay: one step is exactly w - lr*g in float. */
	ph_optim_config c = sgd_cfg(0, 0, 0);
	float w[N], s[2 * N] = { 0 };
	memcpy(w, w0, sizeof w);
	ph_optim_update(&c, 1, 0.1, w, grads[0], s, N, 1);
	for (int i = 0; i < N; i++)
		ck_assert_float_eq(w[i], w0[i] - 0.1f * grads[0][i]);
	double r[N];
	run3(&c, 1, w, s);
	ref_sgd(0.1, 0, 0, 0, r);
	near_d(w, r, 1e-6);
	near_f(w, torch_sgd_plain);
}
END_TEST

START_TEST(test_sgd_momentum)
{
	ph_optim_config c = sgd_cfg(0.9, 0, 0.01);
	float w[N], s[2 * N];
	double r[N];
	run3(&c, 1, w, s);
	ref_sgd(0.1, 0.9, 0, 0.01, r);
	near_d(w, r, 1e-6);
	near_f(w, torch_sgd_mom);

	/* Step 1 by hand for element 0: v = g + wd*w = 0.1 + 0.005 = 0.105,
	 * w = 0.5 - 0.1*0.105 = 0.4895; and the buffer holds v. */
	float w1[N], s1[N] = { 0 };
	memcpy(w1, w0, sizeof w1);
	ph_optim_update(&c, 1, 0.1, w1, grads[0], s1, N, 1);
	ck_assert_double_eq_tol(w1[0], 0.4895, 1e-7);
	ck_assert_double_eq_tol(s1[0], 0.105, 1e-7);

	c.nesterov = 1;
	run3(&c, 1, w, s);
	ref_sgd(0.1, 0.9, 1, 0.01, r);
	near_d(w, r, 1e-6);
	near_f(w, torch_sgd_nesterov);
}
END_TEST

START_TEST(test_adamw)
{
	ph_optim_config c = adamw_cfg(0.1);
	ck_assert_int_eq(ph_optim_state_per_param(&c), 2);
	float w[N], s[2 * N];
	double r[N], m[N], v[N];
	run3(&c, 1, w, s);
	ref_adamw(1e-2, 0.9, 0.999, 1e-8, 0.1, r, m, v);
	near_d(w, r, 1e-6);
	near_f(w, torch_adamw);
	/* State layout: m in s[0..n), v in s[n..2n). */
	near_d(s, m, 1e-6);
	near_d(s + N, v, 1e-6);

	/* Step 1 by hand: mhat = g, vhat = g^2, so the step is lr*g/(|g|+eps),
	 * after the decoupled decay w *= 1 - lr*wd. */
	float w1[N], s1[2 * N] = { 0 };
	memcpy(w1, w0, sizeof w1);
	ph_optim_update(&c, 1, 1e-2, w1, grads[0], s1, N, 1);
	for (int i = 0; i < N; i++) {
		double g = grads[0][i];
		double want = w0[i] * (1 - 1e-3) - 1e-2 * g / (fabs(g) + 1e-8);
		ck_assert_double_eq_tol(w1[i], want, 1e-6);
		ck_assert_double_eq_tol(s1[i], 0.1 * g, 1e-8);
		ck_assert_double_eq_tol(s1[N + i], 0.001 * g * g, 1e-9);
	}
}
END_TEST

/* Lion (Chen et al. 2023, program 1) in double: w *= 1 - lr*wd;
 * c = b1*m + (1-b1)*g; w -= lr*sign(c); m = b2*m + (1-b2)*g. */
static void ref_lion(double lr, double b1, double b2, double wd, double *w, double *m)
{
	for (int i = 0; i < N; i++) {
		w[i] = w0[i];
		m[i] = 0;
	}
	for (int t = 0; t < 3; t++)
		for (int i = 0; i < N; i++) {
			double g = grads[t][i], c = b1 * m[i] + (1 - b1) * g;
			w[i] *= 1 - lr * wd;
			w[i] -= lr * (c > 0 ? 1 : c < 0 ? -1 : 0);
			m[i] = b2 * m[i] + (1 - b2) * g;
		}
}

START_TEST(test_lion)
{
	ph_optim_config c = lion_cfg(0.1);
	ck_assert_int_eq(ph_optim_state_per_param(&c), 1);
	float w[N], s[2 * N];
	double r[N], m[N];
	run3(&c, 1, w, s);
	ref_lion(1e-2, 0.9, 0.99, 0.1, r, m);
	near_d(w, r, 1e-6);
	near_d(s, m, 1e-7);

	/* Without decay every element moves by lr a step, or not at all: the
	 * step's size does not follow the gradient's. */
	c.weight_decay = 0;
	run3(&c, 1, w, s);
	ref_lion(1e-2, 0.9, 0.99, 0, r, m);
	for (int i = 0; i < N; i++) {
		double steps = (w0[i] - w[i]) / 1e-2;
		ck_assert_double_eq_tol(steps, round(steps), 1e-4);
		ck_assert_double_eq_tol(w[i], r[i], 1e-6);
	}
	/* sign(0) = 0: a zero gradient on a zero moment leaves the weight */
	const float g0[N] = { 0.f, 0.f, 1e-30f, -1e-30f, 0.f };
	float w1[N], s1[N] = { 0 };
	memcpy(w1, w0, sizeof w1);
	ph_optim_update(&c, 1, 1e-2, w1, g0, s1, N, 1);
	ck_assert_float_eq(w1[0], w0[0]);
	ck_assert_float_eq(w1[1], w0[1]);
	ck_assert_float_eq(w1[2], w0[2] - 1e-2f);
	ck_assert_float_eq(w1[3], w0[3] + 1e-2f);
	ck_assert_float_eq(w1[4], w0[4]);
}
END_TEST

START_TEST(test_decay_exemption)
{
	/* decay = 0 must give exactly what weight_decay = 0 gives. */
	float a[N], b[N], sa[2 * N], sb[2 * N];
	ph_optim_config with = adamw_cfg(0.1), without = adamw_cfg(0.0);
	run3(&with, 0, a, sa);
	run3(&without, 1, b, sb);
	ck_assert_mem_eq(a, b, sizeof a);
	near_f(a, torch_adamw_nodecay);
	run3(&with, 1, a, sa);
	ck_assert_float_ne(a[0], b[0]);

	with = sgd_cfg(0.9, 0, 0.01), without = sgd_cfg(0.9, 0, 0);
	run3(&with, 0, a, sa);
	run3(&without, 1, b, sb);
	ck_assert_mem_eq(a, b, sizeof a);
	ck_assert_mem_eq(sa, sb, N * sizeof *sa);
	run3(&with, 1, a, sa);
	ck_assert_float_ne(a[0], b[0]);
}
END_TEST

START_TEST(test_deterministic)
{
	float a[N], b[N], sa[2 * N], sb[2 * N];
	ph_optim_config c = adamw_cfg(0.1);
	run3(&c, 1, a, sa);
	run3(&c, 1, b, sb);
	ck_assert_mem_eq(a, b, sizeof a);
	ck_assert_mem_eq(sa, sb, sizeof sa);
	ck_assert_int_eq(ph_optim_state_per_param(&(ph_optim_config){ .type = PH_OPTIM_SGD }),
			 1);
}
END_TEST

/* core/optim.c's AdamW as one plain loop, as it was before the SSE kernel
 * (shapes: w, g [n], s [2n] = m then v); the kernel must match it bitwise. */
static void adamw_plain(const ph_optim_config *c, int64_t t, double lr, float *w,
			const float *g, float *s, int64_t n, int decay)
{
	if (t < 1)
		t = 1;
	float *m = s, *v = s + n;
	const double bc1 = 1.0 - pow(c->beta1, (double)t);
	const double bc2 = 1.0 - pow(c->beta2, (double)t);
	const float step_size = (float)(lr / bc1);
	const float bc2_sqrt = (float)sqrt(bc2);
	const float b1 = (float)c->beta1, b2 = (float)c->beta2;
	const float one_b1 = (float)(1.0 - c->beta1), one_b2 = (float)(1.0 - c->beta2);
	const float eps = (float)c->eps;
	const float keep = (float)(1.0 - lr * (decay ? c->weight_decay : 0.0));
	for (int64_t i = 0; i < n; i++) {
		float wi = w[i];
		if (keep != 1.f)
			wi *= keep;
		float gi = g[i];
		float mi = b1 * m[i] + one_b1 * gi;
		float vi = b2 * v[i] + one_b2 * gi * gi;
		m[i] = mi;
		v[i] = vi;
		float denom = sqrtf(vi) / bc2_sqrt + eps;
		w[i] = wi - step_size * (mi / denom);
	}
}

/* The vectorised update against the plain loop: every length 1..37 (SSE
 * blocks and their tails), with and without decay, early and late steps,
 * gradients over many magnitudes (zero and tiny ones included). */
START_TEST(test_adamw_kernel_bitwise)
{
	ph_optim_config c = adamw_cfg(0.1);
	uint64_t r = 12345;
	for (int n = 1; n <= 37; n++)
		for (int decay = 0; decay <= 1; decay++) {
			float *w = malloc(n * sizeof *w), *wr = malloc(n * sizeof *w);
			float *g = malloc(n * sizeof *g);
			float *st = calloc(2 * n, sizeof *st), *sr = calloc(2 * n, sizeof *st);
			for (int i = 0; i < n; i++) {
				r = r * 6364136223846793005ull + 1442695040888963407ull;
				w[i] = wr[i] = (float)((int)(r >> 40) % 2001 - 1000) / 700.0f;
			}
			for (int64_t t = 1; t <= 40; t += 3) {
				for (int i = 0; i < n; i++) {
					r = r * 6364136223846793005ull + 1442695040888963407ull;
					int e = (int)(r >> 59) - 20;  /* 2^-20 .. 2^11 */
					g[i] = i % 7 == 3 ? 0.0f
						: ldexpf((float)((int)(r >> 33) % 1000 - 500) / 500.0f, e);
				}
				double lr = 1e-3 * (double)t;
				ph_optim_update(&c, t * 37, lr, w, g, st, n, decay);
				adamw_plain(&c, t * 37, lr, wr, g, sr, n, decay);
				ck_assert_msg(memcmp(w, wr, n * sizeof *w) == 0, "w differs: n %d t %d", n, (int)t);
				ck_assert_msg(memcmp(st, sr, 2 * n * sizeof *st) == 0, "m/v differ: n %d", n);
			}
			free(w), free(wr), free(g), free(st), free(sr);
		}
}
END_TEST

START_TEST(test_lr_schedule)
{
	ph_optim_config c;
	memset(&c, 0, sizeof c);
	c.lr = 1.0;
	c.min_lr = 0.1;
	c.warmup = 10;
	c.total_steps = 111; /* last step 110: 100 steps of cosine after warm-up */
	c.lr_schedule = PH_LR_COSINE;
	ck_assert_double_eq_tol(ph_lr_at(&c, 0), 0.1, 1e-15);   /* lr/warmup */
	ck_assert_double_eq_tol(ph_lr_at(&c, 4), 0.5, 1e-15);
	ck_assert_double_eq_tol(ph_lr_at(&c, 9), 1.0, 1e-15);   /* end of warm-up */
	ck_assert_double_eq_tol(ph_lr_at(&c, 10), 1.0, 1e-15);  /* cosine starts at lr */
	ck_assert_double_eq_tol(ph_lr_at(&c, 60), 0.55, 1e-12); /* half-way */
	ck_assert_double_eq(ph_lr_at(&c, 110), 0.1);            /* last step: min_lr */
	ck_assert_double_eq(ph_lr_at(&c, 500), 0.1);            /* and held */
	/* 0.1 + 0.45*(1 + cos(pi*25/100)) at t = 35. */
	ck_assert_double_eq_tol(ph_lr_at(&c, 35), 0.1 + 0.45 * (1 + cos(M_PI / 4)), 1e-12);
	for (int64_t t = 10; t < 120; t++)
		ck_assert(ph_lr_at(&c, t + 1) <= ph_lr_at(&c, t));

	/* Constant after warm-up. */
	c.lr_schedule = PH_LR_CONSTANT;
	ck_assert_double_eq_tol(ph_lr_at(&c, 0), 0.1, 1e-15);
	ck_assert_double_eq(ph_lr_at(&c, 10), 1.0);
	ck_assert_double_eq(ph_lr_at(&c, 110), 1.0);

	/* No warm-up: full lr from step 0; cosine from lr at 0 to min_lr at the end. */
	c.warmup = 0;
	ck_assert_double_eq(ph_lr_at(&c, 0), 1.0);
	c.lr_schedule = PH_LR_COSINE;
	c.total_steps = 11;
	ck_assert_double_eq(ph_lr_at(&c, 0), 1.0);
	ck_assert_double_eq_tol(ph_lr_at(&c, 5), 0.55, 1e-12);
	ck_assert_double_eq(ph_lr_at(&c, 10), 0.1);
	/* Unknown length: nothing to decay towards. */
	c.total_steps = 0;
	ck_assert_double_eq(ph_lr_at(&c, 1000), 1.0);
	/* Warm-up as long as the run: warm-up wins, the cosine never starts. */
	c.warmup = 5;
	c.total_steps = 5;
	ck_assert_double_eq_tol(ph_lr_at(&c, 3), 0.8, 1e-15);
	ck_assert_double_eq(ph_lr_at(&c, 4), 1.0);
	ck_assert_double_eq(ph_lr_at(&c, 5), 0.1);
}
END_TEST

START_TEST(test_sumsq)
{
	float g[3] = { 3.f, 4.f, 0.f };
	ck_assert_double_eq(ph_sumsq(g, 3), 25.0);
	ck_assert_double_eq(ph_sumsq(g, 0), 0.0);
	/* Accumulated in double: 1e6 values of 0.1f square to 1e4 within
	 * double rounding, far better than a float sum would. */
	static float h[1000000];
	for (int i = 0; i < 1000000; i++)
		h[i] = 0.1f;
	double want = 1e6 * (double)0.1f * (double)0.1f;
	ck_assert_double_eq_tol(ph_sumsq(h, 1000000), want, 1e-6);
}
END_TEST

/* Clipping's factor is torch.nn.utils.clip_grad_norm_'s: min(1, clip /
 * (norm + 1e-6)).  A norm within 1e-6 under clip is still scaled (it was
 * left alone: norm 3.3375e-5 under a clip 1e-5 above it moved 3% too far
 * against PyTorch); clip = 0 is off. */
START_TEST(test_clip_scale)
{
	double norm = 3.3375e-5, clip = norm * (1 + 1e-5);
	double want = clip / (norm + 1e-6);
	ck_assert_double_eq_tol(ph_clip_scale(clip, norm * norm), want, 1e-15);
	ck_assert(ph_clip_scale(clip, norm * norm) < 0.98);
	ck_assert_double_eq_tol(ph_clip_scale(1.0, 16.0), 1.0 / (4.0 + 1e-6), 1e-15); /* norm 4 over clip 1 */
	ck_assert(ph_clip_scale(10.0, 16.0) == 1.0);                                  /* far under: untouched */
	ck_assert(ph_clip_scale(0.0, 16.0) == 1.0);                                   /* off */
	ck_assert(ph_clip_scale(1.0, 0.0) == 1.0);                                    /* no gradient */
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("optim");
	TCase *tc = tcase_create("optim");
	tcase_add_test(tc, test_sgd_plain);
	tcase_add_test(tc, test_sgd_momentum);
	tcase_add_test(tc, test_adamw);
	tcase_add_test(tc, test_lion);
	tcase_add_test(tc, test_decay_exemption);
	tcase_add_test(tc, test_deterministic);
	tcase_add_test(tc, test_adamw_kernel_bitwise);
	tcase_add_test(tc, test_lr_schedule);
	tcase_add_test(tc, test_sumsq);
	tcase_add_test(tc, test_clip_scale);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return run_suite(suite());
}
