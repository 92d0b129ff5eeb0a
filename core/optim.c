/* SPDX-License-Identifier: MIT */
/* SGD with momentum, AdamW, and the warm-up + cosine learning-rate schedule.
 * The update rules follow PyTorch's torch.optim.SGD and torch.optim.AdamW so
 * that hyper-parameters carry over.  Per-element arithmetic is float, as in
 * PyTorch; step-wide scalars (bias corrections) are computed in double and
 * rounded once.  Each update is a plain loop in index order, so the same
 * inputs give the same bits every time. */
#include "optim.h"

#include <math.h>

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

/* torch.optim.AdamW: decoupled decay w *= 1 - lr*wd first, then
 * m = b1*m + (1-b1)*g, v = b2*v + (1-b2)*g^2 and
 * w -= (lr / (1-b1^t)) * m / (sqrt(v) / sqrt(1-b2^t) + eps),
 * which is lr * mhat / (sqrt(vhat) + eps) arranged as PyTorch does it. */
static void adamw(const ph_optim_config *c, int64_t t, double lr, float *w,
		  const float *g, float *s, int64_t n, int decay)
{
	if (t < 1)
		t = 1; /* bias correction divides by 1 - b^t, zero at t = 0 */
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

void ph_optim_update(const ph_optim_config *c, int64_t t, double lr, float *w,
		     const float *g, float *s, int64_t n, int decay)
{
	if (c->type == PH_OPTIM_ADAMW)
		adamw(c, t, lr, w, g, s, n, decay);
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
