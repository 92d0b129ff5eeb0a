/* SPDX-License-Identifier: MIT */
/*
 * gpt_block_cuda.cu: the CUDA twin of gpt_block.c, one GPT-2 pre-LN block.
 *
 *   x [B, T, d] -> y [B, T, d];  R = B*T rows, n = R*d, rd = r*d
 *   h1  = ln1(x)                                  [R, d]
 *   qkv = h1 Wqkv^T + b_qkv                       [R, 3d]
 *   P, att = causal attention core (attention_ops.cuh)
 *   x1  = x + drop1(att Wproj^T + b_proj)         [R, d]
 *   h2  = ln2(x1)
 *   u   = h2 Wfc^T + b_fc                         [R, rd]
 *   g   = gelu(u)
 *   y   = x1 + drop2(g Wfcproj^T + b_fcproj)
 *
 * Parameters, saved layout, dropout keys and element indices are exactly
 * gpt_block.c's (see its header); the element-wise kernels come from
 * cuda_ops.cuh (bitwise the CPU's), the products from the host's GEMM with
 * the biases (and, under bf16, the GELU) in its epilogue; without dropout
 * the two residual additions ride in the projections' products too.
 * Under bf16, where flash_attention.cuh takes the shape (ph_flash_usable),
 * the attention core is fused: the saved P region is then L2 [B, H, T]
 * alone, the later regions moved up (gpt_block_cuda_saved_bytes tells the
 * host, ABI 1.6); fp32 keeps the materialised core.  Under bf16,
 * h1, h2 and g are saved in bf16 too (act16), and so, where the core is
 * fused, are att and the backward's dqkv (att16); the backward's other
 * gradients that feed products it rounds itself (grad16): every product
 * of the block then reads bf16 made by the block, or a weight's shadow.
 * With PIPEHOST_ATTN_CUDNN=1 the fused core is cuDNN's (cudnn_sdpa.h)
 * instead of flash_attention.cuh's, where there is no dropout: same saved
 * layout, its bf16 copies and workspace in the scratch that is free at
 * that point.
 * mlp = moe: the MLP is moe_cuda.cuh's, y = x1 + drop2(moe(h2)); the block
 * then has no u and g (an MLP ratio of 0 here), h2 stays fp32 (the router
 * and the experts read it), and the MoE's saved regions follow the
 * block's, its scratch past the block's (gpt_moe_scratch_at).
 *
 * Device scratch (gpt_block.c's meta sets device_scratch_bytes):
 *   forward:  tmp [R, d], then Pd [H, T, T] (dropout only)
 *   backward: dx1, dbr, dh, dh1 [R, d] each, dgu [R, rd], dqkv [R, 3d],
 *             then dP [H, T, T] and Pd [H, T, T] (dropout only); the fused
 *             core uses dP's place for D [<=T samples, H, T]; then the
 *             bias and layernorm gradients' split sums (ws,
 *             gpt_reduce_floats)
 */
#include "attention_ops.cuh"
#include "cuda_ops.cuh"
#include "flash_attention.cuh"
#include "moe_cuda.cuh"
#include "cudnn_sdpa.h"
#include "gpt_block_state.h"

static_assert(GPT_REDUCE_SLICES == PH_CSS_SLICES, "gpt_block_state.h sizes the split sums' workspace");

/* The geometry as plain values, from the state gpt_block.c made. */
typedef struct {
	int T, d, H, hd; /* sequence, model width, heads, head width */
	int r;           /* mlp_ratio; 0 with mlp = moe */
	float rate;      /* dropout, as (float)option */
	float scale;     /* (float)(1 / (1 - option)) */
	const moe_geom *mg; /* mlp = moe, else NULL */
	size_t moe_at;   /* mlp = moe: where its scratch starts (floats) */
} gpt_block_dims;

static gpt_block_dims dims_of(const void *state)
{
	const gpt_state *s = (const gpt_state *)state;
	gpt_block_dims g = { s->g.T, s->g.d, s->g.H, s->g.hd, s->moe ? 0 : s->r, s->g.rate, s->g.scale,
			     s->moe ? &((const gpt_moe_state *)state)->mg : NULL, s->moe ? gpt_moe_scratch_at(s) : 0 };
	return g;
}

enum { P_LNW, P_LNB, P_QKV, P_PROJ, P_FC, P_FCPROJ, P_BIAS };
enum { P_GATE = 4, P_EFC = 5, P_EFCPROJ = 7 }; /* mlp = moe (gpt_block.c) */

static int layout16(int precision);

static int check_call(const ph_ctx *ctx, ph_err *err)
{
	if (ctx->batch > 0 && (!ctx->saved || !ctx->scratch))
		return ph_fail(err, PH_EINTERNAL, "gpt_block: called without saved or scratch space");
	if (ctx->batch > 0 && !ctx->gpu)
		return ph_fail(err, PH_EINTERNAL, "gpt_block: no GPU services in the call context");
	/* the saved layout packs h1, h2 and g as bf16 (layout16), which only
	 * a host with bf16 products fills that way */
	if (ctx->batch > 0 && layout16(ctx->precision) && !ph_gpu_has_gemm_bf16(ctx))
		return ph_fail(err, PH_EUNSUPPORTED, "gpt_block: under bf16 this host offers no bf16 products "
			       "(ph_gpu_api gemm_bf16); set PIPEHOST_BF16_ACT=0 or use a newer pipehost");
	return PH_OK;
}

/* The saved regions of this micro-batch, gpt_block.c's saved_views(),
 * packed where the GPU keeps less (ABI 1.6: gpt_block_cuda_saved_bytes
 * tells the host, which allocates that much less):
 *  - where the fused core runs, the P region is L2 [B, H, T] alone;
 *  - under bf16, h1, h2 and g (act16), and att where the core is fused
 *    (att16), are bf16: regions of half the floats, each rounded up to 16
 *    bytes so that every region stays aligned for cuBLASLt.
 * The layout follows the run's precision and switches alone
 * (layout16, ph_flash_usable_at), so the hook computes it without a call. */
typedef struct {
	float *h1, *mean1, *rstd1, *qkv, *P, *att, *x1, *h2, *mean2, *rstd2, *u, *g;
	float *moe; /* mlp = moe: the MoE's regions (moe_cuda.cuh) */
} gpt_saved;

/* Floats of the P region per sample: the materialised [H, T, T], or the
 * fused core's L2 [H, T]. */
static size_t p_floats(const gpt_block_dims *g, int fused)
{
	return (size_t)g->H * g->T * (fused ? 1 : (size_t)g->T);
}

/* Floats that hold n values: n in fp32, or n bf16 (n/2 floats, to 4). */
static size_t held(size_t n, int bf16)
{
	return bf16 ? (n + 7) / 8 * 4 : n;
}

/* Whether h1, h2 and g are saved in bf16 (act16 without the call's host
 * check): PIPEHOST_BF16_ACT=0 keeps them fp32, to time one against the
 * other. */
static int layout16(int precision)
{
	static const int off = ph_env_off("PIPEHOST_BF16_ACT"); /* read once (C++ makes that thread-safe) */
	return !off && precision == PH_PREC_BF16;
}

static ph_attn_geom attn_geom(const gpt_block_dims *g);

/* The layout for B samples: the views from base, and the floats in all. */
static size_t saved_layout(const gpt_block_dims *g, size_t B, int precision, float *base, gpt_saved *v)
{
	const size_t T = g->T, d = g->d, r = g->r, R = B * T;
	const ph_attn_geom ag = attn_geom(g);
	const int fused = ph_flash_usable_at(precision, &ag), a16 = layout16(precision), o16 = a16 && fused;
	size_t at = 0;
#define REGION(field, n)                   	do {                               		if (v)                     			v->field = base + at; 		at += (n);                 	} while (0)
	REGION(h1, held(R * d, a16));
	REGION(mean1, R);
	REGION(rstd1, R);
	REGION(qkv, R * 3 * d);
	REGION(P, B * p_floats(g, fused));
	REGION(att, held(R * d, o16));
	REGION(x1, R * d);
	REGION(h2, held(R * d, a16 && !g->mg)); /* mlp = moe reads it in fp32 */
	REGION(mean2, R);
	REGION(rstd2, R);
	REGION(u, R * r * d);
	REGION(g, held(R * r * d, a16));
	REGION(moe, g->mg ? B * moe_saved_floats(g->mg) : 0);
#undef REGION
	return at;
}

static gpt_saved saved_views(const gpt_block_dims *g, const ph_ctx *ctx)
{
	gpt_saved v;
	saved_layout(g, (size_t)ctx->batch, ctx->precision, (float *)ctx->saved, &v);
	return v;
}

static uint64_t site_key(const ph_ctx *ctx, uint64_t site)
{
	return ph_mix64(ph_rng_key(ctx->seed, ctx->step, ctx->microbatch, ctx->layer) ^ site);
}

static ph_attn_geom attn_geom(const gpt_block_dims *g)
{
	ph_attn_geom a = { g->T, g->d, g->H, g->hd, g->rate, g->scale };
	return a;
}

/* Under bf16 the GELU's gradient rides in the backward's product into dgu,
 * and, where act16 is off, the GELU in the fc product's epilogue (one pass
 * less over [R, rd] each way: cuBLASLt's tanh GELU, to bf16 tolerance of
 * the CPU's);
 * fp32 keeps cuda_ops.cuh's bit-for-bit twin of the CPU's GELU.
 * PIPEHOST_GELU_FUSE=0 in the environment keeps it separate under bf16 too,
 * to time one against the other on the same build. */
static int gelu_fused(const ph_ctx *ctx)
{
	static const int off = ph_env_off("PIPEHOST_GELU_FUSE"); /* read once (C++ makes that thread-safe) */
	return !off && ctx->precision == PH_PREC_BF16;
}

/* Under bf16 the block writes the inputs of its products that it makes
 * itself (the two layernorm outputs h1 and h2, and the GELU output g) in
 * bf16, in the first half of their saved regions, and hands them to the
 * host's bf16-operand products: half the bytes written, and no rounding
 * pass of the host's before each product that reads them, forward and
 * backward.  The GELU is then cuda_ops.cuh's kernel after a BIAS product
 * (u stays fp32 for the backward).  PIPEHOST_BF16_ACT=0 keeps them fp32,
 * to time one against the other. */
static int act16(const ph_ctx *ctx)
{
	return layout16(ctx->precision) && ph_gpu_has_gemm_bf16(ctx);
}

/* With act16, where the fused core runs, it writes its output att (the
 * projection's input, forward and weight gradient) in bf16 in the first
 * half of att's saved region, and the backward's dqkv (the qkv weight
 * gradient's and dh1's input) in bf16 in the first half of its scratch:
 * the same values the products read before after their own rounding pass,
 * which is now gone, and half the bytes.  What changes is what reads them
 * as numbers: D = rowsum(dO * O) and the qkv bias gradient see the bf16
 * values (as FlashAttention-2 and PyTorch's autocast do). */
static int att16(const ph_ctx *ctx, const ph_attn_geom *ag)
{
	return act16(ctx) && ph_flash_usable(ctx, ag);
}

/* With att16, the backward rounds the three gradients that each feed a
 * weight gradient's product and the next input gradient's (the two
 * branches' dy and du) to bf16 itself, in the pass that sums their columns
 * for the bias gradients (ph_k_colsum_cast), and both products read that
 * copy: no staging pass of the host's, and one read of each gradient
 * fewer.  Same roundings, same sums, same bits.  The copies sit where dh1
 * and dqkv are made later; du's [R, rd] in bf16 fits in dqkv's [R, 3d]
 * floats while the MLP is at most 6 wide. */
static int grad16(const ph_ctx *ctx, const gpt_block_dims *g, const ph_attn_geom *ag)
{
	return att16(ctx, ag) && g->r <= 6;
}

/* Whether cuDNN's fused attention (cudnn_sdpa.h) takes this call's core:
 * asked for (PIPEHOST_ATTN_CUDNN=1), where the fused layout is in use (L2
 * alone saved) and without dropout, whose mask stays ours. */
static int sdpa_on(const ph_ctx *ctx, const ph_attn_geom *ag, int drop)
{
	return !drop && ph_flash_usable(ctx, ag) && ph_sdpa_requested();
}

#define TRY(call)                         \
	do {                              \
		if ((rc = (call)) != PH_OK) \
			return rc;        \
	} while (0)

/* y [M, N] = x [M, K] . W^T + bias (+ r, a residual, where r is not NULL),
 * x in bf16 where a16 (act16) says the block saved it so, else fp32. */
static int xwt(const ph_ctx *ctx, int a16, int M, int N, int K, const void *x, const float *W, const float *bias,
	       const float *r, float *y, ph_err *err)
{
	if (a16)
		return ph_gemm_x16wt_bias(ctx, M, N, K, x, W, bias, r, y, err);
	return r ? ph_gemm_xwt_bias_add(ctx, M, N, K, (const float *)x, W, bias, r, y, err)
		 : ph_gemm_xwt_bias(ctx, M, N, K, (const float *)x, W, bias, y, err);
}

/* dW [N, K] += dy^T [N, M] . x [M, K], x as in xwt */
static int dw_acc(const ph_ctx *ctx, int a16, int M, int N, int K, const float *dy, const void *x, float *dW,
		  ph_err *err)
{
	if (a16)
		return ph_gemm_dyt_x16_acc(ctx, M, N, K, dy, x, dW, err);
	return ph_gemm(ctx, 1, 0, N, K, M, 1.0f, dy, N, (const float *)x, K, 1.0f, dW, K, err);
}

static int gpt_block_fwd(const gpt_block_dims *g, const ph_ctx *ctx, float *const *params,
				      const float *x, float *y, ph_err *err)
{
	int rc = check_call(ctx, err);
	if (rc || ctx->batch == 0)
		return rc;
	const cudaStream_t st = PH_STREAM(ctx);
	const int T = g->T, d = g->d, rd = g->r * d, R = ctx->batch * T;
	const int64_t n = (int64_t)R * d;
	const gpt_saved v = saved_views(g, ctx);
	const ph_attn_geom ag = attn_geom(g);
	const int drop = ctx->training && g->rate > 0.0f;
	const float *lnw = params[P_LNW], *lnb = params[P_LNB], *bias = params[P_BIAS];
	float *tmp = (float *)ctx->scratch, *pd = tmp + n; /* [R, d], then [H, T, T] */

	const int a16 = act16(ctx), o16 = att16(ctx, &ag);

	/* attention branch */
	if (a16)
		PH_CUDA_TRY(err, ph_k_layernorm_fwd(st, x, lnw, lnb, (__nv_bfloat16 *)v.h1, v.mean1, v.rstd1, R, d,
						    GPT_LN_EPS));
	else
		PH_CUDA_TRY(err, ph_k_layernorm_fwd(st, x, lnw, lnb, v.h1, v.mean1, v.rstd1, R, d, GPT_LN_EPS));
	TRY(xwt(ctx, a16, R, 3 * d, d, v.h1, params[P_QKV], bias, NULL, v.qkv, err));
	if (sdpa_on(ctx, &ag, drop)) { /* all of scratch is free here: tmp serves dropout alone */
		const size_t floats = gpt_device_scratch_floats((size_t)ctx->batch, (size_t)T, (size_t)d, (size_t)g->r,
								(size_t)g->H, g->rate > 0.0f);
		const ph_sdpa_span work = { ctx->scratch, floats * sizeof(float) };
		TRY(ph_sdpa_forward(st, ctx->batch, T, ag.H, ag.hd, v.qkv, v.att, o16, v.P, &work, 1, err));
	} else if (o16)
		TRY(ph_flash_forward(ctx, &ag, ctx->batch, drop, site_key(ctx, GPT_SITE_ATTN), v.qkv, v.P,
				     (ph_bf16 *)v.att, err));
	else if (ph_flash_usable(ctx, &ag))
		TRY(ph_flash_forward(ctx, &ag, ctx->batch, drop, site_key(ctx, GPT_SITE_ATTN), v.qkv, v.P, v.att, err));
	else
		TRY(ph_attn_forward(ctx, &ag, ctx->batch, drop, site_key(ctx, GPT_SITE_ATTN), v.qkv, v.P, v.att, pd,
				    err));
	if (drop) {
		TRY(xwt(ctx, o16, R, d, d, v.att, params[P_PROJ], bias + 3 * d, NULL, tmp, err));
		PH_CUDA_TRY(err, ph_k_dropout_add(st, site_key(ctx, GPT_SITE_RESID1), drop, g->rate, g->scale, x,
						  tmp, v.x1, n));
	} else { /* no dropout: the residual rides in the product */
		TRY(xwt(ctx, o16, R, d, d, v.att, params[P_PROJ], bias + 3 * d, x, v.x1, err));
	}

	/* MLP branch */
	if (a16 && !g->mg)
		PH_CUDA_TRY(err, ph_k_layernorm_fwd(st, v.x1, lnw + d, lnb + d, (__nv_bfloat16 *)v.h2, v.mean2, v.rstd2,
						    R, d, GPT_LN_EPS));
	else
		PH_CUDA_TRY(err, ph_k_layernorm_fwd(st, v.x1, lnw + d, lnb + d, v.h2, v.mean2, v.rstd2, R, d,
						    GPT_LN_EPS));
	if (g->mg) { /* tmp = moe(h2), then y = x1 + drop2(tmp), as gpt_block.c */
		const moe_params mp = { params[P_GATE], params[P_EFC], params[P_EFCPROJ], bias + 4 * (size_t)d };
		TRY(moe_d_mlp_forward(g->mg, ctx, &mp, v.h2, tmp, 0, v.moe, (float *)ctx->scratch + g->moe_at, err));
		if (drop)
			PH_CUDA_TRY(err, ph_k_dropout_add(st, site_key(ctx, GPT_SITE_RESID2), drop, g->rate, g->scale,
							  v.x1, tmp, y, n));
		else
			PH_CUDA_TRY(err, ph_k_add(st, v.x1, tmp, y, n));
		return PH_OK;
	}
	if (!a16 && gelu_fused(ctx)) {
		TRY(ph_gemm_xwt_bias_gelu(ctx, R, rd, d, v.h2, params[P_FC], bias + 4 * d, v.u, v.g, err));
	} else {
		TRY(xwt(ctx, a16, R, rd, d, v.h2, params[P_FC], bias + 4 * d, NULL, v.u, err));
		if (a16)
			PH_CUDA_TRY(err, ph_k_gelu_fwd(st, v.u, (__nv_bfloat16 *)v.g, (int64_t)R * rd));
		else
			PH_CUDA_TRY(err, ph_k_gelu_fwd(st, v.u, v.g, (int64_t)R * rd));
	}
	if (drop) {
		TRY(xwt(ctx, a16, R, d, rd, v.g, params[P_FCPROJ], bias + 4 * d + rd, NULL, tmp, err));
		PH_CUDA_TRY(err, ph_k_dropout_add(st, site_key(ctx, GPT_SITE_RESID2), drop, g->rate, g->scale, v.x1,
						  tmp, y, n));
	} else {
		TRY(xwt(ctx, a16, R, d, rd, v.g, params[P_FCPROJ], bias + 4 * d + rd, v.x1, y, err));
	}
	return PH_OK;
}

/*
 * The whole backward, gpt_block.c's gpt_bwd(): grads NULL skips the weight
 * half, dx NULL the end of the input half; the chain of input gradients in
 * between runs the same either way, so backward() == I then W bit for bit.
 * Without dropout the residual masks are the identity: the branch gradient
 * IS the residual gradient, read in place instead of copied (same bits).
 */
static int gpt_block_bwd(const gpt_block_dims *g, const ph_ctx *ctx, float *const *params,
				       float *const *grads, const float *x, const float *dy, float *dx, ph_err *err)
{
	int rc = check_call(ctx, err);
	if (rc || ctx->batch == 0 || (!grads && !dx))
		return rc;
	const cudaStream_t st = PH_STREAM(ctx);
	const int T = g->T, d = g->d, rd = g->r * d, R = ctx->batch * T;
	const int64_t n = (int64_t)R * d;
	const gpt_saved v = saved_views(g, ctx);
	const ph_attn_geom ag = attn_geom(g);
	const int drop = ctx->training && g->rate > 0.0f;
	const int a16 = act16(ctx), o16 = att16(ctx, &ag); /* h1, h2 and g (and att) were saved in bf16 */
	const int d16 = grad16(ctx, g, &ag);
	const float *lnw = params[P_LNW];
	float *dx1 = (float *)ctx->scratch;     /* [R, d] */
	float *dbr = dx1 + n;                   /* [R, d]: d(branch) = mask * d(residual) */
	float *dh = dbr + n;                    /* [R, d]: dh2, then datt */
	float *dh1 = dh + n;                    /* [R, d] */
	float *dgu = dh1 + n;                   /* [R, rd]: dg, then du in place */
	float *dqkv = dgu + (size_t)R * rd;     /* [R, 3d] */
	float *tmp = dqkv + (size_t)R * 3 * d;  /* [H, T, T] (x2 with dropout) */
	float *ws = tmp + (size_t)ag.H * T * T * (drop ? 2 : 1); /* the split sums' partials */
	ph_bf16 *db16 = (ph_bf16 *)dh1;         /* d16: a branch's dy in bf16, until dh1 is made */
	ph_bf16 *dgu16 = (ph_bf16 *)dqkv;       /* d16: du in bf16, until dqkv is made */
	const float *db;

	/* ---- MLP branch: y = x1 + drop2(g Wfcproj^T + b_fcproj) ---- */
	db = dy;
	if (drop) {
		PH_CUDA_TRY(err, ph_k_dropout_add(st, site_key(ctx, GPT_SITE_RESID2), 1, g->rate, g->scale, NULL, dy,
						  dbr, n));
		db = dbr;
	}
	if (g->mg) { /* dh = d moe(h2) / d h2 */
		const moe_params mp = { params[P_GATE], params[P_EFC], params[P_EFCPROJ], params[P_BIAS] + 4 * (size_t)d };
		const moe_grads mgr = grads ? moe_grads{ grads[P_GATE], grads[P_EFC], grads[P_EFCPROJ],
							 grads[P_BIAS] + 4 * (size_t)d }
					    : moe_grads{ NULL, NULL, NULL, NULL };
		TRY(moe_d_mlp_backward(g->mg, ctx, &mp, grads ? &mgr : NULL, v.h2, db, dh, v.moe,
				       (float *)ctx->scratch + g->moe_at, err));
	} else if (d16) {
		PH_CUDA_TRY(err, ph_k_colsum_cast_ws(st, db, R, d, grads ? grads[P_BIAS] + 4 * d + rd : NULL, db16, ws));
		if (grads)
			TRY(ph_gemm_dy16t_x16_acc(ctx, R, d, rd, db16, v.g, grads[P_FCPROJ], err));
		if (gelu_fused(ctx)) {
			TRY(ph_gemm_dy16w_dgelu(ctx, R, d, rd, db16, params[P_FCPROJ], v.u, dgu, err));
		} else {
			TRY(ph_gemm_dy16w(ctx, R, d, rd, db16, params[P_FCPROJ], dgu, err));
			PH_CUDA_TRY(err, ph_k_gelu_bwd(st, v.u, dgu, dgu, (int64_t)R * rd));
		}
		PH_CUDA_TRY(err, ph_k_colsum_cast_ws(st, dgu, R, rd, grads ? grads[P_BIAS] + 4 * d : NULL, dgu16, ws));
		if (grads)
			TRY(ph_gemm_dy16t_x16_acc(ctx, R, rd, d, dgu16, v.h2, grads[P_FC], err));
		TRY(ph_gemm_dy16w(ctx, R, rd, d, dgu16, params[P_FC], dh, err));
	} else {
		if (grads) {
			TRY(dw_acc(ctx, a16, R, d, rd, db, v.g, grads[P_FCPROJ], err));
			PH_CUDA_TRY(err, ph_k_colsum_acc_ws(st, db, R, d, grads[P_BIAS] + 4 * d + rd, ws));
			ph_gpu_reuse_operand(ctx, db); /* the next product reads db again */
		}
		if (gelu_fused(ctx)) {
			TRY(ph_gemm_xw_dgelu(ctx, R, rd, d, db, params[P_FCPROJ], v.u, dgu, err));
		} else {
			TRY(ph_gemm(ctx, 0, 0, R, rd, d, 1.0f, db, d, params[P_FCPROJ], rd, 0.0f, dgu, rd, err));
			PH_CUDA_TRY(err, ph_k_gelu_bwd(st, v.u, dgu, dgu, (int64_t)R * rd));
		}
		if (grads) {
			TRY(dw_acc(ctx, a16, R, rd, d, dgu, v.h2, grads[P_FC], err));
			PH_CUDA_TRY(err, ph_k_colsum_acc_ws(st, dgu, R, rd, grads[P_BIAS] + 4 * d, ws));
			ph_gpu_reuse_operand(ctx, dgu);
		}
		TRY(ph_gemm(ctx, 0, 0, R, d, rd, 1.0f, dgu, rd, params[P_FC], d, 0.0f, dh, d, err));
	}
	if (grads)
		PH_CUDA_TRY(err, ph_k_layernorm_bwd_weight_ws(st, dh, v.x1, v.mean2, v.rstd2, grads[P_LNW] + d,
							      grads[P_LNB] + d, R, d, ws));
	/* dx1 = ln2's input gradient + dy (the residual) */
	PH_CUDA_TRY(err, ph_k_layernorm_bwd_input_add(st, dh, v.x1, lnw + d, v.mean2, v.rstd2, dy, dx1, R, d));

	/* ---- attention branch: x1 = x + drop1(att Wproj^T + b_proj) ---- */
	db = dx1;
	if (drop) {
		PH_CUDA_TRY(err, ph_k_dropout_add(st, site_key(ctx, GPT_SITE_RESID1), 1, g->rate, g->scale, NULL, dx1,
						  dbr, n));
		db = dbr;
	}
	if (d16) {
		PH_CUDA_TRY(err, ph_k_colsum_cast_ws(st, db, R, d, grads ? grads[P_BIAS] + 3 * d : NULL, db16, ws));
		if (grads)
			TRY(ph_gemm_dy16t_x16_acc(ctx, R, d, d, db16, v.att, grads[P_PROJ], err));
		TRY(ph_gemm_dy16w(ctx, R, d, d, db16, params[P_PROJ], dh, err)); /* datt */
	} else {
		if (grads) {
			TRY(dw_acc(ctx, o16, R, d, d, db, v.att, grads[P_PROJ], err));
			PH_CUDA_TRY(err, ph_k_colsum_acc_ws(st, db, R, d, grads[P_BIAS] + 3 * d, ws));
			ph_gpu_reuse_operand(ctx, db);
		}
		TRY(ph_gemm(ctx, 0, 0, R, d, d, 1.0f, db, d, params[P_PROJ], d, 0.0f, dh, d, err)); /* datt */
	}
	ph_bf16 *dqkv16 = (ph_bf16 *)dqkv; /* o16: dqkv in bf16, in the first half of its place */
	if (sdpa_on(ctx, &ag, drop)) { /* free now: gpt_sdpa_backward_spans */
		gpt_scratch_span sp[3];
		ph_sdpa_span work[3];
		const int nsp = gpt_sdpa_backward_spans((size_t)ctx->batch, (size_t)T, (size_t)d, (size_t)g->r,
							(size_t)ag.H, o16, sp);
		for (int i = 0; i < nsp; i++)
			work[i] = { (float *)ctx->scratch + sp[i].at, sp[i].floats * sizeof(float) };
		TRY(ph_sdpa_backward(st, ctx->batch, T, ag.H, ag.hd, v.qkv, v.P, v.att, o16, dh,
				     o16 ? (void *)dqkv16 : (void *)dqkv, o16, work, nsp, err));
	} else if (o16)
		TRY(ph_flash_backward(ctx, &ag, ctx->batch, drop, site_key(ctx, GPT_SITE_ATTN), v.qkv, v.P,
				      (const ph_bf16 *)v.att, dh, dqkv16, tmp, err));
	else if (ph_flash_usable(ctx, &ag))
		TRY(ph_flash_backward(ctx, &ag, ctx->batch, drop, site_key(ctx, GPT_SITE_ATTN), v.qkv, v.P,
				      (const float *)v.att, dh, dqkv, tmp, err));
	else
		TRY(ph_attn_backward(ctx, &ag, ctx->batch, drop, site_key(ctx, GPT_SITE_ATTN), v.qkv, v.P, dh, dqkv,
				     tmp, err));
	if (o16) { /* the core wrote dqkv in bf16 (h1 is bf16 too) */
		if (grads) {
			TRY(ph_gemm_dy16t_x16_acc(ctx, R, 3 * d, d, dqkv16, v.h1, grads[P_QKV], err));
			PH_CUDA_TRY(err, ph_k_colsum_acc_ws(st, (const ph_bf16 *)dqkv16, R, 3 * d, grads[P_BIAS], ws));
		}
		TRY(ph_gemm_dy16w(ctx, R, 3 * d, d, dqkv16, params[P_QKV], dh1, err));
	} else {
		if (grads) {
			TRY(dw_acc(ctx, a16, R, 3 * d, d, dqkv, v.h1, grads[P_QKV], err));
			PH_CUDA_TRY(err, ph_k_colsum_acc_ws(st, (const float *)dqkv, R, 3 * d, grads[P_BIAS], ws));
			ph_gpu_reuse_operand(ctx, dqkv);
		}
		TRY(ph_gemm(ctx, 0, 0, R, d, 3 * d, 1.0f, dqkv, 3 * d, params[P_QKV], d, 0.0f, dh1, d, err));
	}
	if (grads)
		PH_CUDA_TRY(err, ph_k_layernorm_bwd_weight_ws(st, dh1, x, v.mean1, v.rstd1, grads[P_LNW], grads[P_LNB],
							      R, d, ws));
	if (dx) /* dx = ln1's input gradient + dx1 */
		PH_CUDA_TRY(err, ph_k_layernorm_bwd_input_add(st, dh1, x, lnw, v.mean1, v.rstd1, dx1, dx, R, d));
	return PH_OK;
}

/* The hooks: the geometry from the state, then the code above. */
static int gpt_block_cuda_forward(void *state, const ph_ctx *ctx, float *const *params, const float *x, float *y,
				  ph_err *err)
{
	const gpt_block_dims g = dims_of(state);
	return gpt_block_fwd(&g, ctx, params, x, y, err);
}

static int gpt_block_cuda_backward(void *state, const ph_ctx *ctx, float *const *params, float *const *grads,
				   const float *x, const float *y, const float *dy, float *dx, ph_err *err)
{
	const gpt_block_dims g = dims_of(state);
	return gpt_block_bwd(&g, ctx, params, grads, x, dy, dx, err);
}

static int gpt_block_cuda_backward_input(void *state, const ph_ctx *ctx, float *const *params, const float *x,
					 const float *y, const float *dy, float *dx, ph_err *err)
{
	const gpt_block_dims g = dims_of(state);
	return gpt_block_bwd(&g, ctx, params, NULL, x, dy, dx, err);
}

static int gpt_block_cuda_backward_weight(void *state, const ph_ctx *ctx, float *const *params,
					  float *const *grads, const float *x, const float *y, const float *dy,
					  ph_err *err)
{
	const gpt_block_dims g = dims_of(state);
	return gpt_block_bwd(&g, ctx, params, grads, x, dy, NULL, err);
}

/* Bytes saved per sample on the GPU (ABI 1.6): saved_layout's for one
 * sample, which bounds B samples' by B times (each region's rounding is
 * at most one sample's); fp32 keeps gpt_block.c's figure exactly. */
static size_t gpt_block_cuda_saved_bytes(const void *state, int precision)
{
	const gpt_block_dims g = dims_of(state);
	return saved_layout(&g, 1, precision, NULL, NULL) * sizeof(float);
}

PH_LAYER_CUDA_OPS(gpt_block_cuda_ops) = { .struct_size = sizeof(ph_layer_device_ops),
					  .forward = gpt_block_cuda_forward,
					  .backward = gpt_block_cuda_backward,
					  .backward_input = gpt_block_cuda_backward_input,
					  .backward_weight = gpt_block_cuda_backward_weight,
					  .release = NULL,
					  .saved_bytes = gpt_block_cuda_saved_bytes };
