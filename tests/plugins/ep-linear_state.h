/* SPDX-License-Identifier: MIT */
/* ep_linear's state and buffer geometry, shared by ep-linear.c and its
 * CUDA twin ep-linear_cuda.cu.  Buffers [E][C][row], row = 1 + 2 D:
 * [used, x (D), dy or product (D)]; sample i of a micro-batch whose first
 * sample is number `base` of the whole batch goes to expert (base + i) mod
 * E, into that expert's slot i / E (the samples before it with the same
 * expert: every E-th). */
#ifndef EP_LINEAR_STATE_H
#define EP_LINEAR_STATE_H

#include <stddef.h>

#include <pipehost/plugin.h>

typedef struct {
	int E, D, C;
	ph_shape in;
} ep_state;

static inline size_t ep_row(const ep_state *s)
{
	return 1 + 2 * (size_t)s->D;
}

static inline size_t ep_buf_floats(const ep_state *s)
{
	return (size_t)s->E * s->C * ep_row(s);
}

/* (base mod E): the expert of the micro-batch's first sample */
static inline int ep_base(const ep_state *s, const ph_ctx *ctx)
{
	return (int)((ctx->microbatch * (uint64_t)s->C) % (uint64_t)s->E);
}

#endif
