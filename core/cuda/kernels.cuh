/* SPDX-License-Identifier: MIT */
/* Kernels of the CUDA backend: gradient housekeeping (tied sums, sums of
 * squares); the optimizer's are in optimizer.cu.  The _rn intrinsics keep
 * nvcc from fusing into FMAs, so results do not depend on the compiler. */
#ifndef PH_CUDA_KERNELS_CUH
#define PH_CUDA_KERNELS_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#define PH_K_SUMSQ_BLOCKS 256

static inline unsigned ph_k_blocks(int64_t n)
{
	int64_t b = (n + 255) / 256;
	return (unsigned)(b < 1 ? 1 : b > 65535 * 8 ? 65535 * 8 : b);
}

#define K_GRID_STRIDE(i, n) \
	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)

/* Tied copies: a = a + b; b = a. */
__global__ static void k_tie_sum(float *a, float *b, int64_t n)
{
	K_GRID_STRIDE(i, n)
	{
		float s = __fadd_rn(a[i], b[i]);
		a[i] = s;
		b[i] = s;
	}
}

/* sum(g^2) in double: PH_K_SUMSQ_BLOCKS x 256 threads, each a fixed strided
 * run, then fixed-shape trees, so the result depends on n only.  The block
 * and tree as functions, for optimizer.cu's batched form (sh: the
 * kernel's shared array, 256 and PH_K_SUMSQ_BLOCKS doubles). */
__device__ static inline void k_sumsq_block(const float *g, int64_t n, double *partial, double *sh)
{
	double acc = 0;
	K_GRID_STRIDE(i, n)
	{
		double x = (double)g[i];
		acc = __dadd_rn(acc, __dmul_rn(x, x));
	}
	sh[threadIdx.x] = acc;
	__syncthreads();
	for (int w = 128; w > 0; w >>= 1) {
		if ((int)threadIdx.x < w)
			sh[threadIdx.x] = __dadd_rn(sh[threadIdx.x], sh[threadIdx.x + w]);
		__syncthreads();
	}
	if (threadIdx.x == 0)
		partial[blockIdx.x] = sh[0];
}

__device__ static inline void k_sumsq_tree(const double *partial, double *out, double *sh)
{
	sh[threadIdx.x] = partial[threadIdx.x];
	__syncthreads();
	for (int w = PH_K_SUMSQ_BLOCKS / 2; w > 0; w >>= 1) {
		if ((int)threadIdx.x < w)
			sh[threadIdx.x] = __dadd_rn(sh[threadIdx.x], sh[threadIdx.x + w]);
		__syncthreads();
	}
	if (threadIdx.x == 0)
		out[0] = sh[0];
}

__global__ static void k_sumsq_partial(const float *g, int64_t n, double *partial)
{
	__shared__ double sh[256];
	k_sumsq_block(g, n, partial, sh);
}

/* One block of PH_K_SUMSQ_BLOCKS threads; the sum lands in out[0]. */
__global__ static void k_sumsq_final(const double *partial, double *out)
{
	__shared__ double sh[PH_K_SUMSQ_BLOCKS];
	k_sumsq_tree(partial, out, sh);
}

#endif
