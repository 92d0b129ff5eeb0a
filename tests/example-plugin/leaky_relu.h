/* SPDX-License-Identifier: MIT */
/* leaky_relu's state: what leaky_relu.c makes and its CUDA twin
 * leaky_relu_cuda.cu reads, so both include it. */
#ifndef LEAKY_RELU_H
#define LEAKY_RELU_H

#include <pipehost/plugin.h>

typedef struct {
	float slope;
	ph_shape shape;
} leaky;

#endif
