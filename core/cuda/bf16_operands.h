/* SPDX-License-Identifier: MIT */
/* Where the operands of a bf16 product come from (core/cuda/bf16_operands.cu).
 *
 * Under `precision = bf16` tensors stay fp32 and the products run on bf16
 * tensor cores.  cuBLAS can round fp32 inputs itself
 * (CUBLAS_COMPUTE_32F_FAST_16BF), but then it reads twice the bytes and
 * converts inside the kernel, and its fastest Hopper kernels (TMA, wgmma)
 * take bf16 from memory; how much that costs is what bench/gemm-modes
 * measures, and PIPEHOST_GEMM_CAST=0 goes back to it.  Here each operand
 * is rounded once, to nearest even (as FAST_16BF and the CPU twin round),
 * into a bf16 copy:
 *
 *   parameters  a shadow per registered block, made at the block's first
 *               use after a write; the engine registers each layer's
 *               weights, and every device op that writes memory reports it
 *               (ph_bf16_params_wrote), so a step casts each weight once
 *               however many micro-batches read it;
 *   the rest    (activations, gradients) cast on every call into a staging
 *               buffer of the rank, packed with a leading dimension rounded
 *               up to 8 elements (16 bytes, what cuBLASLt's fast kernels want).
 */
#ifndef PH_CUDA_BF16_OPERANDS_H
#define PH_CUDA_BF16_OPERANDS_H

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include <pipehost/plugin.h>

/* Register n floats of parameters at w, on the current GPU: allocates the
 * shadow (2n bytes).  A block that is already registered is left alone. */
int ph_bf16_params_register(const float *w, int64_t n, ph_err *err);
/* Forget the block starting at p, if any, and free its shadow (device
 * memory being freed). */
void ph_bf16_params_forget(const void *p);
/* bytes at p were written (or are about to be, in stream order): the
 * shadows of the blocks they touch are stale. */
void ph_bf16_params_wrote(const void *p, size_t bytes);
/* *view: the bf16 twin of the registered parameters at p (extent floats
 * from p must lie in one block), refreshed on stream st first if stale;
 * NULL where p is not in a registered block. */
int ph_bf16_param_view(const float *p, int64_t extent, cudaStream_t st, const void **view, ph_err *err);

/* A rank's staging buffer for one operand slot, and what it holds. */
typedef struct {
	void *buf;
	size_t cap; /* bytes */
	const float *src; /* the last operand cast into it (NULL: none) */
	int rows, cols, ld, batch;
	int64_t stride;
	int ld_out;         /* and the copy's leading dimension and stride */
	int64_t stride_out;
	int pooled;          /* buf from cudaMallocAsync on `stream` */
	cudaStream_t stream;
} ph_bf16_stage;

/* Whether the current device has a memory pool, so that a buffer can grow
 * in stream order (cudaMallocAsync, cudaFreeAsync) rather than through
 * cudaFree, which waits for the whole device. */
int ph_stream_ordered_alloc(void);

/* `batch` row-major matrices rows x cols at src (leading dimension ld, the
 * i-th at src + i*stride; stride 0: one matrix shared) rounded into s on
 * st: *out, *ld_out (cols rounded up to 8) and *stride_out (0 where stride
 * is 0).  Grows the buffer (after draining st) when it is too small. */
int ph_bf16_stage_cast(ph_bf16_stage *s, const float *src, int rows, int cols, int ld, int batch, int64_t stride,
		       cudaStream_t st, const void **out, int *ld_out, int64_t *stride_out, ph_err *err);
/* Whether s holds the copy of exactly that operand (the caller knows it
 * was not written since: reuse_operand's promise). */
int ph_bf16_stage_holds(const ph_bf16_stage *s, const float *src, int rows, int cols, int ld, int batch,
			int64_t stride);
void ph_bf16_stage_free(ph_bf16_stage *s);

#endif
