/* SPDX-License-Identifier: MIT */
/* layernorm's state, shared by layernorm.c and its CUDA twin layernorm_cuda.cu. */
#ifndef PH_LAYERS_LAYERNORM_STATE_H
#define PH_LAYERS_LAYERNORM_STATE_H

#include <stdint.h>

#include <pipehost/plugin.h>

typedef struct {
	ph_shape shape;
	int64_t rows; /* per sample: the product of all dimensions but the last */
	int C;        /* the last dimension, normalised over */
	float eps;
} layernorm_state;

#endif
