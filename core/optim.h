/* SPDX-License-Identifier: MIT */
/* Optimizers (SGD with momentum, AdamW, Lion) and the learning-rate schedule. */
#ifndef PH_CORE_OPTIM_H
#define PH_CORE_OPTIM_H

#include <stdint.h>

enum { PH_OPTIM_SGD = 0, PH_OPTIM_ADAMW = 1, PH_OPTIM_LION = 2 }; /* [optimizer] type's choices, in order */
enum { PH_LR_CONSTANT = 0, PH_LR_COSINE = 1 };

typedef struct {
	int type;               /* PH_OPTIM_* */
	double lr;              /* peak learning rate */
	double momentum;        /* SGD */
	int nesterov;           /* SGD */
	double beta1, beta2, eps; /* AdamW; Lion reads beta1 and beta2 */
	double weight_decay;    /* SGD: L2 added to the gradient; AdamW: decoupled */
	int64_t warmup;         /* steps of linear warm-up from lr/warmup to lr */
	int lr_schedule;        /* PH_LR_* after warm-up */
	double min_lr;          /* cosine floor */
	int64_t total_steps;    /* for the cosine */
	double clip;            /* global gradient-norm clip; 0 = off */
} ph_optim_config;

/* Learning rate for step t = 0, 1, ... */
double ph_lr_at(const ph_optim_config *c, int64_t t);

/* Optimizer state floats per parameter: 1 for SGD (momentum) and Lion (its
 * moment), 2 for AdamW. */
int ph_optim_state_per_param(const ph_optim_config *c);

/* Update n weights in place.  t is the 1-based step count (Adam's bias
 * correction); lr from ph_lr_at; g already scaled (clipping); s holds
 * state_per_param * n floats, zero at the start; decay = 0 exempts the tensor
 * from weight decay.  Deterministic: a plain loop, same order every time. */
void ph_optim_update(const ph_optim_config *c, int64_t t, double lr, float *w,
		     const float *g, float *s, int64_t n, int decay);

/* The factor clipping multiplies every gradient by, for the gradients'
 * global sum of squares: torch.nn.utils.clip_grad_norm_'s
 * min(1, clip / (norm + 1e-6)); 1 when clip is 0 (off). */
double ph_clip_scale(double clip, double sumsq);

/* Sum of squares of g in double, in index order. */
double ph_sumsq(const float *g, int64_t n);

#endif
