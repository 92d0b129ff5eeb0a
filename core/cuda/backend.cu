/* SPDX-License-Identifier: MIT */
/* The CUDA backend module (pipehost-cuda.so): the device ops of
 * core/device.h and the GPU services of <pipehost/device.h>.
 *
 * Loaded by the host only when a rank is placed on a GPU.  One "rank state"
 * per pipeline rank: its GPU, its stream, and cuBLAS and cuDNN handles bound
 * to that stream (handles are not shared between threads); the products
 * layers ask for are core/cuda/gemm.cu's, one instance per rank.  Everything is
 * queued on the rank's stream; only D2H copies and sumsq wait. */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <math.h>
#ifdef PH_WITH_NCCL
#include <nccl.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pipehost/device.h>

extern "C" {
#include "device.h"
}

#include "bf16_operands.h"
#include "cuda_try.h"
#include "gemm.h"
#include "kernels.cuh"
#include "optimizer.h"

struct rank_state {
	int ordinal;
	int precision;
	cudaStream_t stream;
	cublasHandle_t blas;
	cudnnHandle_t dnn;
	ph_gemm_rank *gemm;   /* the products layers ask for (ctx->gpu) */
	ph_optim_many *many;  /* the step's end, many tensors per launch */
	double *partial;      /* sumsq: per-block partial sums, device */
	double *result_host;  /* sumsq: pinned host result */
};

/* ---------------------------------------------------------------- */
/* Device ops                                                         */

static int op_count(int *n, ph_err *err)
{
	int c = 0;
	cudaError_t e = cudaGetDeviceCount(&c);
	if (e != cudaSuccess) {
		/* no driver, no device: a CPU machine, not an error */
		(void)cudaGetLastError();
		c = 0;
	}
	*n = c;
	return PH_OK;
}

static int op_describe(int ordinal, char *name, size_t len, size_t *total, ph_err *err)
{
	cudaDeviceProp p;
	TRY(err, cudaGetDeviceProperties(&p, ordinal));
	snprintf(name, len, "%s", p.name);
	*total = p.totalGlobalMem;
	return PH_OK;
}

static void op_close(void *v)
{
	rank_state *r = (rank_state *)v;
	if (!r)
		return;
	cudaSetDevice(r->ordinal);
	if (r->stream)
		cudaStreamSynchronize(r->stream);
	if (r->dnn)
		cudnnDestroy(r->dnn);
	if (r->blas)
		cublasDestroy(r->blas);
	ph_gemm_close(r->gemm);
	ph_optim_many_close(r->many);
	if (r->partial)
		cudaFree(r->partial);
	if (r->result_host)
		cudaFreeHost(r->result_host);
	if (r->stream)
		cudaStreamDestroy(r->stream);
	free(r);
}

/* Per GPU, the device memory in use when this process's first rank opened
 * there, its context made: op_mem_held's zero.  Ranks open one after
 * another on the main thread (engine.c). */
#define MEM_BASE_GPUS 64
static size_t mem_base[MEM_BASE_GPUS];
static int mem_base_set[MEM_BASE_GPUS];

static size_t mem_in_use(void)
{
	size_t freeb = 0, total = 0;
	if (cudaMemGetInfo(&freeb, &total) != cudaSuccess) {
		(void)cudaGetLastError();
		return 0;
	}
	return total - freeb;
}

static int op_open(int ordinal, int precision, void **out, ph_err *err)
{
	rank_state *r = (rank_state *)calloc(1, sizeof *r);
	if (!r)
		return ph_fail(err, PH_ENOMEM, "out of memory");
	*out = NULL;
	r->ordinal = ordinal;
	r->precision = precision;
	cudaError_t e;
	/* cudaFree(NULL) makes the context without allocating */
	if (ordinal >= 0 && ordinal < MEM_BASE_GPUS && !mem_base_set[ordinal] && cudaSetDevice(ordinal) == cudaSuccess &&
	    cudaFree(NULL) == cudaSuccess) {
		mem_base[ordinal] = mem_in_use();
		mem_base_set[ordinal] = 1;
	}
	(void)cudaGetLastError();
	if ((e = cudaSetDevice(ordinal)) != cudaSuccess ||
	    (e = cudaStreamCreateWithFlags(&r->stream, cudaStreamNonBlocking)) != cudaSuccess ||
	    (e = cudaMalloc(&r->partial, PH_K_SUMSQ_BLOCKS * sizeof(double))) != cudaSuccess ||
	    (e = cudaMallocHost(&r->result_host, sizeof(double))) != cudaSuccess) {
		op_close(r);
		return ph_fail(err, e == cudaErrorMemoryAllocation ? PH_ENOMEM : PH_EINTERNAL, "cuda:%d: %s", ordinal,
			       cudaGetErrorString(e));
	}
	cublasStatus_t bs = cublasCreate(&r->blas);
	if (bs == CUBLAS_STATUS_SUCCESS)
		bs = cublasSetStream(r->blas, r->stream);
	if (bs != CUBLAS_STATUS_SUCCESS) {
		op_close(r);
		return ph_fail(err, bs == CUBLAS_STATUS_ALLOC_FAILED ? PH_ENOMEM : PH_EINTERNAL,
			       "cuda:%d: cannot create a cuBLAS handle: %s", ordinal, ph_blas_status(bs));
	}
	cudnnStatus_t ds = cudnnCreate(&r->dnn);
	if (ds == CUDNN_STATUS_SUCCESS)
		ds = cudnnSetStream(r->dnn, r->stream);
	if (ds != CUDNN_STATUS_SUCCESS) {
		op_close(r);
		return ph_fail(err,
			       ds == CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED ||
					       ds == CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED
				       ? PH_ENOMEM
				       : PH_EINTERNAL,
			       "cuda:%d: cannot create a cuDNN handle: %s", ordinal, cudnnGetErrorString(ds));
	}
	int rc = ph_gemm_open(&r->gemm, err);
	if (!rc)
		rc = ph_optim_many_open(&r->many, err);
	if (rc) {
		op_close(r);
		return rc;
	}
	*out = r;
	return PH_OK;
}

static int op_bind(void *v, ph_err *err)
{
	TRY(err, cudaSetDevice(((rank_state *)v)->ordinal));
	return PH_OK;
}

static void op_fill_ctx(void *v, ph_ctx *ctx)
{
	rank_state *r = (rank_state *)v;
	ctx->device = PH_DEV_CUDA;
	ctx->stream = r->stream;
	ctx->blas = r->blas;
	ctx->dnn = r->dnn;
	ctx->gpu = ph_gemm_services(r->gemm);
	ctx->precision = r->precision;
}

/* The main thread serves ranks of several GPUs (uploads, tied gradients,
 * the clip norm): every op that queues work makes the rank's GPU current. */
#define ON_DEVICE(err, r) TRY(err, cudaSetDevice((r)->ordinal))

static int op_alloc(void *v, size_t bytes, void **p, ph_err *err)
{
	rank_state *r = (rank_state *)v;
	*p = NULL;
	ON_DEVICE(err, r);
	if (!bytes)
		bytes = 1;
	cudaError_t e = cudaMalloc(p, bytes);
	if (e != cudaSuccess) {
		size_t freeb = 0, total = 0;
		(void)cudaGetLastError();
		cudaMemGetInfo(&freeb, &total);
		*p = NULL;
		return ph_fail(err, PH_ENOMEM, "cuda:%d: cannot allocate %.1f MiB (%.1f MiB free of %.1f): %s",
			       r->ordinal, bytes / 1048576.0, freeb / 1048576.0, total / 1048576.0, cudaGetErrorString(e));
	}
	/* zeroed, and ordered before anything later on this stream */
	e = cudaMemsetAsync(*p, 0, bytes, r->stream);
	if (e != cudaSuccess) {
		cudaFree(*p);
		*p = NULL;
		return ph_fail(err, PH_EINTERNAL, "cuda:%d: cudaMemsetAsync: %s", r->ordinal, cudaGetErrorString(e));
	}
	return PH_OK;
}

static void op_free(void *v, void *p)
{
	if (p) {
		cudaSetDevice(((rank_state *)v)->ordinal);
		ph_bf16_params_forget(p);
		cudaFree(p);
	}
}

static int op_copy(void *v, void *dst, const void *src, size_t bytes, int dir, ph_err *err)
{
	rank_state *r = (rank_state *)v;
	if (!bytes)
		return PH_OK;
	ON_DEVICE(err, r);
	if (dir != PH_COPY_D2H)
		ph_bf16_params_wrote(dst, bytes);
	/* cudaMemcpyDefault: the pointers say which memory; between two GPUs
	 * it is a peer copy on the copy engines (staged by the driver where
	 * the GPUs have no peer access) */
	TRY(err, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, r->stream));
	/* H2D from pageable memory returns once src is staged; D2H must land */
	if (dir == PH_COPY_D2H || dir == PH_COPY_H2D)
		TRY(err, cudaStreamSynchronize(r->stream));
	return PH_OK;
}

static int op_zero(void *v, void *p, size_t bytes, ph_err *err)
{
	ON_DEVICE(err, (rank_state *)v);
	ph_bf16_params_wrote(p, bytes);
	TRY(err, cudaMemsetAsync(p, 0, bytes, ((rank_state *)v)->stream));
	return PH_OK;
}

static int op_sync(void *v, ph_err *err)
{
	TRY(err, cudaStreamSynchronize(((rank_state *)v)->stream));
	return PH_OK;
}

static int op_event_create(void *v, void **ev, ph_err *err)
{
	/* an event belongs to the GPU current at its creation, and is
	 * recorded only on that GPU's streams */
	ON_DEVICE(err, (rank_state *)v);
	cudaEvent_t e;
	TRY(err, cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
	*ev = e;
	return PH_OK;
}

static void op_event_destroy(void *ev)
{
	if (ev)
		cudaEventDestroy((cudaEvent_t)ev);
}

static int op_event_record(void *v, void *ev, ph_err *err)
{
	ON_DEVICE(err, (rank_state *)v);
	TRY(err, cudaEventRecord((cudaEvent_t)ev, ((rank_state *)v)->stream));
	return PH_OK;
}

static int op_event_wait(void *v, void *ev, ph_err *err)
{
	TRY(err, cudaStreamWaitEvent(((rank_state *)v)->stream, (cudaEvent_t)ev, 0));
	return PH_OK;
}

/* The step-wide scalars exactly as optim.c computes them, in double and
 * rounded once, so the per-element arithmetic matches the CPU's. */
static int op_optim_update(void *v, const ph_optim_config *c, int64_t t, double lr, double clip, float *w, float *g,
			   float *s, int64_t n, int decay, ph_err *err)
{
	rank_state *r = (rank_state *)v;
	if (!n)
		return PH_OK;
	ON_DEVICE(err, r);
	ph_bf16_params_wrote(w, (size_t)n * sizeof(float));
	return ph_cuda_optim_update(r->stream, c, t, lr, clip, w, g, s, n, decay, err);
}

static int op_optim_update_many(void *v, const ph_optim_config *c, int64_t t, double lr, double clip,
				float *const *w, float *const *g, float *const *s, const int64_t *n, const int *decay,
				int count, ph_err *err)
{
	rank_state *r = (rank_state *)v;
	ON_DEVICE(err, r);
	for (int k = 0; k < count; k++)
		ph_bf16_params_wrote(w[k], (size_t)n[k] * sizeof(float));
	return ph_optim_many_update(r->many, r->stream, c, t, lr, clip, w, g, s, n, decay, count, err);
}

static int op_sumsq_many(void *v, const float *const *g, const int64_t *n, int count, double *out, ph_err *err)
{
	rank_state *r = (rank_state *)v;
	ON_DEVICE(err, r);
	return ph_optim_many_sumsq(r->many, r->stream, g, n, count, out, err);
}

static int op_sumsq(void *v, const float *g, int64_t n, double *out, ph_err *err)
{
	rank_state *r = (rank_state *)v;
	ON_DEVICE(err, r);
	k_sumsq_partial<<<PH_K_SUMSQ_BLOCKS, 256, 0, r->stream>>>(g, n, r->partial);
	k_sumsq_final<<<1, PH_K_SUMSQ_BLOCKS, 0, r->stream>>>(r->partial, r->partial);
	TRY(err, cudaGetLastError());
	TRY(err, cudaMemcpyAsync(r->result_host, r->partial, sizeof(double), cudaMemcpyDeviceToHost, r->stream));
	TRY(err, cudaStreamSynchronize(r->stream));
	*out = *r->result_host;
	return PH_OK;
}

static int op_sumsq_to(void *v, const float *g, int64_t n, double *out, ph_err *err)
{
	rank_state *r = (rank_state *)v;
	ON_DEVICE(err, r);
	/* r->partial is reused by the next call: the stream orders them */
	k_sumsq_partial<<<PH_K_SUMSQ_BLOCKS, 256, 0, r->stream>>>(g, n, r->partial);
	k_sumsq_final<<<1, PH_K_SUMSQ_BLOCKS, 0, r->stream>>>(r->partial, out);
	TRY(err, cudaGetLastError());
	return PH_OK;
}

static int op_tie_sum(void *v, float *a, float *b, int64_t n, ph_err *err)
{
	rank_state *r = (rank_state *)v;
	ON_DEVICE(err, r);
	ph_bf16_params_wrote(a, (size_t)n * sizeof(float));
	ph_bf16_params_wrote(b, (size_t)n * sizeof(float));
	k_tie_sum<<<ph_k_blocks(n), 256, 0, r->stream>>>(a, b, n);
	TRY(err, cudaGetLastError());
	return PH_OK;
}

/* Under bf16 products read weights from a bf16 shadow of the block, made
 * at first use after each write (with PIPEHOST_GEMM_CAST=0 only products
 * whose other operand a layer holds in bf16 do); fp32 ranks need none. */
static int op_param_block(void *v, const float *w, int64_t n, ph_err *err)
{
	rank_state *r = (rank_state *)v;
	if (r->precision != PH_PREC_BF16 || n <= 0)
		return PH_OK;
	ON_DEVICE(err, r);
	return ph_bf16_params_register(w, n, err);
}

/* ---------------------------------------------------------------- */
/* NCCL, between processes (core/device.h)                            */

#ifdef PH_WITH_NCCL
static_assert(sizeof(ncclUniqueId) == PH_NCCL_ID_BYTES, "PH_NCCL_ID_BYTES must match ncclUniqueId");

/* The communicator and the GPU it was made on: destroying it, like any NCCL
 * call, wants that GPU current. */
struct nccl_comm {
	ncclComm_t comm;
	int ordinal;
	/* a stage link's (op_nccl_send, op_nccl_recv), made on first use */
	cudaStream_t side;
	cudaEvent_t ready, landed;
};

#define NCCL_HINT "run with NCCL_DEBUG=WARN for NCCL's reason, and check that every process of a node sees a different GPU"

static int op_nccl_unique_id(void *id, ph_err *err)
{
	ncclUniqueId u;
	ncclResult_t e = ncclGetUniqueId(&u);
	if (e != ncclSuccess)
		return ph_fail(err, PH_EIO, "NCCL: cannot make a communicator id: %s (%s); %s", ncclGetErrorString(e),
			       ncclGetLastError(NULL), NCCL_HINT);
	memcpy(id, &u, sizeof u);
	return PH_OK;
}

static int op_nccl_open(void *v, const void *id, int members, int member, void **out, ph_err *err)
{
	rank_state *r = (rank_state *)v;
	*out = NULL;
	ON_DEVICE(err, r);
	nccl_comm *c = (nccl_comm *)calloc(1, sizeof *c);
	if (!c)
		return ph_fail(err, PH_ENOMEM, "out of memory");
	c->ordinal = r->ordinal;
	ncclUniqueId u;
	memcpy(&u, id, sizeof u);
	ncclResult_t e = ncclCommInitRank(&c->comm, members, u, member);
	if (e != ncclSuccess) {
		free(c);
		return ph_fail(err, PH_EIO, "NCCL on cuda:%d: cannot join as member %d of %d: %s (%s); %s", r->ordinal,
			       member, members, ncclGetErrorString(e), ncclGetLastError(NULL), NCCL_HINT);
	}
	*out = c;
	return PH_OK;
}

static void op_nccl_close(void *v)
{
	nccl_comm *c = (nccl_comm *)v;
	if (!c)
		return;
	cudaSetDevice(c->ordinal);
	if (c->side)
		cudaStreamSynchronize(c->side);
	ncclCommDestroy(c->comm);
	if (c->side)
		cudaStreamDestroy(c->side);
	if (c->ready)
		cudaEventDestroy(c->ready);
	if (c->landed)
		cudaEventDestroy(c->landed);
	free(c);
}

static int op_nccl_sum(void *v, void *cv, float *g, int64_t n, ph_err *err)
{
	rank_state *r = (rank_state *)v;
	nccl_comm *c = (nccl_comm *)cv;
	if (n <= 0)
		return PH_OK;
	ON_DEVICE(err, r);
	ph_bf16_params_wrote(g, (size_t)n * sizeof(float));
	ncclResult_t e = ncclAllReduce(g, g, (size_t)n, ncclFloat, ncclSum, c->comm, r->stream);
	if (e != ncclSuccess)
		return ph_fail(err, PH_EIO, "NCCL on cuda:%d: sum of %lld floats: %s (%s); %s", r->ordinal, (long long)n,
			       ncclGetErrorString(e), ncclGetLastError(c->comm), NCCL_HINT);
	return PH_OK;
}

/* send [n][count] -> recv [n][count] over the n members: one send and one
 * receive per member (itself included), grouped so that none waits for
 * another's turn. */
static int op_nccl_all_to_all(void *v, void *cv, const float *send, float *recv, size_t count, ph_err *err)
{
	rank_state *r = (rank_state *)v;
	nccl_comm *c = (nccl_comm *)cv;
	int n = 0;
	if (!count)
		return PH_OK;
	ON_DEVICE(err, r);
	ncclResult_t e = ncclCommCount(c->comm, &n);
	if (e == ncclSuccess)
		e = ncclGroupStart();
	for (int j = 0; e == ncclSuccess && j < n; j++) {
		e = ncclSend(send + (size_t)j * count, count, ncclFloat, j, c->comm, r->stream);
		if (e == ncclSuccess)
			e = ncclRecv(recv + (size_t)j * count, count, ncclFloat, j, c->comm, r->stream);
	}
	ncclResult_t e2 = n ? ncclGroupEnd() : ncclSuccess;
	if (e == ncclSuccess)
		e = e2;
	if (e != ncclSuccess)
		return ph_fail(err, PH_EIO, "NCCL on cuda:%d: all-to-all of %d x %zu floats: %s (%s); %s", r->ordinal, n,
			       count, ncclGetErrorString(e), ncclGetLastError(c->comm), NCCL_HINT);
	return PH_OK;
}

static int op_nccl_all_gather(void *v, void *cv, const float *send, float *recv, size_t count, ph_err *err)
{
	rank_state *r = (rank_state *)v;
	nccl_comm *c = (nccl_comm *)cv;
	if (!count)
		return PH_OK;
	ON_DEVICE(err, r);
	ncclResult_t e = ncclAllGather(send, recv, count, ncclFloat, c->comm, r->stream);
	if (e != ncclSuccess)
		return ph_fail(err, PH_EIO, "NCCL on cuda:%d: all-gather of %zu floats: %s (%s); %s", r->ordinal, count,
			       ncclGetErrorString(e), ncclGetLastError(c->comm), NCCL_HINT);
	return PH_OK;
}
/* A stage link's messages run on a stream of the communicator's own: on
 * the rank's stream, NCCL's kernel would hold every kernel queued after it
 * until the other process got to the matching call, and a send of
 * micro-batch 3 would wait for the receiver's forward of 3 while the
 * receiver waits for this rank's gradient of 1.  The side stream starts
 * each message after the rank's stream's work so far (`ready`), which
 * wrote the bytes or still reads the buffer they land in.  link_begin
 * makes the side stream on first use and orders the next message there. */
static int link_begin(rank_state *r, nccl_comm *c, ph_err *err)
{
	ON_DEVICE(err, r);
	if (!c->side) {
		TRY(err, cudaStreamCreateWithFlags(&c->side, cudaStreamNonBlocking));
		TRY(err, cudaEventCreateWithFlags(&c->ready, cudaEventDisableTiming));
		TRY(err, cudaEventCreateWithFlags(&c->landed, cudaEventDisableTiming));
	}
	TRY(err, cudaEventRecord(c->ready, r->stream));
	TRY(err, cudaStreamWaitEvent(c->side, c->ready, 0));
	return PH_OK;
}

static int op_nccl_send(void *v, void *cv, const void *buf, size_t bytes, int peer, void *sent, ph_err *err)
{
	rank_state *r = (rank_state *)v;
	nccl_comm *c = (nccl_comm *)cv;
	int rc = link_begin(r, c, err);
	if (rc)
		return rc;
	ncclResult_t e = ncclSend(buf, bytes, ncclUint8, peer, c->comm, c->side);
	if (e != ncclSuccess)
		return ph_fail(err, PH_EIO, "NCCL on cuda:%d: send of %zu bytes to member %d: %s (%s); %s", r->ordinal,
			       bytes, peer, ncclGetErrorString(e), ncclGetLastError(c->comm), NCCL_HINT);
	TRY(err, cudaEventRecord((cudaEvent_t)sent, c->side));
	return PH_OK;
}

/* The rank's stream waits for the bytes (`landed`) before the kernels
 * queued after this call read them. */
static int op_nccl_recv(void *v, void *cv, void *buf, size_t bytes, int peer, ph_err *err)
{
	rank_state *r = (rank_state *)v;
	nccl_comm *c = (nccl_comm *)cv;
	int rc = link_begin(r, c, err);
	if (rc)
		return rc;
	ncclResult_t e = ncclRecv(buf, bytes, ncclUint8, peer, c->comm, c->side);
	if (e != ncclSuccess)
		return ph_fail(err, PH_EIO, "NCCL on cuda:%d: receive of %zu bytes from member %d: %s (%s); %s",
			       r->ordinal, bytes, peer, ncclGetErrorString(e), ncclGetLastError(c->comm), NCCL_HINT);
	TRY(err, cudaEventRecord(c->landed, c->side));
	TRY(err, cudaStreamWaitEvent(r->stream, c->landed, 0));
	return PH_OK;
}

#define NCCL_OPS op_nccl_unique_id, op_nccl_open, op_nccl_close, op_nccl_sum
#define NCCL_GROUP_OPS op_nccl_all_to_all, op_nccl_all_gather
#define NCCL_LINK_OPS op_nccl_send, op_nccl_recv
#else
#define NCCL_OPS NULL, NULL, NULL, NULL
#define NCCL_GROUP_OPS NULL, NULL
#define NCCL_LINK_OPS NULL, NULL
#endif

static int op_mem_held(void *v, int *ordinal, size_t *bytes, ph_err *err)
{
	rank_state *r = (rank_state *)v;
	*ordinal = r->ordinal;
	*bytes = 0;
	ON_DEVICE(err, r);
	TRY(err, cudaStreamSynchronize(r->stream));
	size_t used = mem_in_use();
	size_t base = r->ordinal >= 0 && r->ordinal < MEM_BASE_GPUS ? mem_base[r->ordinal] : 0;
	*bytes = used > base ? used - base : 0;
	return PH_OK;
}

static int op_device_key(void *v, char *key, size_t len, ph_err *err)
{
	rank_state *r = (rank_state *)v;
	TRY(err, cudaDeviceGetPCIBusId(key, (int)len, r->ordinal));
	return PH_OK;
}

static const ph_device_ops cuda_ops = {
	sizeof(ph_device_ops),
	op_count,
	op_describe,
	op_open,
	op_close,
	op_bind,
	op_fill_ctx,
	op_alloc,
	op_free,
	op_copy,
	op_zero,
	op_sync,
	op_event_create,
	op_event_destroy,
	op_event_record,
	op_event_wait,
	op_optim_update,
	op_sumsq,
	op_tie_sum,
	NCCL_OPS,
	op_sumsq_to,
	op_param_block,
	op_optim_update_many,
	op_sumsq_many,
	PH_DEV_CUDA,
	0, /* GPU memory: the host keeps mirrors */
	NCCL_GROUP_OPS,
	op_mem_held,
	op_device_key,
	NCCL_LINK_OPS,
};

extern "C" __attribute__((visibility("default"))) const ph_device_ops *ph_cuda_backend_ops(void)
{
	return &cuda_ops;
}
