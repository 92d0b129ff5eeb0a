/* relu's CUDA twin (relu.c): y = max(x, 0); dx = y > 0 ? dy : 0.
 * Element-wise over n = batch * numel, grid-stride.  y may alias x, dx dy. */
#include "cuda_common.cuh"

/* x, y [n] */
static __global__ void relu_fwd_kernel(const float *x, float *y, int64_t n)
{
	PH_GRID_STRIDE(i, n) {
		const float v = x[i];
		y[i] = v > 0.0f ? v : 0.0f;
	}
}

/* y, dy, dx [n] */
static __global__ void relu_bwd_kernel(const float *y, const float *dy, float *dx, int64_t n)
{
	PH_GRID_STRIDE(i, n)
		dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

extern "C" int relu_cuda_forward(const ph_ctx *ctx, const float *x, float *y, int64_t n, ph_err *err)
{
	if (n <= 0)
		return PH_OK;
	relu_fwd_kernel<<<ph_blocks(n), 256, 0, PH_STREAM(ctx)>>>(x, y, n);
	PH_CUDA_CHECK_LAUNCH(err, "relu: forward");
	return PH_OK;
}

extern "C" int relu_cuda_backward(const ph_ctx *ctx, const float *y, const float *dy, float *dx,
				  int64_t n, ph_err *err)
{
	if (n <= 0 || !dx)
		return PH_OK;
	relu_bwd_kernel<<<ph_blocks(n), 256, 0, PH_STREAM(ctx)>>>(y, dy, dx, n);
	PH_CUDA_CHECK_LAUNCH(err, "relu: backward");
	return PH_OK;
}
