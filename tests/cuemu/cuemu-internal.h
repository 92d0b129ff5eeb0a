/* SPDX-License-Identifier: MIT */
/* Shared between the emulator's runtime (cuemu.cc) and its cuBLAS, cuDNN
 * and NCCL (cublas.cc, cublaslt.cc, cudnn.cc, nccl.cc): work those
 * libraries queue on a stream. */
#ifndef CUEMU_INTERNAL_H
#define CUEMU_INTERNAL_H

#include <cuda_runtime.h>

#include <stdint.h>
#include <string.h>

#include <functional>

namespace cuemu {
/* Runs fn on stream s after everything queued there before (at once when s
 * is the null stream).  Capture values, not host pointers the caller may
 * change after the call returns. */
void enqueue(cudaStream_t s, std::function<void()> fn);
/* The same, and the stream runs up to and including fn even when lazy
 * (PH_CUEMU_STREAMS), whatever waits on it: the work queued there before
 * fn runs first, and the streams it waits on through events.  For NCCL's
 * operations (nccl.cc), which a peer process waits on. */
void enqueue_eager(cudaStream_t s, std::function<void()> fn);
/* Whether enqueue and enqueue_eager run fn on the calling thread before
 * they return: the null stream, or PH_CUEMU_STREAMS=sync. */
bool runs_at_once(cudaStream_t s);

/* x rounded to bf16 (round to nearest even; inf and nan kept, nan quiet):
 * what tensor cores see of an fp32 input under CUBLAS_COMPUTE_32F_FAST_16BF. */
static inline float round_bf16(float x)
{
	uint32_t u;
	memcpy(&u, &x, 4);
	if ((u & 0x7f800000u) == 0x7f800000u) {
		u = (u & 0x007fffffu) ? (u | 0x00400000u) & 0xffff0000u : u & 0xffff0000u;
	} else {
		u += 0x7fffu + ((u >> 16) & 1u);
		u &= 0xffff0000u;
	}
	memcpy(&x, &u, 4);
	return x;
}

/* Element i of a matrix operand stored as fp32 (bf16 0) or as bf16 (the
 * top half of an fp32), as a float. */
static inline float operand_at(const void *base, int64_t i, int bf16)
{
	if (!bf16)
		return ((const float *)base)[i];
	uint32_t u = (uint32_t)((const uint16_t *)base)[i] << 16;
	float x;
	memcpy(&x, &u, 4);
	return x;
}

/* NCCL operations of this process queued on a stream and not yet done
 * (nccl.cc counts them): cudaFree and cudaDeviceSynchronize refuse to run
 * while any is, as a GPU would wait on them and a peer may wait on us. */
void nccl_queued_add(long delta);

/* Counts products whose A and B were stored as bf16 (cublas.cc keeps it,
 * cuemu_bf16_products() reports it). */
void count_bf16_product();
} /* namespace cuemu */

#endif
