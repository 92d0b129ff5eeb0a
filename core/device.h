/* SPDX-License-Identifier: MIT */
/* Devices: where a rank's tensors live and how bytes move between them.
 *
 * Every rank runs on a device, the CPU included: the engine has one path
 * and calls the ops below for memory, copies, ordering and the step's end.
 * The CPU's table (device_cpu.c, ph_cpu_device) is plain host memory, its
 * copies memcpy, its events and syncs nothing, its update optim.c's loop.
 * For CUDA the host loads one backend module, pipehost-cuda.so (core/cuda/),
 * the first time a run names a CUDA device, so a CPU-only run never loads
 * the CUDA runtime, cuBLAS or cuDNN, and a binary built with CUDA still
 * starts on a machine without a GPU.  The module exports one symbol,
 * ph_cuda_backend_ops(), returning the ops below (fio's ioengine ops, in short).
 *
 * A "rank state" is one pipeline rank's view of its GPU: the device
 * ordinal, a stream, and the cuBLAS, cuBLASLt and cuDNN handles bound to
 * that stream.  Handles are not shared between ranks, so ranks on one GPU
 * run on their own streams and order their hand-offs with events. */
#ifndef PH_CORE_DEVICE_H
#define PH_CORE_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include <pipehost/plugin.h>

#include "optim.h"

#define PH_CUDA_BACKEND_SYMBOL "ph_cuda_backend_ops"
#define PH_CUDA_BACKEND_FILE "pipehost-cuda.so"

enum { PH_COPY_H2D = 0, PH_COPY_D2H = 1, PH_COPY_D2D = 2 };

typedef struct ph_device_ops {
	uint32_t struct_size;

	/* GPUs visible to this process (0 where there is no driver). */
	int (*count)(int *n, ph_err *err);
	/* Name and memory of GPU `ordinal`, for the plan table. */
	int (*describe)(int ordinal, char *name, size_t len, size_t *total_bytes, ph_err *err);

	/* One rank's stream and handles on GPU `ordinal`. */
	int (*open)(int ordinal, int precision, void **rank_state, ph_err *err);
	void (*close)(void *rs);
	/* Make the rank's GPU current on the calling thread: a worker does it
	 * before its layers launch kernels.  The ops below set the GPU
	 * themselves, so any thread may call them for any rank. */
	int (*bind)(void *rs, ph_err *err);
	/* Fill ctx->stream, blas, dnn, gpu and precision for a layer call. */
	void (*fill_ctx)(void *rs, ph_ctx *ctx);

	/* Zeroed device memory on the rank's GPU. */
	int (*alloc)(void *rs, size_t bytes, void **p, ph_err *err);
	void (*free)(void *rs, void *p);
	/* Ordered on the rank's stream.  H2D returns once src may be reused;
	 * D2H returns once dst holds the bytes; D2D does not wait, and works
	 * between two GPUs too (peer copy). */
	int (*copy)(void *rs, void *dst, const void *src, size_t bytes, int dir, ph_err *err);
	int (*zero)(void *rs, void *p, size_t bytes, ph_err *err);
	/* Wait for everything queued on the rank's stream. */
	int (*sync)(void *rs, ph_err *err);

	/* Cross-stream ordering: record on the producer's stream, wait on the
	 * consumer's.  The host keeps one event per link and micro-batch. */
	int (*event_create)(void *rs, void **ev, ph_err *err);
	void (*event_destroy)(void *ev);
	int (*event_record)(void *rs, void *ev, ph_err *err);
	int (*event_wait)(void *rs, void *ev, ph_err *err);

	/* The optimizer step of one tensor on the GPU, the same arithmetic as
	 * the CPU's: where clip != 1, g = (float)(g * clip) (the product in
	 * double; gradient clipping), then ph_optim_update (optim.c); g is
	 * left zeroed for the next step.  One kernel: the clip, the update
	 * and the zeroing read and write each tensor once. */
	int (*optim_update)(void *rs, const ph_optim_config *c, int64_t t, double lr, double clip, float *w, float *g,
			    float *s, int64_t n, int decay, ph_err *err);
	/* sum(g^2) in double, in a fixed order; waits for the result. */
	int (*sumsq)(void *rs, const float *g, int64_t n, double *out, ph_err *err);
	/* Tied copies on one GPU: a = a + b; b = a. */
	int (*tie_sum)(void *rs, float *a, float *b, int64_t n, ph_err *err);

	/* NCCL, between processes only (mpirun; core/comm.h): the ranks of one
	 * process may share a GPU, which one NCCL communicator refuses, so
	 * in-process hand-offs and sums use the ops above.  One communicator
	 * per pipeline rank spans that rank's GPU in every process.  NULL
	 * where the backend was built without NCCL. */
	/* Process 0 makes the id (PH_NCCL_ID_BYTES) and sends it to the others. */
	int (*nccl_unique_id)(void *id, ph_err *err);
	/* Join communicator `id` as member `member` of `members`, on the rank's
	 * GPU; every member calls it at the same time. */
	int (*nccl_open)(void *rs, const void *id, int members, int member, void **comm, ph_err *err);
	void (*nccl_close)(void *comm);
	/* g = the sum of every member's g, queued on the rank's stream. */
	int (*nccl_sum)(void *rs, void *comm, float *g, int64_t n, ph_err *err);

	/* sumsq's arithmetic into *out, one double of the rank's device memory,
	 * queued without waiting: the clip norm queues every tensor's and reads
	 * them back with one copy per rank instead of a round trip each. */
	int (*sumsq_to)(void *rs, const float *g, int64_t n, double *out, ph_err *err);

	/* n floats of parameters at w, allocated by alloc on this rank: under
	 * bf16 the products that read them take a bf16 copy made once after
	 * each write instead of rounding them anew at every product
	 * (core/cuda/bf16_operands.h).  Writes through the ops above are
	 * tracked; kernels of layers never write parameters. */
	int (*param_block)(void *rs, const float *w, int64_t n, ph_err *err);

	/* The step's end with many tensors per launch (core/cuda/optimizer.h),
	 * each tensor getting the bits of its own call above: optim_update
	 * for k = 0 .. count-1, and sumsq_to of g[k] into out[k].  Some 260
	 * launches a step become three for GPT-2 small. */
	int (*optim_update_many)(void *rs, const ph_optim_config *c, int64_t t, double lr, double clip,
				 float *const *w, float *const *g, float *const *s, const int64_t *n, const int *decay,
				 int count, ph_err *err);
	int (*sumsq_many)(void *rs, const float *const *g, const int64_t *n, int count, double *out, ph_err *err);

	/* PH_DEV_CPU or PH_DEV_CUDA: what a layer sees in ctx->device, and
	 * which of its twins (ph_layer_ops.devices) and scratch sizes apply. */
	uint32_t kind;
	/* 1 where the device computes in host memory (the CPU): the engine's
	 * host copies of weights, state, batch and losses are then the device
	 * arrays themselves, and a copy between one array and itself is
	 * nothing; sums across processes go over the process group. */
	int host_memory;

	/* The replica groups' collectives between processes (engine-group.c,
	 * plugin ABI 1.5), on a communicator of nccl_open whose member j is
	 * replica j, queued on the rank's stream; NULL without NCCL.
	 * all_to_all: send [members][count] -> recv [members][count], block j
	 * to and from member j (ncclSend/ncclRecv in one group).  all_gather:
	 * every member's `count` floats into recv [members][count], in member
	 * order (the caller adds them in that order: the same bits as in one
	 * process, which ncclAllReduce's order would not give). */
	int (*nccl_all_to_all)(void *rs, void *comm, const float *send, float *recv, size_t count, ph_err *err);
	int (*nccl_all_gather)(void *rs, void *comm, const float *send, float *recv, size_t count, ph_err *err);

	/* Device memory this process holds on the rank's GPU beyond what it
	 * held when its first rank opened there (after the CUDA context was
	 * made): pipehost's buffers, the libraries' handles and workspaces.
	 * The engine allocates its arenas up front and frees nothing until it
	 * is destroyed, so at the end of training this is the run's peak.
	 * The same measure as PyTorch's memory reserved, context excluded
	 * (bench/gpt2_124m_torch.py prints both).  NULL on the CPU. */
	int (*mem_held)(void *rs, int *ordinal, size_t *bytes, ph_err *err);
	/* The rank's GPU as the machine knows it (its PCI bus id), whatever
	 * ordinal CUDA_VISIBLE_DEVICES gave it: two processes on one host
	 * with the same key share a GPU, which NCCL refuses
	 * (engine-replicas.c).  NULL on the CPU. */
	int (*device_key)(void *rs, char *key, size_t len, ph_err *err);

	/* A pipeline's stage links between processes (engine-links-nccl.c),
	 * each direction of a link on a communicator of nccl_open with two
	 * members.  nccl_send: send `bytes` at buf to member `peer`;
	 * nccl_recv: receive them into buf.  Both are queued after the work
	 * on the rank's stream so far, and run on a stream of the
	 * communicator's own, so the rank's stream goes on computing while a
	 * message waits for the other process.  nccl_send records `sent` (an
	 * event of event_create) once the bytes have left: the rank's stream
	 * waits on it (event_wait) before it writes buf again.  Work queued
	 * on the rank's stream after nccl_recv sees the bytes.  NULL without
	 * NCCL. */
	int (*nccl_send)(void *rs, void *comm, const void *buf, size_t bytes, int peer, void *sent, ph_err *err);
	int (*nccl_recv)(void *rs, void *comm, void *buf, size_t bytes, int peer, ph_err *err);
} ph_device_ops;

#define PH_NCCL_ID_BYTES 128

typedef const ph_device_ops *(*ph_cuda_backend_fn)(void);

/* What `[run] devices` asks for, rank by rank. */
typedef struct {
	int ranks;       /* pipeline ranks times this process's replicas */
	int cuda;        /* any rank on a GPU */
	int *ordinal;    /* [replica][rank]: -1 = CPU, else the CUDA device */
	int *process;    /* a pipeline split over processes on GPUs: [rank]
			  * the process that runs it, -1 for this one; NULL
			  * otherwise */
	char auto_cpu[PH_ERR_MAX]; /* devices = auto found no GPU: why (the backend's
			     * words), for the line that says so; else "" */
} ph_placement;

/* Parse `[run] devices` for `ranks` ranks in each of this process's
 * `replicas` pipelines:
 *   cpu                  every rank on the CPU
 *   auto                 the GPUs round-robin, or the CPU where there is none;
 *                        counting starts at GPU `first` (under mpirun, the
 *                        process's place on its node times its ranks)
 *   cuda                 every rank on cuda:0
 *   cuda:0,cuda:0,cuda:1 one entry per rank (the replicas share it), one per
 *                        rank of every replica, replica by replica, or a
 *                        single entry for all
 * "auto" and cuda:N ask the backend how many GPUs exist; a request it
 * cannot serve fails with one line saying what to do. */
int ph_placement_parse(ph_placement *pl, const char *spec, int ranks, int replicas, int first, ph_err *err);
void ph_placement_free(ph_placement *pl);
/* Rank r's device as placed: "cpu", "cuda:N", or "proc:P" for a rank
 * that process P runs (for the plan). */
void ph_placement_name(const ph_placement *pl, int rank, char *buf, size_t len);

/* The CPU: the ops above over host memory, with the arithmetic the CPU
 * path always had (device_cpu.c). */
const ph_device_ops *ph_cpu_device(void);

/* The CUDA backend, loaded on first use; NULL with a reason when this
 * pipehost was built without CUDA or the module cannot be loaded. */
const ph_device_ops *ph_cuda_backend(ph_err *err);

#endif
