/* SPDX-License-Identifier: MIT */
/*
 * softmax_xent: softmax cross-entropy loss over K classes; the model's last layer.
 *
 *   x [B, K] logits, targets [B] int32 in [0, K)  ->  y [B, 2]
 *   y[b][0] = -log softmax(x_b)[t_b]   = logsumexp(x_b) - x_b[t_b]
 *   y[b][1] = 1 if argmax(x_b) == t_b (first max on ties), else 0
 *
 * logsumexp subtracts the row max first so large logits cannot overflow;
 * the sum runs in double, in index order.
 *
 * Backward has no dy: the host says how the per-sample loss enters the
 * objective through ctx->loss_scale (e.g. 1/B for a mean), and
 *   dx_b = (softmax(x_b) - onehot(t_b)) * loss_scale
 */
#include <math.h>
#include <stdlib.h>

#include <pipehost/plugin.h>
#include "softmax_xent_state.h"

PH_LAYER_TWIN(softmax_xent_cuda_ops); /* softmax_xent_cuda.cu; NULL in a build without CUDA */

static int softmax_xent_create(const void *config, const ph_shape *in, int max_batch,
			       void **state, ph_err *err)
{
	if (in->ndim != 1)
		return ph_fail(err, PH_EINVAL,
			       "softmax_xent: input has %d dimensions; need 1 ([classes]) per sample; "
			       "put a flatten or linear layer before it", in->ndim);
	if (in->d[0] < 1 || in->d[0] > INT32_MAX)
		return ph_fail(err, PH_EINVAL, "softmax_xent: %lld classes; need 1 to %d",
			       (long long)in->d[0], INT32_MAX);
	softmax_xent_state *s = calloc(1, sizeof *s);
	if (!s)
		return ph_fail(err, PH_ENOMEM, "softmax_xent: out of memory");
	s->K = (int)in->d[0];
	*state = s;
	return PH_OK;
}

static void softmax_xent_destroy(void *state)
{
	free(state);
}

static int softmax_xent_meta(const void *state, ph_layer_meta *m, ph_err *err)
{
	const softmax_xent_state *s = state;
	*m = (ph_layer_meta){ 0 };
	m->out = (ph_shape){ 1, { 2 } };
	m->fwd_flops = 4.0 * s->K;  /* max, subtract, exp, sum */
	m->bwd_flops = 5.0 * s->K;  /* the same again, divide, scale */
	m->targets_per_sample = 1;
	return PH_OK;
}

/* Check the call and every target before touching any output. */
static int check_call(const softmax_xent_state *s, const ph_ctx *ctx, ph_err *err)
{
	if (!ctx->targets && ctx->batch > 0)
		return ph_fail(err, PH_EINTERNAL, "softmax_xent: called without targets");
	for (int b = 0; b < ctx->batch; b++)
		if (ctx->targets[b] < 0 || ctx->targets[b] >= s->K)
			return ph_fail(err, PH_EINVAL,
				       "softmax_xent: sample %d has target %d outside [0, %d); "
				       "check the labels against the number of classes",
				       b, (int)ctx->targets[b], s->K);
	return PH_OK;
}

/* Row max and its first index. */
static float row_max(const float *x, int K, int *arg)
{
	float m = x[0];
	int a = 0;
	for (int k = 1; k < K; k++)
		if (x[k] > m) {
			m = x[k];
			a = k;
		}
	*arg = a;
	return m;
}

static int softmax_xent_forward(void *state, const ph_ctx *ctx, float *const *params,
				const float *x, float *y, ph_err *err)
{
	const softmax_xent_state *s = state;
	int rc = check_call(s, ctx, err);
	if (rc)
		return rc;
	const int K = s->K;
	for (int b = 0; b < ctx->batch; b++) {
		const float *xb = x + (size_t)b * K;
		int t = ctx->targets[b], arg;
		float m = row_max(xb, K, &arg);
		double sum = 0.0;
		for (int k = 0; k < K; k++)
			sum += exp((double)xb[k] - m);
		double lse = (double)m + log(sum);
		y[2 * b] = (float)(lse - xb[t]);
		y[2 * b + 1] = arg == t ? 1.0f : 0.0f;
	}
	return PH_OK;
}

static int softmax_xent_backward(void *state, const ph_ctx *ctx, float *const *params,
				 float *const *grads, const float *x, const float *y,
				 const float *dy, float *dx, ph_err *err)
{
	const softmax_xent_state *s = state;
	int rc = check_call(s, ctx, err);
	if (rc || !dx)
		return rc;
	const int K = s->K;
	const double scale = ctx->loss_scale;
	for (int b = 0; b < ctx->batch; b++) {
		const float *xb = x + (size_t)b * K;
		float *dxb = dx + (size_t)b * K;
		int t = ctx->targets[b], arg;
		float m = row_max(xb, K, &arg);
		double sum = 0.0;
		for (int k = 0; k < K; k++)
			sum += exp((double)xb[k] - m);
		for (int k = 0; k < K; k++) {
			double p = exp((double)xb[k] - m) / sum;
			dxb[k] = (float)((p - (k == t)) * scale);
		}
	}
	return PH_OK;
}

static const ph_layer_ops softmax_xent_ops = {
	.head = PH_HEAD_NOOPT(ph_layer_ops, "softmax_xent",
			      "softmax cross-entropy loss over [classes] logits; int32 class targets"),
	.devices = PH_DEV_CPU,
	.flags = PH_LAYER_LOSS,
	.create = softmax_xent_create,
	.destroy = softmax_xent_destroy,
	.meta = softmax_xent_meta,
	.forward = softmax_xent_forward,
	.backward = softmax_xent_backward,
	.cuda = &softmax_xent_cuda_ops,
};

/* A named array: a braced list inside PH_PLUGIN() would split at its comma. */
static const ph_layer_ops *const softmax_xent_layers[] = { &softmax_xent_ops, NULL };
PH_PLUGIN(softmax_xent_layers, NULL, NULL)
