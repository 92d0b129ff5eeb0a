/* SPDX-License-Identifier: MIT */
/* The memory a plan's chunk holds, in bytes, part by part (plan-memory.c). */
#ifndef PH_CORE_PLAN_MEMORY_H
#define PH_CORE_PLAN_MEMORY_H

#include "plan.h"

typedef struct {
	double params;         /* 4 B a parameter */
	double grads;          /* the same */
	double optimizer;      /* 4 B a parameter a state slot (SGD 1, AdamW 2) */
	int versions;          /* weight versions the rank keeps (1: synchronous) */
	double older_versions; /* the versions past the live weights */
	double second_grads;   /* a stream's delayed update: the next step's gradients */
	double shared;         /* taken off: what a tied copy shares with its source */
	double activations;    /* the engine's own buffer table (ph_plan_activation_bytes) */
	double scratch;        /* the largest scratch_bytes of the chunk's layers */
	double total;          /* the sum: --plan's est. MiB */
} ph_chunk_mem;

/* Chunk k of p (built: bounds, slots and streams decided).  PH_ENOMEM
 * when the engine's buffer table could not be made to count the
 * activations (out->activations and out->total are then -1): never a
 * figure short of them. */
int ph_plan_chunk_mem(const ph_plan *p, const ph_model *m, const ph_config *c, int k, ph_chunk_mem *out);

#endif
