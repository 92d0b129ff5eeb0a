/* SPDX-License-Identifier: MIT */
/* maxpool2d's state, shared by maxpool2d.c and its CUDA twin maxpool2d_cuda.cu. */
#ifndef PH_LAYERS_MAXPOOL2D_STATE_H
#define PH_LAYERS_MAXPOOL2D_STATE_H

typedef struct {
	int C, H, W;      /* input */
	int size, stride; /* window */
	int OH, OW;       /* output */
} maxpool2d_state;

#endif
