/* SPDX-License-Identifier: MIT */
/*
 * cudnn.h (cuemu): a CPU stand-in for the cuDNN API, used only by the
 * emulator build in tests/ (tests/cuemu/), where the project's CUDA code is
 * compiled with g++ and run on the host.  It is NOT NVIDIA's header.
 *
 * Only the subset that plugins/layers/conv2d_cuda.cu and core/cuda/backend.cu
 * use is declared: status codes, the handle, 4-d NCHW tensor and filter
 * descriptors, 2-d convolution descriptors, the legacy _v7 algorithm
 * queries, the workspace queries and the three convolutions.  Prototypes,
 * type names and numeric enum values are those of cuDNN 9 (checked against
 * cuDNN 9.19's cudnn_graph.h, cudnn_ops.h, cudnn_cnn.h); cuDNN 9's
 * deprecation attributes are left off.  The implementation (cudnn.cc) is a
 * naive float reference: see the comment at its top.
 */
#ifndef CUEMU_CUDNN_H
#define CUEMU_CUDNN_H

#include <stddef.h>
#include <stdint.h>

/* The same typedef as the emulator's cuda_runtime.h (repeating an
 * identical typedef is legal in C++ and C11). */
struct CUstream_st;
typedef struct CUstream_st *cudaStream_t;

/* The cuDNN version these declarations follow. */
#define CUDNN_MAJOR 9
#define CUDNN_MINOR 19
#define CUDNN_PATCHLEVEL 0
#define CUDNN_VERSION (CUDNN_MAJOR * 10000 + CUDNN_MINOR * 100 + CUDNN_PATCHLEVEL)

/* Exported with default visibility even from a -fvisibility=hidden build. */
#if defined(__GNUC__)
#define CUEMU_CUDNN_API __attribute__((visibility("default")))
#else
#define CUEMU_CUDNN_API
#endif

#if defined(__cplusplus)
extern "C" {
#endif

/* ------------------------------------------------------------------ */
/* Status (cudnn_graph.h).                                              */

typedef enum {
	CUDNN_STATUS_SUCCESS = 0,

	CUDNN_STATUS_NOT_INITIALIZED = 1001,
	CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH = 1002,
	CUDNN_STATUS_SERIALIZATION_VERSION_MISMATCH = 1003,
	CUDNN_STATUS_DEPRECATED = 1004,
	CUDNN_STATUS_LICENSE_ERROR = 1005,
	CUDNN_STATUS_RUNTIME_IN_PROGRESS = 1006,
	CUDNN_STATUS_RUNTIME_FP_OVERFLOW = 1007,
	CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED = 1008,

	CUDNN_STATUS_BAD_PARAM = 2000,
	CUDNN_STATUS_BAD_PARAM_NULL_POINTER = 2002,
	CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER = 2003,
	CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED = 2004,
	CUDNN_STATUS_BAD_PARAM_OUT_OF_BOUND = 2005,
	CUDNN_STATUS_BAD_PARAM_SIZE_INSUFFICIENT = 2006,
	CUDNN_STATUS_BAD_PARAM_STREAM_MISMATCH = 2007,
	CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH = 2008,
	CUDNN_STATUS_BAD_PARAM_DUPLICATED_ENTRIES = 2009,
	CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE = 2010,
	CUDNN_STATUS_BAD_PARAM_CUDA_GRAPH_MISMATCH = 2011,
	CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE = 2012,

	CUDNN_STATUS_NOT_SUPPORTED = 3000,
	CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN = 3001,
	CUDNN_STATUS_NOT_SUPPORTED_SHAPE = 3002,
	CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE = 3003,
	CUDNN_STATUS_NOT_SUPPORTED_LAYOUT = 3004,
	CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDA_DRIVER = 3005,
	CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDART = 3006,
	CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH = 3007,
	CUDNN_STATUS_NOT_SUPPORTED_RUNTIME_PREREQUISITE_MISSING = 3008,
	CUDNN_STATUS_NOT_SUPPORTED_SUBLIBRARY_UNAVAILABLE = 3009,
	CUDNN_STATUS_NOT_SUPPORTED_SHARED_MEMORY_INSUFFICIENT = 3010,
	CUDNN_STATUS_NOT_SUPPORTED_PADDING = 3011,
	CUDNN_STATUS_NOT_SUPPORTED_BAD_LAUNCH_PARAM = 3012,
	CUDNN_STATUS_NOT_SUPPORTED_CUDA_GRAPH_NATIVE_API = 3013,
	CUDNN_STATUS_NOT_SUPPORTED_INVALID_DYNAMIC_SHAPE = 3014,

	CUDNN_STATUS_INTERNAL_ERROR = 4000,
	CUDNN_STATUS_INTERNAL_ERROR_COMPILATION_FAILED = 4001,
	CUDNN_STATUS_INTERNAL_ERROR_UNEXPECTED_VALUE = 4002,
	CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED = 4003,
	CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED = 4004,
	CUDNN_STATUS_INTERNAL_ERROR_BAD_LAUNCH_PARAM = 4005,
	CUDNN_STATUS_INTERNAL_ERROR_TEXTURE_CREATION_FAILED = 4006,

	CUDNN_STATUS_EXECUTION_FAILED = 5000,
	CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER = 5001,
	CUDNN_STATUS_EXECUTION_FAILED_CUBLAS = 5002,
	CUDNN_STATUS_EXECUTION_FAILED_CUDART = 5003,
	CUDNN_STATUS_EXECUTION_FAILED_CURAND = 5004,

	/* deprecated aliases in cuDNN 9 (same values) */
	CUDNN_STATUS_ALLOC_FAILED = CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED,
	CUDNN_STATUS_INVALID_VALUE = 2001,
	CUDNN_STATUS_ARCH_MISMATCH = CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH,
	CUDNN_STATUS_MAPPING_ERROR = CUDNN_STATUS_INTERNAL_ERROR_TEXTURE_CREATION_FAILED,
	CUDNN_STATUS_RUNTIME_PREREQUISITE_MISSING = CUDNN_STATUS_NOT_SUPPORTED_RUNTIME_PREREQUISITE_MISSING,
	CUDNN_STATUS_VERSION_MISMATCH = CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH,
} cudnnStatus_t;

/*
 * The status's name ("CUDNN_STATUS_BAD_PARAM").  Emulator extra: when the
 * last failing cuDNN call on this thread returned this status, the name is
 * followed by the emulator's reason ("...: cuemu cuDNN: ..."); that text
 * lives in a per-thread buffer, valid until this thread's next cuDNN call.
 */
CUEMU_CUDNN_API const char *cudnnGetErrorString(cudnnStatus_t status);

/* ------------------------------------------------------------------ */
/* Handle.                                                              */

struct cudnnContext;
typedef struct cudnnContext *cudnnHandle_t;

CUEMU_CUDNN_API cudnnStatus_t cudnnCreate(cudnnHandle_t *handle);
CUEMU_CUDNN_API cudnnStatus_t cudnnDestroy(cudnnHandle_t handle);
CUEMU_CUDNN_API cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, cudaStream_t streamId);

/* ------------------------------------------------------------------ */
/* Enums (cudnn_graph.h, cudnn_ops.h).                                  */

typedef enum {
	CUDNN_DATA_FLOAT = 0,
	CUDNN_DATA_DOUBLE = 1,
	CUDNN_DATA_HALF = 2,
	CUDNN_DATA_INT8 = 3,
	CUDNN_DATA_INT32 = 4,
	CUDNN_DATA_INT8x4 = 5,
	CUDNN_DATA_UINT8 = 6,
	CUDNN_DATA_UINT8x4 = 7,
	CUDNN_DATA_INT8x32 = 8,
	CUDNN_DATA_BFLOAT16 = 9,
	CUDNN_DATA_INT64 = 10,
	CUDNN_DATA_BOOLEAN = 11,
	CUDNN_DATA_FP8_E4M3 = 12,
	CUDNN_DATA_FP8_E5M2 = 13,
	CUDNN_DATA_FAST_FLOAT_FOR_FP8 = 14,
	CUDNN_DATA_FP8_E8M0 = 15,
	CUDNN_DATA_FP4_E2M1 = 16,
	CUDNN_DATA_INT4 = 17,
	CUDNN_DATA_UINT4 = 18,
	CUDNN_DATA_UINT32 = 19,
	CUDNN_DATA_COMPLEX_FP32 = 20,
	CUDNN_DATA_COMPLEX_FP64 = 21,
} cudnnDataType_t;

typedef enum {
	CUDNN_DEFAULT_MATH = 0,
	CUDNN_TENSOR_OP_MATH = 1,
	CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION = 2,
	CUDNN_FMA_MATH = 3,
} cudnnMathType_t;

typedef enum {
	CUDNN_TENSOR_NCHW = 0,
	CUDNN_TENSOR_NHWC = 1,
	CUDNN_TENSOR_NCHW_VECT_C = 2,
} cudnnTensorFormat_t;

typedef enum { CUDNN_CONVOLUTION = 0, CUDNN_CROSS_CORRELATION = 1 } cudnnConvolutionMode_t;

typedef enum {
	CUDNN_NON_DETERMINISTIC = 0,
	CUDNN_DETERMINISTIC = 1,
} cudnnDeterminism_t;

typedef enum {
	CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM = 0,
	CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM = 1,
	CUDNN_CONVOLUTION_FWD_ALGO_GEMM = 2,
	CUDNN_CONVOLUTION_FWD_ALGO_DIRECT = 3,
	CUDNN_CONVOLUTION_FWD_ALGO_FFT = 4,
	CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING = 5,
	CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD = 6,
	CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED = 7,
	CUDNN_CONVOLUTION_FWD_ALGO_COUNT = 8
} cudnnConvolutionFwdAlgo_t;

typedef enum {
	CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 = 0, /* non-deterministic */
	CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1 = 1,
	CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT = 2,
	CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3 = 3, /* non-deterministic */
	CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD = 4,
	CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED = 5,
	CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING = 6,
	CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT = 7
} cudnnConvolutionBwdFilterAlgo_t;

typedef enum {
	CUDNN_CONVOLUTION_BWD_DATA_ALGO_0 = 0, /* non-deterministic */
	CUDNN_CONVOLUTION_BWD_DATA_ALGO_1 = 1,
	CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT = 2,
	CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING = 3,
	CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD = 4,
	CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED = 5,
	CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT = 6
} cudnnConvolutionBwdDataAlgo_t;

/* ------------------------------------------------------------------ */
/* Tensor and filter descriptors (cudnn_ops.h): 4-d NCHW only here.     */

typedef struct cudnnTensorStruct *cudnnTensorDescriptor_t;
typedef struct cudnnFilterStruct *cudnnFilterDescriptor_t;

CUEMU_CUDNN_API cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t *tensorDesc);
CUEMU_CUDNN_API cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t tensorDesc,
							 cudnnTensorFormat_t format, cudnnDataType_t dataType,
							 int n, int c, int h, int w);
CUEMU_CUDNN_API cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t tensorDesc);

CUEMU_CUDNN_API cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t *filterDesc);
CUEMU_CUDNN_API cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t filterDesc,
							 cudnnDataType_t dataType, cudnnTensorFormat_t format,
							 int k, int c, int h, int w);
CUEMU_CUDNN_API cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t filterDesc);

/* ------------------------------------------------------------------ */
/* Convolution (cudnn_cnn.h): 2-d, one group.                            */

typedef struct cudnnConvolutionStruct *cudnnConvolutionDescriptor_t;

typedef struct cudnnConvolutionFwdAlgoPerfStruct {
	cudnnConvolutionFwdAlgo_t algo;
	cudnnStatus_t status;
	float time;
	size_t memory;
	cudnnDeterminism_t determinism;
	cudnnMathType_t mathType;
	int reserved[3];
} cudnnConvolutionFwdAlgoPerf_t;

typedef struct cudnnConvolutionBwdDataAlgoPerfStruct {
	cudnnConvolutionBwdDataAlgo_t algo;
	cudnnStatus_t status;
	float time;
	size_t memory;
	cudnnDeterminism_t determinism;
	cudnnMathType_t mathType;
	int reserved[3];
} cudnnConvolutionBwdDataAlgoPerf_t;

typedef struct cudnnConvolutionBwdFilterAlgoPerfStruct {
	cudnnConvolutionBwdFilterAlgo_t algo;
	cudnnStatus_t status;
	float time;
	size_t memory;
	cudnnDeterminism_t determinism;
	cudnnMathType_t mathType;
	int reserved[3];
} cudnnConvolutionBwdFilterAlgoPerf_t;

CUEMU_CUDNN_API cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t *convDesc);
CUEMU_CUDNN_API cudnnStatus_t cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t convDesc);
CUEMU_CUDNN_API cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t convDesc,
							  cudnnMathType_t mathType);
CUEMU_CUDNN_API cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t convDesc, int pad_h,
							      int pad_w, int u, int v, int dilation_h,
							      int dilation_w, cudnnConvolutionMode_t mode,
							      cudnnDataType_t computeType);
CUEMU_CUDNN_API cudnnStatus_t cudnnGetConvolution2dForwardOutputDim(const cudnnConvolutionDescriptor_t convDesc,
								    const cudnnTensorDescriptor_t inputTensorDesc,
								    const cudnnFilterDescriptor_t filterDesc,
								    int *n, int *c, int *h, int *w);

CUEMU_CUDNN_API cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(
	cudnnHandle_t handle, const cudnnTensorDescriptor_t srcDesc, const cudnnFilterDescriptor_t filterDesc,
	const cudnnConvolutionDescriptor_t convDesc, const cudnnTensorDescriptor_t destDesc,
	const int requestedAlgoCount, int *returnedAlgoCount, cudnnConvolutionFwdAlgoPerf_t *perfResults);

CUEMU_CUDNN_API cudnnStatus_t cudnnGetConvolutionForwardWorkspaceSize(
	cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc, const cudnnFilterDescriptor_t wDesc,
	const cudnnConvolutionDescriptor_t convDesc, const cudnnTensorDescriptor_t yDesc,
	cudnnConvolutionFwdAlgo_t algo, size_t *sizeInBytes);

/* y = alpha * conv(x, w) + beta * y */
CUEMU_CUDNN_API cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t handle, const void *alpha,
						      const cudnnTensorDescriptor_t xDesc, const void *x,
						      const cudnnFilterDescriptor_t wDesc, const void *w,
						      const cudnnConvolutionDescriptor_t convDesc,
						      cudnnConvolutionFwdAlgo_t algo, void *workSpace,
						      size_t workSpaceSizeInBytes, const void *beta,
						      const cudnnTensorDescriptor_t yDesc, void *y);

CUEMU_CUDNN_API cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(
	cudnnHandle_t handle, const cudnnFilterDescriptor_t filterDesc, const cudnnTensorDescriptor_t diffDesc,
	const cudnnConvolutionDescriptor_t convDesc, const cudnnTensorDescriptor_t gradDesc,
	const int requestedAlgoCount, int *returnedAlgoCount, cudnnConvolutionBwdDataAlgoPerf_t *perfResults);

CUEMU_CUDNN_API cudnnStatus_t cudnnGetConvolutionBackwardDataWorkspaceSize(
	cudnnHandle_t handle, const cudnnFilterDescriptor_t wDesc, const cudnnTensorDescriptor_t dyDesc,
	const cudnnConvolutionDescriptor_t convDesc, const cudnnTensorDescriptor_t dxDesc,
	cudnnConvolutionBwdDataAlgo_t algo, size_t *sizeInBytes);

/* dx = alpha * conv^T(dy, w) + beta * dx */
CUEMU_CUDNN_API cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t handle, const void *alpha,
							   const cudnnFilterDescriptor_t wDesc, const void *w,
							   const cudnnTensorDescriptor_t dyDesc, const void *dy,
							   const cudnnConvolutionDescriptor_t convDesc,
							   cudnnConvolutionBwdDataAlgo_t algo, void *workSpace,
							   size_t workSpaceSizeInBytes, const void *beta,
							   const cudnnTensorDescriptor_t dxDesc, void *dx);

CUEMU_CUDNN_API cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithm_v7(
	cudnnHandle_t handle, const cudnnTensorDescriptor_t srcDesc, const cudnnTensorDescriptor_t diffDesc,
	const cudnnConvolutionDescriptor_t convDesc, const cudnnFilterDescriptor_t gradDesc,
	const int requestedAlgoCount, int *returnedAlgoCount, cudnnConvolutionBwdFilterAlgoPerf_t *perfResults);

CUEMU_CUDNN_API cudnnStatus_t cudnnGetConvolutionBackwardFilterWorkspaceSize(
	cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc, const cudnnTensorDescriptor_t dyDesc,
	const cudnnConvolutionDescriptor_t convDesc, const cudnnFilterDescriptor_t gradDesc,
	cudnnConvolutionBwdFilterAlgo_t algo, size_t *sizeInBytes);

/* dw = alpha * filter_grad(x, dy) + beta * dw */
CUEMU_CUDNN_API cudnnStatus_t cudnnConvolutionBackwardFilter(cudnnHandle_t handle, const void *alpha,
							     const cudnnTensorDescriptor_t xDesc, const void *x,
							     const cudnnTensorDescriptor_t dyDesc, const void *dy,
							     const cudnnConvolutionDescriptor_t convDesc,
							     cudnnConvolutionBwdFilterAlgo_t algo, void *workSpace,
							     size_t workSpaceSizeInBytes, const void *beta,
							     const cudnnFilterDescriptor_t dwDesc, void *dw);

#if defined(__cplusplus)
}
#endif

#endif /* CUEMU_CUDNN_H */
