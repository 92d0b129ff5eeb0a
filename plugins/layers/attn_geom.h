/* SPDX-License-Identifier: MIT */
/* tf_attn_geom: the geometry and dropout of one causal multi-head
 * self-attention, plain C (no BLAS), so that a CUDA twin's state can hold
 * it too.  Per sample:
 *   qkv [T, 3d]   columns: q (0..d), k (d..2d), v (2d..3d); head h owns
 *                 columns h*hd .. (h+1)*hd of each
 *   P   [H, T, T] softmax(q k^T / sqrt(hd)), causal (P[i][j] = 0 for j > i),
 *                 before dropout
 *   att [T, d]    heads concatenated: att[:, h*hd + c] = (drop(P_h) v_h)[:, c]
 * Dropout on P: element ((b*H + h)*T + i)*T + j of the micro-batch is kept
 * iff ph_rng_uniform(key, that index) >= rate, and scaled by 1/(1 - rate). */
#ifndef PH_LAYERS_ATTN_GEOM_H
#define PH_LAYERS_ATTN_GEOM_H

typedef struct {
	int T, d, H, hd;
	float rate;   /* 0: no dropout */
	float scale;  /* 1 / (1 - rate) */
} tf_attn_geom;

#endif
