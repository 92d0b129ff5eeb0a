/* SPDX-License-Identifier: MIT */
/*
 * seq_xent: next-token cross-entropy over a sequence; the model's last layer.
 *
 *   x [B, T, V] logits, targets [B, T] int32 in [0, V)  ->  y [B, 2]
 *   y[b][0] = sum over t of -log softmax(x_bt)[t_bt]  = logsumexp(x_bt) - x_bt[t_bt]
 *   y[b][1] = number of positions t with argmax(x_bt) == t_bt (first max on ties)
 *
 * Stable: logsumexp subtracts the row max.  One float exp per logit in
 * forward (tf_expf, vectorised) summed in TF_LANES float lanes combined in
 * double in a fixed order (deterministic); log of the row sum in double.
 * Forward saves each row's max and log(sum) (ctx->saved, 2 floats per
 * position: all the maxes of the micro-batch first, then all the log-sums),
 * so backward is one more exp per logit, no second max or sum.
 * Backward has no dy; the host passes d(objective)/d(per-target loss) as
 * ctx->loss_scale (1/(B*T) for a mean over tokens):
 *   dx_bt = (softmax(x_bt) - onehot(t_bt)) * loss_scale
 */
#include <math.h>
#include <stdlib.h>

#include <pipehost/plugin.h>
#include "seq_xent_state.h"
#include "transformer_ops.h"

/* seq_xent_cuda.cu; NULL in a build without CUDA.  Its targets stay on the
 * device, unchecked (a bad one gives NaN). */
PH_LAYER_TWIN(seq_xent_cuda_ops);

static int seq_xent_create(const void *config, const ph_shape *in, int max_batch,
			   void **state, ph_err *err)
{
	if (in->ndim != 2)
		return ph_fail(err, PH_EINVAL,
			       "seq_xent: input has %d dimensions; need 2 ([T, vocab] logits) per "
			       "sample", in->ndim);
	if (in->d[0] < 1 || in->d[0] > INT32_MAX || in->d[1] < 1 || in->d[1] > INT32_MAX)
		return ph_fail(err, PH_EINVAL, "seq_xent: input [%lld, %lld]; need both in 1 to %d",
			       (long long)in->d[0], (long long)in->d[1], INT32_MAX);
	seq_xent_state *s = calloc(1, sizeof *s);
	if (!s)
		return ph_fail(err, PH_ENOMEM, "seq_xent: out of memory");
	s->T = (int)in->d[0];
	s->V = (int)in->d[1];
	s->max_batch = max_batch;
	*state = s;
	return PH_OK;
}

static void seq_xent_destroy(void *state)
{
	free(state);
}

static int seq_xent_meta(const void *state, ph_layer_meta *m, ph_err *err)
{
	const seq_xent_state *s = state;
	*m = (ph_layer_meta){ 0 };
	m->out = (ph_shape){ 1, { 2 } };
	m->fwd_flops = 4.0 * s->T * (double)s->V;  /* max, subtract, exp, sum */
	m->bwd_flops = 5.0 * s->T * (double)s->V;  /* the same again, divide, scale */
	m->targets_per_sample = s->T;
	m->saved_bytes = (size_t)s->T * 2 * sizeof(float);
	/* CUDA: each row's loss (double) and hit (int32), summed per sample after */
	m->device_scratch_bytes = (size_t)s->max_batch * s->T * (sizeof(double) + sizeof(int32_t));
	return PH_OK;
}

/* Check the call and every target before touching any output. */
static int check_call(const seq_xent_state *s, const ph_ctx *ctx, ph_err *err)
{
	if (!ctx->targets && ctx->batch > 0)
		return ph_fail(err, PH_EINTERNAL, "seq_xent: called without targets");
	if (!ctx->saved && ctx->batch > 0)
		return ph_fail(err, PH_EINTERNAL, "seq_xent: called without saved state");
	for (int b = 0; b < ctx->batch; b++)
		for (int t = 0; t < s->T; t++) {
			int32_t v = ctx->targets[(size_t)b * s->T + t];
			if (v < 0 || v >= s->V)
				return ph_fail(err, PH_EINVAL,
					       "seq_xent: sample %d position %d has target %d outside "
					       "[0, %d); check the data against the vocabulary size",
					       b, t, (int)v, s->V);
		}
	return PH_OK;
}

/* Row max (exact, so any order gives the same) and its first index. */
TF_HOT static float row_max(const float *x, int V, int *arg)
{
	float m = x[0];
#pragma omp simd reduction(max : m)
	for (int k = 1; k < V; k++)
		m = x[k] > m ? x[k] : m;
	/* first k with x[k] == m: find its block of TF_LANES with a vector test */
	int a = 0, k = 0;
	for (; k + TF_LANES <= V; k += TF_LANES) {
		int hit = 0;
#pragma omp simd reduction(| : hit)
		for (int j = 0; j < TF_LANES; j++)
			hit |= x[k + j] == m;
		if (hit)
			break;
	}
	for (; k < V; k++)
		if (x[k] == m) {
			a = k;
			break;
		}
	*arg = a;
	return m;
}

/* sum of exp(x - m): float lanes, combined in double in a fixed order */
TF_HOT static double row_sumexp(const float *x, int V, float m)
{
	float acc[TF_LANES] = { 0 };
	int k = 0;
	for (; k + TF_LANES <= V; k += TF_LANES)
#pragma omp simd
		for (int j = 0; j < TF_LANES; j++)
			acc[j] += tf_expf(x[k + j] - m);
	double sum = 0.0;
	for (int j = 0; j < TF_LANES; j++)
		sum += acc[j];
	for (; k < V; k++)
		sum += tf_expf(x[k] - m);
	return sum;
}

static int seq_xent_forward(void *state, const ph_ctx *ctx, float *const *params,
			    const float *x, float *y, ph_err *err)
{
	const seq_xent_state *s = state;
	int rc = check_call(s, ctx, err);
	if (rc)
		return rc;
	const int T = s->T, V = s->V;
	const int64_t rows = (int64_t)ctx->batch * T;
	float *smax = ctx->saved, *slog = smax + rows;
	for (int b = 0; b < ctx->batch; b++) {
		double loss = 0.0;
		int correct = 0;
		for (int t = 0; t < T; t++) {
			const int64_t r = (int64_t)b * T + t;
			const float *xr = x + r * V;
			int tgt = ctx->targets[r], arg;
			float m = row_max(xr, V, &arg);
			double ls = log(row_sumexp(xr, V, m));
			smax[r] = m;
			slog[r] = (float)ls;
			loss += (double)m + ls - xr[tgt];
			correct += arg == tgt;
		}
		y[2 * b] = (float)loss;
		y[2 * b + 1] = (float)correct;
	}
	return PH_OK;
}

/* one row of dx [V] from x [V], its max m and log-sum ls; dxr may be xr
 * (PH_LAYER_DX_OVER_X): the target's logit is read before the row is
 * written, and every other element is read just before it is replaced */
TF_HOT static void row_grad(const float *xr, int V, int tgt, float m, float ls, float scale,
			    float *dxr)
{
	const float xt = xr[tgt];
#pragma omp simd
	for (int k = 0; k < V; k++)
		dxr[k] = tf_expf((xr[k] - m) - ls) * scale;
	/* p - 1 is exact for p in [1/2, 1] (Sterbenz) */
	dxr[tgt] = (tf_expf((xt - m) - ls) - 1.0f) * scale;
}

/* dx = (exp((x - max) - log(sum)) - onehot) * scale, from forward's saved
 * max and log(sum) of each row */
static int seq_xent_backward(void *state, const ph_ctx *ctx, float *const *params,
			     float *const *grads, const float *x, const float *y,
			     const float *dy, float *dx, ph_err *err)
{
	const seq_xent_state *s = state;
	int rc = check_call(s, ctx, err);
	if (rc || !dx)
		return rc;
	const int T = s->T, V = s->V;
	const float scale = ctx->loss_scale;
	const int64_t rows = (int64_t)ctx->batch * T;
	const float *smax = ctx->saved, *slog = smax + rows;
	for (int64_t r = 0; r < rows; r++)
		row_grad(x + r * V, V, ctx->targets[r], smax[r], slog[r], scale, dx + r * V);
	return PH_OK;
}

static const ph_layer_ops seq_xent_ops = {
	.head = PH_HEAD_NOOPT(ph_layer_ops, "seq_xent",
			      "cross-entropy over [T, vocab] logits, T int32 targets per sample"),
	.devices = PH_DEV_CPU,
	/* dx over x: each element from its own logit (both backwards) */
	.flags = PH_LAYER_LOSS | PH_LAYER_DX_OVER_X,
	.create = seq_xent_create,
	.destroy = seq_xent_destroy,
	.meta = seq_xent_meta,
	.forward = seq_xent_forward,
	.backward = seq_xent_backward,
	.cuda = &seq_xent_cuda_ops,
};

/* A named array: a braced list inside PH_PLUGIN() would split at its comma. */
static const ph_layer_ops *const seq_xent_layers[] = { &seq_xent_ops, NULL };
PH_PLUGIN(seq_xent_layers, NULL, NULL)
