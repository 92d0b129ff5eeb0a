/* SPDX-License-Identifier: MIT */
/* The engine: one worker thread per pipeline rank runs its lowered action
 * list; in-process links hand activations and gradients between chunks
 * without copies; the host owns every buffer. */
#ifndef PH_CORE_ENGINE_H
#define PH_CORE_ENGINE_H

#include "data.h"
#include "plan.h"
#include "weights.h"

typedef struct ph_engine ph_engine;

typedef struct {
	double loss_sum;    /* summed over targets */
	double correct;     /* correct predictions */
	int64_t targets;    /* targets counted */
} ph_stats;

/* Allocate every arena from the layers' meta and the plan's in-flight
 * counts, initialise parameters (counter-based, so the same for every
 * partition) and start the workers. */
int ph_engine_create(ph_engine **e, ph_model *m, ph_plan *p, const ph_config *c, ph_err *err);

/* One optimizer step on batch x [B, in] / y [B, targets_per_sample].
 * step is 0-based; lr from the schedule. */
int ph_engine_train_step(ph_engine *e, int64_t step, const float *x, const int32_t *y, double lr,
			 ph_stats *st, ph_err *err);

/* k steps from `step` on k batches one after the other in x and y, with
 * their rates lr[k]; each step's figures into st[k].  A no-flush schedule
 * (2bw, pipedream) runs them as one stream, its pipeline drained only at
 * the end (engine-stream.c); any other runs them one by one.  The bits are
 * those of k calls of ph_engine_train_step. */
int ph_engine_train_steps(ph_engine *e, int64_t step, int k, const float *x, const int32_t *y, const double *lr,
			  ph_stats *st, ph_err *err);

/* The most steps ph_engine_train_steps runs as one stream ([run] window),
 * 1 where the schedule drains every step or the stream is not built for
 * the run (GPUs, replicas, mpirun, a split backward). */
int ph_engine_window(const ph_engine *e);
/* For a no-flush schedule, one line saying which (nothing otherwise). */
void ph_engine_print_window(const ph_engine *e, FILE *f);
/* Under mpirun on GPUs: one line when the replicas' gradients go through
 * the host instead of NCCL, and why. */
void ph_engine_print_reduction(const ph_engine *e, FILE *f);

/* Forward-only pass over the first `count` samples of ds, through the
 * same pipeline. */
int ph_engine_eval(ph_engine *e, const ph_dataset *ds, int64_t count, ph_stats *st, ph_err *err);

/* The parameters as named tensors LAYER.PARAM, in layer order. */
int ph_engine_tensors(ph_engine *e, ph_tensor_ref **refs, int *n, ph_err *err);

/* The optimizer state as named tensors LAYER.PARAM.momentum (SGD),
 * LAYER.PARAM.adam_m / .adam_v (AdamW) or LAYER.PARAM.lion_m, pointing into the live arrays: write
 * them for a checkpoint, read into them to resume. */
int ph_engine_state_tensors(ph_engine *e, ph_tensor_ref **refs, int *n, ph_err *err);

/* After writing into the tensors of ph_engine_tensors or
 * ph_engine_state_tensors (an init file, a checkpoint): copy them to the
 * GPU.  Nothing to do on the CPU, where those are the live arrays. */
int ph_engine_upload_tensors(ph_engine *e, ph_err *err);

/* Under mpirun with each pipeline split over processes, every process
 * holds only its ranks' weights up to date: bring every layer's weights
 * and optimizer state to every process before ph_engine_tensors or
 * ph_engine_state_tensors are read for saving.  Every process calls it
 * (a collective); nothing to do otherwise. */
int ph_engine_gather(ph_engine *e, ph_err *err);

/* Bytes of activation memory rank holds: its chunks' slots (as many as the
 * plan keeps micro-batches in flight) and, with recomputation, the shared
 * work buffers; -1 when another process runs the rank. */
double ph_engine_activation_bytes(const ph_engine *e, int rank);

/* The GPUs this process's ranks (replicas included) run on, each once, in
 * rank order, and the device memory the process holds on each (the
 * device's mem_held: at the end of training, the run's peak).  phase[k]
 * (may be NULL): what it held after the first engine on that GPU opened
 * its ranks [0], made its parameters and optimizer state [1], and its
 * activations, links and batch [2].  *n = 0 on the CPU.  At most `max`. */
int ph_engine_gpu_memory(const ph_engine *e, int *ordinal, size_t *bytes, size_t (*phase)[3], int max, int *n,
			 ph_err *err);

/* --trace: record every op (compute, send, receive) of every rank with real
 * timestamps from now on, and write them as Chrome trace JSON. */
int ph_engine_trace(ph_engine *e, ph_err *err);
int ph_engine_write_trace(ph_engine *e, const char *path, ph_err *err);

/* Must every process run evaluation (under mpirun)?  Yes when a layer
 * shards its parameters over replicas in several processes: the experts
 * of process 0's replicas are not all in process 0.  (engine-shard.c) */
int ph_engine_eval_together(const ph_engine *e);

/* The figures layers reported (ph_group.report, and report_device, whose
 * figures it reads back from the GPUs first) since the last call, each
 * LAYER.KEY with its sum and count over the calls of every replica of
 * every process, sorted by name; *out is the caller's to free.  Every
 * process calls it (a collective under mpirun), between jobs.
 * (engine-group.c) */
typedef struct {
	char name[96];
	double sum, count;
} ph_report;
int ph_engine_reports(ph_engine *e, ph_report **out, int *n, ph_err *err);

void ph_engine_destroy(ph_engine *e);

#endif
