/* SPDX-License-Identifier: MIT */
/* The CPU as a device: the ops of device.h over host memory, so the engine
 * runs one path whichever device a rank is on.  The arithmetic is optim.c's
 * and the element loops the engine's CPU path always ran, so every CPU
 * result stays bitwise what it was.  There is no stream: each op is done
 * when it returns, so events and syncs have nothing to order, and a rank
 * state is not needed (NULL). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"

static int cpu_count(int *n, ph_err *err)
{
	*n = 0; /* no GPUs here */
	return PH_OK;
}

static int cpu_describe(int ordinal, char *name, size_t len, size_t *total_bytes, ph_err *err)
{
	snprintf(name, len, "cpu");
	*total_bytes = 0;
	return PH_OK;
}

static int cpu_open(int ordinal, int precision, void **rank_state, ph_err *err)
{
	*rank_state = NULL;
	return PH_OK;
}

static void cpu_close(void *rs)
{
}

static int cpu_bind(void *rs, ph_err *err)
{
	return PH_OK;
}

static void cpu_fill_ctx(void *rs, ph_ctx *ctx)
{
	ctx->device = PH_DEV_CPU;
}

static int cpu_alloc(void *rs, size_t bytes, void **p, ph_err *err)
{
	/* never NULL for 0 bytes: a buffer's pointer says it exists */
	if (!(*p = calloc(1, bytes ? bytes : 1)))
		return ph_fail(err, PH_ENOMEM, "cannot allocate %.1f MiB of host memory", bytes / 1048576.0);
	return PH_OK;
}

static void cpu_free(void *rs, void *p)
{
	free(p);
}

/* A host copy of host memory is the array itself: nothing to move. */
static int cpu_copy(void *rs, void *dst, const void *src, size_t bytes, int dir, ph_err *err)
{
	if (dst != src && bytes)
		memcpy(dst, src, bytes);
	return PH_OK;
}

static int cpu_zero(void *rs, void *p, size_t bytes, ph_err *err)
{
	memset(p, 0, bytes);
	return PH_OK;
}

static int cpu_sync(void *rs, ph_err *err)
{
	return PH_OK;
}

/* In-process links order the ranks with their mutex and flags already. */
static int cpu_event_create(void *rs, void **ev, ph_err *err)
{
	*ev = NULL;
	return PH_OK;
}

static void cpu_event_destroy(void *ev)
{
}

static int cpu_event_record(void *rs, void *ev, ph_err *err)
{
	return PH_OK;
}

static int cpu_event_wait(void *rs, void *ev, ph_err *err)
{
	return PH_OK;
}

static int cpu_optim_update(void *rs, const ph_optim_config *c, int64_t t, double lr, double clip, float *w, float *g,
			    float *s, int64_t n, int decay, ph_err *err)
{
	if (clip != 1.0)
		for (int64_t i = 0; i < n; i++)
			g[i] = (float)(g[i] * clip);
	ph_optim_update(c, t, lr, w, g, s, n, decay);
	memset(g, 0, (size_t)n * sizeof(float));
	return PH_OK;
}

static int cpu_sumsq(void *rs, const float *g, int64_t n, double *out, ph_err *err)
{
	*out = ph_sumsq(g, n);
	return PH_OK;
}

static int cpu_tie_sum(void *rs, float *a, float *b, int64_t n, ph_err *err)
{
	for (int64_t i = 0; i < n; i++) {
		a[i] = a[i] + b[i];
		b[i] = a[i];
	}
	return PH_OK;
}

static const ph_device_ops cpu_ops = {
	.struct_size = sizeof(ph_device_ops),
	.count = cpu_count,
	.describe = cpu_describe,
	.open = cpu_open,
	.close = cpu_close,
	.bind = cpu_bind,
	.fill_ctx = cpu_fill_ctx,
	.alloc = cpu_alloc,
	.free = cpu_free,
	.copy = cpu_copy,
	.zero = cpu_zero,
	.sync = cpu_sync,
	.event_create = cpu_event_create,
	.event_destroy = cpu_event_destroy,
	.event_record = cpu_event_record,
	.event_wait = cpu_event_wait,
	.optim_update = cpu_optim_update,
	.sumsq = cpu_sumsq,
	.tie_sum = cpu_tie_sum,
	/* no NCCL, no batched step's end, no bf16 shadows: the engine asks
	 * for each by its pointer; sums across processes go over MPI */
	.kind = PH_DEV_CPU,
	.host_memory = 1,
};

const ph_device_ops *ph_cpu_device(void)
{
	return &cpu_ops;
}
