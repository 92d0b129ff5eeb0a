/* SPDX-License-Identifier: MIT */
/* Processes: mpirun detection and the MPI module (see comm.h).
 *
 * No MPI header here: libphcore, and so the pipehost binary, never links
 * MPI.  Everything MPI lives in core/mpi/comm_mpi.c, loaded only when
 * mpirun started this process with others. */
#include "build-config.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm.h"

#ifndef PH_BACKEND_DIR
#define PH_BACKEND_DIR "."
#endif

/* A positive int from environment variable `name`; 0 when it is unset or
 * not a number. */
static int env_count(const char *name)
{
	const char *s = getenv(name);
	if (!s || !*s)
		return 0;
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || *end || v <= 0 || v > INT_MAX)
		return 0;
	return (int)v;
}

/* How many processes the launcher started, and which variable said so;
 * 0 when no launcher we know of started this one.  Open MPI's mpirun sets
 * OMPI_COMM_WORLD_SIZE (4.x and 5.x), MPICH's and Intel MPI's Hydra
 * PMI_SIZE.  A bare PMIx launch (srun --mpi=pmix) sets PMIX_RANK but no
 * size, so the size comes from Slurm's task count. */
static int launcher_size(const char **var)
{
	static const char *const sizes[] = { "OMPI_COMM_WORLD_SIZE", "PMI_SIZE" };
	for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
		int n = env_count(sizes[i]);
		if (n) {
			*var = sizes[i];
			return n;
		}
	}
	if (getenv("PMIX_RANK")) {
		static const char *const slurm[] = { "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS" };
		for (size_t i = 0; i < sizeof slurm / sizeof slurm[0]; i++) {
			int n = env_count(slurm[i]);
			if (n) {
				*var = slurm[i];
				return n;
			}
		}
	}
	*var = NULL;
	return 0;
}

#ifdef PH_WITH_MPI
/* dlopen the module: PIPEHOST_MPI_MODULE (the in-tree wrapper and the
 * tests point it into the build tree), else the installed one. */
static const ph_comm_ops *load_module(int n, const char *var, ph_err *err)
{
	const char *env = getenv("PIPEHOST_MPI_MODULE");
	char path[4096]; /* an install prefix or build tree may be long */
	if (env && *env)
		snprintf(path, sizeof path, "%s", env);
	else
		snprintf(path, sizeof path, "%s/%s", PH_BACKEND_DIR, PH_MPI_MODULE_FILE);
	if (access(path, F_OK)) {
		ph_fail(err, PH_EUNSUPPORTED,
			"started by mpirun with %d processes (%s), but there is no MPI module %.100s: install "
			"pipehost built with MPI (configure prints 'MPI yes')",
			n, var, path);
		return NULL;
	}
	/* RTLD_GLOBAL: Open MPI 4 dlopens its own components (mca_*.so), which
	 * resolve libmpi's and libopen-pal's symbols from the global scope. */
	void *h = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
	if (!h) {
		/* dlerror names the file or the library it lacks */
		ph_fail(err, PH_EUNSUPPORTED, "cannot load the MPI module: %.150s; check `ldd` on it", dlerror());
		return NULL;
	}
	ph_mpi_comm_fn fn = (ph_mpi_comm_fn)dlsym(h, PH_MPI_MODULE_SYMBOL);
	const ph_comm_ops *ops = fn ? fn() : NULL;
	if (!ops || ops->struct_size < sizeof(ph_comm_ops)) {
		ph_fail(err, PH_EUNSUPPORTED,
			"%.150s is not this pipehost's MPI module (no " PH_MPI_MODULE_SYMBOL ", or an older one); reinstall",
			path);
		dlclose(h);
		return NULL;
	}
	/* kept loaded for the life of the process: unloading libmpi after
	 * MPI_Finalize is not something Open MPI supports */
	return ops;
}
#endif

int ph_comm_init(ph_comm *c, ph_err *err)
{
	c->rank = 0;
	c->size = 1;
	c->local_rank = 0;
	c->threads = 0;
	c->tag_ub = 0;
	c->ops = NULL;
	const char *var;
	int n = launcher_size(&var);
	if (n <= 1)
		return PH_OK;
#ifndef PH_WITH_MPI
	return ph_fail(err, PH_EUNSUPPORTED,
		       "started by mpirun with %d processes (%s), but this pipehost was built without MPI: install "
		       "libopenmpi-dev and rebuild (configure prints 'MPI yes'), or run without mpirun",
		       n, var);
#else
	const ph_comm_ops *ops = load_module(n, var, err);
	if (!ops)
		return PH_EUNSUPPORTED;
	int rank = 0, size = 0, local = 0, threads = 0, tag_ub = 0;
	int rc = ops->init(&rank, &size, &local, &threads, &tag_ub, err);
	if (rc)
		return rc;
	/* An mpirun of another MPI (MPICH's launching Open MPI's library, say)
	 * starts N singletons that each believe they are alone: N copies of
	 * the job writing the same files.  Refuse that. */
	if (size != n) {
		ops->finalize();
		return ph_fail(err, PH_EINVAL,
			       "%s says %d processes but MPI counts %d: this mpirun is not from the MPI that "
			       "pipehost-mpi.so links (see `ldd` on it and `mpirun --version`)",
			       var, n, size);
	}
	c->rank = rank;
	c->size = size;
	c->local_rank = local;
	c->threads = threads;
	c->tag_ub = tag_ub;
	c->ops = ops;
	return PH_OK;
#endif
}

void ph_comm_finalize(ph_comm *c)
{
	if (c->ops)
		c->ops->finalize();
	c->ops = NULL; /* a second call is harmless */
}
