/*
 * cublas.cc: the emulator's cuBLAS (the subset in include/cublas_v2.h).
 * Plain loops, column-major as cuBLAS: C = alpha op(A) op(B) + beta C, with
 * C not read when beta is 0.  Each product accumulates in double and rounds
 * once; CUBLAS_COMPUTE_32F_FAST_16BF first rounds A and B to bf16 (round to
 * nearest even), the inputs tensor cores would see.  A reference, not
 * cuBLAS's bits: tests compare against it with tolerances.  Queued on the
 * handle's stream like any kernel.
 */
#include <cublas_v2.h>

#include <stdint.h>
#include <string.h>

#include "cuemu-internal.h"

#define EXPORT extern "C" __attribute__((visibility("default")))

struct cublasContext {
	cudaStream_t stream;
};

EXPORT cublasStatus_t cublasCreate(cublasHandle_t *h)
{
	*h = new cublasContext{nullptr};
	return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasDestroy(cublasHandle_t h)
{
	if (!h)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	delete h;
	return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s)
{
	if (!h)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	h->stream = s;
	return CUBLAS_STATUS_SUCCESS;
}

static cublasStatus_t gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
			   const float *alpha, const float *A, int lda, long long sa, const float *B, int ldb,
			   long long sb, const float *beta, float *C, int ldc, long long sc, int batch, int bf16)
{
	if (!h)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	if (m < 0 || n < 0 || k < 0 || batch < 0 || (ta != CUBLAS_OP_N && ta != CUBLAS_OP_T) ||
	    (tb != CUBLAS_OP_N && tb != CUBLAS_OP_T) || lda < (ta == CUBLAS_OP_N ? m : k) || lda < 1 ||
	    ldb < (tb == CUBLAS_OP_N ? k : n) || ldb < 1 || ldc < m || ldc < 1)
		return CUBLAS_STATUS_INVALID_VALUE;
	/* alpha and beta are read now (host pointer mode); the product runs
	 * on the handle's stream */
	const float al = *alpha, be = *beta;
	cuemu::enqueue(h->stream, [=] {
		for (int q = 0; q < batch; q++) {
			const float *a = A + q * sa, *b = B + q * sb;
			float *c = C + q * sc;
			for (int j = 0; j < n; j++)
				for (int i = 0; i < m; i++) {
					double acc = 0;
					for (int p = 0; p < k; p++) {
						float x = ta == CUBLAS_OP_N ? a[i + (int64_t)p * lda] : a[p + (int64_t)i * lda];
						float y = tb == CUBLAS_OP_N ? b[p + (int64_t)j * ldb] : b[j + (int64_t)p * ldb];
						if (bf16) {
							x = cuemu::round_bf16(x);
							y = cuemu::round_bf16(y);
						}
						acc += (double)x * (double)y;
					}
					float *o = &c[i + (int64_t)j * ldc];
					float v = al * (float)acc;
					*o = be == 0.f ? v : v + be * *o;
				}
		}
	});
	return CUBLAS_STATUS_SUCCESS;
}

static int compute_bf16(cublasComputeType_t ct, int *ok)
{
	*ok = ct == CUBLAS_COMPUTE_32F || ct == CUBLAS_COMPUTE_32F_PEDANTIC || ct == CUBLAS_COMPUTE_32F_FAST_16BF ||
	      ct == CUBLAS_COMPUTE_32F_FAST_TF32;
	return ct == CUBLAS_COMPUTE_32F_FAST_16BF;
}

EXPORT cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
						 int n, int k, const void *alpha, const void *A, cudaDataType_t at,
						 int lda, long long sa, const void *B, cudaDataType_t bt, int ldb,
						 long long sb, const void *beta, void *C, cudaDataType_t ct, int ldc,
						 long long sc, int batch, cublasComputeType_t compute, cublasGemmAlgo_t algo)
{
	(void)algo;
	int ok;
	int bf16 = compute_bf16(compute, &ok);
	if (!ok || at != CUDA_R_32F || bt != CUDA_R_32F || ct != CUDA_R_32F)
		return CUBLAS_STATUS_NOT_SUPPORTED;
	return gemm(h, ta, tb, m, n, k, (const float *)alpha, (const float *)A, lda, sa, (const float *)B, ldb, sb,
		    (const float *)beta, (float *)C, ldc, sc, batch, bf16);
}

EXPORT cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
				   const void *alpha, const void *A, cudaDataType_t at, int lda, const void *B,
				   cudaDataType_t bt, int ldb, const void *beta, void *C, cudaDataType_t ct, int ldc,
				   cublasComputeType_t compute, cublasGemmAlgo_t algo)
{
	return cublasGemmStridedBatchedEx(h, ta, tb, m, n, k, alpha, A, at, lda, 0, B, bt, ldb, 0, beta, C, ct, ldc, 0,
					  1, compute, algo);
}

EXPORT cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
				  const float *alpha, const float *A, int lda, const float *B, int ldb,
				  const float *beta, float *C, int ldc)
{
	return gemm(h, ta, tb, m, n, k, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1, 0);
}
