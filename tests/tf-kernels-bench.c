/* SPDX-License-Identifier: MIT */
/*
 * tests/tf-kernels-bench (run by bench/tf-kernels.sh): transformer_ops.h's fast CPU kernels against their plain
 * references, at etc/gpt-fortunes.ini's shapes (one micro-batch of 4
 * sequences, T = 128, d = 128, 4 heads, MLP 4d), one thread.  Each pair
 * runs back to back, REPS times, alternating; the table gives the median
 * of each (thread CPU time, so other processes on the machine disturb it
 * less) and ref / fast.  Built by `make check` (never installed):
 *     OPENBLAS_NUM_THREADS=1 tests/tf-kernels-bench [REPS]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cblas.h>
#include <pipehost/plugin.h>
#define TF_WANT_ATTENTION 1
#include "transformer_ops.h"

enum { B = 4, T = 128, D = 128, H = 4, HD = 32, RD = 4 * D };

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof *v, cmp);
	return v[n / 2];
}

static float *buf(size_t n, float lo, float hi)
{
	float *v = malloc(n * sizeof *v);
	if (!v) {
		fprintf(stderr, "tf-kernels: out of memory\n");
		exit(1);
	}
	for (size_t i = 0; i < n; i++)
		v[i] = lo + (hi - lo) * (float)rand() / (float)RAND_MAX;
	return v;
}

/* the scalar gelu loops, kept out of the vectoriser: the kernels' math, one
 * element at a time */
__attribute__((optimize("no-tree-vectorize"))) static void gelu_fwd_scalar(const float *x,
									    float *y, size_t n)
{
	for (size_t i = 0; i < n; i++)
		y[i] = tf_gelu(x[i]);
}

__attribute__((optimize("no-tree-vectorize"))) static void
gelu_bwd_scalar(const float *x, const float *dy, float *dx, size_t n)
{
	for (size_t i = 0; i < n; i++)
		dx[i] = dy[i] * tf_gelu_grad(x[i]);
}

int main(int argc, char **argv)
{
	const int reps = argc > 1 ? atoi(argv[1]) : 30;
	if (reps < 1 || reps > 100000) {
		fprintf(stderr, "usage: tf-kernels [REPS >= 1]\n");
		return 2;
	}
	const tf_attn_geom g = { T, D, H, HD, 0.0f, 1.0f };
	const size_t R = (size_t)B * T, nq = R * 3 * D, nP = (size_t)B * H * T * T;
	float *qkv = buf(nq, -1, 1), *P = buf(nP, 0, 0), *att = buf(R * D, 0, 0);
	float *datt = buf(R * D, -1, 1), *dqkv = buf(nq, 0, 0), *tmp = buf((size_t)2 * T * T, 0, 0);
	float *u = buf(R * RD, -4, 4), *gu = buf(R * RD, 0, 0), *dg = buf(R * RD, -1, 1);
	float *x = buf(R * D, -3, 3), *y = buf(R * D, 0, 0), *dy = buf(R * D, -1, 1);
	float *w = buf(D, 0.5f, 1.5f), *bb = buf(D, -0.5f, 0.5f), *dx = buf(R * D, 0, 0);
	float *dw = buf(D, 0, 0), *db = buf(D, 0, 0), mean[B * T], rstd[B * T];
	double *t = malloc(sizeof(double) * 2 * (size_t)reps);
	tf_layernorm_forward(x, y, w, bb, (int64_t)R, D, 1e-5f, mean, rstd);

	printf("transformer_ops.h kernels, one micro-batch of %d x %d, d = %d, %d heads; "
	       "median of %d, ms\n\n", B, T, D, H, reps);
	printf("| kernel | reference | fast | reference / fast |\n|---|---:|---:|---:|\n");
#define PAIR(name, REF, FAST)                                                                  \
	do {                                                                                   \
		for (int r = 0; r < reps; r++) {                                               \
			double t0 = now();                                                     \
			REF;                                                                   \
			double t1 = now();                                                     \
			FAST;                                                                  \
			double t2 = now();                                                     \
			t[r] = t1 - t0;                                                        \
			t[reps + r] = t2 - t1;                                                 \
		}                                                                              \
		double a = median(t, reps), b = median(t + reps, reps);                        \
		printf("| %s | %.3f | %.3f | %.2f |\n", name, 1e3 * a, 1e3 * b, a / b);       \
	} while (0)
	PAIR("attention forward (causal blocks, fused softmax)",
	     tf_attn_forward_ref(&g, B, 0, 0, qkv, P, att, tmp),
	     tf_attn_forward(&g, B, 0, 0, qkv, P, att, tmp));
	PAIR("attention backward", tf_attn_backward_ref(&g, B, 0, 0, qkv, P, datt, dqkv, tmp),
	     tf_attn_backward(&g, B, 0, 0, qkv, P, datt, dqkv, tmp));
	PAIR("gelu forward (scalar / vector clone)", gelu_fwd_scalar(u, gu, R * RD),
	     tf_gelu_forward(u, gu, (int64_t)(R * RD)));
	PAIR("gelu backward", gelu_bwd_scalar(u, dg, gu, R * RD),
	     tf_gelu_backward(u, dg, gu, (int64_t)(R * RD)));
	PAIR("layernorm backward (two halves / fused)",
	     (tf_layernorm_backward_weight(x, dy, mean, rstd, (int64_t)R, D, dw, db),
	      tf_layernorm_backward_input(x, dy, w, mean, rstd, (int64_t)R, D, dx)),
	     tf_layernorm_backward(x, dy, w, mean, rstd, (int64_t)R, D, dx, dw, db));
	free(qkv), free(P), free(att), free(datt), free(dqkv), free(tmp), free(u), free(gu);
	free(dg), free(x), free(y), free(dy), free(w), free(bb), free(dx), free(dw), free(db);
	free(t);
	return 0;
}
