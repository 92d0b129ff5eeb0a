/* SPDX-License-Identifier: MIT */
/* TRY(err, call) for the backend's host code (backend.cu, optimizer.cu):
 * a CUDA runtime call that fails becomes the caller's error return,
 * naming the call and CUDA's reason: PH_ENOMEM where CUDA ran out of
 * memory (main then says what to do), else PH_EINTERNAL. */
#ifndef PH_CUDA_TRY_H
#define PH_CUDA_TRY_H

#include <cuda_runtime.h>

#include <pipehost/plugin.h>

#define TRY(err, call)                                                                                     \
	do {                                                                                               \
		cudaError_t e_ = (call);                                                                   \
		if (e_ != cudaSuccess)                                                                     \
			return ph_fail((err), e_ == cudaErrorMemoryAllocation ? PH_ENOMEM : PH_EINTERNAL,   \
				       "CUDA: %s: %s", #call, cudaGetErrorString(e_));                     \
	} while (0)

#endif
