/* SPDX-License-Identifier: MIT */
/*
 * cudnn_sdpa.h: the causal attention core through cuDNN's fused flash
 * attention (cudnn_sdpa.cu), for gpt_block_cuda.cu.  A switch until a GPU
 * has timed it against flash_attention.cuh's kernels: PIPEHOST_ATTN_CUDNN=1
 * (read at each call, so a test takes both paths in one process; =2
 * takes cuDNN's non-deterministic backward, for timing).
 *
 * Same tensors as ph_flash_forward / ph_flash_backward, so the two paths
 * mix freely (a forward of one, the backward of the other):
 *   qkv  [B, T, 3d] fp32 (the saved projection; rounded to bf16 here)
 *   att  [B, T, d]  fp32, or bf16 where att16
 *   L2   [B, H, T]  each row's log2 softmax denominator (cuDNN's natural
 *                   log statistic is converted on the way out and back)
 *   datt [B, T, d]  fp32;  dqkv [B, T, 3d] fp32, or bf16 where dqkv16
 * No dropout: a call with dropout keeps our kernels, whose mask is the
 * CPU's bit for bit.
 *
 * Scratch: the caller names the free device memory it has (up to four
 * spans); the bf16 copies, the statistic, a copy of att or dqkv where it
 * is not 16-byte aligned (cuDNN's need; saved regions are 8-aligned where
 * B*T is odd) and cuDNN's workspace are placed in it (sdpa_place.h), and a
 * call that does not fit fails with the sizes (PH_ENOMEM), as does a shape
 * cuDNN declines (PH_EUNSUPPORTED, with cuDNN's words) or a build without
 * cudnn-frontend (configure --with-cudnn-frontend=DIR).
 */
#ifndef PH_LAYERS_CUDNN_SDPA_H
#define PH_LAYERS_CUDNN_SDPA_H

#include <stddef.h>

#include <pipehost/cuda.h>

#include "sdpa_place.h" /* ph_sdpa_span: free device memory a call may use */

/* Whether PIPEHOST_ATTN_CUDNN asks for this path: 1 ("1": with cuDNN's
 * deterministic backward, so runs repeat bit for bit), 2 ("2": its default
 * backward, which is not, to time what determinism costs), else 0. */
int ph_sdpa_requested(void);

int ph_sdpa_forward(cudaStream_t st, int B, int T, int H, int hd, const float *qkv, void *att, int att16,
		    float *L2, const ph_sdpa_span *work, int nwork, ph_err *err);

int ph_sdpa_backward(cudaStream_t st, int B, int T, int H, int hd, const float *qkv, const float *L2,
		     const void *att, int att16, const float *datt, void *dqkv, int dqkv16, const ph_sdpa_span *work,
		     int nwork, ph_err *err);

/* ---- between cudnn_sdpa.cu and cudnn_sdpa_graph.cpp ---- */

/* The tensors' uids: the forward's 1..5, the backward's 1..9. */
enum { PH_SDPA_Q = 1, PH_SDPA_K, PH_SDPA_V, PH_SDPA_O, PH_SDPA_STATS, PH_SDPA_DO, PH_SDPA_DQ, PH_SDPA_DK, PH_SDPA_DV };

/* The calling thread's built graph of one kind (0 the forward, 1 the
 * deterministic backward, 2 the default one) and shape, made on first use,
 * bound to stream st; *ws_bytes its workspace. */
int ph_sdpa_graph(cudaStream_t st, int kind, int B, int T, int H, int hd, const void **graph, size_t *ws_bytes,
		  ph_err *err);

/* Runs it on the stream given last: ptrs[uid] for each of its uids. */
int ph_sdpa_execute(const void *graph, void *const *ptrs, void *ws, ph_err *err);

#endif
