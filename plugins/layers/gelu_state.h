/* SPDX-License-Identifier: MIT */
/* gelu's state, shared by gelu.c and its CUDA twin gelu_cuda.cu. */
#ifndef PH_LAYERS_GELU_STATE_H
#define PH_LAYERS_GELU_STATE_H

#include <stdint.h>

#include <pipehost/plugin.h>

typedef struct {
	ph_shape shape;
	int64_t numel; /* per sample */
} gelu_state;

#endif
