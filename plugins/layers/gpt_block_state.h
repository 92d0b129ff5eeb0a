/* SPDX-License-Identifier: MIT */
/* What gpt_block.c and its CUDA twin gpt_block_cuda.cu share: the layernorm
 * epsilon, the dropout sites, and the state. */
#ifndef PH_LAYERS_GPT_BLOCK_STATE_H
#define PH_LAYERS_GPT_BLOCK_STATE_H

#include <stddef.h>

#include "attn_geom.h"
#include "moe_core.h"

#ifdef __cplusplus
extern "C" {
#endif

#define GPT_LN_EPS 1e-5f
#define GPT_SITE_ATTN 0x6770742d61747470ull   /* "gpt-attp" */
#define GPT_SITE_RESID1 0x6770742d72657331ull /* "gpt-res1" */
#define GPT_SITE_RESID2 0x6770742d72657332ull /* "gpt-res2" */

typedef struct {
	tf_attn_geom g; /* T, d, heads, rate, scale */
	int r;          /* mlp_ratio */
	int max_batch;  /* sizes the scratch */
	int moe;        /* mlp = moe: the state is a gpt_moe_state */
} gpt_state;

/* gpt_state and, for mlp = moe, the MoE's geometry (moe_core.h). */
typedef struct {
	gpt_state b;
	moe_geom mg;
} gpt_moe_state;

/* The backward's split column sums (bias and layernorm gradients,
 * cuda_ops.cuh's ph_colsum_ws_floats for the widest of d, 3d and rd):
 * two sums of GPT_REDUCE_SLICES partial rows each. */
#define GPT_REDUCE_SLICES 64
static inline size_t gpt_reduce_floats(size_t d, size_t r)
{
	const size_t wide = r * d > 3 * d ? r * d : 3 * d;
	return 2 * GPT_REDUCE_SLICES * wide;
}

/* Floats of device scratch for `batch` samples of d-wide rows, T long,
 * MLP r times wider, H heads: the backward's [R, d] and [R, rd] buffers,
 * then dP [H, T, T], twice with dropout, then the split sums' partials
 * (gpt_block.c's meta asks for it at max_batch; the twin carves the free
 * part of it at the call's batch). */
static inline size_t gpt_device_scratch_floats(size_t batch, size_t T, size_t d, size_t r, size_t H, int dropout)
{
	return batch * T * d * (7 + r) + H * T * T * (dropout ? 2 : 1) + gpt_reduce_floats(d, r);
}

/*
 * The backward's device scratch that is free while cuDNN's fused attention
 * (cudnn_sdpa.h, never with dropout) makes dqkv: gpt_block_cuda.cu's
 * layout at `batch` samples, as float offsets from the scratch's start and
 * counts.  Live then: dx1 [R, d] (the residual's gradient), dh [R, d]
 * (datt, cuDNN's input) and dqkv's first R * 3d floats, or its first half
 * where dqkv16 (cuDNN writes it in bf16 there).  Free: dbr (dropout's
 * alone), dh1 and dgu (spent), and everything past dqkv's used part: the
 * rest of dqkv, dP's place, the split sums' partials.  Three spans.
 */
typedef struct {
	size_t at, floats;
} gpt_scratch_span;

static inline int gpt_sdpa_backward_spans(size_t batch, size_t T, size_t d, size_t r, size_t H, int dqkv16,
					  gpt_scratch_span sp[3])
{
	const size_t n = batch * T * d, dqkv = 4 * n + n * r, used = dqkv16 ? 3 * n / 2 : 3 * n;
	const size_t end = gpt_device_scratch_floats(batch, T, d, r, H, 0);
	sp[0].at = n; /* dbr */
	sp[0].floats = n;
	sp[1].at = 3 * n; /* dh1, dgu */
	sp[1].floats = n + n * r;
	sp[2].at = dqkv + used;
	sp[2].floats = end - sp[2].at;
	return 3;
}

/* mlp = moe on the GPU: the MoE's device scratch (moe_device_scratch_floats
 * per sample) starts here, past the block's own at max_batch (an MLP
 * ratio of 0: the block has no dense MLP), 16-byte aligned for the
 * products. */
static inline size_t gpt_moe_scratch_at(const gpt_state *s)
{
	const size_t at = gpt_device_scratch_floats((size_t)s->max_batch, (size_t)s->g.T, (size_t)s->g.d, 0,
						    (size_t)s->g.H, s->g.rate > 0.0f);
	return (at + 3) / 4 * 4;
}

#ifdef __cplusplus
}
#endif
#endif
