/* SPDX-License-Identifier: MIT */
/*
 * The experts: each the block's MLP, d -> h gelu -> d, run over its
 * capacity slots (moe_core.h).  Expert-side buffers hold E blocks of
 * `rows` = G C rows each; block q = j El + l came from replica j for local
 * expert l (global expert rank El + l).  Empty slots are zero rows: they
 * cost their FLOPs (the meta counts them) and their output is never
 * combined, so their gradient rows are zero and add nothing.
 * Weight gradients accumulate block by block in q order: fixed.
 */
#include <string.h>

#include <cblas.h>
#include "moe_core.h"
#include "transformer_ops.h"

void moe_experts_forward(const moe_geom *g, const ph_ctx *ctx, int rows, const moe_params *p,
			 const float *xin, float *u, float *a, float *out)
{
	const int d = g->d, h = g->h, E = g->E, El = E / moe_group_size(ctx);
	const int rank = moe_group_rank(ctx);
	const float *b1 = p->biases, *b2 = p->biases + (size_t)E * h;
	for (int q = 0; q < E; q++) {
		const int l = q % El, e = rank * El + l;
		const size_t off = (size_t)q * rows;
		const float *w1 = p->w1 + (size_t)l * h * d, *w2 = p->w2 + (size_t)l * d * h;
		float *uq = u + off * h, *oq = out + off * d;
		/* u [rows, h] = xin [rows, d] w1^T + b1;  out [rows, d] = gelu(u) w2^T + b2 */
		tf_bias_preload(uq, b1 + (size_t)e * h, rows, h);
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, h, d, 1.0f, xin + off * d,
			    d, w1, d, 1.0f, uq, h);
		tf_gelu_forward(uq, a, (int64_t)rows * h);
		tf_bias_preload(oq, b2 + (size_t)e * d, rows, d);
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, d, h, 1.0f, a, h, w2, h,
			    1.0f, oq, d);
	}
}

void moe_experts_backward(const moe_geom *g, const ph_ctx *ctx, int rows, const moe_params *p,
			  const moe_grads *gr, const float *xin, const float *u, const float *dout,
			  float *a, float *dh, float *dxin)
{
	const int d = g->d, h = g->h, E = g->E, El = E / moe_group_size(ctx);
	const int rank = moe_group_rank(ctx);
	for (int q = 0; q < E; q++) {
		const int l = q % El, e = rank * El + l;
		const size_t off = (size_t)q * rows;
		const float *w1 = p->w1 + (size_t)l * h * d, *w2 = p->w2 + (size_t)l * d * h;
		const float *uq = u + off * h, *dq = dout + off * d, *xq = xin + off * d;
		if (gr) {
			/* dw2 [d, h] += dout^T gelu(u);  db2 += colsum dout */
			tf_gelu_forward(uq, a, (int64_t)rows * h);
			cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, d, h, rows, 1.0f, dq, d,
				    a, h, 1.0f, gr->w2 + (size_t)l * d * h, h);
			tf_colsum_add(gr->biases + (size_t)E * h + (size_t)e * d, dq, rows, d);
		}
		/* dh [rows, h] = dout w2, then * gelu'(u) */
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, h, d, 1.0f, dq, d, w2, h,
			    0.0f, dh, h);
		tf_gelu_backward(uq, dh, dh, (int64_t)rows * h);
		if (gr) {
			/* dw1 [h, d] += du^T xin;  db1 += colsum du */
			cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, h, d, rows, 1.0f, dh, h,
				    xq, d, 1.0f, gr->w1 + (size_t)l * h * d, d);
			tf_colsum_add(gr->biases + (size_t)e * h, dh, rows, h);
		}
		/* dxin [rows, d] = du w1 */
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, d, h, 1.0f, dh, h, w1, d,
			    0.0f, dxin + off * d, d);
	}
}
