/* SPDX-License-Identifier: MIT */
/* Before the engine allocates: does the run fit in the memory this process
 * may use?  The kernel's OOM killer ends a process without a word, so a run
 * the plan already knows is too big is refused with both figures. */
#ifndef PH_CORE_MEMCHECK_H
#define PH_CORE_MEMCHECK_H

#include "plan.h"

/* What this process may still allocate, in bytes, and which limit says so
 * ("the cgroup memory limit (memory.max)", "ulimit -v", ...).  Returns 0
 * when no limit is known. */
int ph_mem_available(double *bytes, char *which, size_t len);

/* Host memory the engine will allocate in this process for the plan (the
 * parameters, gradients, optimizer state and activations --plan estimates,
 * for its replicas and its share of a split pipeline). */
double ph_mem_estimate(const ph_plan *p, const ph_model *m, const ph_config *c);

/* 0 under PIPEHOST_MEMCHECK=0: no check before allocating (here, nor
 * cost = auto's fit check before measuring, profile.c). */
int ph_memcheck_enabled(void);

/* Under ulimit -v (which counts mappings, not memory touched): do the
 * BLAS threads' buffers (OpenBLAS maps 128 MiB for each) and `model_bytes`
 * fit the address space left?  Asked before any BLAS call, since
 * OpenBLAS, denied a buffer, retries forever.  `ranks`: the pipeline's.
 * 1 when they fit or no ulimit -v is set; *need, *room (-1: no limit) and
 * *threads say by how much. */
int ph_mem_blas_fits(const ph_config *c, int ranks, double model_bytes, double *need, double *room, long *threads);

/* The same as an error naming the figures and what to change
 * (ph_memcheck_run calls it after the model's own check). */
int ph_memcheck_blas(const ph_config *c, int ranks, double model_bytes, ph_err *err);

/* Refuse a run whose estimate exceeds what this process may use, naming
 * both and what to change.  PIPEHOST_MEMCHECK=0 skips it. */
int ph_memcheck_run(const ph_plan *p, const ph_model *m, const ph_config *c, ph_err *err);

#endif
