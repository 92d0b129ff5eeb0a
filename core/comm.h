/* SPDX-License-Identifier: MIT */
/* Processes: what the processes of `mpirun -np N pipehost -c run.ini` share.
 *
 * Each process runs whole pipelines (replicas; core/engine-replicas.c) and the
 * processes agree on every gradient before each optimizer step.  A run that
 * mpirun did not start is a single process and never touches MPI.  Under
 * mpirun the host loads one module, pipehost-mpi.so (core/mpi/), so the
 * pipehost binary starts on a machine without MPI installed and a build
 * without MPI still runs single-process jobs.  The module exports one
 * symbol, ph_mpi_comm_ops(), returning the ops below.
 *
 * Only the main thread calls the collectives.  When a pipeline's ranks are
 * split over processes, the workers send and receive activations and
 * gradients themselves (isend, irecv, test: MPI_THREAD_MULTIPLE). */
#ifndef PH_CORE_COMM_H
#define PH_CORE_COMM_H

#include <stddef.h>
#include <stdint.h>

#include <pipehost/plugin.h>

#define PH_MPI_MODULE_SYMBOL "ph_mpi_comm_ops"
#define PH_MPI_MODULE_FILE "pipehost-mpi.so"

typedef struct ph_comm_ops {
	uint32_t struct_size;
	/* MPI_Init_thread; this process's rank, the process count, its rank
	 * among the processes on its node (for GPU choice), whether several
	 * threads may talk at once (MPI_THREAD_MULTIPLE), and the largest
	 * message tag (MPI_TAG_UB). */
	int (*init)(int *rank, int *size, int *local_rank, int *threads, int *tag_ub, ph_err *err);
	void (*finalize)(void);
	/* Every process contributes `bytes` bytes; recv gets all of them in
	 * process order (size * bytes).  Blocks until all have arrived. */
	int (*allgather)(const void *send, void *recv, size_t bytes, ph_err *err);
	/* root's `bytes` bytes to every process. */
	int (*bcast)(void *buf, size_t bytes, int root, ph_err *err);
	/* *v = the largest *v of all processes: a failure anywhere stops all. */
	int (*max_int)(int *v, ph_err *err);
	/* Stop every process (after this one printed why). */
	void (*abort)(int code);
	/* Point to point, from any thread: start sending or receiving one
	 * message (at most INT_MAX bytes) to or from process `peer`; `test`
	 * sets *done once it has completed, and then releases req.  The
	 * buffer must stay untouched until then. */
	int (*isend)(const void *buf, size_t bytes, int peer, int tag, void **req, ph_err *err);
	int (*irecv)(void *buf, size_t bytes, int peer, int tag, void **req, ph_err *err);
	int (*test)(void *req, int *done, ph_err *err);
} ph_comm_ops;

typedef const ph_comm_ops *(*ph_mpi_comm_fn)(void);

typedef struct {
	int rank;                /* this process, 0..size-1 */
	int size;                /* processes; 1 without mpirun */
	int local_rank;          /* among the processes on this node */
	int threads;             /* the workers may send and receive themselves */
	int tag_ub;              /* the largest tag a message may carry */
	const ph_comm_ops *ops;  /* NULL for a single process */
} ph_comm;

/* Started by mpirun (OMPI_COMM_WORLD_SIZE, PMI_SIZE or PMIX_RANK in the
 * environment, with more than one process)?  Then load pipehost-mpi.so and
 * join the others; otherwise a single process.  Fails with one line when
 * mpirun started several processes but this pipehost has no MPI module. */
int ph_comm_init(ph_comm *c, ph_err *err);
void ph_comm_finalize(ph_comm *c);

/* Does this process write files and progress lines?  Only process 0 does:
 * the processes hold the same weights, and writing a checkpoint twice into
 * one directory would race. */
static inline int ph_comm_writer(const ph_comm *c)
{
	return c->rank == 0;
}

#endif
