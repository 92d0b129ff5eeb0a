/* SPDX-License-Identifier: MIT */
/*
 * The fast CPU kernels of plugins/layers/transformer_ops.h against their
 * plain references, over awkward shapes (T not a multiple of 8 nor of the
 * attention's row block, one head, batch 1, head widths 1 and 3).
 *  - attention: tf_attn_forward/backward (causal row blocks, fused
 *    softmax) vs tf_attn_forward_ref/backward_ref (full squares, double
 *    softmax sums), with and without dropout;
 *  - gelu: the vectorised loops (whichever clone this CPU picks: avx512f,
 *    avx2 or the baseline) must equal the scalar tf_gelu/tf_gelu_grad
 *    bitwise (no clone may contract into FMA);
 *  - layernorm forward and backward vs a double-precision reference, and
 *    the fused backward bitwise equal to its two halves.
 * The header is compiled here directly, as each plugin compiles it.
 */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>
#include <pipehost/plugin.h>
#define TF_WANT_ATTENTION 1
#include "transformer_ops.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static float urand(float lo, float hi) /* xorshift64*, deterministic */
{
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	uint64_t r = rng_state * 0x2545f4914f6cdd1dull;
	return lo + (hi - lo) * (float)((r >> 40) * (1.0 / 16777216.0));
}

static float *randv(size_t n, float lo, float hi)
{
	float *v = malloc(n * sizeof *v);
	ck_assert_ptr_nonnull(v);
	for (size_t i = 0; i < n; i++)
		v[i] = urand(lo, hi);
	return v;
}

/* max |a - b| / (atol + rtol |b|) over n; <= 1 passes */
static double worst(const float *a, const float *b, size_t n, double atol, double rtol,
		    size_t *at)
{
	double w = 0;
	for (size_t i = 0; i < n; i++) {
		double e = fabs((double)a[i] - b[i]) / (atol + rtol * fabs((double)b[i]));
		if (!(e <= w)) { /* NaN counts as worst */
			w = isnan(e) ? INFINITY : e;
			*at = i;
		}
	}
	return w;
}

#define CLOSE(what, a, b, n, atol, rtol)                                                      \
	do {                                                                                  \
		size_t at_ = 0;                                                               \
		double w_ = worst(a, b, n, atol, rtol, &at_);                                 \
		ck_assert_msg(w_ <= 1.0, "%s: element %zu fast %.9g ref %.9g (T=%d H=%d hd=%d " \
			      "B=%d drop=%d)", what, at_, (double)(a)[at_], (double)(b)[at_], T, \
			      H, hd, B, drop);                                                \
	} while (0)

static const struct {
	int B, T, H, hd;
} att_shapes[] = {
	{ 1, 1, 1, 4 },  { 1, 7, 1, 3 },  { 2, 13, 3, 4 }, { 1, 33, 1, 8 },
	{ 2, 45, 2, 5 }, { 1, 70, 4, 1 }, { 3, 64, 2, 8 }, { 1, 97, 1, 16 },
};

START_TEST(test_attention_fast_vs_ref)
{
	const int B = att_shapes[_i / 2].B, T = att_shapes[_i / 2].T, H = att_shapes[_i / 2].H;
	const int hd = att_shapes[_i / 2].hd, d = H * hd, drop = _i % 2;
	tf_attn_geom g = { T, d, H, hd, drop ? 0.25f : 0.0f, drop ? 1.0f / 0.75f : 1.0f };
	const uint64_t key = 0x1234abcdull + (uint64_t)_i;
	const size_t nqkv = (size_t)B * T * 3 * d, nP = (size_t)B * H * T * T, na = (size_t)B * T * d;
	float *qkv = randv(nqkv, -2, 2), *datt = randv(na, -1, 1);
	float *P1 = randv(nP, 5, 6), *P2 = randv(nP, 5, 6); /* garbage in: all must be written */
	float *a1 = randv(na, 5, 6), *a2 = randv(na, 5, 6);
	float *d1 = randv(nqkv, 5, 6), *d2 = randv(nqkv, 5, 6);
	float *tmp = randv((size_t)2 * T * T, 7, 8);

	tf_attn_forward(&g, B, drop, key, qkv, P1, a1, tmp);
	tf_attn_forward_ref(&g, B, drop, key, qkv, P2, a2, tmp);
	CLOSE("P", P1, P2, nP, 1e-7, 1e-5);
	CLOSE("att", a1, a2, na, 1e-6, 1e-5);
	for (size_t e = 0; e < nP; e++) { /* causal: exact zeros above the diagonal */
		const size_t i = e / T % T, j = e % T;
		if (j > i)
			ck_assert_msg(P1[e] == 0.0f, "P[%zu][%zu] = %g above the diagonal", i, j,
				      (double)P1[e]);
	}
	for (size_t i = 0; i < (size_t)2 * T * T; i++)
		tmp[i] = urand(7, 8);
	tf_attn_backward(&g, B, drop, key, qkv, P2, datt, d1, tmp);
	for (size_t i = 0; i < (size_t)2 * T * T; i++)
		tmp[i] = urand(7, 8);
	tf_attn_backward_ref(&g, B, drop, key, qkv, P2, datt, d2, tmp);
	CLOSE("dqkv", d1, d2, nqkv, 1e-6, 1e-4);

	/* the same call twice gives the same bits (fixed reduction order) */
	float *a3 = randv(na, 5, 6), *P3 = randv(nP, 5, 6);
	tf_attn_forward(&g, B, drop, key, qkv, P3, a3, tmp);
	ck_assert(memcmp(P3, P1, nP * sizeof(float)) == 0 && memcmp(a3, a1, na * sizeof(float)) == 0);
	free(qkv), free(datt), free(P1), free(P2), free(P3), free(a1), free(a2), free(a3);
	free(d1), free(d2), free(tmp);
}
END_TEST

START_TEST(test_gelu_clones_bitwise)
{
	/* every length up to 67 (vector bodies and every tail), values over the
	 * whole useful range and beyond the exp clamp */
	for (int n = 1; n <= 67; n++) {
		float *x = randv((size_t)n, -12, 12), *dy = randv((size_t)n, -1, 1);
		float y[67], dx[67];
		if (n == 67)
			x[0] = 0.0f, x[1] = -100.0f, x[2] = 100.0f, x[3] = -1e-30f;
		tf_gelu_forward(x, y, n);
		tf_gelu_backward(x, dy, dx, n);
		for (int i = 0; i < n; i++) {
			const float ry = tf_gelu(x[i]), rdx = dy[i] * tf_gelu_grad(x[i]);
			ck_assert_msg(memcmp(&y[i], &ry, sizeof ry) == 0,
				      "gelu(%.9g): vector %.9g scalar %.9g", (double)x[i], (double)y[i],
				      (double)ry);
			ck_assert_msg(memcmp(&dx[i], &rdx, sizeof rdx) == 0,
				      "gelu'(%.9g): vector %.9g scalar %.9g", (double)x[i],
				      (double)dx[i], (double)rdx);
		}
		/* and the kernel agrees with the tanh formula itself */
		for (int i = 0; i < n; i++) {
			const double v = x[i];
			const double t = 0.5 * v * (1 + tanh(TF_GELU_K * (v + TF_GELU_A * v * v * v)));
			ck_assert_msg(fabs(y[i] - t) <= 1e-6 + 1e-5 * fabs(t), "gelu(%g) = %g, tanh form %g",
				      v, (double)y[i], t);
		}
		/* in place, as gpt_block calls it */
		float dd[67];
		memcpy(dd, dy, (size_t)n * sizeof(float));
		tf_gelu_backward(x, dd, dd, n);
		ck_assert(memcmp(dd, dx, (size_t)n * sizeof(float)) == 0);
		free(x), free(dy);
	}
}
END_TEST

START_TEST(test_layernorm_vs_double)
{
	static const int Cs[] = { 1, 3, 8, 13, 128, 131 };
	const int C = Cs[_i], rows = 5, T = rows, H = 1, hd = C, B = 1, drop = 0;
	const size_t n = (size_t)rows * C;
	float *x = randv(n, -3, 3), *w = randv((size_t)C, 0.5f, 1.5f), *b = randv((size_t)C, -1, 1);
	float *dy = randv(n, -1, 1), *y = randv(n, 9, 9), *dx = randv(n, 9, 9);
	float mean[5], rstd[5];
	for (size_t i = 0; i < n; i++) /* an offset stresses the variance */
		x[i] += 100.0f;
	float *dw = calloc((size_t)C, sizeof(float)), *db = calloc((size_t)C, sizeof(float));
	float *ry = malloc(n * sizeof(float)), *rdx = malloc(n * sizeof(float));
	float *rdw = calloc((size_t)C, sizeof(float)), *rdb = calloc((size_t)C, sizeof(float));
	tf_layernorm_forward(x, y, w, b, rows, C, 1e-5f, mean, rstd);
	tf_layernorm_backward_weight(x, dy, mean, rstd, rows, C, dw, db);
	tf_layernorm_backward_input(x, dy, w, mean, rstd, rows, C, dx);
	for (int r = 0; r < rows; r++) {
		const float *xr = x + (size_t)r * C, *dyr = dy + (size_t)r * C;
		double m = 0, v = 0;
		for (int c = 0; c < C; c++)
			m += xr[c];
		m /= C;
		for (int c = 0; c < C; c++)
			v += (xr[c] - m) * (xr[c] - m);
		const double rs = 1 / sqrt(v / C + 1e-5);
		double sg = 0, sgx = 0;
		for (int c = 0; c < C; c++) {
			const double xh = (xr[c] - m) * rs, gg = (double)dyr[c] * w[c];
			ry[(size_t)r * C + c] = (float)(xh * w[c] + b[c]);
			rdw[c] += (float)(dyr[c] * xh);
			rdb[c] += dyr[c];
			sg += gg;
			sgx += gg * xh;
		}
		for (int c = 0; c < C; c++) {
			const double xh = (xr[c] - m) * rs, gg = (double)dyr[c] * w[c];
			rdx[(size_t)r * C + c] = (float)(rs * (gg - sg / C - xh * sgx / C));
		}
	}
	/* the fused backward is bitwise the two halves */
	float *fdx = randv(n, 9, 9), *fdw = calloc((size_t)C, sizeof(float));
	float *fdb = calloc((size_t)C, sizeof(float));
	tf_layernorm_backward(x, dy, w, mean, rstd, rows, C, fdx, fdw, fdb);
	ck_assert(memcmp(fdx, dx, n * sizeof(float)) == 0);
	ck_assert(memcmp(fdw, dw, (size_t)C * sizeof(float)) == 0);
	ck_assert(memcmp(fdb, db, (size_t)C * sizeof(float)) == 0);
	free(fdx), free(fdw), free(fdb);
	CLOSE("layernorm y", y, ry, n, 1e-4, 1e-4);
	CLOSE("layernorm dx", dx, rdx, n, 1e-3, 1e-3);
	CLOSE("layernorm dw", dw, rdw, (size_t)C, 1e-4, 1e-4);
	CLOSE("layernorm db", db, rdb, (size_t)C, 1e-5, 1e-5);
	free(x), free(w), free(b), free(dy), free(y), free(dx), free(dw), free(db);
	free(ry), free(rdx), free(rdw), free(rdb);
}
END_TEST

static Suite *tf_kernels_suite(void)
{
	Suite *s = suite_create("tf-kernels");
	TCase *tc = tcase_create("kernels");
	tcase_add_loop_test(tc, test_attention_fast_vs_ref, 0,
			    2 * (int)(sizeof att_shapes / sizeof att_shapes[0]));
	tcase_add_test(tc, test_gelu_clones_bitwise);
	tcase_add_loop_test(tc, test_layernorm_vs_double, 0, 6);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(tf_kernels_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
