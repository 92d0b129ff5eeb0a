/* SPDX-License-Identifier: MIT */
/*
 * cublaslt.cc: the emulator's cuBLASLt (the subset in include/cublasLt.h).
 *
 *   D = epi(alpha op(A) op(B) + beta C + bias),  column-major, fp32 data
 *   (A and B may be bf16, both, under CUBLAS_COMPUTE_32F)
 *
 * The product is cublas.cc's: accumulated in double, rounded once to fp32,
 * inputs first rounded to bf16 under CUBLAS_COMPUTE_32F_FAST_16BF.  Then,
 * in fp32 as cuBLASLt's epilogue does: bias[i] added to row i of D (a
 * vector of D's rows: pipehost's bias over the columns of its row-major
 * C); GELU_AUX_BIAS stores that pre-activation to aux (leading dimension
 * aux_ld) and writes gelu_tanh of it to D; DGELU multiplies the product by
 * gelu_tanh' of aux (the forward's pre-activation, read).
 *
 * Stricter than the library where that finds our mistakes: the heuristic
 * refuses what the documentation says cuBLASLt refuses (types other than
 * fp32 throughout or bf16 A and B with fp32 C and D; an aux leading dimension that is not a multiple of 8 or shorter than D's
 * rows, shapes that do not chain), and cublasLtMatmul refuses pointers less
 * aligned than the preference declared when the algorithm was chosen,
 * descriptors whose shapes changed since, and a missing bias or aux.
 * Queued on the given stream like any kernel.  cuemu_lt_matmuls() counts
 * the fused products, for tests that check the fused path was taken.
 */
#include <cublasLt.h>

#include <math.h>
#include <stdint.h>

#include <atomic>
#include <string.h>

#include "cuemu-internal.h"

#define EXPORT extern "C" __attribute__((visibility("default")))

namespace {

const uint64_t ALGO_MAGIC = 0x6375656d754c7431ull; /* "cuemuLt1" */

struct lt_desc {
	cublasComputeType_t compute;
	cublasOperation_t transa, transb;
	uint32_t epilogue;
	const float *bias;
	float *aux;
	int64_t aux_ld;
};

struct lt_layout {
	cudaDataType type;
	uint64_t rows, cols;
	int64_t ld;
};

struct lt_pref {
	uint64_t workspace;
	uint32_t reduction_mask;
	uint32_t align[4]; /* A, B, C, D */
};

static_assert(sizeof(lt_desc) <= sizeof(cublasLtMatmulDescOpaque_t), "descriptor fits");
static_assert(sizeof(lt_layout) <= sizeof(cublasLtMatrixLayoutOpaque_t), "layout fits");
static_assert(sizeof(lt_pref) <= sizeof(cublasLtMatmulPreferenceOpaque_t), "preference fits");

lt_desc *D_(cublasLtMatmulDesc_t d) { return reinterpret_cast<lt_desc *>(d); }
lt_layout *L_(cublasLtMatrixLayout_t l) { return reinterpret_cast<lt_layout *>(l); }
lt_pref *P_(cublasLtMatmulPreference_t p) { return reinterpret_cast<lt_pref *>(p); }

bool epilogue_known(uint32_t e)
{
	return e == CUBLASLT_EPILOGUE_DEFAULT || e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU ||
	       e == CUBLASLT_EPILOGUE_GELU_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX ||
	       e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || e == CUBLASLT_EPILOGUE_DGELU;
}

bool has_bias(uint32_t e) { return e & CUBLASLT_EPILOGUE_BIAS; }
bool has_gelu(uint32_t e) { return e & CUBLASLT_EPILOGUE_GELU; }
bool has_aux(uint32_t e) { return (e & 128) != 0; }
bool is_dgelu(uint32_t e) { return (e & 64) != 0; }

/* The shapes of one product: m x n = (m x k) (k x n), or 0 when they do not chain. */
bool shapes(const lt_desc *o, const lt_layout *a, const lt_layout *b, const lt_layout *c, const lt_layout *d,
	    uint64_t *m, uint64_t *n, uint64_t *k)
{
	*m = d->rows;
	*n = d->cols;
	uint64_t am = o->transa == CUBLAS_OP_N ? a->rows : a->cols, ak = o->transa == CUBLAS_OP_N ? a->cols : a->rows;
	uint64_t bk = o->transb == CUBLAS_OP_N ? b->rows : b->cols, bn = o->transb == CUBLAS_OP_N ? b->cols : b->rows;
	*k = ak;
	return am == *m && bn == *n && bk == ak && c->rows == *m && c->cols == *n && a->ld >= (int64_t)a->rows &&
	       b->ld >= (int64_t)b->rows && c->ld >= (int64_t)c->rows && d->ld >= (int64_t)d->rows && a->ld >= 1 &&
	       b->ld >= 1 && c->ld >= 1 && d->ld >= 1;
}

bool fp32(const lt_layout *l) { return l->type == CUDA_R_32F; }

/* A and B: both fp32, or both bf16 under plain fp32 compute */
bool inputs_ok(const lt_desc *o, const lt_layout *a, const lt_layout *b)
{
	return (fp32(a) && fp32(b)) ||
	       (a->type == CUDA_R_16BF && b->type == CUDA_R_16BF && o->compute == CUBLAS_COMPUTE_32F);
}

/* An attribute's value into its field: the size must be the field's, as
 * the library checks it (a wrong size is INVALID_VALUE). */
template <typename F> cublasStatus_t set_field(F *field, const void *buf, size_t size)
{
	if (size != sizeof *field)
		return CUBLAS_STATUS_INVALID_VALUE;
	memcpy(field, buf, sizeof *field);
	return CUBLAS_STATUS_SUCCESS;
}

bool aligned(const void *p, uint32_t bytes) { return bytes == 0 || (uintptr_t)p % bytes == 0; }

float gelu_tanh(float x)
{
	return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
}

float gelu_tanh_grad(float x)
{
	float t = tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x));
	float dt = 0.7978845608028654f * (1.0f + 3.0f * 0.044715f * x * x);
	return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * dt;
}

} /* namespace */

/* How many products took each fused epilogue: tests ask (through dlsym,
 * so that the same test runs on a real GPU) whether the fused path ran. */
static std::atomic<unsigned long> n_bias{ 0 }, n_gelu{ 0 }, n_dgelu{ 0 }, n_beta{ 0 };

/* which: 0 BIAS, 1 GELU_AUX_BIAS, 2 DGELU, 3 any of them with beta != 0
 * (a matrix added in the same pass) */
EXPORT unsigned long cuemu_lt_matmuls(int which)
{
	switch (which) {
	case 0: return n_bias.load();
	case 1: return n_gelu.load();
	case 2: return n_dgelu.load();
	default: return n_beta.load();
	}
}

struct cublasLtContext {
	int unused;
};

EXPORT cublasStatus_t cublasLtCreate(cublasLtHandle_t *h)
{
	if (!h)
		return CUBLAS_STATUS_INVALID_VALUE;
	*h = new cublasLtContext{0};
	return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasLtDestroy(cublasLtHandle_t h)
{
	if (!h)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	delete h;
	return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t compute,
					       cudaDataType_t scale)
{
	if (!d || scale != CUDA_R_32F)
		return CUBLAS_STATUS_INVALID_VALUE;
	auto *o = new cublasLtMatmulDescOpaque_t();
	*D_(o) = lt_desc{ compute, CUBLAS_OP_N, CUBLAS_OP_N, CUBLASLT_EPILOGUE_DEFAULT, nullptr, nullptr, 0 };
	*d = o;
	return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d)
{
	delete d;
	return CUBLAS_STATUS_SUCCESS;
}

/* Sizes as the library checks them: a wrong size is INVALID_VALUE. */
EXPORT cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr,
						     const void *buf, size_t size)
{
	if (!d || !buf)
		return CUBLAS_STATUS_INVALID_VALUE;
	lt_desc *o = D_(d);
	switch (attr) {
	case CUBLASLT_MATMUL_DESC_TRANSA:
	case CUBLASLT_MATMUL_DESC_TRANSB: {
		int32_t v;
		if (set_field(&v, buf, size) != CUBLAS_STATUS_SUCCESS || (v != CUBLAS_OP_N && v != CUBLAS_OP_T))
			return CUBLAS_STATUS_INVALID_VALUE;
		(attr == CUBLASLT_MATMUL_DESC_TRANSA ? o->transa : o->transb) = (cublasOperation_t)v;
		return CUBLAS_STATUS_SUCCESS;
	}
	case CUBLASLT_MATMUL_DESC_EPILOGUE: return set_field(&o->epilogue, buf, size);
	case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return set_field(&o->bias, buf, size);
	case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: return set_field(&o->aux, buf, size);
	case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: return set_field(&o->aux_ld, buf, size);
	}
	return CUBLAS_STATUS_INVALID_VALUE;
}

EXPORT cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType type, uint64_t rows,
						 uint64_t cols, int64_t ld)
{
	if (!l)
		return CUBLAS_STATUS_INVALID_VALUE;
	auto *o = new cublasLtMatrixLayoutOpaque_t();
	*L_(o) = lt_layout{ type, rows, cols, ld };
	*l = o;
	return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l)
{
	delete l;
	return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p)
{
	if (!p)
		return CUBLAS_STATUS_INVALID_VALUE;
	auto *o = new cublasLtMatmulPreferenceOpaque_t();
	*P_(o) = lt_pref{ 0, CUBLASLT_REDUCTION_SCHEME_MASK, { 256, 256, 256, 256 } };
	*p = o;
	return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p)
{
	delete p;
	return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
							   cublasLtMatmulPreferenceAttributes_t attr, const void *buf,
							   size_t size)
{
	if (!p || !buf)
		return CUBLAS_STATUS_INVALID_VALUE;
	lt_pref *o = P_(p);
	switch (attr) {
	case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: return set_field(&o->workspace, buf, size);
	case CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK: return set_field(&o->reduction_mask, buf, size);
	case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
	case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
	case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
	case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES:
		return set_field(&o->align[attr - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES], buf, size);
	}
	return CUBLAS_STATUS_INVALID_VALUE;
}

/* One algorithm when the request is one we (and cuBLASLt) take; it records
 * the shapes and alignments it was chosen for. */
EXPORT cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t op,
						     cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
						     cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
						     cublasLtMatmulPreference_t pref, int requested,
						     cublasLtMatmulHeuristicResult_t results[], int *returned)
{
	if (!h)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	if (!op || !a || !b || !c || !d || !pref || requested < 1 || !results || !returned)
		return CUBLAS_STATUS_INVALID_VALUE;
	*returned = 0;
	const lt_desc *o = D_(op);
	uint64_t m, n, k;
	if (!shapes(o, L_(a), L_(b), L_(c), L_(d), &m, &n, &k))
		return CUBLAS_STATUS_INVALID_VALUE;
	if (!inputs_ok(o, L_(a), L_(b)) || !fp32(L_(c)) || !fp32(L_(d)) || !epilogue_known(o->epilogue))
		return CUBLAS_STATUS_NOT_SUPPORTED;
	if (o->compute != CUBLAS_COMPUTE_32F && o->compute != CUBLAS_COMPUTE_32F_FAST_16BF &&
	    o->compute != CUBLAS_COMPUTE_32F_FAST_TF32)
		return CUBLAS_STATUS_NOT_SUPPORTED;
	if (has_aux(o->epilogue) && (o->aux_ld < (int64_t)m || o->aux_ld % 8 != 0))
		return CUBLAS_STATUS_NOT_SUPPORTED;
	const lt_pref *p = P_(pref);
	memset(&results[0], 0, sizeof results[0]);
	uint64_t *g = results[0].algo.data;
	g[0] = ALGO_MAGIC;
	g[1] = m;
	g[2] = n;
	g[3] = k;
	g[4] = o->epilogue;
	for (int i = 0; i < 4; i++)
		g[5] |= (uint64_t)(p->align[i] & 0xffffu) << (16 * i);
	results[0].workspaceSize = 0;
	results[0].state = CUBLAS_STATUS_SUCCESS;
	results[0].wavesCount = 1.0f;
	*returned = 1;
	return CUBLAS_STATUS_SUCCESS;
}

EXPORT cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t op, const void *alpha, const void *A,
				     cublasLtMatrixLayout_t a, const void *B, cublasLtMatrixLayout_t b,
				     const void *beta, const void *C, cublasLtMatrixLayout_t c, void *D,
				     cublasLtMatrixLayout_t d, const cublasLtMatmulAlgo_t *algo, void *workspace,
				     size_t workspace_bytes, cudaStream_t stream)
{
	(void)workspace;
	(void)workspace_bytes;
	if (!h)
		return CUBLAS_STATUS_NOT_INITIALIZED;
	if (!op || !alpha || !beta || !A || !B || !D || !a || !b || !c || !d || !algo || algo->data[0] != ALGO_MAGIC)
		return CUBLAS_STATUS_INVALID_VALUE;
	const lt_desc o = *D_(op);
	const lt_layout la = *L_(a), lb = *L_(b), lc = *L_(c), ld = *L_(d);
	uint64_t m, n, k;
	if (!shapes(&o, &la, &lb, &lc, &ld, &m, &n, &k) || algo->data[1] != m || algo->data[2] != n ||
	    algo->data[3] != k || algo->data[4] != o.epilogue)
		return CUBLAS_STATUS_INVALID_VALUE;
	const uint64_t al = algo->data[5];
	if (!aligned(A, al & 0xffff) || !aligned(B, (al >> 16) & 0xffff) || (C && !aligned(C, (al >> 32) & 0xffff)) ||
	    !aligned(D, (al >> 48) & 0xffff))
		return CUBLAS_STATUS_INVALID_VALUE;
	if ((has_bias(o.epilogue) && !o.bias) || (has_aux(o.epilogue) && !o.aux))
		return CUBLAS_STATUS_INVALID_VALUE;
	const float alf = *(const float *)alpha, bef = *(const float *)beta;
	if (bef != 0.f && !C)
		return CUBLAS_STATUS_INVALID_VALUE;
	if (!inputs_ok(&o, &la, &lb))
		return CUBLAS_STATUS_INVALID_VALUE;
	const int bf16 = o.compute == CUBLAS_COMPUTE_32F_FAST_16BF, stored_bf16 = la.type == CUDA_R_16BF;
	if (stored_bf16)
		cuemu::count_bf16_product();
	if (bef != 0.f && o.epilogue != CUBLASLT_EPILOGUE_DEFAULT)
		n_beta++;
	if (is_dgelu(o.epilogue))
		n_dgelu++;
	else if (has_gelu(o.epilogue))
		n_gelu++;
	else if (has_bias(o.epilogue))
		n_bias++;
	const void *pa = A, *pb = B;
	const float *pc = (const float *)C;
	float *pd = (float *)D;
	cuemu::enqueue(stream, [=] {
		for (uint64_t j = 0; j < n; j++)
			for (uint64_t i = 0; i < m; i++) {
				double acc = 0;
				for (uint64_t p = 0; p < k; p++) {
					float x = cuemu::operand_at(pa, o.transa == CUBLAS_OP_N ? i + p * la.ld : p + i * la.ld,
								    stored_bf16);
					float y = cuemu::operand_at(pb, o.transb == CUBLAS_OP_N ? p + j * lb.ld : j + p * lb.ld,
								    stored_bf16);
					if (bf16) {
						x = cuemu::round_bf16(x);
						y = cuemu::round_bf16(y);
					}
					acc += (double)x * (double)y;
				}
				float v = alf * (float)acc;
				if (bef != 0.f)
					v += bef * pc[i + j * lc.ld];
				if (has_bias(o.epilogue))
					v += o.bias[i];
				if (is_dgelu(o.epilogue)) {
					v *= gelu_tanh_grad(o.aux[i + j * o.aux_ld]);
				} else if (has_gelu(o.epilogue)) {
					if (has_aux(o.epilogue))
						o.aux[i + j * o.aux_ld] = v;
					v = gelu_tanh(v);
				}
				pd[i + j * ld.ld] = v;
			}
	});
	return CUBLAS_STATUS_SUCCESS;
}
