/* gelu's CUDA twin (gelu.c): tanh-approximation GELU, element-wise over
 * n = batch * numel, bit for bit tf_gelu / tf_gelu_grad (cuda_ops.cuh).
 *   forward:  y = gelu(x)
 *   backward: dx = dy * gelu'(x)   (dx may alias dy) */
#include "cuda_ops.cuh"

extern "C" int gelu_cuda_forward(const ph_ctx *ctx, const float *x, float *y, int64_t n, ph_err *err)
{
	PH_CUDA_TRY(err, ph_k_gelu_fwd(PH_STREAM(ctx), x, y, n));
	return PH_OK;
}

extern "C" int gelu_cuda_backward(const ph_ctx *ctx, const float *x, const float *dy, float *dx,
				  int64_t n, ph_err *err)
{
	if (!dx)
		return PH_OK;
	PH_CUDA_TRY(err, ph_k_gelu_bwd(PH_STREAM(ctx), x, dy, dx, n));
	return PH_OK;
}
