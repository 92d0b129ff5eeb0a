/* SPDX-License-Identifier: MIT */
/*
 * attention_cuda.cu: the CUDA twin of attention.c (causal multi-head
 * self-attention with its qkv and output projections).
 *
 *   x [B, T, d]  ->  y [B, T, d];  R = B*T rows
 *   qkv = x qkv_weight^T + qkv_bias          [R, 3d]
 *   P, att = the core (attention_ops.cuh)     [B, H, T, T], [R, d]
 *   y   = att proj_weight^T + proj_bias       [R, d]
 *
 * Saved, as the CPU layer lays it out: qkv [B, T, 3d], P [B, H, T, T]
 * (pre-dropout), att [B, T, d], region after region.  Under bf16, where
 * flash_attention.cuh takes the shape (ph_flash_usable), the core is fused
 * and the P region is L2 [B, H, T] alone (each row's log2 softmax
 * denominator), att right after it: the host allocates saved by
 * attention_cuda_saved_bytes (ABI 1.6); fp32 keeps the materialised core.
 *
 * Device scratch (meta.device_scratch_bytes, set by attention.c):
 *   forward:  Pd [H, T, T]                         (dropout only)
 *   backward: datt [R, d], dqkv [R, 3d], dP [H, T, T], Pd [H, T, T] (dropout only)
 *   (fused: nothing in the forward; D [<=T samples, H, T] in dP's place)
 *
 * Bias gradients are column sums with a fixed order (ph_k_colsum_acc): no
 * atomics, so a run repeats bit for bit on the same GPU.
 */
#include "attention_ops.cuh"
#include "cuda_ops.cuh"
#include "attention_state.h"
#include "flash_attention.cuh"

static int check_call(const ph_ctx *ctx, ph_err *err)
{
	if (ctx->batch > 0 && (!ctx->saved || !ctx->scratch))
		return ph_fail(err, PH_EINTERNAL, "attention: called without saved or scratch space");
	if (ctx->batch > 0 && !ctx->gpu)
		return ph_fail(err, PH_EINTERNAL, "attention: no GPU services in the call context");
	return PH_OK;
}

static ph_attn_geom make_geom(const attention_state *s)
{
	ph_attn_geom g = { s->g.T, s->g.d, s->g.H, s->g.d / s->g.H, s->g.rate, s->g.scale };
	return g;
}

/* Floats of the P region per sample: the materialised [H, T, T], or,
 * where the core is fused, L2 [H, T] alone (the host allocates that much
 * less: attention_cuda_saved_bytes, ABI 1.6). */
static size_t p_floats(const ph_attn_geom *g, int fused)
{
	return (size_t)g->H * g->T * (fused ? 1 : (size_t)g->T);
}

static int attention_cuda_forward(void *state, const ph_ctx *ctx, float *const *params, const float *x, float *y,
				  ph_err *err)
{
	int rc = check_call(ctx, err);
	if (rc || ctx->batch == 0)
		return rc;
	const ph_attn_geom g = make_geom((const attention_state *)state);
	const int T = g.T, d = g.d;
	const float rate = g.rate;
	const int B = ctx->batch, R = B * T;
	float *qkv = (float *)ctx->saved;             /* [R, 3d] */
	float *P = qkv + (size_t)R * 3 * d;           /* [B, H, T, T], or fused L2 [B, H, T] */
	float *att = P + (size_t)B * p_floats(&g, ph_flash_usable(ctx, &g)); /* [R, d] */
	const int drop = ctx->training && rate > 0.0f;
	const uint64_t key = ph_rng_key(ctx->seed, ctx->step, ctx->microbatch, ctx->layer);

	/* qkv = x W^T + b, the bias in the product's epilogue */
	if ((rc = ph_gemm_xwt_bias(ctx, R, 3 * d, d, x, params[0], params[1], qkv, err)))
		return rc;
	if (ph_flash_usable(ctx, &g))
		rc = ph_flash_forward(ctx, &g, B, drop, key, qkv, P, att, err);
	else
		rc = ph_attn_forward(ctx, &g, B, drop, key, qkv, P, att, (float *)ctx->scratch, err);
	if (rc)
		return rc;
	/* y = att proj^T + b */
	return ph_gemm_xwt_bias(ctx, R, d, d, att, params[2], params[3], y, err);
}

/*
 * The whole backward; grads NULL skips the weight half, dx NULL the input
 * half.  Both halves run the same core backward (d qkv feeds both), so
 * backward() == backward_input() then backward_weight(), bit for bit.
 *   datt [R, d]  = dy proj_weight
 *   dproj_weight += dy^T att;   dproj_bias += colsum dy
 *   dqkv [R, 3d] = core backward(datt)
 *   dqkv_weight  += dqkv^T x;   dqkv_bias  += colsum dqkv
 *   dx [R, d]    = dqkv qkv_weight
 */
static int attention_bwd(const attention_state *s, const ph_ctx *ctx, float *const *params, float *const *grads,
			 const float *x, const float *dy, float *dx, ph_err *err)
{
	int rc = check_call(ctx, err);
	if (rc || ctx->batch == 0 || (!grads && !dx))
		return rc;
	const ph_attn_geom g = make_geom(s);
	const int T = g.T, d = g.d;
	const float rate = g.rate;
	const int B = ctx->batch, R = B * T;
	const float *qkv = (const float *)ctx->saved;
	const float *P = qkv + (size_t)R * 3 * d;
	const float *att = P + (size_t)B * p_floats(&g, ph_flash_usable(ctx, &g));
	const int drop = ctx->training && rate > 0.0f;
	const uint64_t key = ph_rng_key(ctx->seed, ctx->step, ctx->microbatch, ctx->layer);
	float *datt = (float *)ctx->scratch;          /* [R, d] */
	float *dqkv = datt + (size_t)R * d;           /* [R, 3d] */
	float *tmp = dqkv + (size_t)R * 3 * d;        /* [H, T, T] (x2 with dropout) */

	if ((rc = ph_gemm(ctx, 0, 0, R, d, d, 1.0f, dy, d, params[2], d, 0.0f, datt, d, err)))
		return rc;
	if (grads) {
		ph_gpu_reuse_operand(ctx, dy); /* the product before read dy too */
		if ((rc = ph_gemm(ctx, 1, 0, d, d, R, 1.0f, dy, d, att, d, 1.0f, grads[2], d, err)))
			return rc;
		PH_CUDA_TRY(err, ph_k_colsum_acc(PH_STREAM(ctx), dy, R, d, grads[3]));
	}
	if (ph_flash_usable(ctx, &g))
		rc = ph_flash_backward(ctx, &g, B, drop, key, qkv, P, att, datt, dqkv, tmp, err);
	else
		rc = ph_attn_backward(ctx, &g, B, drop, key, qkv, P, datt, dqkv, tmp, err);
	if (rc)
		return rc;
	if (grads) {
		if ((rc = ph_gemm(ctx, 1, 0, 3 * d, d, R, 1.0f, dqkv, 3 * d, x, d, 1.0f, grads[0], d, err)))
			return rc;
		PH_CUDA_TRY(err, ph_k_colsum_acc(PH_STREAM(ctx), dqkv, R, 3 * d, grads[1]));
		if (dx)
			ph_gpu_reuse_operand(ctx, dqkv);
	}
	if (dx)
		return ph_gemm(ctx, 0, 0, R, d, 3 * d, 1.0f, dqkv, 3 * d, params[0], d, 0.0f, dx, d, err);
	return PH_OK;
}

static int attention_cuda_backward(void *state, const ph_ctx *ctx, float *const *params, float *const *grads,
				   const float *x, const float *y, const float *dy, float *dx, ph_err *err)
{
	return attention_bwd((const attention_state *)state, ctx, params, grads, x, dy, dx, err);
}

static int attention_cuda_backward_input(void *state, const ph_ctx *ctx, float *const *params, const float *x,
					 const float *y, const float *dy, float *dx, ph_err *err)
{
	return attention_bwd((const attention_state *)state, ctx, params, NULL, x, dy, dx, err);
}

static int attention_cuda_backward_weight(void *state, const ph_ctx *ctx, float *const *params,
					  float *const *grads, const float *x, const float *y, const float *dy,
					  ph_err *err)
{
	return attention_bwd((const attention_state *)state, ctx, params, grads, x, dy, NULL, err);
}

/* Bytes saved per sample on the GPU (ABI 1.6): qkv, P as laid out above,
 * att; 0 (meta's) where the core is not fused. */
static size_t attention_cuda_saved_bytes(const void *state, int precision)
{
	const ph_attn_geom g = make_geom((const attention_state *)state);
	if (!ph_flash_usable_at(precision, &g))
		return 0;
	const size_t T = g.T, d = g.d;
	return (T * 3 * d + p_floats(&g, 1) + T * d) * sizeof(float);
}

PH_LAYER_CUDA_OPS(attention_cuda_ops) = { .struct_size = sizeof(ph_layer_device_ops),
					  .forward = attention_cuda_forward,
					  .backward = attention_cuda_backward,
					  .backward_input = attention_cuda_backward_input,
					  .backward_weight = attention_cuda_backward_weight,
					  .release = NULL,
					  .saved_bytes = attention_cuda_saved_bytes };
