/* SPDX-License-Identifier: MIT */
/* Shared by every layer's CUDA twin (NAME_cuda.cu): <pipehost/cuda.h>
 * (error plumbing, launch shapes, the host's GEMM) and this project's own
 * GEMM shapes with fused epilogues.  Header-only and static, so each module
 * stays self-contained.  Kernels launch on ctx->stream and never
 * synchronise; the host orders work between ranks. */
#ifndef PH_LAYERS_CUDA_COMMON_CUH
#define PH_LAYERS_CUDA_COMMON_CUH

#include <stdlib.h>
#include <string.h>

#include <pipehost/cuda.h> /* PH_STREAM, PH_CUDA_TRY, ph_blocks, ph_gemm, ... */

/* 1 when environment variable `name` is "0": how a fast path is turned off
 * to time it against the plain one (PIPEHOST_ATTN_FLASH, PIPEHOST_GELU_FUSE). */
static inline int ph_env_off(const char *name)
{
	const char *e = getenv(name);
	return e && strcmp(e, "0") == 0;
}

/* y [M, N] = x [M, K] . W^T + bias (W [N, K], bias [N]; NULL: none), every
 * matrix dense.  The bias rides in the product's epilogue (ph_gpu_api's
 * gemm_ex: cuBLASLt where it takes the shape), not in a pass of its own. */
static inline int ph_gemm_xwt_bias(const ph_ctx *ctx, int M, int N, int K, const float *x, const float *W,
				   const float *bias, float *y, ph_err *err)
{
	if (!ctx->gpu)
		return ph_fail(err, PH_EINTERNAL, "no GPU services in the call context");
	if (!bias)
		return ctx->gpu->gemm(ctx, 0, 1, M, N, K, 1.0f, x, K, 0, W, K, 0, 0.0f, y, N, 0, 1, err);
	return ctx->gpu->gemm_ex(ctx, 0, 1, M, N, K, x, K, W, K, y, N, PH_EPI_BIAS, bias, NULL, err);
}

/* y [M, N] = x [M, K] . W^T + bias + r, r [M, N] a residual added in the
 * same pass (cuBLASLt's C with beta = 1); y and r distinct. */
static inline int ph_gemm_xwt_bias_add(const ph_ctx *ctx, int M, int N, int K, const float *x, const float *W,
				       const float *bias, const float *r, float *y, ph_err *err)
{
	if (!ctx->gpu)
		return ph_fail(err, PH_EINTERNAL, "no GPU services in the call context");
	/* aux is read, not written, under PH_EPI_BIAS_ADD */
	return ctx->gpu->gemm_ex(ctx, 0, 1, M, N, K, x, K, W, K, y, N, PH_EPI_BIAS_ADD, bias, (float *)r, err);
}

/* The same with GELU fused: u [M, N] = x W^T + bias (kept for the
 * backward), g = gelu_tanh(u).  The epilogue's GELU is the library's tanh
 * form, not cuda_ops.cuh's bit-for-bit twin of the CPU's: for bf16 runs,
 * which track the CPU to bf16 tolerance anyway. */
static inline int ph_gemm_xwt_bias_gelu(const ph_ctx *ctx, int M, int N, int K, const float *x, const float *W,
					const float *bias, float *u, float *g, ph_err *err)
{
	if (!ctx->gpu)
		return ph_fail(err, PH_EINTERNAL, "no GPU services in the call context");
	return ctx->gpu->gemm_ex(ctx, 0, 1, M, N, K, x, K, W, K, g, N, PH_EPI_BIAS_GELU, bias, u, err);
}

/* Products whose x (a layer's own activation) or dy (a gradient it made)
 * it holds in bf16 (ph_gpu_api's gemm_bf16, ABI 1.3), under precision =
 * bf16:
 *   ph_gemm_x16wt_bias       y [M, N] = x16 [M, K] . W^T + bias (epi BIAS, or
 *                            BIAS_ADD with the residual r; r NULL: none)
 *   ph_gemm_dyt_x16_acc      dW [N, K] += dy^T [N, M] . x16 [M, K]
 *   ph_gemm_dy16t_x16_acc    dW [N, K] += dy16^T [N, M] . x16 [M, K]
 *   ph_gemm_dy16w            dx [M, K] = dy16 [M, N] . W [N, K]
 *   ph_gemm_dy16w_dgelu      du [M, K] = (dy16 [M, N] . W [N, K]) * gelu_tanh'(u)
 * Every matrix dense (leading dimension its column count). */
static inline int ph_gemm_x16wt_bias(const ph_ctx *ctx, int M, int N, int K, const void *x16, const float *W,
				     const float *bias, const float *r, float *y, ph_err *err)
{
	if (!ph_gpu_has_gemm_bf16(ctx))
		return ph_fail(err, PH_EINTERNAL, "the host has no bf16-operand products (ABI 1.3)");
	return ctx->gpu->gemm_bf16(ctx, PH_GEMM_A_BF16, 0, 1, M, N, K, 1.0f, x16, K, W, K, 0.0f, y, N,
				   r ? PH_EPI_BIAS_ADD : PH_EPI_BIAS, bias, (float *)r, err);
}

static inline int ph_gemm_dyt_x16_acc(const ph_ctx *ctx, int M, int N, int K, const float *dy, const void *x16,
				      float *dW, ph_err *err)
{
	if (!ph_gpu_has_gemm_bf16(ctx))
		return ph_fail(err, PH_EINTERNAL, "the host has no bf16-operand products (ABI 1.3)");
	return ctx->gpu->gemm_bf16(ctx, PH_GEMM_B_BF16, 1, 0, N, K, M, 1.0f, dy, N, x16, K, 1.0f, dW, K,
				   PH_EPI_NONE, NULL, NULL, err);
}

static inline int ph_gemm_dy16t_x16_acc(const ph_ctx *ctx, int M, int N, int K, const void *dy16, const void *x16,
					float *dW, ph_err *err)
{
	if (!ph_gpu_has_gemm_bf16(ctx))
		return ph_fail(err, PH_EINTERNAL, "the host has no bf16-operand products (ABI 1.3)");
	return ctx->gpu->gemm_bf16(ctx, PH_GEMM_A_BF16 | PH_GEMM_B_BF16, 1, 0, N, K, M, 1.0f, dy16, N, x16, K, 1.0f,
				   dW, K, PH_EPI_NONE, NULL, NULL, err);
}

static inline int ph_gemm_dy16w(const ph_ctx *ctx, int M, int N, int K, const void *dy16, const float *W, float *dx,
				ph_err *err)
{
	if (!ph_gpu_has_gemm_bf16(ctx))
		return ph_fail(err, PH_EINTERNAL, "the host has no bf16-operand products (ABI 1.3)");
	return ctx->gpu->gemm_bf16(ctx, PH_GEMM_A_BF16, 0, 0, M, K, N, 1.0f, dy16, N, W, K, 0.0f, dx, K, PH_EPI_NONE,
				   NULL, NULL, err);
}

static inline int ph_gemm_dy16w_dgelu(const ph_ctx *ctx, int M, int N, int K, const void *dy16, const float *W,
				      const float *u, float *du, ph_err *err)
{
	if (!ph_gpu_has_gemm_bf16(ctx))
		return ph_fail(err, PH_EINTERNAL, "the host has no bf16-operand products (ABI 1.3)");
	/* aux is read, not written, under PH_EPI_DGELU */
	return ctx->gpu->gemm_bf16(ctx, PH_GEMM_A_BF16, 0, 0, M, K, N, 1.0f, dy16, N, W, K, 0.0f, du, K, PH_EPI_DGELU,
				   NULL, (float *)u, err);
}

/* Its backward through the GELU: du [M, N] = (dy [M, K] . W [K, N]) *
 * gelu_tanh'(u), u the pre-activation ph_gemm_xwt_bias_gelu kept. */
static inline int ph_gemm_xw_dgelu(const ph_ctx *ctx, int M, int N, int K, const float *dy, const float *W,
				   const float *u, float *du, ph_err *err)
{
	if (!ctx->gpu)
		return ph_fail(err, PH_EINTERNAL, "no GPU services in the call context");
	/* aux is read, not written, under PH_EPI_DGELU (the ABI has one pointer type) */
	return ctx->gpu->gemm_ex(ctx, 0, 0, M, N, K, dy, K, W, N, du, N, PH_EPI_DGELU, NULL, (float *)u, err);
}

#endif
