/* SPDX-License-Identifier: MIT */
/*
 * cuemu: a CPU stand-in for the parts of CUDA that pipehost uses, so that
 * the CUDA code (kernels, the backend, the layers' twins) can be compiled
 * with g++ and run in tests on machines without a GPU.  See
 * tests/cuemu/README.md for what it checks and what it cannot.
 *
 * Kernel side: a launch runs every block of the grid in turn on the calling
 * host thread; the threads of a block are fibers that switch only at
 * barriers (__syncthreads, __syncwarp, shuffles, ballots), so barrier
 * semantics, warp exchanges and shared memory behave as on the GPU, and a
 * barrier that not every thread reaches is reported as a deadlock.
 * Runtime side: device memory is host memory; each stream is a queue run
 * by a thread of its own, lazily (see cuemu.cc), so work that is not
 * ordered by events or synchronisation shows as wrong results.
 */
#ifndef CUEMU_CUDA_RUNTIME_H
#define CUEMU_CUDA_RUNTIME_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
#include <tuple>
#include <type_traits>
#include <utility>
#endif

#define CUEMU 1
#define CUDART_VERSION 12000

/* ---------------------------------------------------------------- */
/* Types                                                              */

struct uint3 {
	unsigned x, y, z;
};
struct dim3 {
	unsigned x, y, z;
#ifdef __cplusplus
	dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
#endif
};

typedef enum cudaError {
	cudaSuccess = 0,
	cudaErrorInvalidValue = 1,
	cudaErrorMemoryAllocation = 2,
	cudaErrorInitializationError = 3,
	cudaErrorInvalidConfiguration = 9,
	cudaErrorInvalidDevicePointer = 17,
	cudaErrorInvalidMemcpyDirection = 21,
	cudaErrorNoDevice = 100,
	cudaErrorInvalidDevice = 101,
	cudaErrorInvalidResourceHandle = 400,
	cudaErrorNotReady = 600,
	cudaErrorPeerAccessAlreadyEnabled = 704,
	cudaErrorLaunchFailure = 719,
} cudaError_t;

/* the attributes the emulator answers (cudaDeviceGetAttribute) */
typedef enum cudaDeviceAttr {
	cudaDevAttrMemoryPoolsSupported = 115,
} cudaDeviceAttr;

typedef enum cudaMemcpyKind {
	cudaMemcpyHostToHost = 0,
	cudaMemcpyHostToDevice = 1,
	cudaMemcpyDeviceToHost = 2,
	cudaMemcpyDeviceToDevice = 3,
	cudaMemcpyDefault = 4,
} cudaMemcpyKind;

struct CUstream_st;
struct CUevent_st;
typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;

#define cudaStreamDefault 0x00
#define cudaStreamNonBlocking 0x01
#define cudaEventDefault 0x00
#define cudaEventBlockingSync 0x01
#define cudaEventDisableTiming 0x02
#define cudaHostAllocDefault 0x00

typedef struct cudaDeviceProp {
	char name[256];
	size_t totalGlobalMem;
	size_t sharedMemPerBlock;
	int regsPerBlock;
	int warpSize;
	int maxThreadsPerBlock;
	int maxThreadsDim[3];
	int maxGridSize[3];
	int major, minor;
	int multiProcessorCount;
	int l2CacheSize;
} cudaDeviceProp;

/* ---------------------------------------------------------------- */
/* Runtime API (tests/cuemu/cuemu.cc)                                 */

#ifdef __cplusplus
extern "C" {
#endif
cudaError_t cudaGetDeviceCount(int *count);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *prop, int device);
cudaError_t cudaDeviceGetPCIBusId(char *pciBusId, int len, int device);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDevice(int *device);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaDeviceCanAccessPeer(int *can, int device, int peer);
cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned flags);
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);
const char *cudaGetErrorString(cudaError_t e);
const char *cudaGetErrorName(cudaError_t e);
cudaError_t cudaMalloc(void **p, size_t bytes);
cudaError_t cudaFree(void *p);
cudaError_t cudaMallocAsync(void **p, size_t bytes, cudaStream_t s);
cudaError_t cudaFreeAsync(void *p, cudaStream_t s);
cudaError_t cudaDeviceGetAttribute(int *value, cudaDeviceAttr attr, int device);
cudaError_t cudaMallocHost(void **p, size_t bytes);
cudaError_t cudaHostAlloc(void **p, size_t bytes, unsigned flags);
cudaError_t cudaFreeHost(void *p);
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, cudaStream_t s);
cudaError_t cudaMemcpyPeerAsync(void *dst, int dd, const void *src, int sd, size_t bytes, cudaStream_t s);
cudaError_t cudaMemset(void *p, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes, cudaStream_t s);
cudaError_t cudaStreamCreate(cudaStream_t *s);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaStreamQuery(cudaStream_t s);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags);
cudaError_t cudaEventCreate(cudaEvent_t *e);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventQuery(cudaEvent_t e);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b);
#ifdef __cplusplus
}
#endif

#ifdef __cplusplus
/* the typed overloads cuda_runtime.h gives C++ */
template <class T> static inline cudaError_t cudaMalloc(T **p, size_t bytes) { return cudaMalloc((void **)p, bytes); }
template <class T> static inline cudaError_t cudaMallocAsync(T **p, size_t bytes, cudaStream_t s)
{
	return cudaMallocAsync((void **)p, bytes, s);
}
template <class T> static inline cudaError_t cudaMallocHost(T **p, size_t bytes)
{
	return cudaMallocHost((void **)p, bytes);
}

/* ---------------------------------------------------------------- */
/* Kernel side                                                        */

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __constant__
/* one block runs at a time on a host thread, so a block's shared memory is
 * a thread-local static of the kernel */
#define __shared__ static thread_local

namespace __attribute__((visibility("default"))) cuemu {

/* what a kernel sees of the emulated thread running it */
struct thread_view {
	uint3 tid;
	unsigned lane;
};
struct grid_view {
	uint3 block;
	dim3 dim, grid;
};
extern thread_local thread_view *cur;
extern thread_local grid_view launch;

struct cfg {
	dim3 grid, block;
	size_t shmem;
	cudaStream_t stream;
	cfg(dim3 g, dim3 b, size_t sh = 0, cudaStream_t s = 0) : grid(g), block(b), shmem(sh), stream(s) {}
};

/* Queues body(arg) to run on every thread of the grid, on the launch's
 * stream (at once on the null stream); free_arg(arg) after it ran.  A
 * configuration a GPU refuses becomes the calling thread's last error. */
void run_grid(const cfg &c, const char *name, void (*body)(void *), void *arg, void (*free_arg)(void *));

/* barriers and warp exchanges (cuemu.cc) */
void syncthreads();
void syncwarp(unsigned mask);
unsigned long long exchange(unsigned mask, unsigned long long v, int src_lane);
unsigned ballot(unsigned mask, int pred);

template <class F, class T> struct closure {
	F f;
	T args;
	static void run(void *p)
	{
		closure *c = (closure *)p;
		std::apply(c->f, c->args);
	}
	static void destroy(void *p) { delete (closure *)p; }
};

template <class... P> struct launcher {
	cfg c;
	const char *name;
	void (*k)(P...);
	template <class... A> void operator()(A &&...a) const
	{
		/* the arguments convert to the parameters' types and are copied
		 * at the launch, as at a real one: the kernel may run later */
		typedef closure<void (*)(P...), std::tuple<typename std::decay<P>::type...>> cl_t;
		cl_t *cl = new cl_t{k, std::tuple<typename std::decay<P>::type...>(std::forward<A>(a)...)};
		run_grid(c, name, &cl_t::run, cl, &cl_t::destroy);
	}
};
template <class... P> launcher<P...> launch_of(const cfg &c, const char *name, void (*k)(P...))
{
	return launcher<P...>{c, name, k};
}

template <class T> static inline unsigned long long to_bits(T v)
{
	static_assert(sizeof(T) <= 8, "shuffle of a type wider than 8 bytes");
	unsigned long long b = 0;
	memcpy(&b, &v, sizeof v);
	return b;
}
template <class T> static inline T from_bits(unsigned long long b)
{
	T v;
	memcpy(&v, &b, sizeof v);
	return v;
}
} /* namespace cuemu */

/* kernel<<<grid, block, shmem, stream>>>(args) is rewritten by cuemu-cc.sh
 * into CUEMU_LAUNCH("kernel", (kernel), grid, block, shmem, stream)(args) */
#define CUEMU_LAUNCH(name, k, ...) cuemu::launch_of(cuemu::cfg(__VA_ARGS__), name, k)

#define threadIdx (cuemu::cur->tid)
#define blockIdx (cuemu::launch.block)
#define blockDim (cuemu::launch.dim)
#define gridDim (cuemu::launch.grid)
static constexpr int warpSize = 32;

static inline void __syncthreads(void) { cuemu::syncthreads(); }
static inline void __syncwarp(unsigned mask = 0xffffffffu) { cuemu::syncwarp(mask); }
static inline void __threadfence(void) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
static inline void __threadfence_block(void) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

template <class T> static inline T __shfl_sync(unsigned mask, T v, int src, int width = 32)
{
	int lane = (int)cuemu::cur->lane;
	int s = (lane & ~(width - 1)) + (src & (width - 1));
	return cuemu::from_bits<T>(cuemu::exchange(mask, cuemu::to_bits(v), s));
}
template <class T> static inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32)
{
	int lane = (int)cuemu::cur->lane;
	int s = lane ^ lane_mask;
	if ((s & ~(width - 1)) != (lane & ~(width - 1)))
		s = lane;
	return cuemu::from_bits<T>(cuemu::exchange(mask, cuemu::to_bits(v), s));
}
template <class T> static inline T __shfl_down_sync(unsigned mask, T v, unsigned d, int width = 32)
{
	int lane = (int)cuemu::cur->lane;
	int s = lane + (int)d;
	if ((s & ~(width - 1)) != (lane & ~(width - 1)))
		s = lane;
	return cuemu::from_bits<T>(cuemu::exchange(mask, cuemu::to_bits(v), s));
}
template <class T> static inline T __shfl_up_sync(unsigned mask, T v, unsigned d, int width = 32)
{
	int lane = (int)cuemu::cur->lane;
	int s = lane - (int)d;
	if (s < (lane & ~(width - 1)))
		s = lane;
	return cuemu::from_bits<T>(cuemu::exchange(mask, cuemu::to_bits(v), s));
}
static inline unsigned __ballot_sync(unsigned mask, int pred) { return cuemu::ballot(mask, pred); }
static inline int __all_sync(unsigned mask, int pred) { return cuemu::ballot(mask, !pred) == 0; }
static inline int __any_sync(unsigned mask, int pred) { return cuemu::ballot(mask, pred) != 0; }

/* IEEE single and double operations with the rounding the name says: the
 * emulator build compiles with -ffp-contract=off, so nothing fuses */
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __fsqrt_rn(float a) { return sqrtf(a); }
static inline float __frcp_rn(float a) { return 1.0f / a; }
static inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline double __dsub_rn(double a, double b) { return a - b; }
static inline double __dmul_rn(double a, double b) { return a * b; }
static inline double __ddiv_rn(double a, double b) { return a / b; }
static inline double __fma_rn(double a, double b, double c) { return fma(a, b, c); }
static inline float __double2float_rn(double a) { return (float)a; }
static inline float __int2float_rn(int a) { return (float)a; }
static inline int __float2int_rn(float a) { return (int)nearbyintf(a); }
static inline float __int_as_float(int a) { return cuemu::from_bits<float>((unsigned)a); }
static inline int __float_as_int(float a) { return (int)(unsigned)cuemu::to_bits(a); }
static inline float __uint_as_float(unsigned a) { return cuemu::from_bits<float>(a); }
static inline unsigned __float_as_uint(float a) { return (unsigned)cuemu::to_bits(a); }
static inline double __longlong_as_double(long long a) { return cuemu::from_bits<double>((unsigned long long)a); }
static inline long long __double_as_longlong(double a) { return (long long)cuemu::to_bits(a); }
static inline float rsqrtf(float a) { return 1.0f / sqrtf(a); }
static inline int __ffs(int a) { return __builtin_ffs(a); }
static inline int __ffsll(long long a) { return __builtin_ffsll(a); }
static inline int __popc(unsigned a) { return __builtin_popcount(a); }
static inline int __popcll(unsigned long long a) { return __builtin_popcountll(a); }
static inline int __clz(int a) { return a ? __builtin_clz((unsigned)a) : 32; }
template <class T> static inline T __ldg(const T *p) { return *p; }

/* CUDA's device-side min and max overloads */
static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }
static inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
static inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
static inline long long min(long long a, long long b) { return a < b ? a : b; }
static inline long long max(long long a, long long b) { return a > b ? a : b; }
static inline long min(long a, long b) { return a < b ? a : b; }
static inline long max(long a, long b) { return a > b ? a : b; }
static inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
static inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
static inline float min(float a, float b) { return fminf(a, b); }
static inline float max(float a, float b) { return fmaxf(a, b); }
static inline double min(double a, double b) { return fmin(a, b); }
static inline double max(double a, double b) { return fmax(a, b); }

/* Atomics: host atomics (kernels of different host threads may share memory) */
template <class T> static inline T cuemu_atomic_update(T *p, T (*f)(T, T), T v)
{
	T old = __atomic_load_n(p, __ATOMIC_SEQ_CST);
	while (!__atomic_compare_exchange_n(p, &old, f(old, v), false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
		;
	return old;
}
static inline int atomicAdd(int *p, int v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
static inline unsigned atomicAdd(unsigned *p, unsigned v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
static inline unsigned long long atomicAdd(unsigned long long *p, unsigned long long v)
{
	return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);
}
static inline float atomicAdd(float *p, float v)
{
	unsigned *u = (unsigned *)p;
	unsigned old = __atomic_load_n(u, __ATOMIC_SEQ_CST), nw;
	do
		nw = __float_as_uint(__uint_as_float(old) + v);
	while (!__atomic_compare_exchange_n(u, &old, nw, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST));
	return __uint_as_float(old);
}
static inline double atomicAdd(double *p, double v)
{
	unsigned long long *u = (unsigned long long *)p;
	unsigned long long old = __atomic_load_n(u, __ATOMIC_SEQ_CST), nw;
	do
		nw = cuemu::to_bits(cuemu::from_bits<double>(old) + v);
	while (!__atomic_compare_exchange_n(u, &old, nw, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST));
	return cuemu::from_bits<double>(old);
}
static inline int atomicMin(int *p, int v)
{
	return cuemu_atomic_update<int>(p, [](int a, int b) { return a < b ? a : b; }, v);
}
static inline int atomicMax(int *p, int v)
{
	return cuemu_atomic_update<int>(p, [](int a, int b) { return a > b ? a : b; }, v);
}
static inline unsigned atomicMin(unsigned *p, unsigned v)
{
	return cuemu_atomic_update<unsigned>(p, [](unsigned a, unsigned b) { return a < b ? a : b; }, v);
}
static inline unsigned atomicMax(unsigned *p, unsigned v)
{
	return cuemu_atomic_update<unsigned>(p, [](unsigned a, unsigned b) { return a > b ? a : b; }, v);
}
static inline int atomicExch(int *p, int v) { return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST); }
static inline int atomicCAS(int *p, int cmp, int v)
{
	__atomic_compare_exchange_n(p, &cmp, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
	return cmp;
}
static inline unsigned atomicCAS(unsigned *p, unsigned cmp, unsigned v)
{
	__atomic_compare_exchange_n(p, &cmp, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
	return cmp;
}
#endif /* __cplusplus */

#endif
