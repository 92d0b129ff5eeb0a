/* SPDX-License-Identifier: MIT */
/* flatten's state, shared by flatten.c and its CUDA twin flatten_cuda.cu. */
#ifndef PH_LAYERS_FLATTEN_STATE_H
#define PH_LAYERS_FLATTEN_STATE_H

#include <stdint.h>

#include <pipehost/plugin.h>

typedef struct {
	int64_t numel; /* per sample */
} flatten_state;

#endif
