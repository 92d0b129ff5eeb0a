/* SPDX-License-Identifier: MIT */
/*
 * cudnn.cc (cuemu): a CPU stand-in for cuDNN, used only by the emulator
 * build in tests/ (tests/cuemu/), where the project's CUDA code is compiled
 * with g++ and run on the host: device pointers are host pointers, and the
 * convolutions are queued on the handle's stream like kernels (scalars and
 * descriptors are read at the call).  It is not NVIDIA's library.
 *
 * What it implements: the subset of the legacy cuDNN API declared in
 * include/cudnn.h (what conv2d_cuda.cu and backend.cu call), for 4-d NCHW
 * CUDNN_DATA_FLOAT tensors, one group, any padding, stride and dilation,
 * cross-correlation or (kernel-flipping) convolution mode.  Anything else
 * returns CUDNN_STATUS_NOT_SUPPORTED with a reason (see cudnnGetErrorString).
 *
 * Numerics: naive loops.  Each output element is accumulated in double in a
 * fixed order, rounded to float, then scaled as alpha * acc + beta * old in
 * float; beta == 0 never reads the output (garbage, NaN included, is
 * overwritten), as cuDNN documents.  The results are exact-ish references,
 * deterministic, whatever the algorithm or math type asked for (TF32 is not
 * emulated); they are not cuDNN's bits.  Speed is irrelevant.
 *
 * Heuristics: the _v7 queries return a short fixed list (a non-deterministic
 * entry first for the backward directions, so callers' "skip non-deterministic"
 * logic runs), each with the convolution descriptor's current math type and
 * no workspace; every workspace query answers 0 bytes.
 */
#include <cudnn.h>

#include "cuemu-internal.h"

#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <new>

/* ------------------------------------------------------------------ */
/* Objects.                                                            */

namespace {

enum : uint32_t {
	MAGIC_HANDLE = 0x63644e48u, /* "cdNH" */
	MAGIC_TENSOR = 0x63644e54u,
	MAGIC_FILTER = 0x63644e46u,
	MAGIC_CONV = 0x63644e43u,
	MAGIC_DEAD = 0xdeaddeadu,
};

} // namespace

struct cudnnContext {
	uint32_t magic;
	cudaStream_t stream;
};

struct cudnnTensorStruct {
	uint32_t magic;
	bool set;
	int n, c, h, w;
};

struct cudnnFilterStruct {
	uint32_t magic;
	bool set;
	int k, c, h, w;
};

struct cudnnConvolutionStruct {
	uint32_t magic;
	bool set;
	int pad_h, pad_w, u, v, dil_h, dil_w;
	cudnnConvolutionMode_t mode;
	cudnnMathType_t math;
};

/* ------------------------------------------------------------------ */
/* Errors: the reason for this thread's last failure.                  */

namespace {

struct last_failure {
	bool has;
	cudnnStatus_t status;
	char why[512];
};

thread_local last_failure g_fail;
thread_local char g_errbuf[768];

/* Every API entry (but cudnnGetErrorString) starts here. */
void enter() { g_fail.has = false; }

__attribute__((format(printf, 2, 3))) cudnnStatus_t fail(cudnnStatus_t st, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(g_fail.why, sizeof g_fail.why, fmt, ap);
	va_end(ap);
	g_fail.has = true;
	g_fail.status = st;
	return st;
}

const char *status_name(cudnnStatus_t s)
{
	switch (s) {
#define N(x)                                                                                                   \
	case x:                                                                                                \
		return #x;
		N(CUDNN_STATUS_SUCCESS)
		N(CUDNN_STATUS_NOT_INITIALIZED)
		N(CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH)
		N(CUDNN_STATUS_SERIALIZATION_VERSION_MISMATCH)
		N(CUDNN_STATUS_DEPRECATED)
		N(CUDNN_STATUS_LICENSE_ERROR)
		N(CUDNN_STATUS_RUNTIME_IN_PROGRESS)
		N(CUDNN_STATUS_RUNTIME_FP_OVERFLOW)
		N(CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED)
		N(CUDNN_STATUS_BAD_PARAM)
		N(CUDNN_STATUS_INVALID_VALUE)
		N(CUDNN_STATUS_BAD_PARAM_NULL_POINTER)
		N(CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER)
		N(CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED)
		N(CUDNN_STATUS_BAD_PARAM_OUT_OF_BOUND)
		N(CUDNN_STATUS_BAD_PARAM_SIZE_INSUFFICIENT)
		N(CUDNN_STATUS_BAD_PARAM_STREAM_MISMATCH)
		N(CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH)
		N(CUDNN_STATUS_BAD_PARAM_DUPLICATED_ENTRIES)
		N(CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE)
		N(CUDNN_STATUS_BAD_PARAM_CUDA_GRAPH_MISMATCH)
		N(CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE)
		N(CUDNN_STATUS_NOT_SUPPORTED)
		N(CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN)
		N(CUDNN_STATUS_NOT_SUPPORTED_SHAPE)
		N(CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE)
		N(CUDNN_STATUS_NOT_SUPPORTED_LAYOUT)
		N(CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDA_DRIVER)
		N(CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDART)
		N(CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH)
		N(CUDNN_STATUS_NOT_SUPPORTED_RUNTIME_PREREQUISITE_MISSING)
		N(CUDNN_STATUS_NOT_SUPPORTED_SUBLIBRARY_UNAVAILABLE)
		N(CUDNN_STATUS_NOT_SUPPORTED_SHARED_MEMORY_INSUFFICIENT)
		N(CUDNN_STATUS_NOT_SUPPORTED_PADDING)
		N(CUDNN_STATUS_NOT_SUPPORTED_BAD_LAUNCH_PARAM)
		N(CUDNN_STATUS_NOT_SUPPORTED_CUDA_GRAPH_NATIVE_API)
		N(CUDNN_STATUS_NOT_SUPPORTED_INVALID_DYNAMIC_SHAPE)
		N(CUDNN_STATUS_INTERNAL_ERROR)
		N(CUDNN_STATUS_INTERNAL_ERROR_COMPILATION_FAILED)
		N(CUDNN_STATUS_INTERNAL_ERROR_UNEXPECTED_VALUE)
		N(CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED) /* = ALLOC_FAILED */
		N(CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED)
		N(CUDNN_STATUS_INTERNAL_ERROR_BAD_LAUNCH_PARAM)
		N(CUDNN_STATUS_INTERNAL_ERROR_TEXTURE_CREATION_FAILED)
		N(CUDNN_STATUS_EXECUTION_FAILED)
		N(CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER)
		N(CUDNN_STATUS_EXECUTION_FAILED_CUBLAS)
		N(CUDNN_STATUS_EXECUTION_FAILED_CUDART)
		N(CUDNN_STATUS_EXECUTION_FAILED_CURAND)
#undef N
	}
	return "CUDNN_UNKNOWN_STATUS";
}

const char *dtype_name(cudnnDataType_t t)
{
	switch (t) {
	case CUDNN_DATA_FLOAT: return "CUDNN_DATA_FLOAT";
	case CUDNN_DATA_DOUBLE: return "CUDNN_DATA_DOUBLE";
	case CUDNN_DATA_HALF: return "CUDNN_DATA_HALF";
	case CUDNN_DATA_BFLOAT16: return "CUDNN_DATA_BFLOAT16";
	default: return "a non-float type";
	}
}

/* ------------------------------------------------------------------ */
/* Checks.                                                             */

cudnnStatus_t check_handle(cudnnHandle_t h, const char *fn)
{
	if (!h)
		return fail(CUDNN_STATUS_BAD_PARAM, "cuemu cuDNN: %s: NULL handle", fn);
	if (h->magic != MAGIC_HANDLE)
		return fail(CUDNN_STATUS_BAD_PARAM, "cuemu cuDNN: %s: not a live cuDNN handle", fn);
	return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t check_tensor(const cudnnTensorStruct *d, const char *fn, const char *which)
{
	if (!d || d->magic != MAGIC_TENSOR)
		return fail(CUDNN_STATUS_BAD_PARAM, "cuemu cuDNN: %s: %s is not a live tensor descriptor", fn, which);
	if (!d->set)
		return fail(CUDNN_STATUS_BAD_PARAM, "cuemu cuDNN: %s: %s tensor descriptor was never set", fn, which);
	return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t check_filter(const cudnnFilterStruct *d, const char *fn, const char *which)
{
	if (!d || d->magic != MAGIC_FILTER)
		return fail(CUDNN_STATUS_BAD_PARAM, "cuemu cuDNN: %s: %s is not a live filter descriptor", fn, which);
	if (!d->set)
		return fail(CUDNN_STATUS_BAD_PARAM, "cuemu cuDNN: %s: %s filter descriptor was never set", fn, which);
	return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t check_conv(const cudnnConvolutionStruct *d, const char *fn, bool need_set)
{
	if (!d || d->magic != MAGIC_CONV)
		return fail(CUDNN_STATUS_BAD_PARAM, "cuemu cuDNN: %s: not a live convolution descriptor", fn);
	if (need_set && !d->set)
		return fail(CUDNN_STATUS_BAD_PARAM, "cuemu cuDNN: %s: convolution descriptor was never set", fn);
	return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t check_float(cudnnDataType_t t, const char *fn)
{
	if ((int)t < (int)CUDNN_DATA_FLOAT || (int)t > (int)CUDNN_DATA_COMPLEX_FP64)
		return fail(CUDNN_STATUS_BAD_PARAM, "cuemu cuDNN: %s: invalid data type %d", fn, (int)t);
	if (t != CUDNN_DATA_FLOAT)
		return fail(CUDNN_STATUS_NOT_SUPPORTED,
			    "cuemu cuDNN: %s: data type %s (%d) not emulated, only CUDNN_DATA_FLOAT", fn,
			    dtype_name(t), (int)t);
	return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t check_nchw(cudnnTensorFormat_t f, const char *fn)
{
	if (f == CUDNN_TENSOR_NCHW)
		return CUDNN_STATUS_SUCCESS;
	if (f == CUDNN_TENSOR_NHWC || f == CUDNN_TENSOR_NCHW_VECT_C)
		return fail(CUDNN_STATUS_NOT_SUPPORTED,
			    "cuemu cuDNN: %s: tensor format %d not emulated, only CUDNN_TENSOR_NCHW", fn, (int)f);
	return fail(CUDNN_STATUS_BAD_PARAM, "cuemu cuDNN: %s: invalid tensor format %d", fn, (int)f);
}

/* The forward output extent of one spatial dimension, or -1. */
int64_t out_extent(int64_t in, int64_t pad, int64_t filt, int64_t stride, int64_t dil)
{
	const int64_t span = (filt - 1) * dil + 1, room = in + 2 * pad - span;
	return room < 0 ? -1 : 1 + room / stride;
}

/* One convolution's shape, validated. */
struct geom {
	int64_t N, C, H, W;   /* x */
	int64_t K, R, S;      /* w [K, C, R, S] */
	int64_t OH, OW;       /* y [N, K, OH, OW] */
	int64_t ph, pw, u, v, dh, dw;
	bool flip; /* CUDNN_CONVOLUTION: the filter is applied flipped */
};

/* The output dims of conv(x, w), after checking x against w. */
cudnnStatus_t out_dims(const cudnnConvolutionStruct *cv, const cudnnTensorStruct *x, const cudnnFilterStruct *w,
		       const char *fn, int64_t *oh, int64_t *ow)
{
	if (x->c != w->c)
		return fail(CUDNN_STATUS_BAD_PARAM,
			    "cuemu cuDNN: %s: input has %d channels, filter [%d, %d, %d, %d] wants %d (one group only)",
			    fn, x->c, w->k, w->c, w->h, w->w, w->c);
	*oh = out_extent(x->h, cv->pad_h, w->h, cv->u, cv->dil_h);
	*ow = out_extent(x->w, cv->pad_w, w->w, cv->v, cv->dil_w);
	if (*oh < 1 || *ow < 1 || *oh > INT32_MAX || *ow > INT32_MAX)
		return fail(CUDNN_STATUS_BAD_PARAM,
			    "cuemu cuDNN: %s: filter %dx%d (dilation %d, %d) does not fit input %dx%d padded by %d, %d",
			    fn, w->h, w->w, cv->dil_h, cv->dil_w, x->h, x->w, cv->pad_h, cv->pad_w);
	return CUDNN_STATUS_SUCCESS;
}

/* Checks x, w, y against each other and conv, and fills g. */
cudnnStatus_t make_geom(const cudnnConvolutionStruct *cv, const cudnnTensorStruct *x, const cudnnFilterStruct *w,
			const cudnnTensorStruct *y, const char *fn, const char *xname, const char *yname, geom *g)
{
	cudnnStatus_t st;
	if ((st = check_conv(cv, fn, true)) || (st = check_tensor(x, fn, xname)) || (st = check_filter(w, fn, "filter")) ||
	    (st = check_tensor(y, fn, yname)))
		return st;
	int64_t oh, ow;
	if ((st = out_dims(cv, x, w, fn, &oh, &ow)))
		return st;
	if (y->n != x->n || y->c != w->k || y->h != oh || y->w != ow)
		return fail(CUDNN_STATUS_BAD_PARAM,
			    "cuemu cuDNN: %s: %s is [%d, %d, %d, %d], but the convolution of %s [%d, %d, %d, %d] "
			    "gives [%d, %d, %lld, %lld]",
			    fn, yname, y->n, y->c, y->h, y->w, xname, x->n, x->c, x->h, x->w, x->n, w->k, (long long)oh,
			    (long long)ow);
	g->N = x->n, g->C = x->c, g->H = x->h, g->W = x->w;
	g->K = w->k, g->R = w->h, g->S = w->w;
	g->OH = oh, g->OW = ow;
	g->ph = cv->pad_h, g->pw = cv->pad_w, g->u = cv->u, g->v = cv->v, g->dh = cv->dil_h, g->dw = cv->dil_w;
	g->flip = cv->mode == CUDNN_CONVOLUTION;
	return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t check_algo(int algo, int count, const char *fn)
{
	if (algo < 0 || algo >= count)
		return fail(CUDNN_STATUS_BAD_PARAM, "cuemu cuDNN: %s: invalid algorithm %d (valid: 0..%d)", fn, algo,
			    count - 1);
	return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t check_ptrs(const char *fn, const void *alpha, const void *beta, const void *a, const char *an,
			 const void *b, const char *bn, const void *out, const char *outn)
{
	if (!alpha || !beta)
		return fail(CUDNN_STATUS_BAD_PARAM, "cuemu cuDNN: %s: NULL %s", fn, !alpha ? "alpha" : "beta");
	if (!a || !b || !out)
		return fail(CUDNN_STATUS_BAD_PARAM, "cuemu cuDNN: %s: NULL %s pointer", fn, !a ? an : !b ? bn : outn);
	return CUDNN_STATUS_SUCCESS;
}

/* out = alpha * (float)acc + beta * out; beta 0 does not read out. */
inline void store(float *out, double acc, float alpha, float beta)
{
	const float a = alpha * (float)acc;
	if (beta == 0.0f)
		*out = a;
	else
		*out = a + beta * *out;
}

/* Fill the perf results from a fixed list. */
template <typename PERF, typename ALGO>
cudnnStatus_t fill_perf(const char *fn, int requested, int *returned, PERF *perf, const ALGO *algos,
			const cudnnDeterminism_t *det, int n, cudnnMathType_t math)
{
	if (!returned || !perf)
		return fail(CUDNN_STATUS_BAD_PARAM, "cuemu cuDNN: %s: NULL %s", fn,
			    !returned ? "returnedAlgoCount" : "perfResults");
	if (requested < 1)
		return fail(CUDNN_STATUS_BAD_PARAM, "cuemu cuDNN: %s: requestedAlgoCount %d < 1", fn, requested);
	const int m = requested < n ? requested : n;
	for (int i = 0; i < m; i++) {
		std::memset(&perf[i], 0, sizeof perf[i]);
		perf[i].algo = algos[i];
		perf[i].status = CUDNN_STATUS_SUCCESS;
		perf[i].time = -1.0f; /* heuristics: nothing was timed */
		perf[i].memory = 0;
		perf[i].determinism = det[i];
		perf[i].mathType = math;
	}
	*returned = m;
	return CUDNN_STATUS_SUCCESS;
}

} // namespace

/* ------------------------------------------------------------------ */
/* API.                                                                */

extern "C" {

const char *cudnnGetErrorString(cudnnStatus_t status)
{
	const char *name = status_name(status);
	if (!g_fail.has || g_fail.status != status)
		return name;
	snprintf(g_errbuf, sizeof g_errbuf, "%s: %s", name, g_fail.why);
	return g_errbuf;
}

cudnnStatus_t cudnnCreate(cudnnHandle_t *handle)
{
	enter();
	if (!handle)
		return fail(CUDNN_STATUS_BAD_PARAM, "cuemu cuDNN: cudnnCreate: NULL handle pointer");
	cudnnContext *h = new (std::nothrow) cudnnContext;
	if (!h)
		return fail(CUDNN_STATUS_ALLOC_FAILED, "cuemu cuDNN: cudnnCreate: out of memory");
	h->magic = MAGIC_HANDLE;
	h->stream = nullptr;
	*handle = h;
	return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroy(cudnnHandle_t handle)
{
	enter();
	cudnnStatus_t st = check_handle(handle, "cudnnDestroy");
	if (st)
		return st;
	handle->magic = MAGIC_DEAD;
	delete handle;
	return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, cudaStream_t streamId)
{
	enter();
	cudnnStatus_t st = check_handle(handle, "cudnnSetStream");
	if (st)
		return st;
	handle->stream = streamId; /* the convolutions are queued there */
	return CUDNN_STATUS_SUCCESS;
}

/* Tensor descriptors. */

cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t *tensorDesc)
{
	enter();
	if (!tensorDesc)
		return fail(CUDNN_STATUS_BAD_PARAM, "cuemu cuDNN: cudnnCreateTensorDescriptor: NULL pointer");
	cudnnTensorStruct *d = new (std::nothrow) cudnnTensorStruct();
	if (!d)
		return fail(CUDNN_STATUS_ALLOC_FAILED, "cuemu cuDNN: cudnnCreateTensorDescriptor: out of memory");
	d->magic = MAGIC_TENSOR;
	*tensorDesc = d;
	return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t tensorDesc, cudnnTensorFormat_t format,
					 cudnnDataType_t dataType, int n, int c, int h, int w)
{
	static const char fn[] = "cudnnSetTensor4dDescriptor";
	enter();
	if (!tensorDesc || tensorDesc->magic != MAGIC_TENSOR)
		return fail(CUDNN_STATUS_BAD_PARAM, "cuemu cuDNN: %s: not a live tensor descriptor", fn);
	cudnnStatus_t st;
	if ((st = check_nchw(format, fn)) || (st = check_float(dataType, fn)))
		return st;
	if (n < 1 || c < 1 || h < 1 || w < 1)
		return fail(CUDNN_STATUS_BAD_PARAM, "cuemu cuDNN: %s: dims [%d, %d, %d, %d] must all be positive", fn,
			    n, c, h, w);
	tensorDesc->n = n, tensorDesc->c = c, tensorDesc->h = h, tensorDesc->w = w;
	tensorDesc->set = true;
	return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t tensorDesc)
{
	enter();
	if (!tensorDesc)
		return CUDNN_STATUS_SUCCESS;
	if (tensorDesc->magic != MAGIC_TENSOR)
		return fail(CUDNN_STATUS_BAD_PARAM,
			    "cuemu cuDNN: cudnnDestroyTensorDescriptor: not a live tensor descriptor");
	tensorDesc->magic = MAGIC_DEAD;
	delete tensorDesc;
	return CUDNN_STATUS_SUCCESS;
}

/* Filter descriptors. */

cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t *filterDesc)
{
	enter();
	if (!filterDesc)
		return fail(CUDNN_STATUS_BAD_PARAM, "cuemu cuDNN: cudnnCreateFilterDescriptor: NULL pointer");
	cudnnFilterStruct *d = new (std::nothrow) cudnnFilterStruct();
	if (!d)
		return fail(CUDNN_STATUS_ALLOC_FAILED, "cuemu cuDNN: cudnnCreateFilterDescriptor: out of memory");
	d->magic = MAGIC_FILTER;
	*filterDesc = d;
	return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t filterDesc, cudnnDataType_t dataType,
					 cudnnTensorFormat_t format, int k, int c, int h, int w)
{
	static const char fn[] = "cudnnSetFilter4dDescriptor";
	enter();
	if (!filterDesc || filterDesc->magic != MAGIC_FILTER)
		return fail(CUDNN_STATUS_BAD_PARAM, "cuemu cuDNN: %s: not a live filter descriptor", fn);
	cudnnStatus_t st;
	if ((st = check_float(dataType, fn)) || (st = check_nchw(format, fn)))
		return st;
	if (k < 1 || c < 1 || h < 1 || w < 1)
		return fail(CUDNN_STATUS_BAD_PARAM, "cuemu cuDNN: %s: dims [%d, %d, %d, %d] must all be positive", fn,
			    k, c, h, w);
	filterDesc->k = k, filterDesc->c = c, filterDesc->h = h, filterDesc->w = w;
	filterDesc->set = true;
	return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t filterDesc)
{
	enter();
	if (!filterDesc)
		return CUDNN_STATUS_SUCCESS;
	if (filterDesc->magic != MAGIC_FILTER)
		return fail(CUDNN_STATUS_BAD_PARAM,
			    "cuemu cuDNN: cudnnDestroyFilterDescriptor: not a live filter descriptor");
	filterDesc->magic = MAGIC_DEAD;
	delete filterDesc;
	return CUDNN_STATUS_SUCCESS;
}

/* Convolution descriptors. */

cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t *convDesc)
{
	enter();
	if (!convDesc)
		return fail(CUDNN_STATUS_BAD_PARAM, "cuemu cuDNN: cudnnCreateConvolutionDescriptor: NULL pointer");
	cudnnConvolutionStruct *d = new (std::nothrow) cudnnConvolutionStruct();
	if (!d)
		return fail(CUDNN_STATUS_ALLOC_FAILED, "cuemu cuDNN: cudnnCreateConvolutionDescriptor: out of memory");
	d->magic = MAGIC_CONV;
	d->mode = CUDNN_CONVOLUTION;
	d->math = CUDNN_DEFAULT_MATH;
	*convDesc = d;
	return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t convDesc)
{
	enter();
	if (!convDesc)
		return CUDNN_STATUS_SUCCESS;
	cudnnStatus_t st = check_conv(convDesc, "cudnnDestroyConvolutionDescriptor", false);
	if (st)
		return st;
	convDesc->magic = MAGIC_DEAD;
	delete convDesc;
	return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t convDesc, cudnnMathType_t mathType)
{
	static const char fn[] = "cudnnSetConvolutionMathType";
	enter();
	cudnnStatus_t st = check_conv(convDesc, fn, false);
	if (st)
		return st;
	switch (mathType) {
	case CUDNN_DEFAULT_MATH:
	case CUDNN_TENSOR_OP_MATH:
	case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION:
	case CUDNN_FMA_MATH:
		convDesc->math = mathType; /* recorded and reported; the arithmetic ignores it */
		return CUDNN_STATUS_SUCCESS;
	}
	return fail(CUDNN_STATUS_BAD_PARAM, "cuemu cuDNN: %s: invalid math type %d", fn, (int)mathType);
}

cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t convDesc, int pad_h, int pad_w, int u,
					      int v, int dilation_h, int dilation_w, cudnnConvolutionMode_t mode,
					      cudnnDataType_t computeType)
{
	static const char fn[] = "cudnnSetConvolution2dDescriptor";
	enter();
	cudnnStatus_t st = check_conv(convDesc, fn, false);
	if (st)
		return st;
	if (pad_h < 0 || pad_w < 0 || u < 1 || v < 1 || dilation_h < 1 || dilation_w < 1)
		return fail(CUDNN_STATUS_BAD_PARAM,
			    "cuemu cuDNN: %s: pad (%d, %d) must be >= 0, stride (%d, %d) and dilation (%d, %d) >= 1", fn,
			    pad_h, pad_w, u, v, dilation_h, dilation_w);
	if (mode != CUDNN_CONVOLUTION && mode != CUDNN_CROSS_CORRELATION)
		return fail(CUDNN_STATUS_BAD_PARAM, "cuemu cuDNN: %s: invalid convolution mode %d", fn, (int)mode);
	if ((st = check_float(computeType, fn)))
		return st;
	convDesc->pad_h = pad_h, convDesc->pad_w = pad_w;
	convDesc->u = u, convDesc->v = v;
	convDesc->dil_h = dilation_h, convDesc->dil_w = dilation_w;
	convDesc->mode = mode;
	convDesc->set = true;
	return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolution2dForwardOutputDim(const cudnnConvolutionDescriptor_t convDesc,
						    const cudnnTensorDescriptor_t inputTensorDesc,
						    const cudnnFilterDescriptor_t filterDesc, int *n, int *c, int *h,
						    int *w)
{
	static const char fn[] = "cudnnGetConvolution2dForwardOutputDim";
	enter();
	cudnnStatus_t st;
	if ((st = check_conv(convDesc, fn, true)) || (st = check_tensor(inputTensorDesc, fn, "input")) ||
	    (st = check_filter(filterDesc, fn, "filter")))
		return st;
	if (!n || !c || !h || !w)
		return fail(CUDNN_STATUS_BAD_PARAM, "cuemu cuDNN: %s: NULL output pointer", fn);
	int64_t oh, ow;
	if ((st = out_dims(convDesc, inputTensorDesc, filterDesc, fn, &oh, &ow)))
		return st;
	*n = inputTensorDesc->n;
	*c = filterDesc->k;
	*h = (int)oh;
	*w = (int)ow;
	return CUDNN_STATUS_SUCCESS;
}

/* Forward. */

cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(cudnnHandle_t handle, const cudnnTensorDescriptor_t srcDesc,
						     const cudnnFilterDescriptor_t filterDesc,
						     const cudnnConvolutionDescriptor_t convDesc,
						     const cudnnTensorDescriptor_t destDesc, const int requestedAlgoCount,
						     int *returnedAlgoCount, cudnnConvolutionFwdAlgoPerf_t *perfResults)
{
	static const char fn[] = "cudnnGetConvolutionForwardAlgorithm_v7";
	enter();
	geom g;
	cudnnStatus_t st;
	if ((st = check_handle(handle, fn)) || (st = make_geom(convDesc, srcDesc, filterDesc, destDesc, fn, "x", "y", &g)))
		return st;
	static const cudnnConvolutionFwdAlgo_t algos[] = {CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM};
	static const cudnnDeterminism_t det[] = {CUDNN_DETERMINISTIC};
	return fill_perf(fn, requestedAlgoCount, returnedAlgoCount, perfResults, algos, det, 1, convDesc->math);
}

cudnnStatus_t cudnnGetConvolutionForwardWorkspaceSize(cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc,
						      const cudnnFilterDescriptor_t wDesc,
						      const cudnnConvolutionDescriptor_t convDesc,
						      const cudnnTensorDescriptor_t yDesc, cudnnConvolutionFwdAlgo_t algo,
						      size_t *sizeInBytes)
{
	static const char fn[] = "cudnnGetConvolutionForwardWorkspaceSize";
	enter();
	geom g;
	cudnnStatus_t st;
	if ((st = check_handle(handle, fn)) || (st = make_geom(convDesc, xDesc, wDesc, yDesc, fn, "x", "y", &g)) ||
	    (st = check_algo(algo, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, fn)))
		return st;
	if (!sizeInBytes)
		return fail(CUDNN_STATUS_BAD_PARAM, "cuemu cuDNN: %s: NULL sizeInBytes", fn);
	*sizeInBytes = 0;
	return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t handle, const void *alpha, const cudnnTensorDescriptor_t xDesc,
				      const void *x, const cudnnFilterDescriptor_t wDesc, const void *w,
				      const cudnnConvolutionDescriptor_t convDesc, cudnnConvolutionFwdAlgo_t algo,
				      void *workSpace, size_t workSpaceSizeInBytes, const void *beta,
				      const cudnnTensorDescriptor_t yDesc, void *y)
{
	static const char fn[] = "cudnnConvolutionForward";
	(void)workSpace, (void)workSpaceSizeInBytes;
	enter();
	geom g;
	cudnnStatus_t st;
	if ((st = check_handle(handle, fn)) || (st = make_geom(convDesc, xDesc, wDesc, yDesc, fn, "x", "y", &g)) ||
	    (st = check_algo(algo, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, fn)) ||
	    (st = check_ptrs(fn, alpha, beta, x, "x", w, "w", y, "y")))
		return st;
	const float a = *(const float *)alpha, b = *(const float *)beta;
	const float *X = (const float *)x, *Wt = (const float *)w;
	float *Y = (float *)y;
	cuemu::enqueue(handle->stream, [=] {
		for (int64_t n = 0; n < g.N; n++)
			for (int64_t k = 0; k < g.K; k++)
				for (int64_t oh = 0; oh < g.OH; oh++)
					for (int64_t ow = 0; ow < g.OW; ow++) {
						double acc = 0.0;
						for (int64_t c = 0; c < g.C; c++)
							for (int64_t r = 0; r < g.R; r++) {
								const int64_t ih = oh * g.u - g.ph + r * g.dh;
								if (ih < 0 || ih >= g.H)
									continue;
								const int64_t fr = g.flip ? g.R - 1 - r : r;
								const float *xrow = X + ((n * g.C + c) * g.H + ih) * g.W;
								const float *wrow = Wt + ((k * g.C + c) * g.R + fr) * g.S;
								for (int64_t s = 0; s < g.S; s++) {
									const int64_t iw = ow * g.v - g.pw + s * g.dw;
									if (iw < 0 || iw >= g.W)
										continue;
									const int64_t fs = g.flip ? g.S - 1 - s : s;
									acc += (double)xrow[iw] * (double)wrow[fs];
								}
							}
						store(Y + ((n * g.K + k) * g.OH + oh) * g.OW + ow, acc, a, b);
					}
	});
	return CUDNN_STATUS_SUCCESS;
}

/* Backward data. */

cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(cudnnHandle_t handle,
							  const cudnnFilterDescriptor_t filterDesc,
							  const cudnnTensorDescriptor_t diffDesc,
							  const cudnnConvolutionDescriptor_t convDesc,
							  const cudnnTensorDescriptor_t gradDesc,
							  const int requestedAlgoCount, int *returnedAlgoCount,
							  cudnnConvolutionBwdDataAlgoPerf_t *perfResults)
{
	static const char fn[] = "cudnnGetConvolutionBackwardDataAlgorithm_v7";
	enter();
	geom g;
	cudnnStatus_t st;
	if ((st = check_handle(handle, fn)) ||
	    (st = make_geom(convDesc, gradDesc, filterDesc, diffDesc, fn, "dx", "dy", &g)))
		return st;
	/* ALGO_0 first: non-deterministic in real cuDNN, so callers skip it */
	static const cudnnConvolutionBwdDataAlgo_t algos[] = {CUDNN_CONVOLUTION_BWD_DATA_ALGO_0,
							      CUDNN_CONVOLUTION_BWD_DATA_ALGO_1};
	static const cudnnDeterminism_t det[] = {CUDNN_NON_DETERMINISTIC, CUDNN_DETERMINISTIC};
	return fill_perf(fn, requestedAlgoCount, returnedAlgoCount, perfResults, algos, det, 2, convDesc->math);
}

cudnnStatus_t cudnnGetConvolutionBackwardDataWorkspaceSize(cudnnHandle_t handle, const cudnnFilterDescriptor_t wDesc,
							   const cudnnTensorDescriptor_t dyDesc,
							   const cudnnConvolutionDescriptor_t convDesc,
							   const cudnnTensorDescriptor_t dxDesc,
							   cudnnConvolutionBwdDataAlgo_t algo, size_t *sizeInBytes)
{
	static const char fn[] = "cudnnGetConvolutionBackwardDataWorkspaceSize";
	enter();
	geom g;
	cudnnStatus_t st;
	if ((st = check_handle(handle, fn)) || (st = make_geom(convDesc, dxDesc, wDesc, dyDesc, fn, "dx", "dy", &g)) ||
	    (st = check_algo(algo, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, fn)))
		return st;
	if (!sizeInBytes)
		return fail(CUDNN_STATUS_BAD_PARAM, "cuemu cuDNN: %s: NULL sizeInBytes", fn);
	*sizeInBytes = 0;
	return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t handle, const void *alpha, const cudnnFilterDescriptor_t wDesc,
					   const void *w, const cudnnTensorDescriptor_t dyDesc, const void *dy,
					   const cudnnConvolutionDescriptor_t convDesc, cudnnConvolutionBwdDataAlgo_t algo,
					   void *workSpace, size_t workSpaceSizeInBytes, const void *beta,
					   const cudnnTensorDescriptor_t dxDesc, void *dx)
{
	static const char fn[] = "cudnnConvolutionBackwardData";
	(void)workSpace, (void)workSpaceSizeInBytes;
	enter();
	geom g;
	cudnnStatus_t st;
	if ((st = check_handle(handle, fn)) || (st = make_geom(convDesc, dxDesc, wDesc, dyDesc, fn, "dx", "dy", &g)) ||
	    (st = check_algo(algo, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, fn)) ||
	    (st = check_ptrs(fn, alpha, beta, w, "w", dy, "dy", dx, "dx")))
		return st;
	const float a = *(const float *)alpha, b = *(const float *)beta;
	const float *Wt = (const float *)w, *DY = (const float *)dy;
	float *DX = (float *)dx;
	/* dx[n, c, ih, iw] = sum over k and taps (r, s) with ih = oh*u - ph + r*dh
	 * (and the same for iw) of dy[n, k, oh, ow] * w[k, c, tap] */
	cuemu::enqueue(handle->stream, [=] {
		for (int64_t n = 0; n < g.N; n++)
			for (int64_t c = 0; c < g.C; c++)
				for (int64_t ih = 0; ih < g.H; ih++)
					for (int64_t iw = 0; iw < g.W; iw++) {
						double acc = 0.0;
						for (int64_t k = 0; k < g.K; k++)
							for (int64_t r = 0; r < g.R; r++) {
								const int64_t th = ih + g.ph - r * g.dh;
								if (th < 0 || th % g.u)
									continue;
								const int64_t oh = th / g.u;
								if (oh >= g.OH)
									continue;
								const int64_t fr = g.flip ? g.R - 1 - r : r;
								const float *dyrow = DY + ((n * g.K + k) * g.OH + oh) * g.OW;
								const float *wrow = Wt + ((k * g.C + c) * g.R + fr) * g.S;
								for (int64_t s = 0; s < g.S; s++) {
									const int64_t tw = iw + g.pw - s * g.dw;
									if (tw < 0 || tw % g.v)
										continue;
									const int64_t ow = tw / g.v;
									if (ow >= g.OW)
										continue;
									const int64_t fs = g.flip ? g.S - 1 - s : s;
									acc += (double)dyrow[ow] * (double)wrow[fs];
								}
							}
						store(DX + ((n * g.C + c) * g.H + ih) * g.W + iw, acc, a, b);
					}
	});
	return CUDNN_STATUS_SUCCESS;
}

/* Backward filter. */

cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithm_v7(cudnnHandle_t handle,
							    const cudnnTensorDescriptor_t srcDesc,
							    const cudnnTensorDescriptor_t diffDesc,
							    const cudnnConvolutionDescriptor_t convDesc,
							    const cudnnFilterDescriptor_t gradDesc,
							    const int requestedAlgoCount, int *returnedAlgoCount,
							    cudnnConvolutionBwdFilterAlgoPerf_t *perfResults)
{
	static const char fn[] = "cudnnGetConvolutionBackwardFilterAlgorithm_v7";
	enter();
	geom g;
	cudnnStatus_t st;
	if ((st = check_handle(handle, fn)) || (st = make_geom(convDesc, srcDesc, gradDesc, diffDesc, fn, "x", "dy", &g)))
		return st;
	/* ALGO_0 first: non-deterministic in real cuDNN, so callers skip it */
	static const cudnnConvolutionBwdFilterAlgo_t algos[] = {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0,
								CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1};
	static const cudnnDeterminism_t det[] = {CUDNN_NON_DETERMINISTIC, CUDNN_DETERMINISTIC};
	return fill_perf(fn, requestedAlgoCount, returnedAlgoCount, perfResults, algos, det, 2, convDesc->math);
}

cudnnStatus_t cudnnGetConvolutionBackwardFilterWorkspaceSize(cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc,
							     const cudnnTensorDescriptor_t dyDesc,
							     const cudnnConvolutionDescriptor_t convDesc,
							     const cudnnFilterDescriptor_t gradDesc,
							     cudnnConvolutionBwdFilterAlgo_t algo, size_t *sizeInBytes)
{
	static const char fn[] = "cudnnGetConvolutionBackwardFilterWorkspaceSize";
	enter();
	geom g;
	cudnnStatus_t st;
	if ((st = check_handle(handle, fn)) || (st = make_geom(convDesc, xDesc, gradDesc, dyDesc, fn, "x", "dy", &g)) ||
	    (st = check_algo(algo, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, fn)))
		return st;
	if (!sizeInBytes)
		return fail(CUDNN_STATUS_BAD_PARAM, "cuemu cuDNN: %s: NULL sizeInBytes", fn);
	*sizeInBytes = 0;
	return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnConvolutionBackwardFilter(cudnnHandle_t handle, const void *alpha,
					     const cudnnTensorDescriptor_t xDesc, const void *x,
					     const cudnnTensorDescriptor_t dyDesc, const void *dy,
					     const cudnnConvolutionDescriptor_t convDesc,
					     cudnnConvolutionBwdFilterAlgo_t algo, void *workSpace,
					     size_t workSpaceSizeInBytes, const void *beta,
					     const cudnnFilterDescriptor_t dwDesc, void *dw)
{
	static const char fn[] = "cudnnConvolutionBackwardFilter";
	(void)workSpace, (void)workSpaceSizeInBytes;
	enter();
	geom g;
	cudnnStatus_t st;
	if ((st = check_handle(handle, fn)) || (st = make_geom(convDesc, xDesc, dwDesc, dyDesc, fn, "x", "dy", &g)) ||
	    (st = check_algo(algo, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, fn)) ||
	    (st = check_ptrs(fn, alpha, beta, x, "x", dy, "dy", dw, "dw")))
		return st;
	const float a = *(const float *)alpha, b = *(const float *)beta;
	const float *X = (const float *)x, *DY = (const float *)dy;
	float *DW = (float *)dw;
	/* dw[k, c, r, s] = sum over n, oh, ow of dy[n, k, oh, ow] * x[n, c, ih, iw]
	 * at the tap the stored (r, s) is applied as (flipped in convolution mode) */
	cuemu::enqueue(handle->stream, [=] {
		for (int64_t k = 0; k < g.K; k++)
			for (int64_t c = 0; c < g.C; c++)
				for (int64_t r = 0; r < g.R; r++)
					for (int64_t s = 0; s < g.S; s++) {
						const int64_t tr = g.flip ? g.R - 1 - r : r;
						const int64_t ts = g.flip ? g.S - 1 - s : s;
						double acc = 0.0;
						for (int64_t n = 0; n < g.N; n++)
							for (int64_t oh = 0; oh < g.OH; oh++) {
								const int64_t ih = oh * g.u - g.ph + tr * g.dh;
								if (ih < 0 || ih >= g.H)
									continue;
								const float *dyrow = DY + ((n * g.K + k) * g.OH + oh) * g.OW;
								const float *xrow = X + ((n * g.C + c) * g.H + ih) * g.W;
								for (int64_t ow = 0; ow < g.OW; ow++) {
									const int64_t iw = ow * g.v - g.pw + ts * g.dw;
									if (iw < 0 || iw >= g.W)
										continue;
									acc += (double)dyrow[ow] * (double)xrow[iw];
								}
							}
						store(DW + ((k * g.C + c) * g.R + r) * g.S + s, acc, a, b);
					}
	});
	return CUDNN_STATUS_SUCCESS;
}

} /* extern "C" */
