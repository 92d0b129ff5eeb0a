/* Shared between the emulator's runtime (cuemu.cc) and its cuBLAS and cuDNN
 * (cublas.cc, cudnn.cc): work those libraries queue on a stream. */
#ifndef CUEMU_INTERNAL_H
#define CUEMU_INTERNAL_H

#include <cuda_runtime.h>

#include <functional>

namespace cuemu {
/* Runs fn on stream s after everything queued there before (at once when s
 * is the null stream).  Capture values, not host pointers the caller may
 * change after the call returns. */
void enqueue(cudaStream_t s, std::function<void()> fn);
} /* namespace cuemu */

#endif
