/* SPDX-License-Identifier: MIT */
/* The end of a training step on a rank's GPU (core/cuda/optimizer.cu): the
 * optimizer update and the clip norm's sums of squares, one tensor at a
 * time or many per launch.
 *
 * Why many: GPT-2 small has 88 parameter tensors, and one launch per
 * tensor for the update, and two for its sum of squares, is some 260
 * launches a step, a few microseconds of host time each, while the GPU
 * waits (the clip norm needs every gradient, the update needs the norm).
 * The batched forms give every tensor the bits its own launch gives: the
 * update is element-wise, and each tensor's sum of squares keeps its own
 * blocks, strides and trees; only where the work sits in the grid moves.
 */
#ifndef PH_CUDA_OPTIMIZER_H
#define PH_CUDA_OPTIMIZER_H

#include <cuda_runtime.h>
#include <stdint.h>

#include <pipehost/plugin.h>

extern "C" {
#include "optim.h"
}

/* One tensor: where clip != 1, g = (float)(g * clip) (the product in
 * double), then ph_optim_update's arithmetic on w and the state s (AdamW:
 * m = s, v = s + n; SGD: the momentum), and g zeroed; all in one kernel on
 * stream st. */
int ph_cuda_optim_update(cudaStream_t st, const ph_optim_config *c, int64_t t, double lr, double clip, float *w,
			 float *g, float *s, int64_t n, int decay, ph_err *err);

/* The tensors' descriptions live on the GPU; a rank keeps them (and the
 * partial sums) between steps and uploads them again only when they
 * change, which in training they do not. */
typedef struct ph_optim_many ph_optim_many;

int ph_optim_many_open(ph_optim_many **out, ph_err *err);
/* After the stream has drained. */
void ph_optim_many_close(ph_optim_many *m);

/* ph_cuda_optim_update for tensors k = 0 .. count-1 (w[k], g[k], s[k],
 * n[k], decay[k]) in one launch. */
int ph_optim_many_update(ph_optim_many *m, cudaStream_t st, const ph_optim_config *c, int64_t t, double lr,
			 double clip, float *const *w, float *const *g, float *const *s, const int64_t *n,
			 const int *decay, int count, ph_err *err);

/* out[k] (device memory) = sum(g[k]^2) in double, the bits the backend's
 * one-tensor sumsq gives, for k = 0 .. count-1, in two launches. */
int ph_optim_many_sumsq(ph_optim_many *m, cudaStream_t st, const float *const *g, const int64_t *n, int count,
			double *out, ph_err *err);

#endif
