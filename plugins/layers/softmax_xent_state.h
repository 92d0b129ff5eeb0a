/* SPDX-License-Identifier: MIT */
/* softmax_xent's state, shared by softmax_xent.c and its CUDA twin
 * softmax_xent_cuda.cu. */
#ifndef PH_LAYERS_SOFTMAX_XENT_STATE_H
#define PH_LAYERS_SOFTMAX_XENT_STATE_H

typedef struct {
	int K; /* classes */
} softmax_xent_state;

#endif
