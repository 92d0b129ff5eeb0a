/* Shared by every layer's CUDA twin (NAME_cuda.cu): error plumbing and
 * launch shapes.  Header-only and static, so each module stays
 * self-contained.  Kernels launch on ctx->stream and never synchronise;
 * the host orders work between ranks. */
#ifndef PH_LAYERS_CUDA_COMMON_CUH
#define PH_LAYERS_CUDA_COMMON_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#include <pipehost/device.h>
#include <pipehost/plugin.h>

#define PH_STREAM(ctx) ((cudaStream_t)(ctx)->stream)

/* After a launch: turn a CUDA error into a status and one line. */
#define PH_CUDA_CHECK_LAUNCH(err, what)                                                      \
	do {                                                                                 \
		cudaError_t ph_e_ = cudaGetLastError();                                      \
		if (ph_e_ != cudaSuccess)                                                    \
			return ph_fail((err), PH_EINTERNAL, "%s: %s", (what), cudaGetErrorString(ph_e_)); \
	} while (0)

#define PH_CUDA_TRY(err, call)                                                               \
	do {                                                                                 \
		cudaError_t ph_e_ = (call);                                                  \
		if (ph_e_ != cudaSuccess)                                                    \
			return ph_fail((err), PH_EINTERNAL, "%s: %s", #call, cudaGetErrorString(ph_e_)); \
	} while (0)

/* Blocks for n independent elements, 256 threads each, capped: the kernels
 * stride over the rest (grid-stride loops). */
static inline unsigned ph_blocks(int64_t n, int threads = 256)
{
	int64_t b = (n + threads - 1) / threads;
	if (b < 1)
		b = 1;
	return (unsigned)(b > 65535 * 8 ? 65535 * 8 : b);
}

#define PH_GRID_STRIDE(i, n) \
	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)

/* Row-major GEMM through the host's service (precision is the host's). */
static inline int ph_gemm(const ph_ctx *ctx, int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
			  const float *B, int ldb, float beta, float *C, int ldc, ph_err *err)
{
	if (!ctx->gpu)
		return ph_fail(err, PH_EINTERNAL, "no GPU services in the call context");
	return ctx->gpu->gemm(ctx, ta, tb, M, N, K, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1, err);
}

#endif
