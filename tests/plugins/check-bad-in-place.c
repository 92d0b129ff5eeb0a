/* SPDX-License-Identifier: MIT */
/* Two layers whose gradients are right but whose flags lie (ABI 1.7), so
 * that pipehost --check-plugin must fail each on its "in place" check
 * (tests/test-check-plugin.sh):
 *
 *   check_bad_over_x   y_i = x_i * x_{i+1}  (cyclic within a sample);
 *                      claims PH_LAYER_DX_OVER_X, but dx_i reads x_{i-1},
 *                      which dx_{i-1} has overwritten when dx is x.
 *   check_bad_no_y     y = exp(x), dx = dy * y;  claims
 *                      PH_LAYER_BACKWARD_NO_Y, but reads y. */
#include <math.h>

#include "test-layer-common.h"

static int fwd_pair(void *st, const ph_ctx *ctx, float *const *params, const float *x, float *y, ph_err *err)
{
	const tl_state *s = st;
	const int64_t n = s->n;
	for (int64_t b = 0; b < ctx->batch; b++)
		for (int64_t i = 0; i < n; i++)
			y[b * n + i] = x[b * n + i] * x[b * n + (i + 1) % n];
	return PH_OK;
}

/* dx_i = dy_i x_{i+1} + dy_{i-1} x_{i-1}: correct, but not in place */
static int bwd_pair(void *st, const ph_ctx *ctx, float *const *params, float *const *grads, const float *x,
		    const float *y, const float *dy, float *dx, ph_err *err)
{
	const tl_state *s = st;
	const int64_t n = s->n;
	for (int64_t b = 0; dx && b < ctx->batch; b++) {
		const float *xb = x + b * n, *db = dy + b * n;
		for (int64_t i = 0; i < n; i++) {
			const int64_t nx = (i + 1) % n, pv = (i + n - 1) % n;
			dx[b * n + i] = db[i] * xb[nx] + db[pv] * xb[pv];
		}
	}
	return PH_OK;
}

static int fwd_exp(void *st, const ph_ctx *ctx, float *const *params, const float *x, float *y, ph_err *err)
{
	const tl_state *s = st;
	for (int64_t i = 0; i < ctx->batch * s->n; i++)
		y[i] = expf(x[i]);
	return PH_OK;
}

static int bwd_exp(void *st, const ph_ctx *ctx, float *const *params, float *const *grads, const float *x,
		   const float *y, const float *dy, float *dx, ph_err *err)
{
	const tl_state *s = st;
	for (int64_t i = 0; dx && i < ctx->batch * s->n; i++)
		dx[i] = dy[i] * y[i]; /* reads y */
	return PH_OK;
}

static const ph_layer_ops over_x = {
	TL_OPS(PH_HEAD_NOOPT(ph_layer_ops, "check_bad_over_x", "y_i = x_i x_(i+1), falsely claiming dx over x (a test)"),
	       tl_create, tl_meta, fwd_pair, bwd_pair),
	.flags = PH_LAYER_DX_OVER_X,
};

static const ph_layer_ops no_y = {
	TL_OPS(PH_HEAD_NOOPT(ph_layer_ops, "check_bad_no_y", "y = exp(x), falsely claiming not to read y (a test)"),
	       tl_create, tl_meta, fwd_exp, bwd_exp),
	.flags = PH_LAYER_BACKWARD_NO_Y,
};

static const ph_layer_ops *const layers[] = { &over_x, &no_y, NULL };
PH_PLUGIN(layers, NULL, NULL)
