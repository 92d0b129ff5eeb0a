/* SPDX-License-Identifier: MIT */
/*
 * gemm.cu: the matrix products a rank offers its layers (ph_gpu_api).
 *
 *   gemm     C = alpha op(A) op(B) + beta C, batched: cublasGemmStridedBatchedEx
 *   gemm_ex  C = epi(op(A) op(B) + bias): cuBLASLt with the BIAS,
 *            GELU_AUX_BIAS or DGELU epilogue (and BIAS with beta = 1 for a
 *            residual added in the same pass), so the bias, the residual
 *            and the GELU (or its gradient) cost no pass of their own over
 *            C; or, where cuBLASLt refuses the request, the product and
 *            then one pass (k_epilogue: the same formulas)
 *
 * Row-major throughout, as cblas with CblasRowMajor: C = op(A) op(B) is
 * column-major C^T = op(B)^T op(A)^T, so cuBLAS gets B first and N, M
 * swapped; the transposes carry over unchanged, and the bias, one value per
 * column of the row-major C, is one per row of cuBLAS's D.
 *
 * Precision is the run's: fp32 computes in fp32 without TF32 (it tracks the
 * CPU twin to rounding); bf16 rounds the inputs to bf16 and accumulates in
 * fp32 on tensor cores.  The rounding happens in a pass of our own into bf16
 * copies (bf16_operands.h: a shadow per weight, made once a step, and a
 * staging buffer for the rest), so cuBLAS runs its native bf16 kernels;
 * PIPEHOST_GEMM_CAST=0 lets cuBLAS round fp32 inputs itself instead
 * (CUBLAS_COMPUTE_32F_FAST_16BF), the same values by another road.
 *
 * cuBLASLt needs a descriptor, three layouts and a heuristic query per
 * shape, which cost more host time than a small product takes on the GPU:
 * each rank keeps the plans it has made (a training step repeats a handful
 * of shapes) and only re-points bias and aux on a hit.  A plan is chosen
 * from the shape, the epilogue and the operands' alignment alone, so every
 * rank, schedule and run picks the same kernel for the same product: the
 * bitwise contracts of test-gpu.sh hold.  Split-K reductions that add into
 * the output in place are excluded from the search for the same reason.
 */
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pipehost/device.h>

#include "bf16_operands.h"
#include "gemm.h"

/* What the Hopper documentation suggests for cuBLASLt's workspace. */
#define LT_WORKSPACE_BYTES ((size_t)32 << 20)

typedef struct {
	/* the key */
	int ta, tb, M, N, K, lda, ldb, ldc, epi;
	int ab_type; /* cudaDataType_t of A and B: fp32, or bf16 copies */
	int compute; /* cublasComputeType_t: resolve()'s, from the precision and ab_type */
	uint32_t align_a, align_b, align_c;
	/* the plan; usable 0: cuBLASLt refused, take the unfused path */
	int usable;
	cublasLtMatmulDesc_t op;
	cublasLtMatrixLayout_t la, lb, lc;
	cublasLtMatmulAlgo_t algo;
} lt_plan;

struct ph_gemm_rank {
	ph_gpu_api api; /* first: ctx->gpu points here, svc_gemm_ex finds the rank from it */
	cublasLtHandle_t lt;
	void *workspace;
	int use_lt;
	int cast; /* bf16: round operands into bf16 copies (else FAST_16BF) */
	ph_bf16_stage stage[2]; /* two operands' staging */
	const float *reuse;     /* reuse_operand's promise for the next product */
	lt_plan *plans;
	int nplans, cap;
};

const char *ph_blas_status(cublasStatus_t s)
{
	switch (s) {
	case CUBLAS_STATUS_NOT_INITIALIZED: return "not initialised";
	case CUBLAS_STATUS_ALLOC_FAILED: return "allocation failed";
	case CUBLAS_STATUS_INVALID_VALUE: return "invalid value";
	case CUBLAS_STATUS_ARCH_MISMATCH: return "architecture mismatch";
	case CUBLAS_STATUS_EXECUTION_FAILED: return "execution failed";
	case CUBLAS_STATUS_NOT_SUPPORTED: return "not supported";
	default: return "error";
	}
}

/* The largest power of two dividing p, at most 256 (cuBLASLt's default
 * assumption, which the preference lowers to what we have). */
static uint32_t alignment(const void *p)
{
	uintptr_t a = (uintptr_t)p;
	uint32_t b = 256;
	while (b > 1 && a % b)
		b >>= 1;
	return b;
}

/* A product's operands as cuBLAS gets them: the caller's fp32 matrices, or
 * their bf16 copies (with the copies' leading dimensions and strides). */
typedef struct {
	const void *a, *b;
	int lda, ldb;
	int64_t sa, sb;
	cudaDataType_t type;
	cublasComputeType_t compute;
} operands;

/* One operand of a bf16 product: `batch` row-major rows x cols matrices
 * (leading dimension ld, stride apart). */
typedef struct {
	const float *p;
	int rows, cols, ld, batch;
	int64_t stride;
} operand_src;

/* Its bf16 copy: a weight's shadow where p lies in a registered block and
 * the view has the 16-byte alignment of rows and start that cuBLAS's fast
 * kernels want; else the copy staging slot `slot` holds when `reuse` says
 * p is unchanged since it was made; else p rounded into that slot. */
static int bf16_operand(ph_gemm_rank *g, int slot, int reuse, cudaStream_t st, const operand_src *s,
			const void **out, int *ld_out, int64_t *stride_out, ph_err *err)
{
	*out = s->p;
	*ld_out = s->ld;
	*stride_out = s->stride;
	if (s->rows <= 0 || s->cols <= 0 || s->batch <= 0)
		return PH_OK; /* nothing is read */
	const int64_t extent = (int64_t)(s->batch - 1) * s->stride + (int64_t)(s->rows - 1) * s->ld + s->cols;
	const void *view = NULL;
	int rc = ph_bf16_param_view(s->p, extent, st, &view, err);
	if (rc)
		return rc;
	if (view && alignment(view) >= 16 && s->ld % 8 == 0 && s->stride % 8 == 0) {
		*out = view;
		return PH_OK;
	}
	ph_bf16_stage *sl = &g->stage[slot];
	if (reuse) { /* the slot holds it (checked by the caller) */
		*out = sl->buf;
		*ld_out = sl->ld_out;
		*stride_out = sl->stride_out;
		return PH_OK;
	}
	return ph_bf16_stage_cast(sl, s->p, s->rows, s->cols, s->ld, s->batch, s->stride, st, out, ld_out,
				  stride_out, err);
}

static int slot_holds(const ph_gemm_rank *g, int slot, const operand_src *s)
{
	return ph_bf16_stage_holds(&g->stage[slot], s->p, s->rows, s->cols, s->ld, s->batch, s->stride);
}

/* op(A) is M x K and op(B) K x N: stored K x M / M x K and N x K / K x N.
 * Under bf16 each gets a bf16 copy (bf16_operand); the staged ones take a
 * slot each, and an operand reuse_operand promised unchanged keeps the
 * slot that already holds its copy. */
static int resolve(const ph_ctx *ctx, int flags, int ta, int tb, int M, int N, int K, const void *A, int lda,
		   int64_t sa, const void *B, int ldb, int64_t sb, int batch, operands *o, ph_err *err)
{
	ph_gemm_rank *g = (ph_gemm_rank *)ctx->gpu;
	const int bf16 = ctx->precision == PH_PREC_BF16;
	const float *promised = g->reuse;
	g->reuse = NULL; /* a promise is for the next product only */
	o->a = A, o->b = B, o->lda = lda, o->ldb = ldb, o->sa = sa, o->sb = sb;
	o->type = CUDA_R_32F;
	o->compute = bf16 ? CUBLAS_COMPUTE_32F_FAST_16BF : CUBLAS_COMPUTE_32F;
	/* an operand the caller holds in bf16 makes the product a bf16 one
	 * whatever PIPEHOST_GEMM_CAST says: both operands must be */
	if (!bf16 || (!g->cast && !flags))
		return PH_OK;
	o->type = CUDA_R_16BF;
	o->compute = CUBLAS_COMPUTE_32F;
	const operand_src a = { (const float *)A, ta ? K : M, ta ? M : K, lda, batch, sa };
	const operand_src b = { (const float *)B, tb ? N : K, tb ? K : N, ldb, batch, sb };
	cudaStream_t st = (cudaStream_t)ctx->stream;
	const int a16 = (flags & PH_GEMM_A_BF16) != 0, b16 = (flags & PH_GEMM_B_BF16) != 0;
	if (a16 && b16)
		return PH_OK;
	if (a16) /* the fp32 one alone, in slot 0 (no promise applies) */
		return bf16_operand(g, 0, 0, st, &b, &o->b, &o->ldb, &o->sb, err);
	if (b16)
		return bf16_operand(g, 0, 0, st, &a, &o->a, &o->lda, &o->sa, err);
	/* slots: A in 0 and B in 1, unless a promised operand's copy sits in
	 * the other one */
	int slot_a = 0, slot_b = 1, keep_a = 0, keep_b = 0;
	if (promised == A)
		for (int k = 0; k < 2 && !keep_a; k++)
			if (slot_holds(g, k, &a))
				keep_a = 1, slot_a = k, slot_b = 1 - k;
	if (promised == B && !(keep_a && A == B))
		for (int k = 0; k < 2 && !keep_b; k++)
			if ((!keep_a || k != slot_a) && slot_holds(g, k, &b))
				keep_b = 1, slot_b = k, slot_a = keep_a ? slot_a : 1 - k;
	int rc = bf16_operand(g, slot_a, keep_a, st, &a, &o->a, &o->lda, &o->sa, err);
	return rc ? rc : bf16_operand(g, slot_b, keep_b, st, &b, &o->b, &o->ldb, &o->sb, err);
}

static int gemm_resolved(const ph_ctx *ctx, int ta, int tb, int M, int N, int K, float alpha, const operands *o,
			 float beta, float *C, int ldc, int64_t sc, int batch, ph_err *err)
{
	cublasHandle_t h = (cublasHandle_t)ctx->blas;
	cublasStatus_t s = cublasGemmStridedBatchedEx(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
						      N, M, K, &alpha, o->b, o->type, o->ldb, o->sb, o->a, o->type,
						      o->lda, o->sa, &beta, C, CUDA_R_32F, ldc, sc, batch, o->compute,
						      CUBLAS_GEMM_DEFAULT);
	if (s != CUBLAS_STATUS_SUCCESS)
		return ph_fail(err, PH_EINTERNAL, "cuBLAS gemm %dx%dx%d (batch %d): %s", M, N, K, batch,
			       ph_blas_status(s));
	return PH_OK;
}

static int svc_gemm(const ph_ctx *ctx, int ta, int tb, int M, int N, int K, float alpha, const float *A, int lda,
		    int64_t sa, const float *B, int ldb, int64_t sb, float beta, float *C, int ldc, int64_t sc, int batch,
		    ph_err *err)
{
	operands o;
	int rc = resolve(ctx, 0, ta, tb, M, N, K, A, lda, sa, B, ldb, sb, batch, &o, err);
	return rc ? rc : gemm_resolved(ctx, ta, tb, M, N, K, alpha, &o, beta, C, ldc, sc, batch, err);
}

/* ---------------------------------------------------------------- */
/* The unfused path                                                   */

/* The unfused epilogue: one pass over C [M, N] (leading dimension ld),
 * which holds A*B (for BIAS_GELU aux holds it, and keeps the
 * pre-activation):
 *   BIAS       C += bias
 *   BIAS_GELU  aux += bias; C = gelu_tanh(aux)
 *   DGELU      C *= gelu_tanh'(aux)
 *   BIAS_ADD   C = (C + aux) + bias, the order of cuBLASLt's beta = 1 */
__global__ static void k_epilogue(int epi, float *C, float *aux, const float *bias, int M, int N, int ld)
{
	const float k0 = 0.7978845608028654f, a = 0.044715f; /* gelu_tanh: sqrt(2/pi), the cubic's weight */
	int64_t total = (int64_t)M * N;
	for (int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; k < total; k += (int64_t)gridDim.x * blockDim.x) {
		const int64_t j = k % N, o = (k / N) * ld + j;
		switch (epi) {
		case PH_EPI_BIAS: C[o] = C[o] + bias[j]; break;
		case PH_EPI_BIAS_GELU: {
			float x = aux[o] + bias[j];
			aux[o] = x;
			C[o] = 0.5f * x * (1.f + tanhf(k0 * (x + a * x * x * x)));
			break;
		}
		case PH_EPI_DGELU: {
			float x = aux[o], t = tanhf(k0 * (x + a * x * x * x)), dt = k0 * (1.f + 3.f * a * x * x);
			C[o] *= 0.5f * (1.f + t) + 0.5f * x * (1.f - t * t) * dt;
			break;
		}
		case PH_EPI_BIAS_ADD: C[o] = (C[o] + aux[o]) + bias[j]; break;
		}
	}
}

static int gemm_ex_unfused(const ph_ctx *ctx, int ta, int tb, int M, int N, int K, const operands *o, float *C,
			   int ldc, int epi, const float *bias, float *aux, ph_err *err)
{
	float *prod = epi == PH_EPI_BIAS_GELU ? aux : C;
	int rc = gemm_resolved(ctx, ta, tb, M, N, K, 1.f, o, 0.f, prod, ldc, 0, 1, err);
	if (rc || epi == PH_EPI_NONE)
		return rc;
	int64_t n = (int64_t)M * N, blocks = (n + 255) / 256;
	blocks = blocks < 1 ? 1 : blocks > 65535 * 8 ? 65535 * 8 : blocks;
	k_epilogue<<<(unsigned)blocks, 256, 0, (cudaStream_t)ctx->stream>>>(epi, C, aux, bias, M, N, ldc);
	cudaError_t e = cudaGetLastError();
	if (e != cudaSuccess)
		return ph_fail(err, PH_EINTERNAL, "GEMM epilogue: %s", cudaGetErrorString(e));
	return PH_OK;
}

/* ---------------------------------------------------------------- */
/* cuBLASLt plans                                                     */

static void plan_release(lt_plan *p)
{
	if (p->op)
		cublasLtMatmulDescDestroy(p->op);
	if (p->la)
		cublasLtMatrixLayoutDestroy(p->la);
	if (p->lb)
		cublasLtMatrixLayoutDestroy(p->lb);
	if (p->lc)
		cublasLtMatrixLayoutDestroy(p->lc);
	p->op = NULL;
	p->la = p->lb = p->lc = NULL;
}

#define LT_OK(call) ((call) == CUBLAS_STATUS_SUCCESS)

/* Descriptor, layouts and the heuristic's first algorithm for p's key.
 * Leaves p->usable 0 when cuBLASLt has nothing for it. */
static void plan_make(ph_gemm_rank *g, lt_plan *p)
{
	const cudaDataType_t ab = (cudaDataType_t)p->ab_type;
	const cublasComputeType_t ct = (cublasComputeType_t)p->compute;
	cublasOperation_t opa = p->tb ? CUBLAS_OP_T : CUBLAS_OP_N, opb = p->ta ? CUBLAS_OP_T : CUBLAS_OP_N;
	uint32_t epi = p->epi == PH_EPI_BIAS_GELU ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS
		       : p->epi == PH_EPI_DGELU   ? CUBLASLT_EPILOGUE_DGELU
						  : CUBLASLT_EPILOGUE_BIAS;
	const int with_aux = p->epi == PH_EPI_BIAS_GELU || p->epi == PH_EPI_DGELU; /* aux attribute */
	int64_t aux_ld = p->ldc;
	/* cuBLAS's A is our B: stored N x K (op N) or K x N (op T); its B is
	 * our A: K x M or M x K; D is N x M. */
	uint64_t a_rows = p->tb ? p->K : p->N, a_cols = p->tb ? p->N : p->K;
	uint64_t b_rows = p->ta ? p->M : p->K, b_cols = p->ta ? p->K : p->M;
	p->usable = 0;
	if (!LT_OK(cublasLtMatmulDescCreate(&p->op, ct, CUDA_R_32F)) ||
	    !LT_OK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa)) ||
	    !LT_OK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb)) ||
	    !LT_OK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi)) ||
	    (with_aux &&
	     !LT_OK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof aux_ld))) ||
	    !LT_OK(cublasLtMatrixLayoutCreate(&p->la, ab, a_rows, a_cols, p->ldb)) ||
	    !LT_OK(cublasLtMatrixLayoutCreate(&p->lb, ab, b_rows, b_cols, p->lda)) ||
	    !LT_OK(cublasLtMatrixLayoutCreate(&p->lc, CUDA_R_32F, p->N, p->M, p->ldc))) {
		plan_release(p);
		return;
	}
	cublasLtMatmulPreference_t pref = NULL;
	uint64_t ws = LT_WORKSPACE_BYTES;
	uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE | CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE;
	cublasLtMatmulHeuristicResult_t res;
	int found = 0;
	if (LT_OK(cublasLtMatmulPreferenceCreate(&pref)) &&
	    LT_OK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws)) &&
	    LT_OK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &schemes,
						       sizeof schemes)) &&
	    LT_OK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &p->align_b,
						       sizeof(uint32_t))) &&
	    LT_OK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &p->align_a,
						       sizeof(uint32_t))) &&
	    LT_OK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &p->align_c,
						       sizeof(uint32_t))) &&
	    LT_OK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &p->align_c,
						       sizeof(uint32_t))) &&
	    LT_OK(cublasLtMatmulAlgoGetHeuristic(g->lt, p->op, p->la, p->lb, p->lc, p->lc, pref, 1, &res, &found)) &&
	    found > 0 && res.state == CUBLAS_STATUS_SUCCESS && res.workspaceSize <= LT_WORKSPACE_BYTES) {
		p->algo = res.algo;
		p->usable = 1;
	}
	if (pref)
		cublasLtMatmulPreferenceDestroy(pref);
	if (!p->usable)
		plan_release(p);
}

static int same_key(const lt_plan *a, const lt_plan *b)
{
	return a->ta == b->ta && a->tb == b->tb && a->M == b->M && a->N == b->N && a->K == b->K && a->lda == b->lda &&
	       a->ldb == b->ldb && a->ldc == b->ldc && a->epi == b->epi && a->ab_type == b->ab_type &&
	       a->compute == b->compute &&
	       a->align_a == b->align_a && a->align_b == b->align_b && a->align_c == b->align_c;
}

/* The plan for this key, made on first use; NULL only without memory. */
static lt_plan *plan_for(ph_gemm_rank *g, const lt_plan *key)
{
	for (int i = 0; i < g->nplans; i++)
		if (same_key(&g->plans[i], key))
			return &g->plans[i];
	if (g->nplans == g->cap) {
		int cap = g->cap ? 2 * g->cap : 16;
		lt_plan *n = (lt_plan *)realloc(g->plans, (size_t)cap * sizeof *n);
		if (!n)
			return NULL;
		g->plans = n;
		g->cap = cap;
	}
	lt_plan *p = &g->plans[g->nplans++];
	*p = *key;
	plan_make(g, p);
	return p;
}

/* Once per process: say that a fused product took the slow path, which a
 * benchmark reader wants to know and a test does not. */
static void note_refusal(const lt_plan *p, cublasStatus_t s)
{
	static int said;
	if (said)
		return;
	said = 1;
	fprintf(stderr, "pipehost: cuBLASLt refused a %dx%dx%d product with a fused epilogue (%s); "
			"such products run unfused\n", p->M, p->N, p->K, ph_blas_status(s));
}

/* gemm_ex and gemm_bf16 with an epilogue: flags as gemm_bf16's. */
static int gemm_ex_typed(const ph_ctx *ctx, int flags, int ta, int tb, int M, int N, int K, const void *A, int lda,
			 const void *B, int ldb, float *C, int ldc, int epi, const float *bias, float *aux, ph_err *err)
{
	ph_gemm_rank *g = (ph_gemm_rank *)ctx->gpu;
	const int with_bias = epi == PH_EPI_BIAS || epi == PH_EPI_BIAS_GELU || epi == PH_EPI_BIAS_ADD;
	const int with_aux = epi == PH_EPI_BIAS_GELU || epi == PH_EPI_DGELU || epi == PH_EPI_BIAS_ADD;
	const int aux_attr = epi == PH_EPI_BIAS_GELU || epi == PH_EPI_DGELU; /* else aux is cuBLAS's C */
	if (epi != PH_EPI_NONE && !with_bias && !with_aux)
		return ph_fail(err, PH_EINTERNAL, "gemm_ex: unknown epilogue %d", epi);
	if (with_bias && !bias)
		return ph_fail(err, PH_EINTERNAL, "gemm_ex: epilogue without a bias");
	if (with_aux && !aux)
		return ph_fail(err, PH_EINTERNAL, "gemm_ex: GELU epilogue without an aux matrix");
	operands o;
	int rc = resolve(ctx, flags, ta, tb, M, N, K, A, lda, 0, B, ldb, 0, 1, &o, err);
	if (rc)
		return rc;
	/* cuBLASLt wants 16-byte vectors for bias and aux and an aux leading
	 * dimension that is a multiple of 8; below 16 bytes of alignment the
	 * plain product serves as well. */
	const uint32_t al_a = alignment(o.a), al_b = alignment(o.b), al_c = alignment(C),
		       al_x = with_aux ? alignment(aux) : 256; /* aux is read or written like C */
	int lt_ok = g->use_lt && epi != PH_EPI_NONE && M > 0 && N > 0 && K > 0 &&
		    (!with_bias || alignment(bias) >= 16) && al_a >= 16 && al_b >= 16 && al_c >= 16 &&
		    (!with_aux || (al_x >= 16 && ldc % 8 == 0));
	if (lt_ok) {
		lt_plan key;
		memset(&key, 0, sizeof key);
		key.ta = ta;
		key.tb = tb;
		key.M = M;
		key.N = N;
		key.K = K;
		key.lda = o.lda;
		key.ldb = o.ldb;
		key.ldc = ldc;
		key.epi = epi;
		key.ab_type = o.type;
		key.compute = o.compute;
		key.align_a = al_a;
		key.align_b = al_b;
		key.align_c = al_c < al_x ? al_c : al_x;
		lt_plan *p = plan_for(g, &key);
		if (!p)
			return ph_fail(err, PH_ENOMEM, "gemm_ex: out of memory for a cuBLASLt plan");
		if (p->usable) {
			const float one = 1.f, zero = 0.f;
			cublasStatus_t s = CUBLAS_STATUS_SUCCESS;
			if (with_bias)
				s = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
								   sizeof bias);
			if (s == CUBLAS_STATUS_SUCCESS && aux_attr)
				s = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux,
								   sizeof aux);
			/* BIAS_ADD: the residual is cuBLAS's C with beta = 1, D is ours */
			const int add = epi == PH_EPI_BIAS_ADD;
			if (s == CUBLAS_STATUS_SUCCESS)
				s = cublasLtMatmul(g->lt, p->op, &one, o.b, p->la, o.a, p->lb, add ? &one : &zero,
						   add ? aux : C, p->lc, C, p->lc, &p->algo, g->workspace,
						   LT_WORKSPACE_BYTES, (cudaStream_t)ctx->stream);
			if (s == CUBLAS_STATUS_SUCCESS)
				return PH_OK;
			/* refused at the call (nothing was queued): from now on this
			 * shape takes the unfused path, the same every run */
			note_refusal(p, s);
			p->usable = 0;
			plan_release(p);
		}
	}
	return gemm_ex_unfused(ctx, ta, tb, M, N, K, &o, C, ldc, epi, bias, aux, err);
}

/* ---------------------------------------------------------------- */

static int svc_gemm_ex(const ph_ctx *ctx, int ta, int tb, int M, int N, int K, const float *A, int lda,
		       const float *B, int ldb, float *C, int ldc, int epi, const float *bias, float *aux, ph_err *err)
{
	return gemm_ex_typed(ctx, 0, ta, tb, M, N, K, A, lda, B, ldb, C, ldc, epi, bias, aux, err);
}

static int svc_gemm_bf16(const ph_ctx *ctx, int flags, int ta, int tb, int M, int N, int K, float alpha,
			 const void *A, int lda, const void *B, int ldb, float beta, float *C, int ldc, int epi,
			 const float *bias, float *aux, ph_err *err)
{
	if (ctx->precision != PH_PREC_BF16)
		return ph_fail(err, PH_EINTERNAL, "gemm_bf16: bf16 operands in a product at fp32 precision");
	if (flags & ~(PH_GEMM_A_BF16 | PH_GEMM_B_BF16))
		return ph_fail(err, PH_EINTERNAL, "gemm_bf16: unknown flags 0x%x", (unsigned)flags);
	if (epi != PH_EPI_NONE) {
		if (alpha != 1.f || beta != 0.f)
			return ph_fail(err, PH_EINTERNAL, "gemm_bf16: an epilogue needs alpha 1 and beta 0");
		return gemm_ex_typed(ctx, flags, ta, tb, M, N, K, A, lda, B, ldb, C, ldc, epi, bias, aux, err);
	}
	operands o;
	int rc = resolve(ctx, flags, ta, tb, M, N, K, A, lda, 0, B, ldb, 0, 1, &o, err);
	return rc ? rc : gemm_resolved(ctx, ta, tb, M, N, K, alpha, &o, beta, C, ldc, 0, 1, err);
}

static void svc_reuse_operand(const ph_ctx *ctx, const float *p)
{
	((ph_gemm_rank *)ctx->gpu)->reuse = p;
}

int ph_gemm_open(ph_gemm_rank **out, ph_err *err)
{
	*out = NULL;
	ph_gemm_rank *g = (ph_gemm_rank *)calloc(1, sizeof *g);
	if (!g)
		return ph_fail(err, PH_ENOMEM, "out of memory");
	g->api.struct_size = sizeof(ph_gpu_api);
	g->api.gemm = svc_gemm;
	g->api.gemm_ex = svc_gemm_ex;
	g->api.reuse_operand = svc_reuse_operand;
	g->api.gemm_bf16 = svc_gemm_bf16;
	const char *env = getenv("PIPEHOST_GEMM_LT");
	g->use_lt = !(env && strcmp(env, "0") == 0);
	g->cast = ph_gemm_casts();
	if (g->use_lt) {
		cublasStatus_t s = cublasLtCreate(&g->lt);
		if (s != CUBLAS_STATUS_SUCCESS) {
			free(g);
			return ph_fail(err, PH_EINTERNAL, "cannot create a cuBLASLt handle: %s", ph_blas_status(s));
		}
		cudaError_t e = cudaMalloc(&g->workspace, LT_WORKSPACE_BYTES);
		if (e != cudaSuccess) {
			cublasLtDestroy(g->lt);
			free(g);
			return ph_fail(err, PH_ENOMEM, "cuBLASLt workspace (%zu MiB): %s", LT_WORKSPACE_BYTES >> 20,
				       cudaGetErrorString(e));
		}
	}
	*out = g;
	return PH_OK;
}

/* After the rank's stream has drained (the backend synchronises first). */
void ph_gemm_close(ph_gemm_rank *g)
{
	if (!g)
		return;
	for (int i = 0; i < g->nplans; i++)
		plan_release(&g->plans[i]);
	free(g->plans);
	ph_bf16_stage_free(&g->stage[0]);
	ph_bf16_stage_free(&g->stage[1]);
	if (g->workspace)
		cudaFree(g->workspace);
	if (g->lt)
		cublasLtDestroy(g->lt);
	free(g);
}

int ph_gemm_casts(void)
{
	const char *env = getenv("PIPEHOST_GEMM_CAST");
	return !(env && strcmp(env, "0") == 0);
}

const ph_gpu_api *ph_gemm_services(const ph_gemm_rank *g)
{
	return &g->api;
}
