/* SPDX-License-Identifier: MIT */
/* embedding's state, shared by embedding.c and its CUDA twin embedding_cuda.cu. */
#ifndef PH_LAYERS_EMBEDDING_STATE_H
#define PH_LAYERS_EMBEDDING_STATE_H

typedef struct {
	int T, vocab, dim; /* ids per sample, token ids, embedding width */
} embedding_state;

#endif
