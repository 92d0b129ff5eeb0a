/* SPDX-License-Identifier: MIT */
/* relu's state, shared by relu.c and its CUDA twin relu_cuda.cu. */
#ifndef PH_LAYERS_RELU_STATE_H
#define PH_LAYERS_RELU_STATE_H

#include <stdint.h>

#include <pipehost/plugin.h>

typedef struct {
	ph_shape shape;
	int64_t numel; /* per sample */
} relu_state;

#endif
