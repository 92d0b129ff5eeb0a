/* Kernels of the CUDA backend: the optimizer and gradient
 * housekeeping.  The optimizer mirrors core/optim.c operation for
 * operation with the _rn intrinsics, which nvcc never fuses into FMAs, so a
 * GPU step rounds exactly as the CPU's plain float loop does. */
#ifndef PH_CUDA_KERNELS_CUH
#define PH_CUDA_KERNELS_CUH

#include <stdint.h>

#define PH_K_SUMSQ_BLOCKS 256

static inline unsigned ph_k_blocks(int64_t n)
{
	int64_t b = (n + 255) / 256;
	return (unsigned)(b < 1 ? 1 : b > 65535 * 8 ? 65535 * 8 : b);
}

#define K_GRID_STRIDE(i, n) \
	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)

typedef struct {
	float lr, mom, wd;
	int nesterov;
} ph_k_sgd_args;

typedef struct {
	float step_size, bc2_sqrt, b1, b2, one_b1, one_b2, eps, keep;
} ph_k_adamw_args;

/* The gradient as the update reads it: clipped, g = (float)(g * clip) with
 * the product in double as the CPU does, where clip != 1; the tensor's
 * element is zeroed for the next step's accumulation in the same pass. */
__device__ static inline float k_take_grad(float *g, int64_t i, double clip)
{
	float gi = g[i];
	if (clip != 1.0)
		gi = __double2float_rn(__dmul_rn((double)gi, clip));
	g[i] = 0.f;
	return gi;
}

/* optim.c sgd(): d = g + wd*w; v = mom*s + d; w -= lr * (nesterov ? d + mom*v : v) */
__global__ static void k_sgd(ph_k_sgd_args a, double clip, float *w, float *g, float *s, int64_t n)
{
	K_GRID_STRIDE(i, n)
	{
		float d = k_take_grad(g, i, clip);
		if (a.wd != 0.f)
			d = __fadd_rn(d, __fmul_rn(a.wd, w[i]));
		float v = __fadd_rn(__fmul_rn(a.mom, s[i]), d);
		s[i] = v;
		float step = a.nesterov ? __fadd_rn(d, __fmul_rn(a.mom, v)) : v;
		w[i] = __fsub_rn(w[i], __fmul_rn(a.lr, step));
	}
}

/* optim.c adamw(): decoupled decay, then the moments, then the step. */
__global__ static void k_adamw(ph_k_adamw_args a, double clip, float *w, float *g, float *m, float *v, int64_t n)
{
	K_GRID_STRIDE(i, n)
	{
		float wi = w[i];
		if (a.keep != 1.f)
			wi = __fmul_rn(wi, a.keep);
		float gi = k_take_grad(g, i, clip);
		float mi = __fadd_rn(__fmul_rn(a.b1, m[i]), __fmul_rn(a.one_b1, gi));
		float vi = __fadd_rn(__fmul_rn(a.b2, v[i]), __fmul_rn(__fmul_rn(a.one_b2, gi), gi));
		m[i] = mi;
		v[i] = vi;
		float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), a.bc2_sqrt), a.eps);
		w[i] = __fsub_rn(wi, __fmul_rn(a.step_size, __fdiv_rn(mi, denom)));
	}
}

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
 * run, then fixed-shape trees, so the result depends on n only. */
__global__ static void k_sumsq_partial(const float *g, int64_t n, double *partial)
{
	__shared__ double sh[256];
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

/* One block of PH_K_SUMSQ_BLOCKS threads; the sum lands in out[0]. */
__global__ static void k_sumsq_final(const double *partial, double *out)
{
	__shared__ double sh[PH_K_SUMSQ_BLOCKS];
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

#endif
