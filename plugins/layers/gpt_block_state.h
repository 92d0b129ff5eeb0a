/* What gpt_block.c and its CUDA twin gpt_block_cuda.cu share: the layernorm
 * epsilon, the dropout sites, and the geometry as plain values (the C
 * state's tf_attn_geom needs cblas.h, which the twin does not include). */
#ifndef PH_LAYERS_GPT_BLOCK_STATE_H
#define PH_LAYERS_GPT_BLOCK_STATE_H

#include <pipehost/plugin.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GPT_LN_EPS 1e-5f
#define GPT_SITE_ATTN 0x6770742d61747470ull   /* "gpt-attp" */
#define GPT_SITE_RESID1 0x6770742d72657331ull /* "gpt-res1" */
#define GPT_SITE_RESID2 0x6770742d72657332ull /* "gpt-res2" */

typedef struct {
	int T, d, H, hd; /* sequence, model width, heads, head width */
	int r;           /* mlp_ratio */
	int max_batch;
	float rate;      /* dropout, as (float)option */
	float scale;     /* (float)(1 / (1 - option)) */
} gpt_block_dims;

#ifdef PH_WITH_CUDA
int gpt_block_cuda_forward(const gpt_block_dims *g, const ph_ctx *ctx, float *const *params, const float *x,
			   float *y, ph_err *err);
/* grads NULL: the input half only; dx NULL: the weight half only. */
int gpt_block_cuda_backward(const gpt_block_dims *g, const ph_ctx *ctx, float *const *params, float *const *grads,
			    const float *x, const float *dy, float *dx, ph_err *err);
#endif

#ifdef __cplusplus
}
#endif
#endif
