/* SPDX-License-Identifier: MIT */
/* What every process of an mpirun job has for NCCL, gathered so that all
 * of them take the same way.
 *
 * NCCL may carry a split pipeline's stage links (engine-links-nccl.c) and
 * the sum of the replicas' gradients (engine-replicas.c) only if every
 * process can: one process that takes the host's way while its peer waits
 * in an NCCL call would hang both.  So each process states what it knows,
 * every process gathers every statement, and each decides from the same
 * bytes.  A statement: two flags (this build has no NCCL, PIPEHOST_NCCL=0),
 * then for each rank of the pipeline its host and GPU where this process
 * runs that rank, empty where it does not.  Two processes with one key
 * would put two members of a communicator on one GPU, which NCCL refuses. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine-impl.h"

int ph_eng_gather_gpu_keys(ph_engine *e, ph_gpu_keys *g, ph_err *err)
{
	const ph_comm *cm = &e->cfg->comm;
	int rc = PH_OK;
	g->n = cm->size;
	g->ranks = e->plan->ranks;
	g->rec = 2 + (size_t)g->ranks * PH_GPU_KEY_BYTES;
	unsigned char *mine = calloc(1, g->rec);
	g->all = calloc((size_t)g->n, g->rec);
	if (!mine || !g->all) {
		rc = ph_fail(err, PH_ENOMEM, "out of memory");
		goto out;
	}
	mine[0] = !e->dev->nccl_open || !e->dev->nccl_send || !e->dev->nccl_recv;
	mine[1] = env_is_zero("PIPEHOST_NCCL");
	char host[48] = "";
	gethostname(host, sizeof host - 1);
	/* the ranks this process runs: all of them, or its share of a split
	 * pipeline (the others sit on its first GPU and have nothing there) */
	for (int k = e->rank_lo; k < e->rank_hi && e->dev->device_key; k++) {
		char *key = (char *)mine + 2 + (size_t)k * PH_GPU_KEY_BYTES;
		snprintf(key, PH_GPU_KEY_BYTES, "%s ", host);
		size_t used = strlen(key);
		if ((rc = e->dev->device_key(e->rs[k], key + used, PH_GPU_KEY_BYTES - used - 1, err)))
			goto out;
	}
	rc = cm->ops->allgather(mine, g->all, g->rec, err);
out:
	free(mine);
	if (rc)
		ph_gpu_keys_free(g);
	return rc;
}

const char *ph_gpu_keys_switch_reason(const ph_gpu_keys *g)
{
	for (int i = 0; i < g->n; i++)
		if (g->all[(size_t)i * g->rec + 1])
			return "PIPEHOST_NCCL=0";
	for (int i = 0; i < g->n; i++)
		if (g->all[(size_t)i * g->rec])
			return "this pipehost's CUDA backend was built without NCCL (install it and rebuild: "
			       "configure prints NCCL yes)";
	return NULL;
}

const char *ph_gpu_key(const ph_gpu_keys *g, int process, int rank)
{
	return (const char *)g->all + (size_t)process * g->rec + 2 + (size_t)rank * PH_GPU_KEY_BYTES;
}

int ph_gpu_keys_same(const ph_gpu_keys *g, int p1, int k1, int p2, int k2)
{
	const char *a = ph_gpu_key(g, p1, k1), *b = ph_gpu_key(g, p2, k2);
	return *a && !strncmp(a, b, PH_GPU_KEY_BYTES);
}

void ph_gpu_keys_free(ph_gpu_keys *g)
{
	free(g->all);
	g->all = NULL;
}
