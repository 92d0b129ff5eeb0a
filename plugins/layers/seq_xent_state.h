/* SPDX-License-Identifier: MIT */
/* seq_xent's state, shared by seq_xent.c and its CUDA twin seq_xent_cuda.cu. */
#ifndef PH_LAYERS_SEQ_XENT_STATE_H
#define PH_LAYERS_SEQ_XENT_STATE_H

typedef struct {
	int T, V;      /* positions per sample, vocabulary */
	int max_batch; /* sizes the device scratch */
} seq_xent_state;

#endif
