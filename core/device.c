/* SPDX-License-Identifier: MIT */
/* `[run] devices` and the CUDA backend module (see device.h). */
#include "build-config.h"

#include <ctype.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"

#ifndef PH_BACKEND_DIR
#define PH_BACKEND_DIR "."
#endif

static pthread_once_t cuda_once = PTHREAD_ONCE_INIT;
static const ph_device_ops *cuda_ops;
static char cuda_why[PH_ERR_MAX];

/* PIPEHOST_CUDA_BACKEND names the module (the in-tree wrapper and the
 * tests point it into the build tree); else the installed one. */
static void load_cuda(void)
{
#ifndef PH_WITH_CUDA
	snprintf(cuda_why, sizeof cuda_why,
		 "this pipehost was built without CUDA (configure found no nvcc, cuBLAS or cuDNN); "
		 "rebuild with --with-cuda=DIR or use devices = cpu");
#else
	const char *env = getenv("PIPEHOST_CUDA_BACKEND");
	char path[4096]; /* an install prefix or build tree may be long */
	if (env && *env)
		snprintf(path, sizeof path, "%s", env);
	else
		snprintf(path, sizeof path, "%s/%s", PH_BACKEND_DIR, PH_CUDA_BACKEND_FILE);
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		snprintf(cuda_why, sizeof cuda_why,
			 "cannot load the CUDA backend: %.140s; check that `ldd` on it finds the CUDA libraries, or use "
			 "devices = cpu",
			 dlerror());
		return;
	}
	ph_cuda_backend_fn fn = (ph_cuda_backend_fn)dlsym(h, PH_CUDA_BACKEND_SYMBOL);
	const ph_device_ops *ops = fn ? fn() : NULL;
	if (!ops || ops->struct_size < sizeof(ph_device_ops)) {
		snprintf(cuda_why, sizeof cuda_why, "%.150s is not this pipehost's CUDA backend (no " PH_CUDA_BACKEND_SYMBOL
			 ", or an older one); reinstall", path);
		dlclose(h);
		return;
	}
	cuda_ops = ops; /* kept loaded for the life of the process */
#endif
}

const ph_device_ops *ph_cuda_backend(ph_err *err)
{
	pthread_once(&cuda_once, load_cuda);
	if (!cuda_ops)
		ph_fail(err, PH_EUNSUPPORTED, "%s", cuda_why);
	return cuda_ops;
}

void ph_placement_free(ph_placement *pl)
{
	free(pl->ordinal);
	free(pl->process);
	pl->ordinal = NULL;
	pl->process = NULL;
}

/* "cuda" or "cuda:N" -> N (0 for bare "cuda"); -1 if it is neither. */
static int parse_cuda(const char *s, size_t len)
{
	if (len < 4 || strncmp(s, "cuda", 4))
		return -1;
	if (len == 4)
		return 0;
	if (s[4] != ':' || len == 5 || len > 9)
		return -1;
	int n = 0;
	for (size_t i = 5; i < len; i++) {
		if (!isdigit((unsigned char)s[i]))
			return -1;
		n = n * 10 + (s[i] - '0');
	}
	return n;
}

static int gpu_count(int *n, ph_err *err)
{
	const ph_device_ops *ops = ph_cuda_backend(err);
	if (!ops)
		return PH_EUNSUPPORTED;
	return ops->count(n, err);
}

int ph_placement_parse(ph_placement *pl, const char *spec, int ranks, int replicas, int first, ph_err *err)
{
	memset(pl, 0, sizeof *pl);
	int per_replica = ranks;
	ranks *= replicas; /* from here on: every rank of every replica */
	pl->ranks = ranks;
	pl->ordinal = malloc((size_t)(ranks > 0 ? ranks : 1) * sizeof *pl->ordinal);
	if (!pl->ordinal)
		return ph_fail(err, PH_ENOMEM, "out of memory");
	if (!strcmp(spec, "cpu")) {
		for (int r = 0; r < ranks; r++)
			pl->ordinal[r] = -1;
		return PH_OK;
	}
	if (!strcmp(spec, "auto")) {
		/* GPUs when there are any, else the CPU: a job written for a GPU
		 * box still runs (slowly) on a laptop */
		int n = 0;
		ph_err quiet = { { 0 } };
		if (gpu_count(&n, &quiet) || n <= 0) {
			snprintf(pl->auto_cpu, sizeof pl->auto_cpu, "%s",
				 quiet.msg[0] ? quiet.msg : "the CUDA driver counts 0 GPUs");
			n = 0;
		}
		for (int r = 0; r < ranks; r++)
			pl->ordinal[r] = n ? ((first + r) % n + n) % n : -1; /* first may be < 0 */
		pl->cuda = n > 0;
		return PH_OK;
	}
	/* a comma list: one entry per rank, or one entry for all */
	int entries = 0, devs[1024];
	const char *p = spec;
	while (*p) {
		const char *end = strchr(p, ',');
		size_t len = end ? (size_t)(end - p) : strlen(p);
		while (len && isspace((unsigned char)*p))
			p++, len--;
		while (len && isspace((unsigned char)p[len - 1]))
			len--;
		int d;
		if (len == 3 && !strncmp(p, "cpu", 3))
			d = -1;
		else if ((d = parse_cuda(p, len)) < 0) {
			ph_placement_free(pl);
			return ph_fail(err, PH_EINVAL,
				       "devices = %s: '%.*s' is not a device; write cpu, auto, cuda, or cuda:N, one per "
				       "rank separated by commas",
				       spec, (int)len, p);
		}
		if (entries == (int)(sizeof devs / sizeof devs[0])) {
			ph_placement_free(pl);
			return ph_fail(err, PH_EINVAL, "devices = %s: too many entries", spec);
		}
		devs[entries++] = d;
		if (!end)
			break;
		p = end + 1;
	}
	if (entries != 1 && entries != per_replica && entries != ranks) {
		ph_placement_free(pl);
		if (replicas > 1)
			return ph_fail(err, PH_EINVAL,
				       "devices = %s lists %d devices for %d ranks in each of %d replicas; give one per "
				       "rank (%d, shared by the replicas), one per rank of every replica (%d), or one for all",
				       spec, entries, per_replica, replicas, per_replica, ranks);
		return ph_fail(err, PH_EINVAL,
			       "devices = %s lists %d devices for %d ranks; give one per rank, or one for all", spec,
			       entries, ranks);
	}
	for (int r = 0; r < ranks; r++) {
		pl->ordinal[r] = devs[entries == 1 ? 0 : entries == per_replica ? r % per_replica : r];
		pl->cuda |= pl->ordinal[r] >= 0;
	}
	if (!pl->cuda)
		return PH_OK;
	for (int r = 0; r < ranks; r++)
		if (pl->ordinal[r] < 0) {
			ph_placement_free(pl);
			return ph_fail(err, PH_EINVAL,
				       "devices = %s mixes CPU and GPU ranks, which pipehost does not run; put every "
				       "rank on a GPU or every rank on the CPU",
				       spec);
		}
	int n = 0;
	ph_err why = { { 0 } };
	int rc = gpu_count(&n, &why);
	if (rc) {
		ph_placement_free(pl);
		return ph_fail(err, rc, "devices = %s: %s", spec, why.msg);
	}
	for (int r = 0; r < ranks; r++)
		if (pl->ordinal[r] >= n) {
			int want = pl->ordinal[r];
			ph_placement_free(pl);
			if (n == 0)
				return ph_fail(err, PH_EINVAL,
					       "devices = %s: no CUDA device is visible (driver missing, or "
					       "CUDA_VISIBLE_DEVICES empty); use devices = cpu or auto",
					       spec);
			return ph_fail(err, PH_EINVAL, "devices = %s: rank %d asks for cuda:%d but only %d GPU%s visible (cuda:0..cuda:%d)",
				       spec, r % per_replica, want, n, n == 1 ? " is" : "s are", n - 1);
		}
	return PH_OK;
}

void ph_placement_name(const ph_placement *pl, int rank, char *buf, size_t len)
{
	int d = pl->ordinal && rank < pl->ranks ? pl->ordinal[rank] : -1;
	if (pl->process && rank < pl->ranks && pl->process[rank] >= 0)
		snprintf(buf, len, "proc:%d", pl->process[rank]);
	else if (d < 0)
		snprintf(buf, len, "cpu");
	else
		snprintf(buf, len, "cuda:%d", d);
}
