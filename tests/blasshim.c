/* SPDX-License-Identifier: MIT */
/* blasshim.c: an LD_PRELOAD shim in front of OpenBLAS for
 * tests/test-blas-gate.sh.
 *
 *   openblas_get_config()  says MAX_THREADS=$BLASSHIM_MAX_THREADS, so that
 *                          a few rank threads stand for the thousand it
 *                          takes to run out of a real build's buffers
 *   cblas_sgemm()          the real one, then $BLASSHIM_SLEEP_US of sleep
 *                          inside the call, so that threads pile up in it
 *                          wherever nothing stops them; the most threads
 *                          inside at once is written to $BLASSHIM_PEAK at
 *                          exit (by the process that called it: timeout(1)
 *                          and the shells before pipehost load the shim too)
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <cblas.h>

static atomic_int inside, peak;
static char config[128];

char *openblas_get_config(void)
{
	const char *n = getenv("BLASSHIM_MAX_THREADS");
	snprintf(config, sizeof config, "OpenBLAS (tests/blasshim) MAX_THREADS=%s", n ? n : "64");
	return config;
}

typedef void (*sgemm_fn)(const enum CBLAS_ORDER, const enum CBLAS_TRANSPOSE, const enum CBLAS_TRANSPOSE,
			 const blasint, const blasint, const blasint, const float, const float *, const blasint,
			 const float *, const blasint, const float, float *, const blasint);

void cblas_sgemm(const enum CBLAS_ORDER order, const enum CBLAS_TRANSPOSE ta, const enum CBLAS_TRANSPOSE tb,
		 const blasint m, const blasint n, const blasint k, const float alpha, const float *a,
		 const blasint lda, const float *b, const blasint ldb, const float beta, float *c, const blasint ldc)
{
	static sgemm_fn real;
	if (!real)
		real = (sgemm_fn)dlsym(RTLD_NEXT, "cblas_sgemm");
	int now = atomic_fetch_add(&inside, 1) + 1, was = atomic_load(&peak);
	while (now > was && !atomic_compare_exchange_weak(&peak, &was, now))
		;
	real(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
	const char *us = getenv("BLASSHIM_SLEEP_US");
	if (us)
		usleep((useconds_t)atoi(us));
	atomic_fetch_sub(&inside, 1);
}

__attribute__((destructor)) static void write_peak(void)
{
	const char *path = getenv("BLASSHIM_PEAK");
	FILE *f = path && atomic_load(&peak) ? fopen(path, "w") : NULL;
	if (f) {
		fprintf(f, "%d\n", atomic_load(&peak));
		fclose(f);
	}
}
