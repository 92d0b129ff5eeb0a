/* SPDX-License-Identifier: MIT */
/*
 * The split column sums of plugins/layers/cuda_ops.cuh (the GPU's bias and
 * layernorm weight gradients, ph_k_colsum_acc_ws, ph_k_colsum_cast_ws,
 * ph_k_layernorm_bwd_weight_ws) against a replay of their order on the
 * host, bit for bit: each slice's rows summed by PH_CSS_LANES lanes in row
 * order, a tree over the lanes, the slices in order, then added to what
 * out held.  So a row counted twice or lost, a slice's bounds off by one, a
 * lane's partial dropped or a race in the tree shows as a wrong bit, at any
 * precision's tolerance.  Shapes: one row, rows that leave the last slice
 * short or empty, more rows than PH_CSS_SLICES slices of PH_CSS_MIN_ROWS,
 * columns that leave a block part-empty.  Run by tests/test-cuda-sums.sh
 * in the emulator build (tests/cuemu), which builds it with cuemu-cc.sh
 * --cuh-dir=plugins/layers; prints a line per check, exits non-zero on a
 * failure.
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_ops.cuh"

static int failed;
static void check(int ok, const char *what)
{
	printf("%s - %s\n", ok ? "ok" : "not ok", what);
	failed += !ok;
}

/* a reproducible spread of magnitudes and signs, so that order matters */
static float value(uint64_t i, uint64_t salt)
{
	uint64_t z = (i + 1) * 0x9e3779b97f4a7c15ull ^ salt;
	z = (z ^ (z >> 31)) * 0xbf58476d1ce4e5b9ull;
	z ^= z >> 29;
	const double u = (double)(z >> 11) / 9007199254740992.0; /* [0, 1) */
	return (float)((u - 0.5) * ldexp(1.0, (int)(z % 17) - 8));
}

/* bf16 round to nearest even, as __float2bfloat16_rn (finite inputs) */
static uint16_t bf16_bits(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	u += 0x7fffu + ((u >> 16) & 1u);
	return (uint16_t)(u >> 16);
}

static float bf16_value(uint16_t b)
{
	const uint32_t u = (uint32_t)b << 16;
	float f;
	memcpy(&f, &u, 4);
	return f;
}

/* The kernels' order on the host.  term(i, c): row i's term of column c. */
template <typename F> static float replay(int rows, int c, F term)
{
	const int S = ph_colsum_slices(rows), span = (rows + S - 1) / S;
	float total = 0.0f;
	for (int s = 0; s < S; s++) {
		const int lo = s * span, hi = lo + span < rows ? lo + span : rows;
		float lane[PH_CSS_LANES];
		for (int ty = 0; ty < PH_CSS_LANES; ty++) {
			float a = 0.0f;
			for (int i = lo + ty; i < hi; i += PH_CSS_LANES)
				a += term(i, c);
			lane[ty] = a;
		}
		for (int h = PH_CSS_LANES / 2; h > 0; h >>= 1)
			for (int ty = 0; ty < h; ty++)
				lane[ty] += lane[ty + h];
		total += lane[0];
	}
	return total;
}

static void *dev(size_t bytes)
{
	void *p = NULL;
	if (cudaMalloc(&p, bytes) != cudaSuccess) {
		printf("not ok - cudaMalloc %zu bytes\n", bytes);
		exit(1);
	}
	return p;
}

static int same_bits(const float *a, const float *b, int n)
{
	return memcmp(a, b, (size_t)n * sizeof(float)) == 0;
}

static void colsum_case(int rows, int cols, int bf16_in)
{
	const size_t n = (size_t)rows * cols;
	float *hx = (float *)malloc(n * sizeof(float)), *hout = (float *)malloc(cols * sizeof(float));
	float *want = (float *)malloc(cols * sizeof(float)), *got = (float *)malloc(cols * sizeof(float));
	uint16_t *h16 = (uint16_t *)malloc(n * sizeof(uint16_t)), *got16 = (uint16_t *)malloc(n * sizeof(uint16_t));
	for (size_t i = 0; i < n; i++) {
		hx[i] = value(i, 0x51);
		h16[i] = bf16_bits(hx[i]);
	}
	for (int c = 0; c < cols; c++)
		hout[c] = value((uint64_t)c, 0x77);
	float *x = (float *)dev(n * sizeof(float)), *out = (float *)dev(cols * sizeof(float));
	__nv_bfloat16 *x16 = (__nv_bfloat16 *)dev(n * 2);
	float *ws = (float *)dev(ph_colsum_ws_floats((size_t)cols) * sizeof(float));
	cudaMemcpy(out, hout, cols * sizeof(float), cudaMemcpyHostToDevice);
	char what[160];
	if (bf16_in) {
		cudaMemcpy(x16, h16, n * 2, cudaMemcpyHostToDevice);
		ph_k_colsum_acc_ws(0, (const __nv_bfloat16 *)x16, rows, cols, out, ws);
		for (int c = 0; c < cols; c++)
			want[c] = hout[c] + replay(rows, c, [&](int i, int j) { return bf16_value(h16[(size_t)i * cols + j]); });
		cudaMemcpy(got, out, cols * sizeof(float), cudaMemcpyDeviceToHost);
		snprintf(what, sizeof what, "bf16 column sums, %d x %d (%d slices), out += them: the replay's bits", rows,
			 cols, ph_colsum_slices(rows));
		check(cudaDeviceSynchronize() == cudaSuccess && same_bits(got, want, cols), what);
	} else {
		cudaMemcpy(x, hx, n * sizeof(float), cudaMemcpyHostToDevice);
		ph_k_colsum_cast_ws(0, x, rows, cols, out, x16, ws);
		for (int c = 0; c < cols; c++)
			want[c] = hout[c] + replay(rows, c, [&](int i, int j) { return hx[(size_t)i * cols + j]; });
		cudaMemcpy(got, out, cols * sizeof(float), cudaMemcpyDeviceToHost);
		cudaMemcpy(got16, x16, n * 2, cudaMemcpyDeviceToHost);
		snprintf(what, sizeof what, "fp32 column sums, %d x %d (%d slices), out += them: the replay's bits", rows,
			 cols, ph_colsum_slices(rows));
		check(cudaDeviceSynchronize() == cudaSuccess && same_bits(got, want, cols), what);
		snprintf(what, sizeof what, "fp32 column sums, %d x %d: the bf16 copy written in the same pass", rows, cols);
		check(memcmp(got16, h16, n * 2) == 0, what);
		/* the copy alone (no sums): every element still written */
		cudaMemset(x16, 0xff, n * 2);
		ph_k_colsum_cast_ws(0, x, rows, cols, (float *)NULL, x16, ws);
		cudaMemcpy(got16, x16, n * 2, cudaMemcpyDeviceToHost);
		snprintf(what, sizeof what, "%d x %d: the bf16 copy without sums", rows, cols);
		check(cudaDeviceSynchronize() == cudaSuccess && memcmp(got16, h16, n * 2) == 0, what);
		/* and a sanity bound: the split sum is the sum (double, loose) */
		double worst = 0.0;
		for (int c = 0; c < cols; c++) {
			double s = 0.0, mag = 0.0;
			for (int i = 0; i < rows; i++) {
				s += hx[(size_t)i * cols + c];
				mag += fabs(hx[(size_t)i * cols + c]);
			}
			const double e = fabs((double)got[c] - hout[c] - s) / (mag + fabs(hout[c]) + 1e-30);
			worst = e > worst ? e : worst;
		}
		snprintf(what, sizeof what, "%d x %d: within %.1e of the double sum (relative to the terms' magnitude)",
			 rows, cols, worst);
		check(worst < 1e-5, what);
	}
	cudaFree(x);
	cudaFree(out);
	cudaFree(x16);
	cudaFree(ws);
	free(hx);
	free(hout);
	free(want);
	free(got);
	free(h16);
	free(got16);
}

static void ln_case(int rows, int d, int which)
{
	const size_t n = (size_t)rows * d;
	float *hdy = (float *)malloc(n * 4), *hx = (float *)malloc(n * 4), *hm = (float *)malloc(rows * 4),
	      *hr = (float *)malloc(rows * 4), *hg = (float *)malloc(d * 4), *hb = (float *)malloc(d * 4),
	      *got = (float *)malloc(d * 4), *want = (float *)malloc(d * 4);
	for (size_t i = 0; i < n; i++) {
		hdy[i] = value(i, 0x13);
		hx[i] = value(i, 0x29);
	}
	for (int i = 0; i < rows; i++) {
		hm[i] = value((uint64_t)i, 0x31) * 0.1f;
		hr[i] = 1.0f + fabsf(value((uint64_t)i, 0x43));
	}
	for (int c = 0; c < d; c++) {
		hg[c] = value((uint64_t)c, 0x55);
		hb[c] = value((uint64_t)c, 0x67);
	}
	float *dy = (float *)dev(n * 4), *x = (float *)dev(n * 4), *m = (float *)dev(rows * 4), *r = (float *)dev(rows * 4);
	float *dg = (float *)dev(d * 4), *db = (float *)dev(d * 4);
	float *ws = (float *)dev(ph_colsum_ws_floats((size_t)d) * sizeof(float));
	cudaMemcpy(dy, hdy, n * 4, cudaMemcpyHostToDevice);
	cudaMemcpy(x, hx, n * 4, cudaMemcpyHostToDevice);
	cudaMemcpy(m, hm, rows * 4, cudaMemcpyHostToDevice);
	cudaMemcpy(r, hr, rows * 4, cudaMemcpyHostToDevice);
	cudaMemcpy(dg, hg, d * 4, cudaMemcpyHostToDevice);
	cudaMemcpy(db, hb, d * 4, cudaMemcpyHostToDevice);
	/* which: 3 both, 1 dg alone, 2 db alone */
	ph_k_layernorm_bwd_weight_ws(0, dy, x, m, r, which & 1 ? dg : (float *)NULL, which & 2 ? db : (float *)NULL, rows,
				     d, ws);
	char what[160];
	for (int k = 0; k < 2; k++) {
		const int on = which & (1 << k);
		for (int c = 0; c < d; c++) {
			const float base = k ? hb[c] : hg[c];
			want[c] = !on ? base
				      : k ? base + replay(rows, c, [&](int i, int j) { return hdy[(size_t)i * d + j]; })
					  : base + replay(rows, c, [&](int i, int j) {
						    const float xhat = (hx[(size_t)i * d + j] - hm[i]) * hr[i];
						    return hdy[(size_t)i * d + j] * xhat;
					    });
		}
		cudaMemcpy(got, k ? db : dg, d * 4, cudaMemcpyDeviceToHost);
		snprintf(what, sizeof what, "layernorm %s, %d x %d (%d slices)%s: the replay's bits", k ? "db" : "dg", rows,
			 d, ph_colsum_slices(rows), on ? "" : ", not asked for: untouched");
		check(cudaDeviceSynchronize() == cudaSuccess && same_bits(got, want, d), what);
	}
	cudaFree(dy);
	cudaFree(x);
	cudaFree(m);
	cudaFree(r);
	cudaFree(dg);
	cudaFree(db);
	cudaFree(ws);
	free(hdy);
	free(hx);
	free(hm);
	free(hr);
	free(hg);
	free(hb);
	free(got);
	free(want);
}

int main(void)
{
	/* rows: 1; 7 (one slice, lanes left empty); 33 (two slices, the
	 * second of 16); 100 (4 of 25: no lane's count a multiple of the
	 * unroll); 2049 and 4100 (more than 64 slices' worth: 64 slices, the
	 * last one short); cols: 1, 31, 33, 96 */
	static const int shapes[][2] = { { 1, 1 }, { 7, 33 }, { 33, 31 }, { 100, 96 }, { 2049, 33 }, { 4100, 40 } };
	for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
		colsum_case(shapes[k][0], shapes[k][1], 0);
		colsum_case(shapes[k][0], shapes[k][1], 1);
		ln_case(shapes[k][0], shapes[k][1], 3);
	}
	ln_case(100, 33, 1);
	ln_case(100, 33, 2);
	check(ph_colsum_slices(1) == 1 && ph_colsum_slices(33) == 2 && ph_colsum_slices(1 << 20) == PH_CSS_SLICES,
	      "slices: 1 for one row, 2 for 33, at most PH_CSS_SLICES");
	return failed ? 1 : 0;
}
