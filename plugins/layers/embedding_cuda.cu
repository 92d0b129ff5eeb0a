/* SPDX-License-Identifier: MIT */
/* embedding's CUDA twin (embedding.c), bit for bit the CPU's results.
 *
 *   x [B, T] token ids as floats; tokens [vocab, D]; positions [T, D]
 *   forward:  y[b][t] = tokens[id(b, t)] + positions[t]          y [B, T, D]
 *   backward: dx = 0; dtokens[id] += dy rows, dpositions[t] += dy rows,
 *             each element summed in the CPU's (b, t) order, no atomics on floats.
 *
 * dtokens, deterministically and without sorting: a table first[vocab]
 * (device scratch: vocab int32) gets each token's first row by an integer
 * atomicMin (order-free); the block of a token's first row then walks the
 * rows from there in order, 256 at a time, finds the ones with its token by
 * a ballot, and adds their dy into a register, from the old gradient on:
 * ((g + dy_r1) + dy_r2) + ..., the CPU's additions.
 *
 * An id must be an integer in [0, vocab); the CPU refuses anything else with
 * PH_EINVAL before touching an output, which a kernel cannot report without
 * a synchronisation.  Here a bad id makes its output row NaN and adds
 * nothing to the gradients (no out-of-bounds access).
 */
#include <limits.h>
#include <math.h>

#include "cuda_common.cuh"
#include "embedding_state.h"

#define EMB_THREADS 256

/* the token id of a float, or -1 when it is not one (embedding.c's test) */
static __device__ __forceinline__ int emb_id(float v, int vocab)
{
	return v >= 0.0f && v < (float)vocab && v == floorf(v) ? (int)v : -1;
}

/* x [N] ids, tok [vocab, D], pos [T, D] -> y [N, D]; one block per row, grid-stride */
static __global__ void emb_fwd_kernel(const float *x, const float *tok, const float *pos, float *y,
				      int N, int T, int D, int vocab)
{
	for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
		const int id = emb_id(x[n], vocab);
		const float *e = tok + (int64_t)(id < 0 ? 0 : id) * D, *p = pos + (n % T) * (int64_t)D;
		float *yr = y + n * D;
		for (int c = threadIdx.x; c < D; c += blockDim.x)
			yr[c] = id < 0 ? __int_as_float(0x7fffffff) : __fadd_rn(e[c], p[c]);
	}
}

/* first[id] = min { n : id(n) == id }; first was set to 0x7f7f7f7f */
static __global__ void emb_first_kernel(const float *x, int *first, int N, int vocab)
{
	PH_GRID_STRIDE(n, N) {
		const int id = emb_id(x[n], vocab);
		if (id >= 0)
			atomicMin(first + id, (int)n);
	}
}

/*
 * gtok[id] += sum of dy[m] over rows m with id(m) == id, in row order.
 * Grid (rows, column chunks of EMB_THREADS); only the block of a token's
 * first row does anything.  dy [N, D], gtok [vocab, D].
 */
static __global__ void emb_dtok_kernel(const float *x, const int *first, const float *dy, float *gtok,
				       int N, int D, int vocab)
{
	__shared__ unsigned hits[EMB_THREADS / 32];
	const int n = blockIdx.x;
	const int id = emb_id(x[n], vocab);
	if (id < 0 || first[id] != n) /* the same for the whole block */
		return;
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	for (int64_t c0 = (int64_t)blockIdx.y * EMB_THREADS; c0 < D; c0 += (int64_t)gridDim.y * EMB_THREADS) {
		const int64_t c = c0 + threadIdx.x;
		float *g = gtok + (int64_t)id * D + c;
		float acc = c < D ? *g : 0.0f;
		for (int m0 = n; m0 < N; m0 += EMB_THREADS) {
			const int m = m0 + threadIdx.x;
			const int hit = m < N && emb_id(x[m], vocab) == id;
			const unsigned b = __ballot_sync(0xffffffffu, hit);
			if (lane == 0)
				hits[warp] = b;
			__syncthreads();
			if (c < D)
				for (int w = 0; w < EMB_THREADS / 32; w++)
					for (unsigned bits = hits[w]; bits;) {
						/* up to 8 rows' loads in flight, then their adds in row order */
						float v[8];
						int cnt = 0;
#pragma unroll
						for (int q = 0; q < 8; q++)
							if (bits) {
								const int r = m0 + w * 32 + __ffs(bits) - 1;
								bits &= bits - 1;
								v[q] = dy[(int64_t)r * D + c];
								cnt = q + 1;
							}
#pragma unroll
						for (int q = 0; q < 8; q++)
							if (q < cnt)
								acc = __fadd_rn(acc, v[q]);
					}
			__syncthreads(); /* hits is rewritten next round */
		}
		if (c < D)
			*g = acc;
	}
}

/* gpos[t][c] += sum over b in order of dy[b][t][c]; dy [B, T, D], gpos [T, D] */
static __global__ void emb_dpos_kernel(const float *dy, float *gpos, int B, int T, int D)
{
	const int64_t TD = (int64_t)T * D;
	PH_GRID_STRIDE(e, TD) {
		float acc = gpos[e];
		for (int b = 0; b < B; b++)
			acc = __fadd_rn(acc, dy[b * TD + e]);
		gpos[e] = acc;
	}
}

static int emb_check(int64_t N, ph_err *err)
{
	if (N >= 0x7f7f7f7f)
		return ph_fail(err, PH_EUNSUPPORTED, "embedding: %lld tokens in one call; too many on CUDA",
			       (long long)N);
	return PH_OK;
}

static int embedding_cuda_forward(void *state, const ph_ctx *ctx, float *const *params, const float *x, float *y,
				  ph_err *err)
{
	const embedding_state *s = (const embedding_state *)state;
	const int T = s->T, vocab = s->vocab, D = s->dim;
	const int64_t N = (int64_t)ctx->batch * T;
	int rc = emb_check(N, err);
	if (rc || N <= 0)
		return rc;
	const unsigned grid = (unsigned)(N < 65535 * 8 ? N : 65535 * 8);
	emb_fwd_kernel<<<grid, EMB_THREADS, 0, PH_STREAM(ctx)>>>(x, params[0], params[1], y, (int)N, T, D,
								 vocab);
	PH_CUDA_CHECK_LAUNCH(err, "embedding: forward");
	return PH_OK;
}

/* dx = 0 (skipped when NULL) */
static int embedding_cuda_backward_input(void *state, const ph_ctx *ctx, float *const *params, const float *x,
					 const float *y, const float *dy, float *dx, ph_err *err)
{
	const int T = ((const embedding_state *)state)->T;
	const int64_t N = (int64_t)ctx->batch * T;
	if (!dx || N <= 0)
		return PH_OK;
	PH_CUDA_TRY(err, cudaMemsetAsync(dx, 0, (size_t)N * sizeof(float), PH_STREAM(ctx)));
	return PH_OK;
}

/* grads[0] (tokens) +=, grads[1] (positions) +=; ctx->scratch: vocab int32 */
static int embedding_cuda_backward_weight(void *state, const ph_ctx *ctx, float *const *params,
					  float *const *grads, const float *x, const float *y, const float *dy,
					  ph_err *err)
{
	const embedding_state *s = (const embedding_state *)state;
	const int T = s->T, vocab = s->vocab, D = s->dim;
	const int64_t N = (int64_t)ctx->batch * T;
	int rc = emb_check(N, err);
	if (rc || N <= 0)
		return rc;
	if (!ctx->scratch)
		return ph_fail(err, PH_EINTERNAL, "embedding: no device scratch for the token table");
	cudaStream_t st = PH_STREAM(ctx);
	int *first = (int *)ctx->scratch;
	PH_CUDA_TRY(err, cudaMemsetAsync(first, 0x7f, (size_t)vocab * sizeof(int), st));
	emb_first_kernel<<<ph_blocks(N), 256, 0, st>>>(x, first, (int)N, vocab);
	PH_CUDA_CHECK_LAUNCH(err, "embedding: backward (first rows)");
	const int64_t chunks = (D + EMB_THREADS - 1) / EMB_THREADS;
	const dim3 grid((unsigned)N, (unsigned)(chunks < 65535 ? chunks : 65535));
	emb_dtok_kernel<<<grid, EMB_THREADS, 0, st>>>(x, first, dy, grads[0], (int)N, D, vocab);
	PH_CUDA_CHECK_LAUNCH(err, "embedding: backward (tokens)");
	emb_dpos_kernel<<<ph_blocks((int64_t)T * D), 256, 0, st>>>(dy, grads[1], ctx->batch, T, D);
	PH_CUDA_CHECK_LAUNCH(err, "embedding: backward (positions)");
	return PH_OK;
}

/* The weight half, then the input half, as embedding.c's backward. */
static int embedding_cuda_backward(void *state, const ph_ctx *ctx, float *const *params, float *const *grads,
				   const float *x, const float *y, const float *dy, float *dx, ph_err *err)
{
	int rc = embedding_cuda_backward_weight(state, ctx, params, grads, x, y, dy, err);
	return rc ? rc : embedding_cuda_backward_input(state, ctx, params, x, y, dy, dx, err);
}

PH_LAYER_CUDA_OPS(embedding_cuda_ops) = { .struct_size = sizeof(ph_layer_device_ops),
					  .forward = embedding_cuda_forward,
					  .backward = embedding_cuda_backward,
					  .backward_input = embedding_cuda_backward_input,
					  .backward_weight = embedding_cuda_backward_weight };
