/* SPDX-License-Identifier: MIT */
/* dropout's CUDA twin (dropout.c): the CPU's mask, bit for bit.
 *   out_i = ph_rng_uniform(key, i) >= rate ? in_i * scale : 0,  i = 0..n-1
 * over the whole micro-batch, key = ph_rng_key(seed, step, microbatch, layer);
 * forward maps x -> y, backward dy -> dx with the mask drawn again.  The
 * kernel is cuda_ops.cuh's (one Philox call per four elements). */
#include "cuda_ops.cuh"
#include "dropout_state.h"

static int dropout_cuda_apply(const ph_ctx *ctx, float rate, float scale, const float *in,
				  float *out, int64_t n, ph_err *err)
{
	if (n <= 0)
		return PH_OK;
	const uint64_t key = ph_rng_key(ctx->seed, ctx->step, ctx->microbatch, ctx->layer);
	PH_CUDA_TRY(err, ph_k_dropout_fwd_ex(PH_STREAM(ctx), key, rate, scale, in, out, n));
	return PH_OK;
}

/* eval, or rate 0: out = in (skipped in place) */
static int dropout_cuda_copy(const ph_ctx *ctx, const float *in, float *out, int64_t n,
				 ph_err *err)
{
	if (n <= 0 || out == in)
		return PH_OK;
	PH_CUDA_TRY(err, cudaMemcpyAsync(out, in, (size_t)n * sizeof(float), cudaMemcpyDeviceToDevice,
					 PH_STREAM(ctx)));
	return PH_OK;
}

/* out = mask(in) in training, in otherwise: x -> y forward, dy -> dx backward */
static int dropout_cuda_map(const dropout_state *s, const ph_ctx *ctx, const float *in, float *out, ph_err *err)
{
	const int64_t n = ctx->batch * s->numel;
	return !ctx->training || s->rate == 0.0f ? dropout_cuda_copy(ctx, in, out, n, err)
						 : dropout_cuda_apply(ctx, s->rate, s->scale, in, out, n, err);
}

static int dropout_cuda_forward(void *state, const ph_ctx *ctx, float *const *params, const float *x, float *y,
				ph_err *err)
{
	return dropout_cuda_map((const dropout_state *)state, ctx, x, y, err);
}

static int dropout_cuda_backward(void *state, const ph_ctx *ctx, float *const *params, float *const *grads,
				 const float *x, const float *y, const float *dy, float *dx, ph_err *err)
{
	return dx ? dropout_cuda_map((const dropout_state *)state, ctx, dy, dx, err) : PH_OK;
}

PH_LAYER_CUDA_OPS(dropout_cuda_ops) = { .struct_size = sizeof(ph_layer_device_ops),
					.forward = dropout_cuda_forward,
					.backward = dropout_cuda_backward };
