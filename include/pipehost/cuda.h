/* SPDX-License-Identifier: MIT */
/*
 * pipehost CUDA twins: what a layer's CUDA hooks (ph_layer_device_ops,
 * plugin.h ABI 1.4) need, for a .cu file compiled with nvcc (C++):
 *
 *     nvcc -std=c++17 -Xcompiler -fPIC $(pkg-config --cflags pipehost) -c NAME_cuda.cu
 *
 * and linked into the same module as NAME.c (docs/plugins-cuda.md).
 *
 * What the host guarantees a CUDA hook, on top of plugin.h's contracts:
 *  - ctx->batch lies in [0, max_batch] (max_batch as create() got it): the
 *    host checks it before every call, so a hook need not;
 *  - every tensor pointer (params, grads, x, y, dy, dx, ctx->scratch,
 *    ctx->saved, ctx->targets) is device memory of the rank's GPU, which
 *    is the current device; scratch has meta's device_scratch_bytes (or
 *    scratch_bytes when that is 0);
 *  - ctx->stream is the rank's stream: launch every kernel and copy on it
 *    and never synchronise; the host orders the work between ranks;
 *  - ctx->gpu offers GEMMs at the run's precision (device.h), ctx->blas is
 *    the rank's cuBLAS handle and ctx->dnn its cuDNN handle, both bound to
 *    ctx->stream.
 */
#ifndef PIPEHOST_CUDA_H
#define PIPEHOST_CUDA_H

#include <cuda_runtime.h>
#include <stdint.h>

#include <pipehost/device.h>
#include <pipehost/plugin.h>

/* Define the device hooks that NAME.c declares with PH_LAYER_TWIN(sym):
 *     PH_LAYER_CUDA_OPS(NAME_cuda_ops) = { .struct_size = sizeof(ph_layer_device_ops),
 *                                          .forward = ..., .backward = ... };
 * (C linkage, so the C file's reference finds it; external, which a const
 * object in C++ otherwise is not; hidden outside the module.) */
#ifdef __cplusplus
#define PH_LAYER_CUDA_OPS(sym) extern "C" __attribute__((visibility("hidden"))) const ph_layer_device_ops sym
#else
#define PH_LAYER_CUDA_OPS(sym) __attribute__((visibility("hidden"))) const ph_layer_device_ops sym
#endif

/* The call's stream and library handles (the last two need cublas_v2.h or
 * cudnn.h included first). */
#define PH_STREAM(ctx) ((cudaStream_t)(ctx)->stream)
#define PH_CUBLAS(ctx) ((cublasHandle_t)(ctx)->blas)
#define PH_CUDNN(ctx) ((cudnnHandle_t)(ctx)->dnn)

/* After a launch: turn a CUDA error into a status and one line (PH_ENOMEM
 * where CUDA ran out of memory, so that the host says what to do). */
#define PH_CUDA_CHECK_LAUNCH(err, what)                                                      \
	do {                                                                                 \
		cudaError_t ph_e_ = cudaGetLastError();                                      \
		if (ph_e_ != cudaSuccess)                                                    \
			return ph_fail((err), ph_e_ == cudaErrorMemoryAllocation ? PH_ENOMEM : PH_EINTERNAL, \
				       "%s: %s", (what), cudaGetErrorString(ph_e_));                 \
	} while (0)

/* Run a CUDA runtime call; on failure return PH_EINTERNAL naming it
 * (PH_ENOMEM where CUDA ran out of memory). */
#define PH_CUDA_TRY(err, call)                                                               \
	do {                                                                                 \
		cudaError_t ph_e_ = (call);                                                  \
		if (ph_e_ != cudaSuccess)                                                    \
			return ph_fail((err), ph_e_ == cudaErrorMemoryAllocation ? PH_ENOMEM : PH_EINTERNAL, \
				       "%s: %s", #call, cudaGetErrorString(ph_e_));                  \
	} while (0)

#ifdef __cplusplus
/* Blocks for n independent elements, `threads` each, capped: the kernels
 * stride over the rest (PH_GRID_STRIDE). */
static inline unsigned ph_blocks(int64_t n, int threads = 256)
{
	int64_t b = (n + threads - 1) / threads;
	if (b < 1)
		b = 1;
	return (unsigned)(b > 65535 * 8 ? 65535 * 8 : b);
}
#endif

/* Inside a kernel: i = this thread's elements of [0, n), grid-stride. */
#define PH_GRID_STRIDE(i, n) \
	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)

/* Row-major C [M, N] = alpha op(A) op(B) + beta C through the host's GEMM,
 * at the run's precision (ph_gpu_api.gemm, one product). */
static inline int ph_gemm(const ph_ctx *ctx, int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
			  const float *B, int ldb, float beta, float *C, int ldc, ph_err *err)
{
	if (!ctx->gpu)
		return ph_fail(err, PH_EINTERNAL, "no GPU services in the call context");
	return ctx->gpu->gemm(ctx, ta, tb, M, N, K, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1, err);
}

#endif /* PIPEHOST_CUDA_H */
