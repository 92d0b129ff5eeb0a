/* SPDX-License-Identifier: MIT */
/* cuemu: the cuBLAS subset pipehost uses, on the CPU (tests/cuemu/cublas.cc).
 * Column-major as cuBLAS; fp32 data; products accumulate in double and round
 * once, and CUBLAS_COMPUTE_32F_FAST_16BF rounds both inputs to bf16 first,
 * as tensor cores do. */
#ifndef CUEMU_CUBLAS_V2_H
#define CUEMU_CUBLAS_V2_H

#include <cuda_runtime.h>

typedef enum {
	CUBLAS_STATUS_SUCCESS = 0,
	CUBLAS_STATUS_NOT_INITIALIZED = 1,
	CUBLAS_STATUS_ALLOC_FAILED = 3,
	CUBLAS_STATUS_INVALID_VALUE = 7,
	CUBLAS_STATUS_ARCH_MISMATCH = 8,
	CUBLAS_STATUS_MAPPING_ERROR = 11,
	CUBLAS_STATUS_EXECUTION_FAILED = 13,
	CUBLAS_STATUS_INTERNAL_ERROR = 14,
	CUBLAS_STATUS_NOT_SUPPORTED = 15,
	CUBLAS_STATUS_LICENSE_ERROR = 16
} cublasStatus_t;

typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1, CUBLAS_OP_C = 2 } cublasOperation_t;

typedef enum {
	CUDA_R_16F = 2,
	CUDA_R_32F = 0,
	CUDA_R_64F = 1,
	CUDA_R_16BF = 14,
} cudaDataType_t;
typedef cudaDataType_t cudaDataType;

typedef enum {
	CUBLAS_COMPUTE_16F = 64,
	CUBLAS_COMPUTE_32F = 68,
	CUBLAS_COMPUTE_32F_PEDANTIC = 69,
	CUBLAS_COMPUTE_32F_FAST_16F = 74,
	CUBLAS_COMPUTE_32F_FAST_16BF = 75,
	CUBLAS_COMPUTE_32F_FAST_TF32 = 77,
	CUBLAS_COMPUTE_64F = 70,
} cublasComputeType_t;

typedef enum { CUBLAS_GEMM_DEFAULT = -1, CUBLAS_GEMM_DEFAULT_TENSOR_OP = 99 } cublasGemmAlgo_t;

struct cublasContext;
typedef struct cublasContext *cublasHandle_t;

#ifdef __cplusplus
extern "C" {
#endif
cublasStatus_t cublasCreate(cublasHandle_t *h);
cublasStatus_t cublasDestroy(cublasHandle_t h);
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s);
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
					  int k, const void *alpha, const void *A, cudaDataType_t at, int lda,
					  long long sa, const void *B, cudaDataType_t bt, int ldb, long long sb,
					  const void *beta, void *C, cudaDataType_t ct, int ldc, long long sc, int batch,
					  cublasComputeType_t compute, cublasGemmAlgo_t algo);
cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
			    const void *alpha, const void *A, cudaDataType_t at, int lda, const void *B,
			    cudaDataType_t bt, int ldb, const void *beta, void *C, cudaDataType_t ct, int ldc,
			    cublasComputeType_t compute, cublasGemmAlgo_t algo);
cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
			   const float *alpha, const float *A, int lda, const float *B, int ldb, const float *beta,
			   float *C, int ldc);
#ifdef __cplusplus
}
#endif

#endif
