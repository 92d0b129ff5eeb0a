/* SPDX-License-Identifier: MIT */
/* One chunk's buffer layout, sizes first: a table of regions (llm.c's
 * pattern) that the engine carves out of one allocation per chunk
 * (engine-layout.c) and the plan sums for its memory estimate (plan.c), so
 * the two cannot drift apart.
 *
 * A chunk holds `nslots` activation slots (the plan's peak in-flight count,
 * one more under recompute = except_last).  A slot holds, for one
 * micro-batch, every layer's output and saved bytes, the gradient of the
 * chunk's output (not the last chunk), and where the schedule or the
 * placement needs them: each inner layer's output gradient from I to W
 * (split backward), a copy of the input (split backward, and an input from
 * another GPU or process) and the input gradient before it leaves for
 * another GPU or process.  Under recompute a lean slot keeps only the last
 * layer's output; the chunk's work buffers (every layer's output and saved
 * bytes) are shared by the lean slots.  Besides: one scratch buffer and two
 * ping-pong gradient buffers for the backward. */
#ifndef PH_CORE_ENGINE_LAYOUT_H
#define PH_CORE_ENGINE_LAYOUT_H

#include <stddef.h>

#include <pipehost/plugin.h>

#include "model.h"
#include "plan.h"

typedef enum {
	PH_REG_WORK_Y,     /* recompute: layer's output, shared by lean slots */
	PH_REG_WORK_SAVED, /* recompute: layer's saved bytes, likewise */
	PH_REG_SCRATCH,    /* the chunk's scratch (largest of its layers) */
	PH_REG_GBUF,       /* backward ping-pong gradient buffer `index` (0, 1) */
	PH_REG_Y,          /* slot's output of layer `index` */
	PH_REG_SAVED,      /* slot's saved bytes of layer `index` */
	PH_REG_DY,         /* split backward: output gradient of inner layer `index` */
	PH_REG_X_OWN,      /* own copy of the chunk's input */
	PH_REG_DX_OWN,     /* the input gradient before it leaves */
	PH_REG_DY_OUT      /* the gradient of the chunk's output */
} ph_region_kind;

typedef struct {
	ph_region_kind kind;
	int slot;          /* -1: the chunk's own */
	int index;         /* layer within the chunk, or gradient buffer */
	int activation;    /* counted as activation memory */
	size_t bytes;
	size_t offset;     /* in the chunk's arena */
} ph_region;

typedef struct {
	int nslots;
	int recompute;     /* [run] recompute (PH_RECOMPUTE_*): NO = no work
			    * buffers and no lean slots */
	int in_place;      /* layers may write dx over x (ph_layout_dx_over_x) */
	ph_region *reg;
	int nreg;
	size_t arena_bytes;      /* every region, each aligned */
	size_t activation_bytes; /* the regions counted as activations */
} ph_chunk_layout;

/* Chunk k's layout on the device of replica-local ordinals `ordinal`
 * ([ranks]: -1 = CPU; NULL = every rank on the CPU) under plan p.  The
 * process split (mpirun) comes from c->comm. */
int ph_chunk_layout_make(ph_chunk_layout *lay, const ph_plan *p, const ph_model *m, const ph_config *c,
			 const int *ordinal, int k, ph_err *err);
void ph_chunk_layout_free(ph_chunk_layout *lay);

/* Is slot s a lean one (recompute)?  Under except_last the last slot
 * keeps everything, for the last micro-batch. */
int ph_chunk_layout_lean(const ph_chunk_layout *lay, int s);

/* Does layer l of a chunk starting at layer a write its input gradient
 * over its input (PH_LAYER_DX_OVER_X after a PH_LAYER_BACKWARD_NO_Y
 * layer)?  Its input is then the layer before's output in the slot, so
 * not the chunk's first layer; `in_place` is the layout's: 0 under a split
 * backward, whose I half keeps each layer's output gradient for W, and
 * under PIPEHOST_GRAD_IN_PLACE=0.  The backward hands the gradient over in
 * that memory, and the ping-pong buffers need no room for it. */
static inline int ph_layout_dx_over_x(int in_place, const ph_model *m, int a, int l)
{
	return in_place && l > a && (m->layers[l].ops->flags & PH_LAYER_DX_OVER_X) &&
	       (m->layers[l - 1].ops->flags & PH_LAYER_BACKWARD_NO_Y);
}

#endif
