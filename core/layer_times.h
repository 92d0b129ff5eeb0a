/* SPDX-License-Identifier: MIT */
/* Per-layer wall times inside real training steps, to hold the profiler
 * ([partition] cost = profile, profile.h) against what the layers cost
 * while the pipeline runs.  Off unless PIPEHOST_LAYER_TIMES=FILE names a
 * file (bench/profile-vs-step.sh): then every training-mode forward and
 * backward call from step `from_step` on is timed (CLOCK_MONOTONIC and the
 * thread's CPU clock around the layer's hook in layer_call.c) and, after
 * training, FILE gets one line per layer:
 *     layer INDEX NAME TYPE FWD_MS BWD_MS CALLS FWD_CPU_MS BWD_CPU_MS
 * the medians over the calls (a split backward's I and W add up; a
 * recomputed forward counts as a forward).  Timing never changes what a
 * layer computes, so results stay bitwise the same with it on. */
#ifndef PH_CORE_LAYER_TIMES_H
#define PH_CORE_LAYER_TIMES_H

#include <stdint.h>
#include <stdio.h>

#include <pipehost/plugin.h>

#include "model.h"

typedef struct ph_layer_times ph_layer_times;

/* Set while timing: layer_call.c reads it on every call. */
extern ph_layer_times *ph_layer_times_active;

enum { PH_LT_FWD = 0, PH_LT_BWD = 1, PH_LT_BWD_I = 2, PH_LT_BWD_W = 3 };

/* Start timing nlayers layers from training step from_step on. */
int ph_layer_times_start(int nlayers, uint64_t from_step, ph_err *err);
/* One call of layer ctx->layer took `seconds` (called by layer_call.c). */
void ph_layer_times_add(const ph_ctx *ctx, int kind, double seconds, double cpu_seconds);
/* Median forward and backward seconds of layer i, wall (cpu 0) or the
 * calling thread's CPU time (cpu 1); 0 calls: -1. */
int ph_layer_times_get(int i, int cpu, double *fwd_s, double *bwd_s, int *calls);
/* Stop timing and free. */
void ph_layer_times_stop(void);
double ph_layer_times_now(void);
double ph_layer_times_cpu(void);

/* For main(): start timing when PIPEHOST_LAYER_TIMES is set (from step 3,
 * once every buffer has been touched); after training, write its file. */
int ph_layer_times_from_env(int nlayers, ph_err *err);
int ph_layer_times_finish(const ph_model *m, ph_err *err);

#endif
