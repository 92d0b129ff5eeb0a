/* SPDX-License-Identifier: MIT */
/* dropout's state, shared by dropout.c and its CUDA twin dropout_cuda.cu. */
#ifndef PH_LAYERS_DROPOUT_STATE_H
#define PH_LAYERS_DROPOUT_STATE_H

#include <stdint.h>

#include <pipehost/plugin.h>

typedef struct {
	ph_shape shape;
	int64_t numel; /* per sample */
	float rate;    /* threshold on the uniform draw */
	float scale;   /* 1 / (1 - rate) */
} dropout_state;

#endif
