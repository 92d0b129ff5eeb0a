/*
 * seq_xent: next-token cross-entropy over a sequence; the model's last layer.
 *
 *   x [B, T, V] logits, targets [B, T] int32 in [0, V)  ->  y [B, 2]
 *   y[b][0] = sum over t of -log softmax(x_bt)[t_bt]  = logsumexp(x_bt) - x_bt[t_bt]
 *   y[b][1] = number of positions t with argmax(x_bt) == t_bt (first max on ties)
 *
 * Stable: logsumexp subtracts the row max; sums run in double, in index order.
 * Backward has no dy; the host passes d(objective)/d(per-target loss) as
 * ctx->loss_scale (1/(B*T) for a mean over tokens):
 *   dx_bt = (softmax(x_bt) - onehot(t_bt)) * loss_scale
 */
#include <math.h>
#include <stdlib.h>

#include <pipehost/plugin.h>

typedef struct {
	int T, V;
	int max_batch;
} seq_xent_state;

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
	return PH_OK;
}

/* Check the call and every target before touching any output. */
static int check_call(const seq_xent_state *s, const ph_ctx *ctx, ph_err *err)
{
	if (ctx->batch < 0 || ctx->batch > s->max_batch)
		return ph_fail(err, PH_EINTERNAL, "seq_xent: batch %d outside [0, %d] given at create",
			       ctx->batch, s->max_batch);
	if (!ctx->targets && ctx->batch > 0)
		return ph_fail(err, PH_EINTERNAL, "seq_xent: called without targets");
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

/* Row max and its first index; sum of exp(x - max) in double. */
static double row_stats(const float *x, int V, float *max, int *arg)
{
	float m = x[0];
	int a = 0;
	for (int k = 1; k < V; k++)
		if (x[k] > m) {
			m = x[k];
			a = k;
		}
	double sum = 0.0;
	for (int k = 0; k < V; k++)
		sum += exp((double)x[k] - m);
	*max = m;
	*arg = a;
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
	for (int b = 0; b < ctx->batch; b++) {
		double loss = 0.0;
		int correct = 0;
		for (int t = 0; t < T; t++) {
			const float *xr = x + ((size_t)b * T + t) * V;
			int tgt = ctx->targets[(size_t)b * T + t], arg;
			float m;
			double sum = row_stats(xr, V, &m, &arg);
			loss += (double)m + log(sum) - xr[tgt];
			correct += arg == tgt;
		}
		y[2 * b] = (float)loss;
		y[2 * b + 1] = (float)correct;
	}
	return PH_OK;
}

static int seq_xent_backward(void *state, const ph_ctx *ctx, float *const *params,
			     float *const *grads, const float *x, const float *y,
			     const float *dy, float *dx, ph_err *err)
{
	const seq_xent_state *s = state;
	int rc = check_call(s, ctx, err);
	if (rc || !dx)
		return rc;
	const int T = s->T, V = s->V;
	const double scale = ctx->loss_scale;
	for (int64_t r = 0; r < (int64_t)ctx->batch * T; r++) {
		const float *xr = x + r * V;
		float *dxr = dx + r * V;
		int tgt = ctx->targets[r], arg;
		float m;
		double sum = row_stats(xr, V, &m, &arg);
		for (int k = 0; k < V; k++) {
			double p = exp((double)xr[k] - m) / sum;
			dxr[k] = (float)((p - (k == tgt)) * scale);
		}
	}
	return PH_OK;
}

static const ph_layer_ops seq_xent_ops = {
	.head = PH_HEAD_NOOPT(ph_layer_ops, "seq_xent",
			      "cross-entropy over [T, vocab] logits, T int32 targets per sample"),
	.devices = PH_DEV_CPU,
	.flags = PH_LAYER_LOSS,
	.create = seq_xent_create,
	.destroy = seq_xent_destroy,
	.meta = seq_xent_meta,
	.forward = seq_xent_forward,
	.backward = seq_xent_backward,
};

/* A named array: a braced list inside PH_PLUGIN() would split at its comma. */
static const ph_layer_ops *const seq_xent_layers[] = { &seq_xent_ops, NULL };
PH_PLUGIN(seq_xent_layers, NULL, NULL)
