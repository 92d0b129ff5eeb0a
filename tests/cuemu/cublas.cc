/* SPDX-License-Identifier: MIT */
/*
 * cublas.cc: the emulator's cuBLAS (the subset in include/cublas_v2.h).
 * Plain loops, column-major as cuBLAS: C = alpha op(A) op(B) + beta C, with
 * C not read when beta is 0.  Each product accumulates in double and rounds
 * once; CUBLAS_COMPUTE_32F_FAST_16BF first rounds A and B to bf16 (round to
 * nearest even), the inputs tensor cores would see, and A and B may be
 * stored as bf16 (CUDA_R_16BF, both, with C fp32 and CUBLAS_COMPUTE_32F),
 * which gives the same products as FAST_16BF on their fp32 originals.  A reference, not
 * cuBLAS's bits: tests compare against it with tolerances.  Queued on the
 * handle's stream like any kernel.
 */
#include <cublas_v2.h>

#include <stdint.h>
#include <string.h>

#include "cuemu-internal.h"

#include <atomic>

#define EXPORT extern "C" __attribute__((visibility("default")))

static std::atomic<unsigned long> n_bf16_products{ 0 };

void cuemu::count_bf16_product()
{
	n_bf16_products++;
}

/* Products (cuBLAS and cuBLASLt) whose A and B were stored as bf16: tests
 * ask, through dlsym, whether a bf16 run took its bf16 copies. */
EXPORT unsigned long cuemu_bf16_products(void)
{
	return n_bf16_products.load();
}

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
			   const float *alpha, const void *A, int lda, long long sa, const void *B, int ldb,
			   long long sb, const float *beta, float *C, int ldc, long long sc, int batch, int bf16,
			   int stored_bf16)
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
	if (stored_bf16)
		cuemu::count_bf16_product();
	cuemu::enqueue(h->stream, [=] {
		for (int q = 0; q < batch; q++) {
			const int64_t oa = q * sa, ob = q * sb;
			float *c = C + q * sc;
			for (int j = 0; j < n; j++)
				for (int i = 0; i < m; i++) {
					double acc = 0;
					for (int p = 0; p < k; p++) {
						float x = cuemu::operand_at(A, oa + (ta == CUBLAS_OP_N ? i + (int64_t)p * lda
												    : p + (int64_t)i * lda),
									  stored_bf16);
						float y = cuemu::operand_at(B, ob + (tb == CUBLAS_OP_N ? p + (int64_t)j * ldb
												    : j + (int64_t)p * ldb),
									  stored_bf16);
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
	/* fp32 inputs under any fp32 compute type, or bf16 inputs under plain
	 * CUBLAS_COMPUTE_32F; the output is fp32 */
	const int stored_bf16 = at == CUDA_R_16BF && bt == CUDA_R_16BF && compute == CUBLAS_COMPUTE_32F;
	if (!ok || !(stored_bf16 || (at == CUDA_R_32F && bt == CUDA_R_32F)) || ct != CUDA_R_32F)
		return CUBLAS_STATUS_NOT_SUPPORTED;
	return gemm(h, ta, tb, m, n, k, (const float *)alpha, A, lda, sa, B, ldb, sb, (const float *)beta, (float *)C,
		    ldc, sc, batch, bf16, stored_bf16);
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
	return gemm(h, ta, tb, m, n, k, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1, 0, 0);
}
