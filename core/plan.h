/* SPDX-License-Identifier: MIT */
/* The plan: stage boundaries from the partitioner, per-rank action lists from
 * the schedule, lowered with sends and receives and proven deadlock-free. */
#ifndef PH_CORE_PLAN_H
#define PH_CORE_PLAN_H

#include <stdio.h>

#include "model.h"

typedef enum {
	PH_OP_F = PH_ACT_F,
	PH_OP_B = PH_ACT_B,
	PH_OP_I = PH_ACT_I,
	PH_OP_W = PH_ACT_W,
	PH_OP_RECV_ACT,   /* before F of chunk c > 0: activation from chunk c-1 */
	PH_OP_SEND_ACT,   /* after F of chunk c < last */
	PH_OP_RECV_GRAD,  /* before B/I of chunk c < last: gradient from chunk c+1 */
	PH_OP_SEND_GRAD,  /* after B/I of chunk c > 0 */
	/* The engine's own, in the stream of a no-flush schedule's steps
	 * (core/engine-stream.c); mb is the step within the stream: */
	PH_OP_STEP_DONE,  /* after the rank's last backward of the step */
	PH_OP_UPDATE      /* the rank's delayed update with that step's gradients */
} ph_op_kind;

typedef struct {
	uint8_t kind;
	int chunk;
	int mb;
} ph_op;

typedef struct {
	int ranks, v, nchunks, m;
	int *first;              /* [nchunks + 1]: first layer of each chunk */
	ph_action **actions;     /* [ranks]: the schedule's compute actions */
	int *nactions;
	ph_op **ops;             /* [ranks]: lowered lists */
	int *nops;
	int *slots;              /* [nchunks]: peak micro-batches in flight */
	/* ph_plan_build: will the engine run the steps as streams of [run]
	 * window steps (a no-flush schedule on the CPU, replicas and mpirun
	 * with whole pipelines included, a window's lists within one step's
	 * slots)?  When not, for a no-flush schedule, stream_why says why. */
	int streams;
	const char *stream_why;
	/* Set before ph_plan_set_actions, by whoever generated the lists:
	 * the schedule's name, for its refusals ("schedule NAME: ..."; NULL:
	 * "schedule: ...", the checker names it itself), and for a schedule
	 * that updates per micro-batch (PH_SCHED_UPDATE_PER_MB), each rank's
	 * weight versions K ([ranks], owned by the plan; NULL: none). */
	const char *sched_name;
	int *per_mb_versions;
} ph_plan;

/* Each rank's weight versions for schedule ops with config under shape,
 * when it updates per micro-batch (PH_SCHED_UPDATE_PER_MB without a
 * delayed update): a malloc'd [shape->ranks] for plan.per_mb_versions;
 * NULL with PH_OK when it does not. */
int ph_plan_per_mb_versions(const ph_schedule_ops *ops, const void *config, const ph_schedule_shape *shape,
			    int **out, ph_err *err);

/* Generate, partition, lower, validate.  Errors name the rule, the rank and
 * the position.  cost_fwd/cost_bwd: measured per-layer costs (seconds) for
 * [partition] cost = profile, else NULL (FLOPs from meta, or parameters). */
int ph_plan_build(ph_plan *p, const ph_model *m, const ph_config *c, const double *cost_fwd,
		  const double *cost_bwd, ph_err *err);

/* May a stage end after layer l, given [partition] cuts and the layer's cut. */
int ph_plan_can_cut(const ph_config *c, const ph_layer_cfg *l);

/* Can the model be cut into [run] stages x chunks pieces at all (chunks
 * within the schedule's limit per rank, a layer each, at most one
 * boundary per allowed cut)?  Checked by the plan, and
 * before the profiler measures, so that a job that cannot be cut is
 * refused at once. */
int ph_plan_check_cuttable(const ph_model *m, const ph_config *c, ph_err *err);

/* Can a schedule that updates after every micro-batch on its own rank
 * (PH_SCHED_UPDATE_PER_MB: pipedream) run this job?  Not with what a
 * step's end does across ranks: the global clip norm, the replicas' sums,
 * tied copies' sums, a pipeline split over processes.  Checked before the
 * profiler measures (so --plan refuses it too) and by the engine. */
int ph_plan_check_per_mb(const ph_model *m, const ph_config *c, ph_err *err);

/* Is first[0..stages] a valid cut of pb's layers: from 0 to n, no stage
 * empty, every boundary where pb->cut_after allows one?  The error names
 * the partitioner. */
int ph_plan_check_bounds(const char *partitioner, const ph_partition_problem *pb, const int *first, ph_err *err);

/* Check compute lists and lower them (exposed for tests and for schedules
 * read from files). */
int ph_plan_set_actions(ph_plan *p, ph_action **lists, const int *counts, ph_err *err);

/* Activation bytes chunk k holds on replica 0's devices: the activation
 * regions of the engine's own buffer table (core/engine-layout.h), so the
 * estimate is what the engine allocates; -1 when out of memory. */
double ph_plan_activation_bytes(const ph_plan *p, const ph_model *m, const ph_config *c, int k);

/* Does layer l, a tied copy, share its source's memory?  When the copy is
 * the layer's one tensor and the source an earlier layer's on the same
 * rank, neither sharded, the engine gives the copy the source's weights
 * and optimizer state and keeps only its gradient (engine.c).  The tie's
 * index in m->ties, or -1. */
int ph_plan_shared_tie(const ph_plan *p, const ph_model *m, int l);
/* The bytes of weights and optimizer state chunk k's shared copies do not
 * hold: what the memory estimates take off. */
double ph_plan_shared_bytes(const ph_plan *p, const ph_model *m, const ph_config *c, int k);
/* The rank that computes layer l (chunk c runs on rank c mod ranks). */
int ph_plan_layer_rank(const ph_plan *p, int l);

/* The plan of k consecutive steps run as one stream, for a schedule that
 * declares no flush (PH_SCHED_NO_FLUSH): the schedule's order for k * m
 * micro-batches (micro-batch n is step n / m's n % m), lowered as any plan;
 * out->m is k * m.  --simulate runs it to show the steady state, and the
 * engine runs it to train k steps without draining between them.  Free
 * with ph_plan_free. */
int ph_plan_stream(const ph_plan *p, const ph_config *c, int k, ph_plan *out, ph_err *err);

void ph_plan_print(FILE *f, const ph_plan *p, const ph_model *m, const ph_config *c);
void ph_plan_free(ph_plan *p);

/* "F3", "1B0" (chunk prefix when v > 1) */
void ph_action_str(const ph_action *a, int v, char *buf, size_t len);

#endif
