/* SPDX-License-Identifier: MIT */
/* cuemu: the cuBLASLt subset pipehost uses, on the CPU (tests/cuemu/cublaslt.cc).
 * One matmul D = alpha op(A) op(B) + beta C with the BIAS, GELU_AUX_BIAS
 * and DGELU epilogues, column-major, fp32 data; the descriptors keep what was set and
 * the heuristic hands back one "algorithm" when the request is one real
 * cuBLASLt takes (types, epilogue, aux leading dimension, alignments as the
 * preference declares them).  Enum values are cuBLASLt's own. */
#ifndef CUEMU_CUBLASLT_H
#define CUEMU_CUBLASLT_H

#include <stddef.h>
#include <stdint.h>

#include <cublas_v2.h>

struct cublasLtContext;
typedef struct cublasLtContext *cublasLtHandle_t;

typedef struct {
	uint64_t data[32];
} cublasLtMatmulDescOpaque_t;
typedef cublasLtMatmulDescOpaque_t *cublasLtMatmulDesc_t;

typedef struct {
	uint64_t data[8];
} cublasLtMatrixLayoutOpaque_t;
typedef cublasLtMatrixLayoutOpaque_t *cublasLtMatrixLayout_t;

typedef struct {
	uint64_t data[8];
} cublasLtMatmulPreferenceOpaque_t;
typedef cublasLtMatmulPreferenceOpaque_t *cublasLtMatmulPreference_t;

typedef struct {
	uint64_t data[8];
} cublasLtMatmulAlgo_t;

typedef struct {
	cublasLtMatmulAlgo_t algo;
	size_t workspaceSize;
	cublasStatus_t state;
	float wavesCount;
	int reserved[4];
} cublasLtMatmulHeuristicResult_t;

typedef enum {
	CUBLASLT_MATMUL_DESC_TRANSA = 3,
	CUBLASLT_MATMUL_DESC_TRANSB = 4,
	CUBLASLT_MATMUL_DESC_EPILOGUE = 7,
	CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8,
	CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER = 11,
	CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD = 12,
} cublasLtMatmulDescAttributes_t;

typedef enum {
	CUBLASLT_EPILOGUE_DEFAULT = 1,
	CUBLASLT_EPILOGUE_BIAS = 4,
	CUBLASLT_EPILOGUE_GELU = 32,
	CUBLASLT_EPILOGUE_GELU_AUX = 32 | 128,
	CUBLASLT_EPILOGUE_GELU_BIAS = 32 | 4,
	CUBLASLT_EPILOGUE_GELU_AUX_BIAS = 32 | 128 | 4,
	CUBLASLT_EPILOGUE_DGELU = 64 | 128,
} cublasLtEpilogue_t;

typedef enum {
	CUBLASLT_REDUCTION_SCHEME_NONE = 0,
	CUBLASLT_REDUCTION_SCHEME_INPLACE = 1,
	CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE = 2,
	CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE = 4,
	CUBLASLT_REDUCTION_SCHEME_MASK = 7,
} cublasLtReductionScheme_t;

typedef enum {
	CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1,
	CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK = 3,
	CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES = 5,
	CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES = 6,
	CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES = 7,
	CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES = 8,
} cublasLtMatmulPreferenceAttributes_t;

#ifdef __cplusplus
extern "C" {
#endif
cublasStatus_t cublasLtCreate(cublasLtHandle_t *h);
cublasStatus_t cublasLtDestroy(cublasLtHandle_t h);
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t compute, cudaDataType_t scale);
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d);
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr,
					      const void *buf, size_t size);
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType type, uint64_t rows, uint64_t cols,
					  int64_t ld);
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l);
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p);
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p);
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
						    cublasLtMatmulPreferenceAttributes_t attr, const void *buf,
						    size_t size);
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t a,
					      cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c,
					      cublasLtMatrixLayout_t d, cublasLtMatmulPreference_t pref, int requested,
					      cublasLtMatmulHeuristicResult_t results[], int *returned);
cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t op, const void *alpha, const void *A,
			      cublasLtMatrixLayout_t a, const void *B, cublasLtMatrixLayout_t b, const void *beta,
			      const void *C, cublasLtMatrixLayout_t c, void *D, cublasLtMatrixLayout_t d,
			      const cublasLtMatmulAlgo_t *algo, void *workspace, size_t workspace_bytes,
			      cudaStream_t stream);
#ifdef __cplusplus
}
#endif

#endif
