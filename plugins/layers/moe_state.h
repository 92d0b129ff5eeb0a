/* SPDX-License-Identifier: MIT */
/* What moe.c and its CUDA twin moe_cuda.cu share: the layer's state. */
#ifndef PH_LAYERS_MOE_STATE_H
#define PH_LAYERS_MOE_STATE_H

#include "moe_core.h"

enum { MOE_P_GATE, MOE_P_W1, MOE_P_W2, MOE_P_BIAS, MOE_P_COUNT };

typedef struct {
	moe_geom g;
	int residual;   /* y = x + moe(x) */
	int max_batch;
	int ndim;       /* the input's: [T, d] or [d] */
} moe_state;

#endif
