/* SPDX-License-Identifier: MIT */
/*
 * conv2d_cuda.cu: the CUDA twin of conv2d.c, on cuDNN (legacy convolution
 * API, NCHW float, cross-correlation as PyTorch).
 *
 *   x [B, C, H, W] -> y [B, F, OH, OW];  weight [F, C, k, k];  bias [F]
 *
 *   forward          y  = conv(x, W) (+ b[f] on every pixel of plane f)
 *   backward_input   dx = conv^T(dy, W)                   (overwritten, beta 0)
 *   backward_weight  dW += conv_filter_grad(x, dy)        (beta 1: accumulate)
 *                    db += sum over samples and pixels of dy[:, f]
 *
 * Descriptors live in the layer state, made on the first CUDA call (a state
 * is used by one rank thread) and destroyed by conv2d.c's destroy().  The
 * x and y descriptors and the algorithms depend on the batch, so they are
 * set again when a call's batch (or precision) differs from the last one's.
 *
 * Algorithms: cuDNN's heuristics (the _v7 queries: no benchmarking, no
 * allocation, no synchronisation), the first result that is deterministic
 * (bitwise repeatable: the backward ALGO_0s and filter ALGO_3 use atomics
 * and are passed over), runs at the run's precision, and needs at most
 * CONV2D_CUDA_WORKSPACE bytes, the layer's device scratch (checked with
 * cudnnGet*WorkspaceSize); else PyTorch's deterministic defaults
 * (IMPLICIT_PRECOMP_GEMM, BWD_DATA_ALGO_1, BWD_FILTER_ALGO_1).
 * Precision: fp32 runs pin CUDNN_FMA_MATH (no TF32, as the host's GEMM)
 * and pass over the FFT and Winograd algorithms, which transform the
 * operands and round in the transformed domain: their errors grow with the
 * tile (well past a direct sum's ~1e-7 of the scale), where fp32 promises
 * the CPU's values to rounding (tests/test-cuda-layers.c's fp32 row);
 * bf16 runs allow the default math (TF32 tensor cores, fp32 accumulation)
 * and any deterministic algorithm.
 *
 * Bias add and bias gradient are our own kernels; the gradient is a fixed
 * shared-memory tree per filter, no atomics.
 */
#include <stdlib.h>

#include <cudnn.h>

#include "conv2d_state.h"
#include "cuda_common.cuh"

/* The three passes, each with its own algorithm. */
enum { CONV2D_FWD, CONV2D_DATA, CONV2D_FILT, CONV2D_PASSES };

/* One pass's pick, valid for the descriptors' batch and precision. */
typedef struct {
	int ok;               /* picked yet */
	int algo;             /* cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t of the pass */
	cudnnMathType_t math; /* set on the convolution descriptor before each run */
	size_t ws;            /* workspace bytes */
} conv2d_algo;

typedef struct {
	cudnnTensorDescriptor_t x, y;
	cudnnFilterDescriptor_t w;
	cudnnConvolutionDescriptor_t conv;
	int made;      /* the four descriptors exist; w and conv are set */
	int batch;     /* the x, y descriptors' batch; 0: not set yet */
	int precision; /* PH_PREC_* the algorithms below were picked for */
	conv2d_algo algo[CONV2D_PASSES];
} conv2d_cuda;

/* Each pass's name in messages and its deterministic default (PyTorch's). */
static const struct {
	const char *name;
	int fallback;
} conv2d_pass[CONV2D_PASSES] = {
	{ "forward", CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM },
	{ "backward-data", CUDNN_CONVOLUTION_BWD_DATA_ALGO_1 },
	{ "backward-filter", CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1 },
};

#define DNN_TRY(err, what, call)                                                                            \
	do {                                                                                                \
		cudnnStatus_t st_ = (call);                                                                 \
		if (st_ != CUDNN_STATUS_SUCCESS)                                                            \
			return ph_fail((err),                                                               \
				       st_ == CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED ||                   \
						       st_ == CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED    \
					       ? PH_ENOMEM                                                    \
					       : PH_EINTERNAL,                                                \
				       "conv2d: %s: %s", (what), cudnnGetErrorString(st_));                   \
	} while (0)

/* ------------------------------------------------------------------ */
/* Kernels.                                                            */

/* y [n, F, P] += b [F] on every pixel of plane f */
__global__ static void conv2d_bias_add_kernel(float *y, const float *b, int64_t n, int F, int P)
{
	PH_GRID_STRIDE(i, n * F * P)
		y[i] += b[(i / P) % F];
}

#define CONV2D_BIAS_THREADS 256

/*
 * db [F] += sum over samples q and pixels p of dy [n, F, P][q][f][p].
 * One block per filter (grid-stride over filters); thread t sums the
 * elements e = t, t + 256, ... of the plane's n*P (q = e / P, p = e % P),
 * then a fixed shared-memory tree: the same order every run.
 */
__global__ static void conv2d_bias_grad_kernel(const float *dy, float *db, int n, int F, int P)
{
	__shared__ float part[CONV2D_BIAS_THREADS];
	const int64_t NP = (int64_t)n * P;
	for (int f = blockIdx.x; f < F; f += gridDim.x) {
		float s = 0.0f;
		for (int64_t e = threadIdx.x; e < NP; e += CONV2D_BIAS_THREADS) {
			const int64_t q = e / P, p = e - q * P;
			s += dy[(q * F + f) * P + p];
		}
		part[threadIdx.x] = s;
		__syncthreads();
		for (int w = CONV2D_BIAS_THREADS / 2; w > 0; w >>= 1) {
			if (threadIdx.x < w)
				part[threadIdx.x] += part[threadIdx.x + w];
			__syncthreads();
		}
		if (threadIdx.x == 0)
			db[f] += part[0];
		__syncthreads(); /* part[] is reused by the next filter */
	}
}

/* ------------------------------------------------------------------ */
/* Descriptors and algorithms.                                         */

static void release(conv2d_cuda *c)
{
	if (!c)
		return;
	if (c->x)
		cudnnDestroyTensorDescriptor(c->x);
	if (c->y)
		cudnnDestroyTensorDescriptor(c->y);
	if (c->w)
		cudnnDestroyFilterDescriptor(c->w);
	if (c->conv)
		cudnnDestroyConvolutionDescriptor(c->conv);
	free(c);
}

/* ph_layer_device_ops.release: the descriptors (host-side calls only; any thread). */
static void conv2d_cuda_release(void *state)
{
	conv2d_state *s = (conv2d_state *)state;
	release((conv2d_cuda *)s->cuda);
	s->cuda = NULL;
}

/* The state's descriptors, made on first use; x and y set for ctx->batch. */
static int prepare(conv2d_state *s, const ph_ctx *ctx, conv2d_cuda **out, ph_err *err)
{
	if (!ctx->dnn)
		return ph_fail(err, PH_EINTERNAL, "conv2d: no cuDNN handle in the call context");
	conv2d_cuda *c = (conv2d_cuda *)s->cuda;
	if (!c) {
		if (!(c = (conv2d_cuda *)calloc(1, sizeof *c)))
			return ph_fail(err, PH_ENOMEM, "conv2d: out of memory");
		s->cuda = c; /* from here on destroy() frees whatever was made */
	}
	if (!c->made) { /* a failure half way leaves it 0: the next call retries */
		if (!c->x)
			DNN_TRY(err, "tensor descriptor", cudnnCreateTensorDescriptor(&c->x));
		if (!c->y)
			DNN_TRY(err, "tensor descriptor", cudnnCreateTensorDescriptor(&c->y));
		if (!c->w)
			DNN_TRY(err, "filter descriptor", cudnnCreateFilterDescriptor(&c->w));
		if (!c->conv)
			DNN_TRY(err, "convolution descriptor", cudnnCreateConvolutionDescriptor(&c->conv));
		DNN_TRY(err, "filter descriptor",
			cudnnSetFilter4dDescriptor(c->w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, s->F, s->C, s->k, s->k));
		DNN_TRY(err, "convolution descriptor",
			cudnnSetConvolution2dDescriptor(c->conv, s->p, s->p, s->s, s->s, 1, 1,
							CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
		c->made = 1;
	}
	if (c->batch != ctx->batch || c->precision != ctx->precision) {
		c->batch = 0; /* until both are set */
		for (int i = 0; i < CONV2D_PASSES; i++)
			c->algo[i].ok = 0;
		DNN_TRY(err, "input descriptor",
			cudnnSetTensor4dDescriptor(c->x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, ctx->batch, s->C, s->H, s->W));
		DNN_TRY(err, "output descriptor",
			cudnnSetTensor4dDescriptor(c->y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, ctx->batch, s->F, s->OH,
						   s->OW));
		int n, f, oh, ow;
		DNN_TRY(err, "output shape", cudnnGetConvolution2dForwardOutputDim(c->conv, c->x, c->w, &n, &f, &oh, &ow));
		if (n != ctx->batch || f != s->F || oh != s->OH || ow != s->OW)
			return ph_fail(err, PH_EINTERNAL, "conv2d: cuDNN output [%d, %d, %d, %d], expected [%d, %d, %d, %d]",
				       n, f, oh, ow, ctx->batch, s->F, s->OH, s->OW);
		c->batch = ctx->batch;
		c->precision = ctx->precision;
	}
	*out = c;
	return PH_OK;
}

/* The math the descriptor is given before a heuristic query. */
static cudnnMathType_t base_math(const ph_ctx *ctx)
{
	return ctx->precision == PH_PREC_BF16 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
}

/* The math to run a heuristic's result with, or -1 to pass it over: fp32
 * is FMA only; bf16 takes TF32 (default / tensor-op math) but not the
 * conversion to fp16 inside cuDNN. */
static int usable_math(const ph_ctx *ctx, cudnnMathType_t m)
{
	if (ctx->precision != PH_PREC_BF16)
		return m == CUDNN_FMA_MATH || m == CUDNN_DEFAULT_MATH ? (int)CUDNN_FMA_MATH : -1;
	return m == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION ? -1 : (int)m;
}

/* Whether pass d's algorithm sums the products directly (GEMM-like), not
 * through an FFT or Winograd transform: fp32 takes only these. */
static int direct_sum(int d, int algo)
{
	if (d == CONV2D_FWD)
		return algo != CUDNN_CONVOLUTION_FWD_ALGO_FFT && algo != CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING &&
		       algo != CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD && algo != CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED;
	if (d == CONV2D_DATA)
		return algo != CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT && algo != CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING &&
		       algo != CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD &&
		       algo != CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED;
	return algo != CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT && algo != CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING &&
	       algo != CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED;
}

/* The workspace pass d needs with algorithm algo, at the descriptor's current math. */
static cudnnStatus_t workspace_size(const conv2d_cuda *c, cudnnHandle_t h, int d, int algo, size_t *bytes)
{
	if (d == CONV2D_FWD)
		return cudnnGetConvolutionForwardWorkspaceSize(h, c->x, c->w, c->conv, c->y,
							       (cudnnConvolutionFwdAlgo_t)algo, bytes);
	if (d == CONV2D_DATA)
		return cudnnGetConvolutionBackwardDataWorkspaceSize(h, c->w, c->y, c->conv, c->x,
								    (cudnnConvolutionBwdDataAlgo_t)algo, bytes);
	return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, c->x, c->y, c->conv, c->w,
							      (cudnnConvolutionBwdFilterAlgo_t)algo, bytes);
}

static int picked(conv2d_algo *out, int algo, cudnnMathType_t math, size_t ws)
{
	out->algo = algo;
	out->math = math;
	out->ws = ws;
	out->ok = 1;
	return PH_OK;
}

/* Pass d's deterministic default at the base math, when no advice fits. */
static int pick_default(conv2d_cuda *c, const ph_ctx *ctx, int d, ph_err *err)
{
	const int algo = conv2d_pass[d].fallback;
	size_t ws = 0;
	DNN_TRY(err, "math type", cudnnSetConvolutionMathType(c->conv, base_math(ctx)));
	cudnnStatus_t st = workspace_size(c, (cudnnHandle_t)ctx->dnn, d, algo, &ws);
	if (st != CUDNN_STATUS_SUCCESS)
		return ph_fail(err, PH_EINTERNAL, "conv2d: %s workspace: %s", conv2d_pass[d].name, cudnnGetErrorString(st));
	if (ws > CONV2D_CUDA_WORKSPACE)
		return ph_fail(err, PH_EUNSUPPORTED,
			       "conv2d: no cuDNN %s algorithm fits %zu bytes of workspace (the default needs %zu)",
			       conv2d_pass[d].name, (size_t)CONV2D_CUDA_WORKSPACE, ws);
	return picked(&c->algo[d], algo, base_math(ctx), ws);
}

/* The first of cuDNN's n results (best first) that succeeded, is
 * deterministic, runs at the run's precision (under fp32: a direct sum)
 * and fits the workspace; else the default.  Perf: the pass's _v7 result
 * type (the three share fields). */
template <typename Perf>
static int pick_from(conv2d_cuda *c, const ph_ctx *ctx, int d, const Perf *perf, int n, ph_err *err)
{
	for (int i = 0; i < n; i++) {
		const int m = usable_math(ctx, perf[i].mathType);
		size_t ws = 0;
		if (perf[i].status != CUDNN_STATUS_SUCCESS || perf[i].determinism != CUDNN_DETERMINISTIC || m < 0)
			continue;
		if (ctx->precision != PH_PREC_BF16 && !direct_sum(d, (int)perf[i].algo))
			continue;
		/* the workspace depends on the math: ask with the one it will run with */
		if (cudnnSetConvolutionMathType(c->conv, (cudnnMathType_t)m) != CUDNN_STATUS_SUCCESS ||
		    workspace_size(c, (cudnnHandle_t)ctx->dnn, d, (int)perf[i].algo, &ws) != CUDNN_STATUS_SUCCESS ||
		    ws > CONV2D_CUDA_WORKSPACE)
			continue;
		return picked(&c->algo[d], (int)perf[i].algo, (cudnnMathType_t)m, ws);
	}
	return pick_default(c, ctx, d, err);
}

/* Pass d's algorithm, math and workspace into c->algo[d] (the rules are in
 * the comment at the top), from cuDNN's heuristics queried at the base
 * math.  The descriptor's math is left as the last query set it: the
 * caller sets the picked one before running. */
static int pick(conv2d_cuda *c, const ph_ctx *ctx, int d, ph_err *err)
{
	cudnnHandle_t h = (cudnnHandle_t)ctx->dnn;
	int n = 0;
	DNN_TRY(err, "math type", cudnnSetConvolutionMathType(c->conv, base_math(ctx)));
	if (d == CONV2D_FWD) {
		cudnnConvolutionFwdAlgoPerf_t p[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
		if (cudnnGetConvolutionForwardAlgorithm_v7(h, c->x, c->w, c->conv, c->y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
							   &n, p) != CUDNN_STATUS_SUCCESS)
			n = 0; /* no advice: the default */
		return pick_from(c, ctx, d, p, n, err);
	}
	if (d == CONV2D_DATA) {
		cudnnConvolutionBwdDataAlgoPerf_t p[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
		if (cudnnGetConvolutionBackwardDataAlgorithm_v7(h, c->w, c->y, c->conv, c->x,
								CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n,
								p) != CUDNN_STATUS_SUCCESS)
			n = 0;
		return pick_from(c, ctx, d, p, n, err);
	}
	cudnnConvolutionBwdFilterAlgoPerf_t p[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
	if (cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, c->x, c->y, c->conv, c->w,
							  CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n,
							  p) != CUDNN_STATUS_SUCCESS)
		n = 0;
	return pick_from(c, ctx, d, p, n, err);
}

/* The workspace: the layer's device scratch, which meta sized to the cap. */
static int workspace(const ph_ctx *ctx, size_t bytes, void **ws, ph_err *err)
{
	if (bytes && !ctx->scratch)
		return ph_fail(err, PH_EINTERNAL, "conv2d: no scratch for a %zu-byte cuDNN workspace", bytes);
	*ws = bytes ? ctx->scratch : NULL;
	return PH_OK;
}

/*
 * Everything pass d needs before its cuDNN call: the descriptors set for
 * ctx's batch, the algorithm picked (once per batch and precision), its
 * math set on the convolution descriptor, and its workspace in *ws.
 */
static int ready(conv2d_state *s, const ph_ctx *ctx, int d, conv2d_cuda **out, void **ws, ph_err *err)
{
	conv2d_cuda *c = NULL;
	int rc = prepare(s, ctx, &c, err);
	if (rc)
		return rc;
	if (!c->algo[d].ok && (rc = pick(c, ctx, d, err)))
		return rc;
	if ((rc = workspace(ctx, c->algo[d].ws, ws, err)))
		return rc;
	DNN_TRY(err, "math type", cudnnSetConvolutionMathType(c->conv, c->algo[d].math));
	*out = c;
	return PH_OK;
}

/* ------------------------------------------------------------------ */
/* Entry points.                                                       */

/* y [B, F, OH, OW] = conv(x, W) (+ b) */
static int conv2d_cuda_forward(void *state, const ph_ctx *ctx, float *const *params, const float *x, float *y,
			       ph_err *err)
{
	conv2d_state *s = (conv2d_state *)state;
	conv2d_cuda *c = NULL;
	void *ws = NULL;
	int rc;
	if (ctx->batch == 0)
		return PH_OK;
	if ((rc = ready(s, ctx, CONV2D_FWD, &c, &ws, err)))
		return rc;
	const conv2d_algo *a = &c->algo[CONV2D_FWD];
	const float one = 1.0f, zero = 0.0f;
	DNN_TRY(err, "forward",
		cudnnConvolutionForward((cudnnHandle_t)ctx->dnn, &one, c->x, x, c->w, params[0], c->conv,
					(cudnnConvolutionFwdAlgo_t)a->algo, ws, a->ws, &zero, c->y, y));
	if (s->bias) {
		const int64_t n = ctx->batch;
		conv2d_bias_add_kernel<<<ph_blocks(n * s->F * s->ohw), 256, 0, PH_STREAM(ctx)>>>(y, params[1], n, s->F,
												  s->ohw);
		PH_CUDA_CHECK_LAUNCH(err, "conv2d: bias");
	}
	return PH_OK;
}

/* The I half: dx [B, C, H, W] = conv^T(dy, W), overwritten (beta = 0). */
static int conv2d_cuda_backward_input(void *state, const ph_ctx *ctx, float *const *params, const float *x,
				      const float *y, const float *dy, float *dx, ph_err *err)
{
	conv2d_state *s = (conv2d_state *)state;
	conv2d_cuda *c = NULL;
	void *ws = NULL;
	int rc;
	if (ctx->batch == 0 || !dx)
		return PH_OK;
	if ((rc = ready(s, ctx, CONV2D_DATA, &c, &ws, err)))
		return rc;
	const conv2d_algo *a = &c->algo[CONV2D_DATA];
	const float one = 1.0f, zero = 0.0f;
	DNN_TRY(err, "backward data",
		cudnnConvolutionBackwardData((cudnnHandle_t)ctx->dnn, &one, c->w, params[0], c->y, dy, c->conv,
					     (cudnnConvolutionBwdDataAlgo_t)a->algo, ws, a->ws, &zero, c->x, dx));
	return PH_OK;
}

/* The W half: dW += filter gradient (beta = 1), db += per-filter sums of dy. */
static int conv2d_cuda_backward_weight(void *state, const ph_ctx *ctx, float *const *params, float *const *grads,
				       const float *x, const float *y, const float *dy, ph_err *err)
{
	conv2d_state *s = (conv2d_state *)state;
	conv2d_cuda *c = NULL;
	void *ws = NULL;
	int rc;
	if (ctx->batch == 0)
		return PH_OK;
	if ((rc = ready(s, ctx, CONV2D_FILT, &c, &ws, err)))
		return rc;
	const conv2d_algo *a = &c->algo[CONV2D_FILT];
	const float one = 1.0f;
	DNN_TRY(err, "backward filter",
		cudnnConvolutionBackwardFilter((cudnnHandle_t)ctx->dnn, &one, c->x, x, c->y, dy, c->conv,
					       (cudnnConvolutionBwdFilterAlgo_t)a->algo, ws, a->ws, &one, c->w, grads[0]));
	if (s->bias) {
		const unsigned blocks = (unsigned)(s->F < 65535 ? s->F : 65535);
		conv2d_bias_grad_kernel<<<blocks, CONV2D_BIAS_THREADS, 0, PH_STREAM(ctx)>>>(dy, grads[1], ctx->batch,
											     s->F, s->ohw);
		PH_CUDA_CHECK_LAUNCH(err, "conv2d: bias gradient");
	}
	return PH_OK;
}

/* The W half, then the I half, as conv2d.c's backward. */
static int conv2d_cuda_backward(void *state, const ph_ctx *ctx, float *const *params, float *const *grads,
				const float *x, const float *y, const float *dy, float *dx, ph_err *err)
{
	int rc = conv2d_cuda_backward_weight(state, ctx, params, grads, x, y, dy, err);
	return rc ? rc : conv2d_cuda_backward_input(state, ctx, params, x, y, dy, dx, err);
}

PH_LAYER_CUDA_OPS(conv2d_cuda_ops) = { .struct_size = sizeof(ph_layer_device_ops),
				       .forward = conv2d_cuda_forward,
				       .backward = conv2d_cuda_backward,
				       .backward_input = conv2d_cuda_backward_input,
				       .backward_weight = conv2d_cuda_backward_weight,
				       .release = conv2d_cuda_release };
