/* SPDX-License-Identifier: MIT */
/*
 * moe's CUDA twin (moe.c): the mixture-of-experts MLP of moe_cuda.cuh,
 *   y = x + moe(x)   (residual = yes)   or   y = moe(x)
 * with moe.c's parameters, saved layout and options.  Device scratch is
 * moe_device_scratch_floats per sample (moe.c's meta asks for it).
 */
#include "moe_cuda.cuh"
#include "moe_state.h"

static moe_params params_of(float *const *params)
{
	return moe_params{ params[MOE_P_GATE], params[MOE_P_W1], params[MOE_P_W2], params[MOE_P_BIAS] };
}

static int check_call(const ph_ctx *ctx, ph_err *err)
{
	if (ctx->batch > 0 && (!ctx->saved || !ctx->scratch))
		return ph_fail(err, PH_EINTERNAL, "moe: called without saved or scratch space");
	return PH_OK;
}

static int moe_cuda_forward(void *state, const ph_ctx *ctx, float *const *params, const float *x, float *y,
			    ph_err *err)
{
	const moe_state *s = (const moe_state *)state;
	int rc = check_call(ctx, err);
	if (rc || ctx->batch == 0)
		return rc;
	const size_t n = (size_t)ctx->batch * s->g.T * s->g.d;
	if (s->residual)
		PH_CUDA_TRY(err, cudaMemcpyAsync(y, x, n * sizeof *y, cudaMemcpyDeviceToDevice, PH_STREAM(ctx)));
	const moe_params p = params_of(params);
	return moe_d_mlp_forward(&s->g, ctx, &p, x, y, s->residual, (float *)ctx->saved, (float *)ctx->scratch, err);
}

static int moe_cuda_backward(void *state, const ph_ctx *ctx, float *const *params, float *const *grads,
			     const float *x, const float *y, const float *dy, float *dx, ph_err *err)
{
	(void)y;
	const moe_state *s = (const moe_state *)state;
	int rc = check_call(ctx, err);
	if (rc || ctx->batch == 0)
		return rc;
	const moe_params p = params_of(params);
	const moe_grads gr = { grads[MOE_P_GATE], grads[MOE_P_W1], grads[MOE_P_W2], grads[MOE_P_BIAS] };
	rc = moe_d_mlp_backward(&s->g, ctx, &p, &gr, x, dy, dx, (float *)ctx->saved, (float *)ctx->scratch, err);
	if (rc == PH_OK && dx && s->residual)
		PH_CUDA_TRY(err, ph_k_add(PH_STREAM(ctx), dx, dy, dx, (int64_t)ctx->batch * s->g.T * s->g.d));
	return rc;
}

PH_LAYER_CUDA_OPS(moe_cuda_ops) = { .struct_size = sizeof(ph_layer_device_ops),
				    .forward = moe_cuda_forward,
				    .backward = moe_cuda_backward };
