/* SPDX-License-Identifier: MIT */
/*
 * cuemu: the part of CUDA's warp matrix API (mma.h, nvcuda::wmma) that
 * pipehost uses, for 16x16x16 tiles of bf16 with float accumulators (see
 * tests/cuemu/README.md).
 *
 * On a GPU a fragment is spread over the 32 lanes of a warp in a layout
 * CUDA leaves unspecified.  Here every lane holds the whole tile, row-major
 * in x[] (num_elements = the tile's size), so the only portable uses of x[]
 * (the same operation on every element, whatever its position) behave as on
 * the GPU, and code that reads x[i] as element (i / 16, i % 16) works here
 * but not there: do not.
 *
 * The calls are warp-collective, as on the GPU:
 *  - load_matrix_sync and store_matrix_sync begin with a warp barrier
 *    (cuemu::syncwarp), so every lane arrives before any lane goes on;
 *  - a load reads the whole tile into each lane; a store writes only the
 *    lane's share (elements e with e % 32 == lane), as a GPU lane writes
 *    its own elements, so a lane that reads what other lanes stored without
 *    a __syncwarp in between reads stale data, and the thread orders
 *    (PH_CUEMU_ORDER) tell;
 *  - mma_sync works on the lane's own copies: no barrier needed.
 * Products: each a*b of two bf16 is exact in float; they are added to the
 * accumulator in float, k = 0..15 in order (a tensor core adds in another
 * order and may truncate: last-bit differences only).
 */
#ifndef CUEMU_MMA_H
#define CUEMU_MMA_H

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace nvcuda {
namespace wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

/* rows x cols of the tile a fragment of this use holds */
template <class Use, int M, int N, int K> struct shape_of;
template <int M, int N, int K> struct shape_of<matrix_a, M, N, K> {
	static constexpr int rows = M, cols = K;
};
template <int M, int N, int K> struct shape_of<matrix_b, M, N, K> {
	static constexpr int rows = K, cols = N;
};
template <int M, int N, int K> struct shape_of<accumulator, M, N, K> {
	static constexpr int rows = M, cols = N;
};

template <class Use, int M, int N, int K, class T, class Layout = void> class fragment {
	static_assert(M == 16 && N == 16 && K == 16, "cuemu's wmma has the 16x16x16 shape only");

public:
	static constexpr int rows = shape_of<Use, M, N, K>::rows, cols = shape_of<Use, M, N, K>::cols;
	static constexpr int num_elements = rows * cols;
	typedef T element_type;
	T x[num_elements]; /* the whole tile, row-major (see the top) */
};

template <class Use, int M, int N, int K, class T, class L>
static inline void fill_fragment(fragment<Use, M, N, K, T, L> &f, const T &v)
{
	for (int i = 0; i < f.num_elements; i++)
		f.x[i] = v;
}

namespace detail {
static inline unsigned lane() { return cuemu::cur->lane; }

/* tile element (r, c) from memory in the given layout */
template <class F, class T> static inline void load(F &f, const T *p, unsigned ldm, bool col)
{
	cuemu::syncwarp(0xffffffffu);
	for (int r = 0; r < F::rows; r++)
		for (int c = 0; c < F::cols; c++)
			f.x[r * F::cols + c] = col ? p[(size_t)c * ldm + r] : p[(size_t)r * ldm + c];
}
} /* namespace detail */

/* matrix_a / matrix_b: the layout is the fragment's */
template <class Use, int M, int N, int K, class T>
static inline void load_matrix_sync(fragment<Use, M, N, K, T, row_major> &f, const T *p, unsigned ldm)
{
	detail::load(f, p, ldm, false);
}
template <class Use, int M, int N, int K, class T>
static inline void load_matrix_sync(fragment<Use, M, N, K, T, col_major> &f, const T *p, unsigned ldm)
{
	detail::load(f, p, ldm, true);
}
/* accumulator: the layout is the call's */
template <int M, int N, int K, class T>
static inline void load_matrix_sync(fragment<accumulator, M, N, K, T> &f, const T *p, unsigned ldm, layout_t l)
{
	detail::load(f, p, ldm, l == mem_col_major);
}

template <int M, int N, int K, class T>
static inline void store_matrix_sync(T *p, const fragment<accumulator, M, N, K, T> &f, unsigned ldm, layout_t l)
{
	typedef fragment<accumulator, M, N, K, T> F;
	cuemu::syncwarp(0xffffffffu);
	for (int e = (int)detail::lane(); e < F::num_elements; e += 32) {
		const int r = e / F::cols, c = e % F::cols;
		p[l == mem_col_major ? (size_t)c * ldm + r : (size_t)r * ldm + c] = f.x[e];
	}
}

/* d = a b + c, in float; d may be c */
template <int M, int N, int K, class TA, class LA, class TB, class LB>
static inline void mma_sync(fragment<accumulator, M, N, K, float> &d,
			    const fragment<matrix_a, M, N, K, TA, LA> &a, const fragment<matrix_b, M, N, K, TB, LB> &b,
			    const fragment<accumulator, M, N, K, float> &c, bool satf = false)
{
	(void)satf;
	float out[M * N];
	for (int i = 0; i < M; i++)
		for (int j = 0; j < N; j++) {
			float s = c.x[i * N + j];
			for (int k = 0; k < K; k++)
				s += (float)a.x[i * K + k] * (float)b.x[k * N + j];
			out[i * N + j] = s;
		}
	for (int e = 0; e < M * N; e++)
		d.x[e] = out[e];
}

} /* namespace wmma */
} /* namespace nvcuda */

#endif
