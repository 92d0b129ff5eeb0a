/* SPDX-License-Identifier: MIT */
/*
 * nccl.h (cuemu): a CPU stand-in for the NCCL API, used only by the
 * emulator build in tests/ (tests/cuemu/), where the project's CUDA code is
 * compiled with g++ and run on the host.  It is NOT NVIDIA's header.
 *
 * Only the subset pipehost uses (core/cuda/backend.cu) and a few neighbours
 * are declared: result codes, the unique id, the communicator's life and
 * queries, AllReduce, AllGather, Broadcast, point-to-point Send and Recv
 * and groups.  Prototypes, type names and numeric enum values are NCCL
 * 2.x's (nccl.h of NCCL 2.28, with bf16 as when __CUDA_BF16_TYPES_EXIST__
 * is defined; the fp8 types are left off).  The implementation (nccl.cc)
 * joins the members of a communicator over unix-domain sockets, one process
 * per member as under mpirun: see the comment at its top.
 */
#ifndef CUEMU_NCCL_H
#define CUEMU_NCCL_H

#include <stddef.h>

/* The same typedef as the emulator's cuda_runtime.h (repeating an
 * identical typedef is legal in C++ and C11). */
struct CUstream_st;
typedef struct CUstream_st *cudaStream_t;

/* The NCCL version these declarations follow. */
#define NCCL_MAJOR 2
#define NCCL_MINOR 28
#define NCCL_PATCH 9
#define NCCL_SUFFIX ""
#define NCCL_VERSION(X, Y, Z) (((X) <= 2 && (Y) <= 8) ? (X) * 1000 + (Y) * 100 + (Z) : (X) * 10000 + (Y) * 100 + (Z))
#define NCCL_VERSION_CODE NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH)

/* Exported with default visibility even from a -fvisibility=hidden build. */
#if defined(__GNUC__)
#define CUEMU_NCCL_API __attribute__((visibility("default")))
#else
#define CUEMU_NCCL_API
#endif

#if defined(__cplusplus)
extern "C" {
#endif

/* Opaque handle to a communicator. */
typedef struct ncclComm *ncclComm_t;
#define NCCL_COMM_NULL NULL

#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
	char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

typedef enum {
	ncclSuccess = 0,
	ncclUnhandledCudaError = 1,
	ncclSystemError = 2,
	ncclInternalError = 3,
	ncclInvalidArgument = 4,
	ncclInvalidUsage = 5,
	ncclRemoteError = 6,
	ncclInProgress = 7,
	ncclNumResults = 8
} ncclResult_t;

typedef enum {
	ncclInt8 = 0,
	ncclChar = 0,
	ncclUint8 = 1,
	ncclInt32 = 2,
	ncclInt = 2,
	ncclUint32 = 3,
	ncclInt64 = 4,
	ncclUint64 = 5,
	ncclFloat16 = 6,
	ncclHalf = 6,
	ncclFloat32 = 7,
	ncclFloat = 7,
	ncclFloat64 = 8,
	ncclDouble = 8,
	ncclBfloat16 = 9,
	ncclNumTypes = 10
} ncclDataType_t;

typedef enum { ncclNumOps_dummy = 5 } ncclRedOp_dummy_t;
typedef enum {
	ncclSum = 0,
	ncclProd = 1,
	ncclMax = 2,
	ncclMin = 3,
	ncclAvg = 4,
	ncclNumOps = 5,
	ncclMaxRedOp = 0x7fffffff >> (32 - 8 * sizeof(ncclRedOp_dummy_t))
} ncclRedOp_t;

CUEMU_NCCL_API ncclResult_t ncclGetVersion(int *version);
CUEMU_NCCL_API ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId);
CUEMU_NCCL_API ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank);
CUEMU_NCCL_API ncclResult_t ncclCommDestroy(ncclComm_t comm);
CUEMU_NCCL_API ncclResult_t ncclCommAbort(ncclComm_t comm);
CUEMU_NCCL_API const char *ncclGetErrorString(ncclResult_t result);
CUEMU_NCCL_API const char *ncclGetLastError(ncclComm_t comm);
CUEMU_NCCL_API ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError);
CUEMU_NCCL_API ncclResult_t ncclCommCount(const ncclComm_t comm, int *count);
CUEMU_NCCL_API ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *device);
CUEMU_NCCL_API ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank);

CUEMU_NCCL_API ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
					  ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
CUEMU_NCCL_API ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
					  int root, ncclComm_t comm, cudaStream_t stream);
CUEMU_NCCL_API ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
					  ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
CUEMU_NCCL_API ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer,
				     ncclComm_t comm, cudaStream_t stream);
CUEMU_NCCL_API ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
				     cudaStream_t stream);

CUEMU_NCCL_API ncclResult_t ncclGroupStart(void);
CUEMU_NCCL_API ncclResult_t ncclGroupEnd(void);

#if defined(__cplusplus)
}
#endif

#endif
