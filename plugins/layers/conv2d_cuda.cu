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
 * Precision: fp32 runs pin CUDNN_FMA_MATH (no TF32, as the host's GEMM);
 * bf16 runs allow the default math (TF32 tensor cores, fp32 accumulation).
 *
 * Bias add and bias gradient are our own kernels; the gradient is a fixed
 * shared-memory tree per filter, no atomics.
 */
#include <stdlib.h>

#include <cudnn.h>

#include "conv2d_state.h"
#include "cuda_common.cuh"

typedef struct {
	cudnnTensorDescriptor_t x, y;
	cudnnFilterDescriptor_t w;
	cudnnConvolutionDescriptor_t conv;
	int made;      /* the four descriptors exist; w and conv are set */
	int batch;     /* the x, y descriptors' batch; 0: not set yet */
	int precision; /* PH_PREC_* the algorithms below were picked for */
	/* per direction: picked yet (for this batch), algorithm, math, workspace bytes */
	int fwd_ok, data_ok, filt_ok;
	cudnnConvolutionFwdAlgo_t fwd;
	cudnnConvolutionBwdDataAlgo_t data;
	cudnnConvolutionBwdFilterAlgo_t filt;
	cudnnMathType_t fwd_math, data_math, filt_math;
	size_t fwd_ws, data_ws, filt_ws;
} conv2d_cuda;

#define DNN_TRY(err, what, call)                                                                            \
	do {                                                                                                \
		cudnnStatus_t st_ = (call);                                                                 \
		if (st_ != CUDNN_STATUS_SUCCESS)                                                            \
			return ph_fail((err), PH_EINTERNAL, "conv2d: %s: %s", (what), cudnnGetErrorString(st_)); \
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

extern "C" void conv2d_cuda_release(conv2d_state *s)
{
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
		c->fwd_ok = c->data_ok = c->filt_ok = 0;
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

/*
 * One direction's picker.  PERF: the _v7 result type; COUNT: how many
 * algorithms cuDNN has; QUERY(perf, n): the _v7 call; WS(algo, bytes): the
 * workspace query; FALLBACK: the deterministic default.  Fills algo, math,
 * ws of the direction.
 */
#define CONV2D_PICK(PERF, COUNT, QUERY, WS, FALLBACK, ALGO, MATH, BYTES, what)                           \
	do {                                                                                            \
		PERF perf_[COUNT];                                                                      \
		int n_ = 0;                                                                             \
		DNN_TRY(err, "math type", cudnnSetConvolutionMathType(c->conv, base_math(ctx)));        \
		if (QUERY(perf_, n_) != CUDNN_STATUS_SUCCESS)                                            \
			n_ = 0; /* no advice: the default below */                                       \
		for (int i_ = 0; i_ < n_; i_++) {                                                       \
			int m_ = usable_math(ctx, perf_[i_].mathType);                                  \
			size_t ws_ = 0;                                                                 \
			if (perf_[i_].status != CUDNN_STATUS_SUCCESS ||                                 \
			    perf_[i_].determinism != CUDNN_DETERMINISTIC || m_ < 0)                     \
				continue;                                                               \
			if (cudnnSetConvolutionMathType(c->conv, (cudnnMathType_t)m_) != CUDNN_STATUS_SUCCESS || \
			    WS(perf_[i_].algo, ws_) != CUDNN_STATUS_SUCCESS || ws_ > CONV2D_CUDA_WORKSPACE) \
				continue;                                                               \
			ALGO = perf_[i_].algo, MATH = (cudnnMathType_t)m_, BYTES = ws_;                 \
			return PH_OK;                                                                   \
		}                                                                                       \
		size_t ws_ = 0;                                                                         \
		DNN_TRY(err, "math type", cudnnSetConvolutionMathType(c->conv, base_math(ctx)));        \
		DNN_TRY(err, what " workspace", WS(FALLBACK, ws_));                                     \
		if (ws_ > CONV2D_CUDA_WORKSPACE)                                                        \
			return ph_fail(err, PH_EUNSUPPORTED,                                            \
				       "conv2d: no cuDNN " what " algorithm fits %zu bytes of workspace "  \
				       "(the default needs %zu)", (size_t)CONV2D_CUDA_WORKSPACE, ws_);   \
		ALGO = FALLBACK, MATH = base_math(ctx), BYTES = ws_;                                    \
		return PH_OK;                                                                           \
	} while (0)

static int pick_fwd(conv2d_cuda *c, const ph_ctx *ctx, ph_err *err)
{
	cudnnHandle_t h = (cudnnHandle_t)ctx->dnn;
#define Q(p, n) cudnnGetConvolutionForwardAlgorithm_v7(h, c->x, c->w, c->conv, c->y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &(n), (p))
#define WS(a, b) cudnnGetConvolutionForwardWorkspaceSize(h, c->x, c->w, c->conv, c->y, (a), &(b))
	CONV2D_PICK(cudnnConvolutionFwdAlgoPerf_t, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, Q, WS,
		    CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, c->fwd, c->fwd_math, c->fwd_ws, "forward");
#undef Q
#undef WS
}

static int pick_data(conv2d_cuda *c, const ph_ctx *ctx, ph_err *err)
{
	cudnnHandle_t h = (cudnnHandle_t)ctx->dnn;
#define Q(p, n) cudnnGetConvolutionBackwardDataAlgorithm_v7(h, c->w, c->y, c->conv, c->x, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &(n), (p))
#define WS(a, b) cudnnGetConvolutionBackwardDataWorkspaceSize(h, c->w, c->y, c->conv, c->x, (a), &(b))
	CONV2D_PICK(cudnnConvolutionBwdDataAlgoPerf_t, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, Q, WS,
		    CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, c->data, c->data_math, c->data_ws, "backward-data");
#undef Q
#undef WS
}

static int pick_filt(conv2d_cuda *c, const ph_ctx *ctx, ph_err *err)
{
	cudnnHandle_t h = (cudnnHandle_t)ctx->dnn;
#define Q(p, n) cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, c->x, c->y, c->conv, c->w, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &(n), (p))
#define WS(a, b) cudnnGetConvolutionBackwardFilterWorkspaceSize(h, c->x, c->y, c->conv, c->w, (a), &(b))
	CONV2D_PICK(cudnnConvolutionBwdFilterAlgoPerf_t, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, Q, WS,
		    CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, c->filt, c->filt_math, c->filt_ws, "backward-filter");
#undef Q
#undef WS
}

static int check_call(const conv2d_state *s, const ph_ctx *ctx, ph_err *err)
{
	if (ctx->batch < 0 || ctx->batch > s->max_batch)
		return ph_fail(err, PH_EINTERNAL, "conv2d: batch %d outside [0, %d] given at create", ctx->batch,
			       s->max_batch);
	return PH_OK;
}

/* The workspace: the layer's device scratch, which meta sized to the cap. */
static int workspace(const ph_ctx *ctx, size_t bytes, void **ws, ph_err *err)
{
	if (bytes && !ctx->scratch)
		return ph_fail(err, PH_EINTERNAL, "conv2d: no scratch for a %zu-byte cuDNN workspace", bytes);
	*ws = bytes ? ctx->scratch : NULL;
	return PH_OK;
}

/* ------------------------------------------------------------------ */
/* Entry points.                                                       */

/* y [B, F, OH, OW] = conv(x, W) (+ b) */
extern "C" int conv2d_cuda_forward(conv2d_state *s, const ph_ctx *ctx, float *const *params, const float *x,
				   float *y, ph_err *err)
{
	conv2d_cuda *c = NULL;
	void *ws = NULL;
	int rc = check_call(s, ctx, err);
	if (rc || ctx->batch == 0)
		return rc;
	if ((rc = prepare(s, ctx, &c, err)))
		return rc;
	if (!c->fwd_ok) {
		if ((rc = pick_fwd(c, ctx, err)))
			return rc;
		c->fwd_ok = 1;
	}
	if ((rc = workspace(ctx, c->fwd_ws, &ws, err)))
		return rc;
	const float one = 1.0f, zero = 0.0f;
	DNN_TRY(err, "math type", cudnnSetConvolutionMathType(c->conv, c->fwd_math));
	DNN_TRY(err, "forward",
		cudnnConvolutionForward((cudnnHandle_t)ctx->dnn, &one, c->x, x, c->w, params[0], c->conv, c->fwd, ws,
					c->fwd_ws, &zero, c->y, y));
	if (s->bias) {
		const int64_t n = ctx->batch;
		conv2d_bias_add_kernel<<<ph_blocks(n * s->F * s->ohw), 256, 0, PH_STREAM(ctx)>>>(y, params[1], n, s->F,
												  s->ohw);
		PH_CUDA_CHECK_LAUNCH(err, "conv2d: bias");
	}
	return PH_OK;
}

/* The I half: dx [B, C, H, W] = conv^T(dy, W), overwritten (beta = 0). */
extern "C" int conv2d_cuda_backward_input(conv2d_state *s, const ph_ctx *ctx, float *const *params,
					  const float *dy, float *dx, ph_err *err)
{
	conv2d_cuda *c = NULL;
	void *ws = NULL;
	int rc = check_call(s, ctx, err);
	if (rc || ctx->batch == 0 || !dx)
		return rc;
	if ((rc = prepare(s, ctx, &c, err)))
		return rc;
	if (!c->data_ok) {
		if ((rc = pick_data(c, ctx, err)))
			return rc;
		c->data_ok = 1;
	}
	if ((rc = workspace(ctx, c->data_ws, &ws, err)))
		return rc;
	const float one = 1.0f, zero = 0.0f;
	DNN_TRY(err, "math type", cudnnSetConvolutionMathType(c->conv, c->data_math));
	DNN_TRY(err, "backward data",
		cudnnConvolutionBackwardData((cudnnHandle_t)ctx->dnn, &one, c->w, params[0], c->y, dy, c->conv, c->data,
					     ws, c->data_ws, &zero, c->x, dx));
	return PH_OK;
}

/* The W half: dW += filter gradient (beta = 1), db += per-filter sums of dy. */
extern "C" int conv2d_cuda_backward_weight(conv2d_state *s, const ph_ctx *ctx, float *const *grads,
					   const float *x, const float *dy, ph_err *err)
{
	conv2d_cuda *c = NULL;
	void *ws = NULL;
	int rc = check_call(s, ctx, err);
	if (rc || ctx->batch == 0)
		return rc;
	if ((rc = prepare(s, ctx, &c, err)))
		return rc;
	if (!c->filt_ok) {
		if ((rc = pick_filt(c, ctx, err)))
			return rc;
		c->filt_ok = 1;
	}
	if ((rc = workspace(ctx, c->filt_ws, &ws, err)))
		return rc;
	const float one = 1.0f;
	DNN_TRY(err, "math type", cudnnSetConvolutionMathType(c->conv, c->filt_math));
	DNN_TRY(err, "backward filter",
		cudnnConvolutionBackwardFilter((cudnnHandle_t)ctx->dnn, &one, c->x, x, c->y, dy, c->conv, c->filt, ws,
					       c->filt_ws, &one, c->w, grads[0]));
	if (s->bias) {
		const unsigned blocks = (unsigned)(s->F < 65535 ? s->F : 65535);
		conv2d_bias_grad_kernel<<<blocks, CONV2D_BIAS_THREADS, 0, PH_STREAM(ctx)>>>(dy, grads[1], ctx->batch,
											     s->F, s->ohw);
		PH_CUDA_CHECK_LAUNCH(err, "conv2d: bias gradient");
	}
	return PH_OK;
}
