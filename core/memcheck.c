/* SPDX-License-Identifier: MIT */
/* The memory check before allocation (memcheck.h).  Limits, tightest wins:
 * the cgroup (v2 memory.max less memory.current, or v1's limit less usage,
 * every ancestor group too), RLIMIT_AS less the address space in use,
 * RLIMIT_DATA, and MemAvailable plus free swap from /proc/meminfo. */
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "memcheck.h"
#include "plan-memory.h"

/* First number in a file, or -1 ("max" and missing files are no limit). */
static double read_number(const char *path)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	char buf[64];
	double v = -1;
	if (fgets(buf, sizeof buf, f) && buf[0] >= '0' && buf[0] <= '9')
		v = strtod(buf, NULL);
	fclose(f);
	return v;
}

/* "Key:   123 kB" from a /proc file, in bytes, or -1. */
static double proc_field(const char *path, const char *key)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	char line[256];
	double v = -1;
	size_t kl = strlen(key);
	while (fgets(line, sizeof line, f))
		if (strncmp(line, key, kl) == 0 && line[kl] == ':') {
			v = strtod(line + kl + 1, NULL) * 1024.0;
			break;
		}
	fclose(f);
	return v;
}

static void take(double *best, char *which, size_t len, double v, const char *what)
{
	if (v < 0)
		return;
	if (*best < 0 || v < *best) {
		*best = v;
		snprintf(which, len, "%s", what);
	}
}

/* The group's limit less its usage, for it and each ancestor. */
static void cgroup_room(double *best, char *which, size_t len)
{
	FILE *f = fopen("/proc/self/cgroup", "r");
	if (!f)
		return;
	char line[4096];
	while (fgets(line, sizeof line, f)) {
		line[strcspn(line, "\n")] = 0;
		char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
		if (!c2)
			continue;
		int v2 = c1[1] == ':';
		if (!v2 && !strstr(c1 + 1, "memory"))
			continue;
		char path[4096];
		snprintf(path, sizeof path, "%s", c2 + 1);
		for (;;) {
			char lim[4200], use[4200];
			if (v2) {
				snprintf(lim, sizeof lim, "/sys/fs/cgroup%s/memory.max", path);
				snprintf(use, sizeof use, "/sys/fs/cgroup%s/memory.current", path);
			} else {
				snprintf(lim, sizeof lim, "/sys/fs/cgroup/memory%s/memory.limit_in_bytes", path);
				snprintf(use, sizeof use, "/sys/fs/cgroup/memory%s/memory.usage_in_bytes", path);
			}
			double l = read_number(lim), u = read_number(use);
			if (l >= 0 && l < 1e18) /* v1 reports "no limit" as a huge number */
				take(best, which, len, l - (u > 0 ? u : 0),
				     v2 ? "the cgroup limit (memory.max)" : "the cgroup limit (memory.limit_in_bytes)");
			char *slash = strrchr(path, '/');
			if (!slash || slash == path)
				break;
			*slash = 0;
		}
	}
	fclose(f);
}

int ph_mem_available(double *bytes, char *which, size_t len)
{
	double best = -1;
	which[0] = 0;
	cgroup_room(&best, which, len);
	struct rlimit rl;
	if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
		double used = proc_field("/proc/self/status", "VmSize");
		take(&best, which, len, (double)rl.rlim_cur - (used > 0 ? used : 0), "ulimit -v");
	}
	if (getrlimit(RLIMIT_DATA, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
		double used = proc_field("/proc/self/status", "VmData");
		take(&best, which, len, (double)rl.rlim_cur - (used > 0 ? used : 0), "ulimit -d");
	}
	double avail = proc_field("/proc/meminfo", "MemAvailable");
	if (avail >= 0) {
		double swap = proc_field("/proc/meminfo", "SwapFree");
		take(&best, which, len, avail + (swap > 0 ? swap : 0), "MemAvailable+SwapFree");
	}
	if (best < 0)
		return 0;
	*bytes = best > 0 ? best : 0;
	return 1;
}

double ph_mem_estimate(const ph_plan *p, const ph_model *m, const ph_config *c)
{
	int span = ph_config_span(c);
	int per_proc = span > 1 && p->ranks % span == 0 ? p->ranks / span : p->ranks;
	double least = -1;
	/* a split pipeline: the process with the smallest share, so that the
	 * check never refuses a run some process could hold */
	for (int q = 0; q < (span > 1 ? span : 1); q++) {
		double sum = 0;
		for (int k = 0; k < p->nchunks; k++) {
			int r = k % p->ranks;
			if (span > 1 && r / per_proc != q)
				continue;
			ph_chunk_mem mem;
			if (ph_plan_chunk_mem(p, m, c, k, &mem))
				return -1;
			int gpu = c->place.ordinal && r < c->place.ranks && c->place.ordinal[r] >= 0;
			if (gpu) /* the host keeps a copy of the weights and optimizer state */
				sum += mem.params + mem.optimizer - mem.shared;
			else
				sum += mem.total;
		}
		if (least < 0 || sum < least)
			least = sum;
	}
	return least * ph_config_local_replicas(c);
}

static void human(double b, char *buf, size_t len)
{
	if (b >= 1024.0 * 1024 * 1024)
		snprintf(buf, len, "%.1f GiB", b / (1024.0 * 1024 * 1024));
	else
		snprintf(buf, len, "%.1f MiB", b / (1024.0 * 1024));
}

int ph_memcheck_enabled(void)
{
	const char *off = getenv("PIPEHOST_MEMCHECK");
	return !(off && !strcmp(off, "0"));
}

/* Address space the BLAS threads reserve beyond the estimate: OpenBLAS
 * maps a 128 MiB buffer for each thread that runs a product, and each
 * thread a stack (8 MiB).  Measured on fashion-mnist, 2026-11-29: peak
 * VmSize 786 MiB with 1 thread, 2626 with 16, 9154 with 64, some 133 MiB
 * a thread.  Resident memory barely grows (the buffers are touched as
 * far as a product needs), so only ulimit -v, which counts mappings,
 * sees them: there OpenBLAS, denied a buffer, retried mmap forever. */
#define PH_BLAS_THREAD_BYTES (136.0 * 1024 * 1024)

static double blas_reserve(const ph_config *c, int ranks, long *threads)
{
	long busy = ph_config_busy(c, ranks);
	/* the pool's threads, and each rank's own calling thread */
	*threads = ph_config_blas_threads(c, sysconf(_SC_NPROCESSORS_ONLN), busy) + busy;
	/* ranks on GPUs call no BLAS (a placement mixing both is refused) */
	return c->place.cuda ? 0 : (double)*threads * PH_BLAS_THREAD_BYTES;
}

int ph_mem_blas_fits(const ph_config *c, int ranks, double model_bytes, double *need, double *room, long *threads)
{
	struct rlimit rl;
	double blas = blas_reserve(c, ranks, threads);
	*need = model_bytes + blas;
	*room = -1;
	if (!ph_memcheck_enabled() || blas <= 0 || getrlimit(RLIMIT_AS, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
		return 1;
	double used = proc_field("/proc/self/status", "VmSize");
	*room = (double)rl.rlim_cur - (used > 0 ? used : 0);
	return *need <= *room;
}

int ph_memcheck_blas(const ph_config *c, int ranks, double model_bytes, ph_err *err)
{
	double need, room;
	long threads;
	if (ph_mem_blas_fits(c, ranks, model_bytes, &need, &room, &threads))
		return PH_OK;
	char n[32], h[32];
	human(need, n, sizeof n);
	human(room > 0 ? room : 0, h, sizeof h);
	return ph_fail(err, PH_ENOMEM,
		       "run needs ~%s of address space (%sBLAS buffers for %ld threads) but ulimit -v leaves %s; lower "
		       "[run] threads or replicas, or raise ulimit -v", n, model_bytes > 0 ? "the model, and " : "",
		       threads, h);
}

int ph_memcheck_run(const ph_plan *p, const ph_model *m, const ph_config *c, ph_err *err)
{
	if (!ph_memcheck_enabled())
		return PH_OK;
	double have, need = ph_mem_estimate(p, m, c);
	if (need < 0)
		return ph_fail(err, PH_ENOMEM, "out of memory estimating the run's memory (--plan's est. MiB)");
	char which[96], n[32], h[32];
	if (ph_mem_available(&have, which, sizeof which) && need > have) {
		human(need, n, sizeof n);
		human(have, h, sizeof h);
		/* 256 bytes in all: the figures first, then what to change */
		return ph_fail(err, PH_ENOMEM,
			       "run needs ~%s in this process (--plan's estimate) but %s leaves %s; lower [run] batch, "
			       "use more stages, set recompute = yes, or raise the limit", n, which, h);
	}
	/* the model fits; under ulimit -v, with the BLAS threads' mappings? */
	return ph_memcheck_blas(c, p->ranks, need, err);
}
