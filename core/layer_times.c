/* SPDX-License-Identifier: MIT */
/* Per-layer wall times inside training steps (layer_times.h). */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "layer_times.h"
#include "model.h"

/* Samples kept per layer and kind: enough for a bench of a few hundred
 * micro-batches; later calls are not recorded. */
#define LT_CAP 8192

struct ph_layer_times {
	int n;
	uint64_t from_step;
	atomic_int *count; /* [n][4] */
	float *sec;        /* [n][4][LT_CAP] wall */
	float *cpu;        /* [n][4][LT_CAP] the calling thread's CPU time */
};

ph_layer_times *ph_layer_times_active;

double ph_layer_times_cpu(void)
{
	struct timespec t;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

double ph_layer_times_now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int ph_layer_times_start(int nlayers, uint64_t from_step, ph_err *err)
{
	ph_layer_times *t = calloc(1, sizeof *t);
	if (t) {
		t->count = calloc((size_t)nlayers * 4, sizeof *t->count);
		t->sec = calloc((size_t)nlayers * 4 * LT_CAP, sizeof *t->sec);
		t->cpu = calloc((size_t)nlayers * 4 * LT_CAP, sizeof *t->cpu);
	}
	if (!t || !t->count || !t->sec || !t->cpu) {
		if (t) {
			free(t->count);
			free(t->sec);
			free(t->cpu);
		}
		free(t);
		return ph_fail(err, PH_ENOMEM, "out of memory for PIPEHOST_LAYER_TIMES");
	}
	t->n = nlayers;
	t->from_step = from_step;
	ph_layer_times_active = t;
	return PH_OK;
}

void ph_layer_times_add(const ph_ctx *ctx, int kind, double seconds, double cpu_seconds)
{
	ph_layer_times *t = ph_layer_times_active;
	if (!t || !ctx->training || ctx->step < t->from_step || ctx->layer >= (uint64_t)t->n)
		return;
	size_t slot = (size_t)ctx->layer * 4 + (size_t)kind;
	int k = atomic_fetch_add(&t->count[slot], 1);
	if (k < LT_CAP) {
		t->sec[slot * LT_CAP + (size_t)k] = (float)seconds;
		t->cpu[slot * LT_CAP + (size_t)k] = (float)cpu_seconds;
	}
}

static int cmp_float(const void *a, const void *b)
{
	float x = *(const float *)a, y = *(const float *)b;
	return x < y ? -1 : x > y;
}

static double median_of(ph_layer_times *t, const float *base, size_t slot, int *calls)
{
	int n = atomic_load(&t->count[slot]);
	*calls = n;
	if (n > LT_CAP)
		n = LT_CAP;
	if (n == 0)
		return 0;
	float *v = (float *)&base[slot * LT_CAP];
	qsort(v, (size_t)n, sizeof *v, cmp_float);
	return n % 2 ? v[n / 2] : 0.5 * ((double)v[n / 2 - 1] + v[n / 2]);
}

int ph_layer_times_get(int i, int cpu, double *fwd_s, double *bwd_s, int *calls)
{
	ph_layer_times *t = ph_layer_times_active;
	if (!t || i < 0 || i >= t->n)
		return -1;
	int cf, cb, ci, cw;
	const float *v = cpu ? t->cpu : t->sec;
	*fwd_s = median_of(t, v, (size_t)i * 4 + PH_LT_FWD, &cf);
	*bwd_s = median_of(t, v, (size_t)i * 4 + PH_LT_BWD, &cb) + median_of(t, v, (size_t)i * 4 + PH_LT_BWD_I, &ci) +
		 median_of(t, v, (size_t)i * 4 + PH_LT_BWD_W, &cw);
	*calls = cf;
	return cf ? 0 : -1;
}

void ph_layer_times_stop(void)
{
	ph_layer_times *t = ph_layer_times_active;
	ph_layer_times_active = NULL;
	if (t) {
		free(t->count);
		free(t->sec);
		free(t->cpu);
		free(t);
	}
}

int ph_layer_times_from_env(int nlayers, ph_err *err)
{
	const char *path = getenv("PIPEHOST_LAYER_TIMES");
	if (!path || !path[0])
		return PH_OK;
	return ph_layer_times_start(nlayers, 3, err);
}

int ph_layer_times_finish(const ph_model *m, ph_err *err)
{
	const char *path = getenv("PIPEHOST_LAYER_TIMES");
	if (!ph_layer_times_active || !path || !path[0])
		return PH_OK;
	FILE *f = fopen(path, "w");
	if (!f) {
		ph_layer_times_stop();
		return ph_fail(err, PH_EIO, "PIPEHOST_LAYER_TIMES: cannot write %s", path);
	}
	fprintf(f, "# median ms per micro-batch call inside training steps (from step 3): "
		"layer INDEX NAME TYPE FWD_WALL BWD_WALL CALLS FWD_CPU BWD_CPU\n");
	for (int i = 0; i < m->n; i++) {
		double fw = 0, bw = 0, fc = 0, bc = 0;
		int calls = 0;
		ph_layer_times_get(i, 0, &fw, &bw, &calls);
		ph_layer_times_get(i, 1, &fc, &bc, &calls);
		fprintf(f, "layer %d %s %s %.6f %.6f %d %.6f %.6f\n", i, m->layers[i].cfg ? m->layers[i].cfg->name : "?",
			m->layers[i].ops->head.name, 1e3 * fw, 1e3 * bw, calls, 1e3 * fc, 1e3 * bc);
	}
	int bad = ferror(f);
	ph_layer_times_stop();
	if (fclose(f) || bad)
		return ph_fail(err, PH_EIO, "PIPEHOST_LAYER_TIMES: cannot write %s", path);
	return PH_OK;
}
