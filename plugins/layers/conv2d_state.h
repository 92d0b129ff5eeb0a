/* SPDX-License-Identifier: MIT */
/* conv2d's state, shared by conv2d.c and its CUDA twin conv2d_cuda.cu. */
#ifndef PH_LAYERS_CONV2D_STATE_H
#define PH_LAYERS_CONV2D_STATE_H

#include <stddef.h>

#include <pipehost/plugin.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
	int C, H, W;     /* input */
	int F, k, s, p;
	int OH, OW;      /* output */
	int ckk;         /* rows of the column matrix: C*k*k */
	int ohw;         /* columns per sample of the column matrix: P = OH*OW */
	int bias;
	int group;       /* G: samples per gemm, 1..max(max_batch, 1) */
	size_t scratch;  /* bytes: (CKK + F) * G * P floats */
	void *cuda;      /* conv2d_cuda.cu's cuDNN descriptors, made on the first
			  * CUDA call (one rank thread uses a state); NULL before */
} conv2d_state;

/* cuDNN workspace on a GPU, the layer's device scratch: algorithms that
 * need more are passed over. */
#define CONV2D_CUDA_WORKSPACE ((size_t)64 << 20)

#ifdef __cplusplus
}
#endif
#endif
