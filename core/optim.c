/* SPDX-License-Identifier: MIT */
/* SGD with momentum, AdamW, Lion, and the warm-up + cosine learning-rate
 * schedule.  The update rules follow PyTorch's torch.optim.SGD and
 * torch.optim.AdamW, and Lion the paper's (Chen et al., "Symbolic Discovery
 * of Optimization Algorithms", 2023, program 1), so that hyper-parameters
 * carry over.  Per-element arithmetic is float, as in
 * PyTorch; step-wide scalars (bias corrections) are computed in double and
 * rounded once.  Each update is a plain loop in index order, so the same
 * inputs give the same bits every time. */
#include "optim.h"

#include <math.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

double ph_lr_at(const ph_optim_config *c, int64_t t)
{
	int64_t wu = c->warmup > 0 ? c->warmup : 0;
	if (t < 0)
		t = 0;
	/* Warm-up: lr/warmup at t = 0 up to lr at t = warmup - 1, never 0, so
	 * the first step already moves the weights. */
	if (t < wu)
		return c->lr * (double)(t + 1) / (double)wu;
	/* total_steps <= 0 means the length is unknown: no decay to aim at. */
	if (c->lr_schedule != PH_LR_COSINE || c->total_steps <= 0)
		return c->lr;
	/* Cosine from lr at t = warmup down to min_lr at the last step,
	 * t = total_steps - 1, and held there if training runs on. */
	int64_t last = c->total_steps - 1;
	if (t >= last)
		return c->min_lr;
	double p = (double)(t - wu) / (double)(last - wu);
	return c->min_lr + 0.5 * (c->lr - c->min_lr) * (1.0 + cos(M_PI * p));
}

int ph_optim_state_per_param(const ph_optim_config *c)
{
	return c->type == PH_OPTIM_ADAMW ? 2 : 1;
}

/* torch.optim.SGD: g += wd*w; v = momentum*v + g; w -= lr*v, or with
 * Nesterov w -= lr*(g + momentum*v).  Dampening is always 0.  With
 * momentum 0 the buffer just holds the last gradient, and the step is
 * plain SGD. */
static void sgd(const ph_optim_config *c, double lr, float *w, const float *g,
		float *s, int64_t n, int decay)
{
	const float flr = (float)lr;
	const float mom = (float)c->momentum;
	const float wd = decay ? (float)c->weight_decay : 0.f;
	for (int64_t i = 0; i < n; i++) {
		float d = g[i];
		if (wd != 0.f)
			d += wd * w[i];
		float v = mom * s[i] + d;
		s[i] = v;
		float step = c->nesterov ? d + mom * v : v;
		w[i] -= flr * step;
	}
}

/* Lion: decoupled decay w *= 1 - lr*wd, then
 * c = b1*m + (1-b1)*g;  w -= lr * sign(c);  m = b2*m + (1-b2)*g,
 * sign(0) = 0.  Every element moves by lr (or not at all): the step's size
 * does not follow the gradient's, which is what keeps a delayed gradient
 * (2bw) from growing into a blow-up where AdamW's would
 * (docs/delayed-update.md).  The products are exact (lr times +-1), so the
 * only roundings are the decay's, c's and m's. */
static void lion(const ph_optim_config *c, double lr, float *w, const float *g, float *s, int64_t n, int decay)
{
	const float flr = (float)lr;
	const float b1 = (float)c->beta1, one_b1 = (float)(1.0 - c->beta1);
	const float b2 = (float)c->beta2, one_b2 = (float)(1.0 - c->beta2);
	const float keep = (float)(1.0 - lr * (decay ? c->weight_decay : 0.0));
	for (int64_t i = 0; i < n; i++) {
		float wi = w[i];
		if (keep != 1.f)
			wi *= keep;
		const float gi = g[i];
		const float ci = b1 * s[i] + one_b1 * gi;
		if (ci > 0.f)
			wi -= flr;
		else if (ci < 0.f)
			wi += flr;
		w[i] = wi;
		s[i] = b2 * s[i] + one_b2 * gi;
	}
}

/* The step-wide constants of one AdamW update. */
typedef struct {
	float step_size, bc2_sqrt, b1, b2, one_b1, one_b2, eps, keep;
} adamw_k;

static adamw_k adamw_consts(const ph_optim_config *c, int64_t t, double lr, int decay)
{
	if (t < 1)
		t = 1; /* bias correction divides by 1 - b^t, zero at t = 0 */
	const double bc1 = 1.0 - pow(c->beta1, (double)t);
	const double bc2 = 1.0 - pow(c->beta2, (double)t);
	return (adamw_k){
		.step_size = (float)(lr / bc1),
		.bc2_sqrt = (float)sqrt(bc2),
		.b1 = (float)c->beta1, .b2 = (float)c->beta2,
		.one_b1 = (float)(1.0 - c->beta1), .one_b2 = (float)(1.0 - c->beta2),
		.eps = (float)c->eps,
		.keep = (float)(1.0 - lr * (decay ? c->weight_decay : 0.0)),
	};
}

/* torch.optim.AdamW: decoupled decay w *= 1 - lr*wd first, then
 * m = b1*m + (1-b1)*g, v = b2*v + (1-b2)*g^2 and
 * w -= (lr / (1-b1^t)) * m / (sqrt(v) / sqrt(1-b2^t) + eps),
 * which is lr * mhat / (sqrt(vhat) + eps) arranged as PyTorch does it.
 * The plain loop, elements [i0, n): the definition, the tail of the SSE
 * loop below, and the whole update where there is no SSE2. */
static void adamw_ref(const adamw_k *k, float *w, const float *g, float *m, float *v,
		      int64_t i0, int64_t n)
{
	for (int64_t i = i0; i < n; i++) {
		float wi = w[i];
		if (k->keep != 1.f)
			wi *= k->keep;
		float gi = g[i];
		float mi = k->b1 * m[i] + k->one_b1 * gi;
		float vi = k->b2 * v[i] + k->one_b2 * gi * gi;
		m[i] = mi;
		v[i] = vi;
		float denom = sqrtf(vi) / k->bc2_sqrt + k->eps;
		w[i] = wi - k->step_size * (mi / denom);
	}
}

/*
 * Four elements at a time, the same operations in the same order as
 * adamw_ref: SSE's mul, add, div and sqrt round like the scalar ones (IEEE,
 * no fused multiply-add), so the result is bitwise adamw_ref's
 * (tests/test-optim.c compares).  Written with intrinsics because gcc
 * vectorises neither the data-dependent `keep` test nor sqrtf (errno) by
 * itself; the two divisions and the square root stay, being what PyTorch
 * rounds.  The scalar loop took ~15 cycles per element, ~1 s an epoch of
 * the Fashion-MNIST CNN (421k parameters).
 */
static void adamw(const ph_optim_config *c, int64_t t, double lr, float *w,
		  const float *g, float *s, int64_t n, int decay)
{
	const adamw_k k = adamw_consts(c, t, lr, decay);
	float *m = s, *v = s + n;
	int64_t i = 0;
#ifdef __SSE2__
	const __m128 step = _mm_set1_ps(k.step_size), bc2s = _mm_set1_ps(k.bc2_sqrt);
	const __m128 b1 = _mm_set1_ps(k.b1), b2 = _mm_set1_ps(k.b2);
	const __m128 ob1 = _mm_set1_ps(k.one_b1), ob2 = _mm_set1_ps(k.one_b2);
	const __m128 eps = _mm_set1_ps(k.eps), keep = _mm_set1_ps(k.keep);
	const int scale = k.keep != 1.f;
	for (; i + 4 <= n; i += 4) {
		__m128 wi = _mm_loadu_ps(w + i), gi = _mm_loadu_ps(g + i);
		if (scale)
			wi = _mm_mul_ps(wi, keep);
		__m128 mi = _mm_add_ps(_mm_mul_ps(b1, _mm_loadu_ps(m + i)), _mm_mul_ps(ob1, gi));
		__m128 vi = _mm_add_ps(_mm_mul_ps(b2, _mm_loadu_ps(v + i)),
				       _mm_mul_ps(_mm_mul_ps(ob2, gi), gi));
		_mm_storeu_ps(m + i, mi);
		_mm_storeu_ps(v + i, vi);
		__m128 denom = _mm_add_ps(_mm_div_ps(_mm_sqrt_ps(vi), bc2s), eps);
		_mm_storeu_ps(w + i, _mm_sub_ps(wi, _mm_mul_ps(step, _mm_div_ps(mi, denom))));
	}
#endif
	adamw_ref(&k, w, g, m, v, i, n);
}

void ph_optim_update(const ph_optim_config *c, int64_t t, double lr, float *w,
		     const float *g, float *s, int64_t n, int decay)
{
	if (c->type == PH_OPTIM_ADAMW)
		adamw(c, t, lr, w, g, s, n, decay);
	else if (c->type == PH_OPTIM_LION)
		lion(c, lr, w, g, s, n, decay);
	else
		sgd(c, lr, w, g, s, n, decay);
}

double ph_sumsq(const float *g, int64_t n)
{
	double acc = 0.0;
	for (int64_t i = 0; i < n; i++)
		acc += (double)g[i] * (double)g[i];
	return acc;
}

double ph_clip_scale(double clip, double sumsq)
{
	if (!(clip > 0))
		return 1.0;
	/* as PyTorch: no comparison of the norm with clip first, which once
	 * left a norm within 1e-6 under clip unscaled */
	double scale = clip / (sqrt(sumsq) + 1e-6);
	return scale < 1.0 ? scale : 1.0;
}
