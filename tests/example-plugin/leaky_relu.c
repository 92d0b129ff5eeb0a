/* SPDX-License-Identifier: MIT */
/* An example third-party layer plugin, built out of tree against the
 * installed header:
 *
 *     cc -shared -fPIC $(pkg-config --cflags pipehost) -o leaky_relu.so leaky_relu.c
 *
 * then used with `type = leaky_relu` and `--plugin-dir .`.  It shows the whole
 * contract: an option table, create/meta/forward/backward, errors as status
 * codes, no printing.  With nvcc its CUDA twin, leaky_relu_cuda.cu, links
 * into the same module and the layer runs on GPUs too (Makefile); this
 * file is the same either way. */
#include <stdlib.h>

#include <pipehost/plugin.h>

#include "leaky_relu.h"

/* The CUDA hooks, defined in leaky_relu_cuda.cu: a weak reference, NULL
 * when the module is built without it. */
PH_LAYER_TWIN(leaky_relu_cuda_ops);

typedef struct {
	double slope;   /* filled by the host from the option table */
} leaky_config;

static const ph_option leaky_options[] = {
	PH_OPT_FLOAT_(leaky_config, slope, "slope", "0.01", 0, 1, "gradient for negative inputs"),
	PH_OPT_END
};

static int leaky_create(const void *config, const ph_shape *in, int max_batch, void **state, ph_err *err)
{
	const leaky_config *c = config;
	leaky *l = malloc(sizeof *l);
	if (!l)
		return ph_fail(err, PH_ENOMEM, "leaky_relu: out of memory");
	l->slope = (float)c->slope;
	l->shape = *in;
	*state = l;
	return PH_OK;
}

static void leaky_destroy(void *state)
{
	free(state);
}

static int leaky_meta(const void *state, ph_layer_meta *m, ph_err *err)
{
	const leaky *l = state;
	m->out = l->shape;
	m->fwd_flops = (double)ph_shape_numel(&l->shape);
	m->bwd_flops = (double)ph_shape_numel(&l->shape);
	return PH_OK;
}

/* y[i] = x[i] > 0 ? x[i] : slope * x[i]          x, y: [batch, numel] */
static int leaky_forward(void *state, const ph_ctx *ctx, float *const *params, const float *x, float *y, ph_err *err)
{
	const leaky *l = state;
	int64_t n = ph_shape_numel(&l->shape) * ctx->batch;
	for (int64_t i = 0; i < n; i++)
		y[i] = x[i] > 0 ? x[i] : l->slope * x[i];
	return PH_OK;
}

/* dx[i] = dy[i] * (x[i] > 0 ? 1 : slope)      (overwritten, as the ABI says) */
static int leaky_backward(void *state, const ph_ctx *ctx, float *const *params, float *const *grads, const float *x,
			  const float *y, const float *dy, float *dx, ph_err *err)
{
	const leaky *l = state;
	if (!dx)
		return PH_OK;
	int64_t n = ph_shape_numel(&l->shape) * ctx->batch;
	for (int64_t i = 0; i < n; i++)
		dx[i] = x[i] > 0 ? dy[i] : l->slope * dy[i];
	return PH_OK;
}

static const ph_layer_ops leaky_ops = {
	.head = PH_HEAD(ph_layer_ops, "leaky_relu", "leaky ReLU: x, or slope * x below zero", leaky_options, leaky_config),
	.devices = PH_DEV_CPU,
	.create = leaky_create,
	.destroy = leaky_destroy,
	.meta = leaky_meta,
	.forward = leaky_forward,
	.backward = leaky_backward,
	.cuda = &leaky_relu_cuda_ops, /* the host calls these on a GPU */
};

static const ph_layer_ops *const layers[] = { &leaky_ops, NULL };
PH_PLUGIN(layers, NULL, NULL)
