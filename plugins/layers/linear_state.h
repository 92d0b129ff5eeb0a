/* SPDX-License-Identifier: MIT */
/* linear's state, shared by linear.c and its CUDA twin linear_cuda.cu. */
#ifndef PH_LAYERS_LINEAR_STATE_H
#define PH_LAYERS_LINEAR_STATE_H

#include <stdint.h>

#include <pipehost/plugin.h>

typedef struct {
	ph_shape in, out;
	int64_t lead; /* rows per sample: product of all but the last input dim */
	int in_f;     /* input features */
	int units;    /* output features */
	int bias;
} linear_state;

#endif
