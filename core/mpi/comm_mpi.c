/* SPDX-License-Identifier: MIT */
/* pipehost-mpi.so: the processes' collectives over MPI (see core/comm.h).
 *
 * The host dlopens this module only under mpirun, so the pipehost binary
 * itself never links MPI.  It exports one symbol, ph_mpi_comm_ops().
 *
 * MPI counts are ints: a collective of more than INT_MAX bytes goes in
 * pieces of PH_MPI_CHUNK bytes.  Errors come back as codes
 * (MPI_ERRORS_RETURN), turned into one line with MPI_Error_string. */
#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include "comm.h"

/* 256 MiB: far below INT_MAX, large enough that the per-piece latency does
 * not matter.  (-DPH_MPI_CHUNK=... for testing the piecing on small data.) */
#ifndef PH_MPI_CHUNK
#define PH_MPI_CHUNK ((size_t)256 << 20)
#endif

/* The workers' point-to-point messages (a pipeline split over processes)
 * travel on a copy of MPI_COMM_WORLD, apart from the collectives: the main
 * thread's, and during a stream of steps (core/engine-stream.c) the
 * gradient sum that one worker at a time runs while the main thread
 * waits; never two at once in a process. */
static MPI_Comm links = MPI_COMM_NULL;

/* One line for a failed MPI call: what failed and MPI's words for it. */
static int mpi_fail(ph_err *err, const char *what, int rc)
{
	char msg[MPI_MAX_ERROR_STRING];
	int len = 0;
	if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS)
		snprintf(msg, sizeof msg, "MPI error %d", rc);
	return ph_fail(err, PH_EIO, "%s failed: %s", what, msg);
}

static void comm_finalize(void)
{
	int init = 0, fin = 0;
	MPI_Initialized(&init);
	MPI_Finalized(&fin);
	if (init && !fin) {
		if (links != MPI_COMM_NULL)
			MPI_Comm_free(&links);
		MPI_Finalize();
	}
}

/* This process's rank among those sharing its node's memory: the node's
 * GPUs are shared out by it. */
static int node_rank(int rank, int *local, ph_err *err)
{
	MPI_Comm node;
	int rc = MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
	if (rc != MPI_SUCCESS)
		return mpi_fail(err, "MPI_Comm_split_type", rc);
	rc = MPI_Comm_rank(node, local);
	MPI_Comm_free(&node);
	return rc == MPI_SUCCESS ? PH_OK : mpi_fail(err, "MPI_Comm_rank", rc);
}

static int comm_init(int *rank, int *size, int *local_rank, int *threads, int *tag_ub, ph_err *err)
{
	/* the main thread's collectives need FUNNELED; a pipeline split over
	 * processes has every worker send and receive: MULTIPLE */
	int provided = MPI_THREAD_SINGLE;
	int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided);
	if (rc != MPI_SUCCESS)
		return mpi_fail(err, "MPI_Init_thread", rc);
	if (provided < MPI_THREAD_FUNNELED) {
		MPI_Finalize();
		return ph_fail(err, PH_EUNSUPPORTED,
			       "this MPI library does not support MPI_THREAD_FUNNELED (it provides level %d), which "
			       "pipehost's worker threads need",
			       provided);
	}
	/* errors as codes, so they reach the user as one line and not as an
	 * abort from inside MPI */
	rc = MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
	if (rc == MPI_SUCCESS)
		rc = MPI_Comm_rank(MPI_COMM_WORLD, rank);
	if (rc == MPI_SUCCESS)
		rc = MPI_Comm_size(MPI_COMM_WORLD, size);
	if (rc != MPI_SUCCESS) {
		mpi_fail(err, "MPI_Comm_rank/size", rc);
		MPI_Finalize();
		return PH_EIO;
	}
	int st = node_rank(*rank, local_rank, err);
	if (st) {
		MPI_Finalize();
		return st;
	}
	*threads = provided >= MPI_THREAD_MULTIPLE;
	int *ub = NULL, flag = 0;
	*tag_ub = MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag) == MPI_SUCCESS && flag && ub ? *ub : 32767;
	if ((rc = MPI_Comm_dup(MPI_COMM_WORLD, &links)) == MPI_SUCCESS)
		rc = MPI_Comm_set_errhandler(links, MPI_ERRORS_RETURN);
	if (rc != MPI_SUCCESS) {
		mpi_fail(err, "MPI_Comm_dup", rc);
		MPI_Finalize();
		return PH_EIO;
	}
	return PH_OK;
}

/* Point to point: one message of at most INT_MAX bytes (a micro-batch's
 * activations; the engine refuses larger links when it allocates them). */
static int comm_isend(const void *buf, size_t bytes, int dest, int tag, void **req, ph_err *err)
{
	MPI_Request *r = malloc(sizeof *r);
	if (!r)
		return ph_fail(err, PH_ENOMEM, "out of memory");
	int rc = MPI_Isend(buf, (int)bytes, MPI_BYTE, dest, tag, links, r);
	if (rc != MPI_SUCCESS) {
		free(r);
		return mpi_fail(err, "MPI_Isend", rc);
	}
	*req = r;
	return PH_OK;
}

static int comm_irecv(void *buf, size_t bytes, int src, int tag, void **req, ph_err *err)
{
	MPI_Request *r = malloc(sizeof *r);
	if (!r)
		return ph_fail(err, PH_ENOMEM, "out of memory");
	int rc = MPI_Irecv(buf, (int)bytes, MPI_BYTE, src, tag, links, r);
	if (rc != MPI_SUCCESS) {
		free(r);
		return mpi_fail(err, "MPI_Irecv", rc);
	}
	*req = r;
	return PH_OK;
}

static int comm_test(void *req, int *done, ph_err *err)
{
	MPI_Request *r = req;
	MPI_Status st;
	int rc = MPI_Test(r, done, &st);
	if (rc != MPI_SUCCESS) {
		free(r);
		return mpi_fail(err, "MPI_Test", rc);
	}
	if (*done)
		free(r);
	return PH_OK;
}

/* One piece of an allgather: `len` bytes at offset `off` of every
 * process's `bytes`.  The receive type is `len` bytes stretched to an
 * extent of `bytes`, so MPI lays process p's piece at recv + p*bytes + off
 * with no staging copy and no int displacement (extents are MPI_Aint). */
static int allgather_piece(const char *send, char *recv, size_t bytes, size_t off, size_t len, ph_err *err)
{
	MPI_Datatype piece, spaced;
	int rc = MPI_Type_contiguous((int)len, MPI_BYTE, &piece);
	if (rc != MPI_SUCCESS)
		return mpi_fail(err, "MPI_Type_contiguous", rc);
	rc = MPI_Type_create_resized(piece, 0, (MPI_Aint)bytes, &spaced);
	MPI_Type_free(&piece);
	if (rc != MPI_SUCCESS)
		return mpi_fail(err, "MPI_Type_create_resized", rc);
	rc = MPI_Type_commit(&spaced);
	if (rc == MPI_SUCCESS)
		rc = MPI_Allgather(send ? send + off : MPI_IN_PLACE, send ? (int)len : 0, MPI_BYTE, recv + off, 1,
				   spaced, MPI_COMM_WORLD);
	MPI_Type_free(&spaced);
	return rc == MPI_SUCCESS ? PH_OK : mpi_fail(err, "MPI_Allgather", rc);
}

/* send may be this process's own slot of recv (recv + rank*bytes): MPI
 * forbids aliased buffers, so that goes as MPI_IN_PLACE. */
static int comm_allgather(const void *send, void *recv, size_t bytes, ph_err *err)
{
	if (!bytes)
		return PH_OK;
	int rank = 0;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	const char *s = send;
	if (s == (const char *)recv + (size_t)rank * bytes)
		s = NULL;
	for (size_t off = 0; off < bytes; off += PH_MPI_CHUNK) {
		size_t len = bytes - off < PH_MPI_CHUNK ? bytes - off : PH_MPI_CHUNK;
		int st = allgather_piece(s, recv, bytes, off, len, err);
		if (st)
			return st;
	}
	return PH_OK;
}

static int comm_bcast(void *buf, size_t bytes, int root, ph_err *err)
{
	char *b = buf;
	for (size_t off = 0; off < bytes; off += PH_MPI_CHUNK) {
		size_t len = bytes - off < PH_MPI_CHUNK ? bytes - off : PH_MPI_CHUNK;
		int rc = MPI_Bcast(b + off, (int)len, MPI_BYTE, root, MPI_COMM_WORLD);
		if (rc != MPI_SUCCESS)
			return mpi_fail(err, "MPI_Bcast", rc);
	}
	return PH_OK;
}

static int comm_max_int(int *v, ph_err *err)
{
	int rc = MPI_Allreduce(MPI_IN_PLACE, v, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
	return rc == MPI_SUCCESS ? PH_OK : mpi_fail(err, "MPI_Allreduce", rc);
}

static void comm_abort(int code)
{
	MPI_Abort(MPI_COMM_WORLD, code);
}

static const ph_comm_ops ops = {
	.struct_size = sizeof(ph_comm_ops),
	.init = comm_init,
	.finalize = comm_finalize,
	.allgather = comm_allgather,
	.bcast = comm_bcast,
	.max_int = comm_max_int,
	.abort = comm_abort,
	.isend = comm_isend,
	.irecv = comm_irecv,
	.test = comm_test,
};

const ph_comm_ops *ph_mpi_comm_ops(void);
const ph_comm_ops *ph_mpi_comm_ops(void)
{
	return &ops;
}
