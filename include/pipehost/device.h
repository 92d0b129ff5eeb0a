/* SPDX-License-Identifier: MIT */
/*
 * pipehost device services (ABI 1.3): what the host offers a layer's CUDA
 * twin through ph_ctx.gpu.  Plain C, no CUDA header needed to include it.
 *
 * Why the host does the matrix products: the precision policy (`[run]
 * precision = fp32|bf16`), the cuBLAS handle per rank and its workspace are
 * the host's, and a layer plugin that calls through this table needs only
 * the CUDA runtime, not cuBLAS (whose 0.1 s load time every CPU run would
 * otherwise pay).  A plugin is free to link cuBLAS itself and use ctx->blas.
 *
 * Every call is asynchronous on ctx->stream and returns PH_OK or an error
 * code with one line in err.
 */
#ifndef PIPEHOST_DEVICE_H
#define PIPEHOST_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include <pipehost/plugin.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Fused epilogues of ph_gpu_api.gemm_ex (cuBLASLt where it has them). */
enum {
	PH_EPI_NONE = 0,
	PH_EPI_BIAS = 1,      /* C[i][j] += bias[j] */
	PH_EPI_BIAS_GELU = 2, /* C = gelu_tanh(A*B + bias); pre-activation to aux */
	PH_EPI_DGELU = 3,     /* C = A*B * gelu_tanh'(aux): aux is the pre-activation
			       * PH_EPI_BIAS_GELU kept (the MLP's backward); no bias */
	PH_EPI_BIAS_ADD = 4   /* C = A*B + aux + bias: aux (read, not C) is a
			       * residual added in the same pass */
};

typedef struct ph_gpu_api {
	uint32_t struct_size;       /* sizeof, as the host built it */

	/* Row-major, batched, as cblas_sgemm with CblasRowMajor:
	 *   C[b] = alpha * op(A[b]) * op(B[b]) + beta * C[b],   b = 0..batch-1
	 * op(A) is M x K, op(B) is K x N, C is M x N; X[b] = X + b * strideX.
	 * Runs at ctx->precision: fp32 exactly (no TF32), or bf16 tensor-core
	 * products with fp32 accumulation. */
	int (*gemm)(const ph_ctx *ctx, int trans_a, int trans_b, int M, int N, int K, float alpha,
		    const float *A, int lda, int64_t stride_a, const float *B, int ldb, int64_t stride_b,
		    float beta, float *C, int ldc, int64_t stride_c, int batch, ph_err *err);

	/* One product with a fused epilogue (batch 1, beta 0):
	 *   C = epi(op(A) * op(B) + bias)
	 * bias has N floats; with PH_EPI_BIAS_GELU the pre-activation goes to
	 * aux (M x N, leading dimension ldc) for the backward, and with
	 * PH_EPI_DGELU it is read back from there (bias NULL); with
	 * PH_EPI_BIAS_ADD aux is a matrix of the same layout added to C. */
	int (*gemm_ex)(const ph_ctx *ctx, int trans_a, int trans_b, int M, int N, int K,
		       const float *A, int lda, const float *B, int ldb, float *C, int ldc,
		       int epilogue, const float *bias, float *aux, ph_err *err);

	/* ABI 1.3 (check struct_size): a promise about the next product this
	 * rank asks for.  p, an operand of the previous product, is still
	 * unchanged (nothing wrote it since) and the next product reads it
	 * again with the same shape, as a backward does with dy for dx and
	 * then for dW.  Under bf16 that product may then reuse the bf16 copy
	 * the previous one made instead of rounding p again.  A promise that
	 * does not match the next product is ignored; a false one (p written
	 * in between) gives wrong results. */
	void (*reuse_operand)(const ph_ctx *ctx, const float *p);

	/* ABI 1.3, under precision = bf16 only: one product (batch 1) whose A
	 * and/or B the layer already holds in bf16 (PH_GEMM_A_BF16,
	 * PH_GEMM_B_BF16 in flags: uint16 elements, the top halves of the
	 * floats rounded to nearest even; lda/ldb count elements).  The other
	 * operand is fp32 as in gemm.  epilogue PH_EPI_NONE: gemm's
	 *   C = alpha op(A) op(B) + beta C;
	 * any other: gemm_ex's, with alpha 1 and beta 0.  A layer that
	 * produces a product's input can write it in bf16 (half the bytes, and
	 * no rounding pass of the host's at every product). */
	int (*gemm_bf16)(const ph_ctx *ctx, int flags, int trans_a, int trans_b, int M, int N, int K, float alpha,
			 const void *A, int lda, const void *B, int ldb, float beta, float *C, int ldc, int epilogue,
			 const float *bias, float *aux, ph_err *err);
} ph_gpu_api;

enum { PH_GEMM_A_BF16 = 1, PH_GEMM_B_BF16 = 2 }; /* gemm_bf16's flags */

/* Whether ctx->gpu has gemm_bf16 (a host of ABI 1.3 or later). */
static inline int ph_gpu_has_gemm_bf16(const ph_ctx *ctx)
{
	return ctx->gpu && ctx->gpu->struct_size >= offsetof(ph_gpu_api, gemm_bf16) + sizeof ctx->gpu->gemm_bf16 &&
	       ctx->gpu->gemm_bf16;
}

/* ctx->gpu->reuse_operand where the host has it. */
static inline void ph_gpu_reuse_operand(const ph_ctx *ctx, const float *p)
{
	if (ctx->gpu &&
	    ctx->gpu->struct_size >= offsetof(ph_gpu_api, reuse_operand) + sizeof ctx->gpu->reuse_operand &&
	    ctx->gpu->reuse_operand)
		ctx->gpu->reuse_operand(ctx, p);
}

#ifdef __cplusplus
}
#endif
#endif /* PIPEHOST_DEVICE_H */
