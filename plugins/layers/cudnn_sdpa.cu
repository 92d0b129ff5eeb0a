/* SPDX-License-Identifier: MIT */
/*
 * cudnn_sdpa.cu: the causal attention core through cuDNN's fused flash
 * attention, the graph PyTorch's scaled_dot_product_attention takes on
 * Hopper.  Why: on the H200 (2026-11-28) cuDNN's fused backward took 2.95
 * ms of PyTorch's GPT-2 step where flash_attention.cuh's three kernels take
 * 22.0 ms of ours (docs/gpu-session.md).  Interface and contract:
 * cudnn_sdpa.h; the graphs: cudnn_sdpa_graph.cpp.
 *
 * Here: the bf16 copies cuDNN reads (qkv, and dO, and O where the layer
 * keeps att in fp32), the statistic between our log2 form and cuDNN's
 * natural log, the fp32 copies back, and the scratch they take.
 */
#include <stdlib.h>
#include <string.h>

#include <cuda_bf16.h>

#include "cudnn_sdpa.h"

int ph_sdpa_requested(void)
{
	const char *v = getenv("PIPEHOST_ATTN_CUDNN");
	return !v ? 0 : !strcmp(v, "1") ? 1 : !strcmp(v, "2") ? 2 : 0;
}

/* PIPEHOST_ATTN_CUDNN_GROUP=N: the backward over groups of at most N
 * samples even where more fit, so that a test of a few samples takes the
 * grouped path (offsets, the last group's own graph); 0 (unset) none. */
static int group_cap(void)
{
	const char *v = getenv("PIPEHOST_ATTN_CUDNN_GROUP");
	const long n = v ? strtol(v, NULL, 10) : 0;
	return n > 0 && n < 65536 ? (int)n : 0;
}

/* ---- element-wise passes ---- */

static __global__ void ph_sdpa_k_to_bf16(const float *x, __nv_bfloat16 *y, int64_t n)
{
	for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
		y[i] = __float2bfloat16_rn(x[i]);
}

static __global__ void ph_sdpa_k_to_f32(const __nv_bfloat16 *x, float *y, int64_t n)
{
	for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
		y[i] = __bfloat162float(x[i]);
}

/* y = x * a (y may be x) */
static __global__ void ph_sdpa_k_scale(const float *x, float *y, float a, int64_t n)
{
	for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
		y[i] = x[i] * a;
}

static unsigned grid_for(int64_t n)
{
	const int64_t b = (n + 255) / 256;
	return (unsigned)(b < 4096 ? (b > 0 ? b : 1) : 4096);
}

static int aligned16(const void *p)
{
	return ((uintptr_t)p & 15) == 0;
}

#define PH_SDPA_LOG2E 1.4426950408889634f
#define PH_SDPA_LN2 0.6931471805599453f

/* ---- the caller's free memory ---- */

static size_t span_bytes(const ph_sdpa_span *work, int nwork)
{
	size_t have = 0;
	for (int i = 0; i < nwork; i++)
		have += work[i].bytes;
	return have;
}

/* The blocks of sizes[0..n) in the spans (sdpa_place.h), or PH_ENOMEM with
 * the sizes where they do not fit. */
static int place(const ph_sdpa_span *work, int nwork, const size_t *sizes, int n, void **at, const char *what,
		 ph_err *err)
{
	if (nwork < 0 || nwork > PH_SDPA_SPANS)
		return ph_fail(err, PH_EINTERNAL, "attention: %d scratch spans for cuDNN's attention", nwork);
	if (ph_sdpa_place(work, nwork, sizes, n, at))
		return PH_OK;
	size_t want = 0, biggest = 0;
	for (int i = 0; i < n; i++) {
		want += sizes[i];
		biggest = sizes[i] > biggest ? sizes[i] : biggest;
	}
	return ph_fail(err, PH_ENOMEM,
		       "attention: cuDNN's fused attention %s needs %zu bytes of scratch (bf16 copies and "
		       "workspace, the largest block %zu), the layer has %zu free in %d span(s); unset "
		       "PIPEHOST_ATTN_CUDNN",
		       what, want, biggest, span_bytes(work, nwork), nwork);
}

#define SDPA_LAUNCHED(what)                                                                                \
	do {                                                                                               \
		cudaError_t ce_ = cudaGetLastError();                                                      \
		if (ce_ != cudaSuccess)                                                                    \
			return ph_fail(err, PH_EINTERNAL, "attention: %s: %s", what, cudaGetErrorString(ce_)); \
	} while (0)

/* dst [n] bf16 from src: rounded from fp32, or copied where src16 (a
 * bf16 tensor that is not 16-byte aligned). */
static int to_bf16(cudaStream_t st, const void *src, int src16, __nv_bfloat16 *dst, int64_t n, const char *what,
		   ph_err *err)
{
	cudaError_t ce;
	if (src16) {
		ce = cudaMemcpyAsync(dst, src, (size_t)n * 2, cudaMemcpyDeviceToDevice, st);
	} else {
		ph_sdpa_k_to_bf16<<<grid_for(n), 256, 0, st>>>((const float *)src, dst, n);
		ce = cudaGetLastError();
	}
	if (ce != cudaSuccess)
		return ph_fail(err, PH_EINTERNAL, "attention: cuDNN attention: %s to bf16: %s", what,
			       cudaGetErrorString(ce));
	return PH_OK;
}

/* The reverse: dst [n] from bf16 src, widened to fp32, or copied where dst16. */
static int from_bf16(cudaStream_t st, const __nv_bfloat16 *src, void *dst, int dst16, int64_t n, const char *what,
		     ph_err *err)
{
	cudaError_t ce;
	if (dst16) {
		ce = cudaMemcpyAsync(dst, src, (size_t)n * 2, cudaMemcpyDeviceToDevice, st);
	} else {
		ph_sdpa_k_to_f32<<<grid_for(n), 256, 0, st>>>(src, (float *)dst, n);
		ce = cudaGetLastError();
	}
	if (ce != cudaSuccess)
		return ph_fail(err, PH_EINTERNAL, "attention: cuDNN attention: %s from bf16: %s", what,
			       cudaGetErrorString(ce));
	return PH_OK;
}

/*
 * Forward: qkv [B, T, 3d] fp32 -> att [B, T, d] (bf16 where att16, else
 * fp32 through a bf16 copy), L2 [B, H, T].
 */
int ph_sdpa_forward(cudaStream_t st, int B, int T, int H, int hd, const float *qkv, void *att, int att16, float *L2,
		    const ph_sdpa_span *work, int nwork, ph_err *err)
{
	if (B <= 0)
		return PH_OK;
	int rc;
	const void *graph;
	size_t wsb;
	if ((rc = ph_sdpa_graph(st, 0, B, T, H, hd, &graph, &wsb, err)))
		return rc;
	const int64_t d = (int64_t)H * hd, nqkv = (int64_t)B * T * 3 * d, no = (int64_t)B * T * d;
	/* cuDNN wants 16-byte aligned tensors; the layer's saved regions are
	 * only 8-aligned where B*T is odd, so O goes through a copy there,
	 * and the statistic always does (it is scaled on the way anyway) */
	const int o_direct = att16 && aligned16(att);
	const int64_t nl = (int64_t)B * H * T;
	enum { Q16, O16, STATS, WS, NBLOCKS };
	const size_t sizes[NBLOCKS] = { (size_t)nqkv * 2, o_direct ? 0 : (size_t)no * 2, (size_t)nl * sizeof(float),
					wsb };
	void *at[NBLOCKS];
	if ((rc = place(work, nwork, sizes, NBLOCKS, at, "forward", err)))
		return rc;
	__nv_bfloat16 *q16 = (__nv_bfloat16 *)at[Q16];
	__nv_bfloat16 *o16 = o_direct ? (__nv_bfloat16 *)att : (__nv_bfloat16 *)at[O16];
	float *stats = (float *)at[STATS];
	void *ws = at[WS];

	if ((rc = to_bf16(st, qkv, 0, q16, nqkv, "qkv", err)))
		return rc;
	void *ptrs[PH_SDPA_DV + 1] = { nullptr };
	ptrs[PH_SDPA_Q] = q16;
	ptrs[PH_SDPA_K] = q16 + d;
	ptrs[PH_SDPA_V] = q16 + 2 * d;
	ptrs[PH_SDPA_O] = o16;
	ptrs[PH_SDPA_STATS] = stats;
	if ((rc = ph_sdpa_execute(graph, ptrs, ws, err)))
		return rc;
	ph_sdpa_k_scale<<<grid_for(nl), 256, 0, st>>>(stats, L2, PH_SDPA_LOG2E, nl);
	SDPA_LAUNCHED("cuDNN attention forward: the statistic to log2");
	return o_direct ? PH_OK : from_bf16(st, o16, att, att16, no, "att", err);
}

/*
 * Backward: datt [B, T, d] fp32 -> dqkv [B, T, 3d] (=; bf16 where dqkv16,
 * else fp32 through a bf16 copy), from qkv, L2 and the forward's att.
 */
int ph_sdpa_backward(cudaStream_t st, int B, int T, int H, int hd, const float *qkv, const float *L2,
		     const void *att, int att16, const float *datt, void *dqkv, int dqkv16, const ph_sdpa_span *work,
		     int nwork, ph_err *err)
{
	if (B <= 0)
		return PH_OK;
	int rc;
	const void *graph;
	size_t wsb;
	/* 1: the deterministic algorithm; 2 (PIPEHOST_ATTN_CUDNN=2): cuDNN's default */
	const int kind = ph_sdpa_requested() == 2 ? 2 : 1;
	const int64_t d = (int64_t)H * hd, nqkv = (int64_t)B * T * 3 * d, no = (int64_t)B * T * d;
	/* 16-byte alignment, as in the forward */
	const int o_direct = att16 && aligned16(att), g_direct = dqkv16 && aligned16(dqkv);
	enum { Q16, DO16, O16, G16, STATS, WS, NBLOCKS };
	size_t sizes[NBLOCKS] = { (size_t)nqkv * 2,
				  (size_t)no * 2,
				  o_direct ? 0 : (size_t)no * 2,
				  g_direct ? 0 : (size_t)nqkv * 2,
				  0, /* the statistic: set with the group */
				  0 };
	void *at[NBLOCKS];
	/* Samples a run: all of them where the workspace fits.  On Hopper
	 * the deterministic backward keeps dP in its workspace (cudnn-frontend
	 * 1.32, at every cuDNN unless CUDNN_FRONTEND_ATTN_DP_WORKSPACE_LIMIT
	 * says otherwise: B*H*T*T*2 bytes, 192 MiB at GPT-2's
	 * 8 x 1024, more than the layer's free scratch), so it runs over
	 * groups of samples, as ph_flash_backward does: the largest group,
	 * halving from B, whose workspace fits beside the copies.  A group's
	 * bf16 pointers stay 16-byte aligned (hd, so d, a multiple of 8: the
	 * frontend checks them at execute); its statistic is converted into
	 * the start of `stats` for each group, so that pointer is aligned
	 * whatever H*T is: cuDNN checks no Stats pointer, and a misaligned
	 * one gives wrong gradients on Hopper (cudnn-frontend 1.32's
	 * sdpa_support_surface.h). */
	if (nwork < 0 || nwork > PH_SDPA_SPANS)
		return ph_fail(err, PH_EINTERNAL, "attention: %d scratch spans for cuDNN's attention", nwork);
	int Bg = B;
	const int cap = group_cap(); /* PIPEHOST_ATTN_CUDNN_GROUP, for the tests */
	if (cap > 0 && cap < Bg)
		Bg = cap;
	int placed = 0;
	for (;;) {
		if ((rc = ph_sdpa_graph(st, kind, Bg, T, H, hd, &graph, &wsb, err)))
			return rc;
		sizes[WS] = wsb;
		sizes[STATS] = (size_t)Bg * H * T * sizeof(float); /* one group's at a time */
		if (Bg == 1)
			break; /* place() below says what did not fit */
		if ((placed = ph_sdpa_place(work, nwork, sizes, NBLOCKS, at)))
			break;
		Bg = (Bg + 1) / 2;
	}
	if (!placed && (rc = place(work, nwork, sizes, NBLOCKS, at, "backward", err)))
		return rc;
	__nv_bfloat16 *q16 = (__nv_bfloat16 *)at[Q16], *do16 = (__nv_bfloat16 *)at[DO16];
	const __nv_bfloat16 *o16 = o_direct ? (const __nv_bfloat16 *)att : (const __nv_bfloat16 *)at[O16];
	__nv_bfloat16 *g16 = g_direct ? (__nv_bfloat16 *)dqkv : (__nv_bfloat16 *)at[G16];
	float *stats = (float *)at[STATS];
	void *ws = at[WS];

	if ((rc = to_bf16(st, qkv, 0, q16, nqkv, "qkv", err)) || (rc = to_bf16(st, datt, 0, do16, no, "datt", err)) ||
	    (!o_direct && (rc = to_bf16(st, att, att16, (__nv_bfloat16 *)o16, no, "att", err))))
		return rc;
	const size_t ws_cap = wsb;
	for (int b0 = 0; b0 < B; b0 += Bg) {
		const int nb = B - b0 < Bg ? B - b0 : Bg;
		if (nb != Bg) { /* the last, smaller group: a graph of its own */
			if ((rc = ph_sdpa_graph(st, kind, nb, T, H, hd, &graph, &wsb, err)))
				return rc;
			if (wsb > ws_cap)
				return ph_fail(err, PH_ENOMEM,
					       "attention: cuDNN's backward for %d sample(s) needs %zu bytes of workspace, "
					       "more than the %zu for %d; unset PIPEHOST_ATTN_CUDNN",
					       nb, wsb, ws_cap, Bg);
		}
		/* the graphs' strides are per sample, so a group is an offset */
		const int64_t oq = (int64_t)b0 * T * 3 * d, oo = (int64_t)b0 * T * d, ol = (int64_t)b0 * H * T;
		const int64_t nlg = (int64_t)nb * H * T;
		ph_sdpa_k_scale<<<grid_for(nlg), 256, 0, st>>>(L2 + ol, stats, PH_SDPA_LN2, nlg);
		SDPA_LAUNCHED("cuDNN attention backward: the statistic to natural log");
		void *ptrs[PH_SDPA_DV + 1] = { nullptr };
		ptrs[PH_SDPA_Q] = q16 + oq;
		ptrs[PH_SDPA_K] = q16 + oq + d;
		ptrs[PH_SDPA_V] = q16 + oq + 2 * d;
		ptrs[PH_SDPA_O] = (void *)(o16 + oo);
		ptrs[PH_SDPA_DO] = do16 + oo;
		ptrs[PH_SDPA_STATS] = stats;
		ptrs[PH_SDPA_DQ] = g16 + oq;
		ptrs[PH_SDPA_DK] = g16 + oq + d;
		ptrs[PH_SDPA_DV] = g16 + oq + 2 * d;
		if ((rc = ph_sdpa_execute(graph, ptrs, ws, err)))
			return rc;
	}
	return g_direct ? PH_OK : from_bf16(st, g16, dqkv, dqkv16, nqkv, "dqkv", err);
}

