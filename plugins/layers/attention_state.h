/* SPDX-License-Identifier: MIT */
/* attention's state, shared by attention.c and its CUDA twin attention_cuda.cu. */
#ifndef PH_LAYERS_ATTENTION_STATE_H
#define PH_LAYERS_ATTENTION_STATE_H

#include "attn_geom.h"

typedef struct {
	tf_attn_geom g;
	int max_batch; /* sizes the scratch */
} attention_state;

#endif
