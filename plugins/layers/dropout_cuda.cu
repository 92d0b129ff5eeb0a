/* dropout's CUDA twin (dropout.c): the CPU's mask, bit for bit.
 *   out_i = ph_rng_uniform(key, i) >= rate ? in_i * scale : 0,  i = 0..n-1
 * over the whole micro-batch, key = ph_rng_key(seed, step, microbatch, layer);
 * forward maps x -> y, backward dy -> dx with the mask drawn again.  The
 * kernel is cuda_ops.cuh's (one Philox call per four elements). */
#include "cuda_ops.cuh"

extern "C" int dropout_cuda_apply(const ph_ctx *ctx, float rate, float scale, const float *in,
				  float *out, int64_t n, ph_err *err)
{
	if (n <= 0)
		return PH_OK;
	const uint64_t key = ph_rng_key(ctx->seed, ctx->step, ctx->microbatch, ctx->layer);
	PH_CUDA_TRY(err, ph_k_dropout_fwd_ex(PH_STREAM(ctx), key, rate, scale, in, out, n));
	return PH_OK;
}

/* eval, or rate 0: out = in (skipped in place) */
extern "C" int dropout_cuda_copy(const ph_ctx *ctx, const float *in, float *out, int64_t n,
				 ph_err *err)
{
	if (n <= 0 || out == in)
		return PH_OK;
	PH_CUDA_TRY(err, cudaMemcpyAsync(out, in, (size_t)n * sizeof(float), cudaMemcpyDeviceToDevice,
					 PH_STREAM(ctx)));
	return PH_OK;
}
