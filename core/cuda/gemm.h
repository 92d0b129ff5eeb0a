/* SPDX-License-Identifier: MIT */
/* The GPU services of <pipehost/device.h> for one rank: its matrix products
 * (core/cuda/gemm.cu).  Owned by the rank state of core/cuda/backend.cu,
 * which hands ph_gemm_services() to every layer call as ctx->gpu. */
#ifndef PH_CUDA_GEMM_H
#define PH_CUDA_GEMM_H

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <pipehost/device.h>

typedef struct ph_gemm_rank ph_gemm_rank;

/* Call with the rank's GPU current: cuBLASLt's handle and its workspace
 * for this rank's stream.  PIPEHOST_GEMM_LT=0 in the environment keeps
 * every fused epilogue on the unfused path (a product, then one pass). */
int ph_gemm_open(ph_gemm_rank **out, ph_err *err);
void ph_gemm_close(ph_gemm_rank *g);
const ph_gpu_api *ph_gemm_services(const ph_gemm_rank *g);
/* Whether bf16 products round their operands into bf16 copies
 * (bf16_operands.h); PIPEHOST_GEMM_CAST=0 in the environment says no. */
int ph_gemm_casts(void);
const char *ph_blas_status(cublasStatus_t s);

#endif
