/* SPDX-License-Identifier: MIT */
/* Data-parallel replicas (`[run] replicas`): the training step over this
 * process's replicas, the sum of their gradients, and creating and
 * destroying them.  engine.c makes each replica's pipeline;
 * engine-update.c gets the summed gradients ready and updates.
 *
 * Replica r of R trains on samples [r B/R, (r+1) B/R) of each batch, its
 * micro-batches numbered r m .. r m + m - 1 for the RNG, and its loss scaled
 * by 1/B as one pipeline's would be.  Before every update the replicas'
 * gradients are summed, left to right in replica order, and every replica
 * gets the sum: the same update keeps their weights bitwise equal.  The sum
 * is the same for every schedule, partition and placement of the replicas
 * over processes; it differs from R = 1 in the last bits only, because
 * float addition does not associate.
 *
 * In one process the sum is the device's copies (peer copies between
 * GPUs) and its tie_sum.  Across processes (mpirun): where the device
 * computes in host memory (the CPU) every process gathers every replica's
 * gradient (MPI) and sums them in the same order; on GPUs one NCCL
 * communicator per pipeline rank sums each process's share, except where
 * NCCL does not serve (pipelines split over processes, a build without
 * NCCL, PIPEHOST_NCCL=0): there the gradients go through the host and
 * MPI as on the CPU, and process 0 says so (ph_engine_print_reduction). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine-impl.h"
#include "optim.h"

/* ---- Sums over the replicas: losses and gradients --------------------- */

/* The step's loss over every replica, summed in replica order. */
static int replica_stats(ph_engine *e, ph_stats *st, ph_err *err)
{
	const ph_comm *cm = &e->cfg->comm;
	int R = e->nrep, total = R * cm->size;
	double *mine = calloc((size_t)R * 3, sizeof *mine), *all = calloc((size_t)total * 3, sizeof *all);
	int rc = PH_OK;
	if (!mine || !all) {
		rc = ph_fail(err, PH_ENOMEM, "out of memory");
		goto out;
	}
	for (int r = 0; r < R; r++) {
		ph_stats one;
		memset(&one, 0, sizeof one);
		ph_eng_collect(e->rep[r], e->m, &one);
		mine[3 * r] = one.loss_sum;
		mine[3 * r + 1] = one.correct;
		mine[3 * r + 2] = (double)one.targets;
	}
	if (cm->size > 1)
		rc = cm->ops->allgather(mine, all, (size_t)R * 3 * sizeof *mine, err);
	else
		memcpy(all, mine, (size_t)R * 3 * sizeof *mine);
	memset(st, 0, sizeof *st);
	for (int r = 0; !rc && r < total; r++) {
		st->loss_sum += all[3 * r];
		st->correct += all[3 * r + 1];
		st->targets += (int64_t)all[3 * r + 2];
	}
out:
	free(mine);
	free(all);
	return rc;
}

static int64_t largest_layer(const ph_engine *e)
{
	int64_t n = 0;
	for (int l = 0; l < e->model->n; l++)
		if (e->model->layers[l].param_numel > n)
			n = e->model->layers[l].param_numel;
	return n;
}

/* Across processes in host memory: g = g_0 + g_1 + ... + g_{R-1}, element
 * by element over every replica of every process, into every replica of
 * this process.  Also on GPUs where NCCL does not sum them (e->red_host:
 * pipelines split over processes, or a build without NCCL): a layer's
 * gradients come down to the host before the gather, and the sum goes
 * back up to every local replica; the additions are the same floats in
 * the same order as reduce_on_devices' in one process, so the bits match
 * it. */
static int reduce_gathered(ph_engine *e, int par, ph_err *err)
{
	const ph_comm *cm = &e->cfg->comm;
	int R = e->nrep, total = (int)e->cfg->run.replicas, from = R * cm->size;
	const int dev_side = !e->dev->host_memory; /* GPUs: through host copies */
	const float **src = calloc((size_t)total, sizeof *src);
	if (!src)
		return ph_fail(err, PH_ENOMEM, "out of memory");
	float *pack = NULL;
	int rc = PH_OK;
	if (cm->size > 1 && !e->gathered) {
		/* room for the largest layer: every replica's, and this
		 * process's packed for sending */
		e->gathered_n = (size_t)largest_layer(e);
		e->gathered = malloc(((size_t)from + (size_t)R) * (e->gathered_n ? e->gathered_n : 1) * sizeof(float));
		if (!e->gathered) {
			free(src);
			return ph_fail(err, PH_ENOMEM, "out of memory for the gradients of %d replicas", total);
		}
	}
	if (cm->size > 1)
		pack = e->gathered + (size_t)from * e->gathered_n;
	for (int l = 0; l < e->model->n && !rc; l++) {
		size_t n = (size_t)e->model->layers[l].param_numel;
		const int rank = layer_rank(e, l);
		if (!n)
			continue;
		if (cm->size == 1) {
			for (int r = 0; r < R; r++)
				src[r] = grad_block(e->rep[r], l, par);
		} else {
			for (int r = 0; r < R && !rc; r++)
				if (!dev_side)
					memcpy(pack + (size_t)r * n, grad_block(e->rep[r], l, par), n * sizeof(float));
				else if (here(e, rank)) /* (another process's rank: not read) */
					rc = e->dev->copy(e->rep[r]->rs[rank], pack + (size_t)r * n,
							  grad_block(e->rep[r], l, par), n * sizeof(float), PH_COPY_D2H, err);
			if (rc || (rc = cm->ops->allgather(pack, e->gathered, (size_t)R * n * sizeof(float), err)))
				break;
			/* whole pipelines: process-major is replica order; split
			 * ones: replica r's part that runs layer l */
			for (int r = 0; r < total; r++)
				src[r] = e->gathered + (size_t)(e->span > 1 ? r * e->span + owner0(e, rank) : r) * n;
		}
		/* the tensors every replica holds; a sharded one's rows are
		 * one replica's own (engine-shard.c) */
		int64_t o, len;
		if (dev_side && !here(e, rank))
			continue; /* another process sums it */
		for (int run = 0; ph_eng_summed_run(&e->model->layers[l], run, &o, &len); run++) {
			/* on a GPU the sum is made in pack, which the gather no
			 * longer needs, and goes up after */
			float *dst = (dev_side ? pack : grad_block(e, l, par)) + o;
			if (dst != src[0] + o)
				memcpy(dst, src[0] + o, (size_t)len * sizeof(float));
			for (int r = 1; r < total; r++) {
				const float *g = src[r] + o;
				for (int64_t i = 0; i < len; i++)
					dst[i] = dst[i] + g[i];
			}
			for (int r = dev_side ? 0 : 1; r < R && !rc; r++)
				if (!dev_side)
					memcpy(grad_block(e->rep[r], l, par) + o, dst, (size_t)len * sizeof(float));
				else
					rc = e->dev->copy(e->rep[r]->rs[rank], grad_block(e->rep[r], l, par) + o, dst,
							  (size_t)len * sizeof(float), PH_COPY_H2D, err);
			if (rc)
				break;
		}
	}
	free(src);
	return rc;
}

/* The same sum with the device's ops, queued on replica 0's stream of each
 * rank: another replica's gradient is copied over (a peer copy when it is
 * on another GPU) and added; across processes NCCL adds the processes'
 * sums; then every replica gets the result back. */
static int reduce_on_devices(ph_engine *e, int par, ph_err *err)
{
	int rc;
	for (int l = 0; l < e->model->n; l++) {
		int64_t n = e->model->layers[l].param_numel;
		if (!n)
			continue;
		int k = layer_rank(e, l);
		void *rs = e->rs[k];
		int64_t o;
		if (!owns(e, k)) /* a split pipeline: another process sums it */
			continue;
		/* the tensors every replica holds, not a sharded one's rows */
		for (int run = 0; ph_eng_summed_run(&e->model->layers[l], run, &o, &n); run++) {
			float *g0 = grad_block(e, l, par) + o;
			size_t bytes = (size_t)n * sizeof(float);
			for (int r = 1; r < e->nrep; r++)
				if ((rc = e->dev->copy(rs, e->red_tmp[k], grad_block(e->rep[r], l, par) + o, bytes, PH_COPY_D2D,
						       err)) ||
				    (rc = e->dev->tie_sum(rs, g0, e->red_tmp[k], n, err)))
					return rc;
			if (e->nccl && (rc = e->dev->nccl_sum(rs, e->nccl[k], g0, n, err)))
				return rc;
			for (int r = 1; r < e->nrep; r++)
				if ((rc = e->dev->copy(rs, grad_block(e->rep[r], l, par) + o, g0, bytes, PH_COPY_D2D, err)))
					return rc;
		}
	}
	/* the other replicas' update jobs run on their own streams */
	for (int k = e->rank_lo; k < e->rank_hi; k++)
		if ((rc = e->dev->sync(e->rs[k], err)))
			return rc;
	return PH_OK;
}

/* ---- The step, and the replicas' lives -------------------------------- */

int ph_engine_train_step(ph_engine *e, int64_t step, const float *x, const int32_t *y, double lr, ph_stats *st,
			 ph_err *err)
{
	int R = e->nrep, started = 0, rc = PH_OK;
	size_t per = (size_t)e->mbsize * e->m; /* samples per replica */
	for (; started < R && !rc; started++) {
		ph_engine *q = e->rep[started];
		size_t off = (size_t)q->replica * per;
		q->lr = lr; /* per-micro-batch updates run inside the pass */
		if ((rc = ph_eng_train_begin(q, step, x + off * e->in_numel, y + off * e->tps, err)))
			break;
	}
	int echo = 0; /* ph_eng_tell */
	for (int r = 0; r < started; r++) {
		ph_err one = { { 0 } };
		ph_eng_tell(&rc, err, &echo, ph_eng_train_wait(e->rep[r], &one), &one);
	}
	if (rc || (rc = replica_stats(e, st, err)))
		return rc;
	if (e->per_mb) /* pipedream: every backward updated already */
		return PH_OK;
	if (e->cfg->run.replicas > 1 && (rc = ph_eng_replicas_sum(e, 0, err)))
		return rc;
	for (int r = 0; r < R; r++) {
		ph_engine *q = e->rep[r];
		if ((rc = ph_eng_prepare_update(q, err)))
			return rc;
		q->lr = lr;
		q->t = step + 1;
	}
	/* sharded tensors: the clip norm over every replica's rows */
	if (e->cfg->optim.clip > 0 && ph_eng_has_shards(e) && (rc = ph_eng_shard_clip(e, err)))
		return rc;
	for (int r = 0; r < R; r++)
		ph_eng_dispatch_start(e->rep[r], JOB_UPDATE);
	echo = 0;
	for (int r = 0; r < R; r++) {
		ph_err one = { { 0 } };
		ph_eng_tell(&rc, err, &echo, ph_eng_dispatch_wait(e->rep[r], &one), &one);
	}
	return rc;
}

int ph_eng_replicas_sum(ph_engine *e, int par, ph_err *err)
{
	/* across processes: on the CPU, and on GPUs where NCCL does not sum
	 * them (open_reduction says why) */
	return e->cfg->comm.size > 1 && (e->dev->host_memory || e->red_host) ? reduce_gathered(e, par, err)
									     : reduce_on_devices(e, par, err);
}

void ph_engine_print_reduction(const ph_engine *e, FILE *f)
{
	if (e->red_host)
		fprintf(f, "replicas: gradients summed through host memory over MPI, not NCCL: %s\n", e->red_host);
	if (e->span > 1 && !e->dev->host_memory) {
		if (e->links_host)
			fprintf(f, "links: between processes through host memory over MPI, not NCCL: %s\n",
				e->links_host);
		else
			fprintf(f, "links: between processes over NCCL\n");
	}
}

int ph_engine_upload_tensors(ph_engine *e, ph_err *err)
{
	/* the weights and state were written into replica 0's host copies:
	 * the other replicas start from the same */
	int spp = ph_optim_state_per_param(&e->cfg->optim);
	for (int r = 1; r < e->nrep; r++)
		for (int l = 0; l < e->model->n; l++) {
			/* (a sharded tensor's rows are each replica's own: below) */
			int64_t o, n;
			for (int run = 0; ph_eng_summed_run(&e->model->layers[l], run, &o, &n); run++) {
				memcpy(e->rep[r]->params[l].hw + o, e->params[l].hw + o, (size_t)n * sizeof(float));
				memcpy(e->rep[r]->params[l].hs + o * spp, e->params[l].hs + o * spp,
				       (size_t)n * spp * sizeof(float));
			}
		}
	/* a sharded tensor's rows: each replica its own, from the whole */
	ph_eng_shard_scatter(e);
	for (int r = 1; r < e->nrep; r++)
		ph_eng_versions_copy(e->rep[r], e);
	for (int r = 0; r < e->nrep; r++) {
		int rc = ph_eng_upload_one(e->rep[r], err);
		if (rc)
			return rc;
	}
	return PH_OK;
}

/* Under mpirun on GPUs: may NCCL sum the replicas?  Sets e->red_host
 * when it may not, to the first reason: the user's switch, a build without
 * NCCL, two processes running one rank on one GPU (engine-gpu-keys.c). */
static int nccl_fits(ph_engine *e, ph_err *err)
{
	ph_gpu_keys g;
	int rc = ph_eng_gather_gpu_keys(e, &g, err);
	if (rc)
		return rc;
	e->red_host = ph_gpu_keys_switch_reason(&g);
	for (int k = 0; k < g.ranks && !e->red_host; k++)
		for (int i = 0; i < g.n && !e->red_host; i++)
			for (int j = i + 1; j < g.n && !e->red_host; j++)
				if (ph_gpu_keys_same(&g, i, k, j, k)) {
					snprintf(e->red_why, sizeof e->red_why,
						 "processes %d and %d run rank %d on one GPU (%.*s), which NCCL refuses", i,
						 j, k, PH_GPU_KEY_BYTES, ph_gpu_key(&g, i, k));
					e->red_host = e->red_why;
				}
	ph_gpu_keys_free(&g);
	return PH_OK;
}

/* Replicas: room on replica 0's device of each rank for another replica's
 * gradient; under mpirun on GPUs, one NCCL communicator per rank. */
static int open_reduction(ph_engine *e, ph_err *err)
{
	const ph_comm *cm = &e->cfg->comm;
	int P = e->plan->ranks, rc;
	if (e->nrep > 1) {
		if (!(e->red_tmp = calloc((size_t)P, sizeof *e->red_tmp)))
			return ph_fail(err, PH_ENOMEM, "out of memory");
		for (int k = 0; k < P; k++) {
			int64_t n = 0;
			for (int l = 0; l < e->model->n; l++)
				if (layer_rank(e, l) == k && e->model->layers[l].param_numel > n)
					n = e->model->layers[l].param_numel;
			if (n && !(e->red_tmp[k] = ph_eng_balloc(e, k, (size_t)n * sizeof(float))))
				return ph_fail(err, PH_ENOMEM, "out of memory for summing the replicas' gradients%s%s",
					       e->err_set ? ": " : "", e->err_set ? e->err.msg : "");
		}
	}
	if (cm->size == 1 || e->dev->host_memory)
		return PH_OK; /* reduce_gathered */
	/* a split pipeline: its replicas sum over NCCL where its links run
	 * over NCCL (engine-links-nccl.c), else through the host with them */
	if (e->span > 1 && e->cfg->run.replicas <= 1)
		return PH_OK;
	if (e->span > 1 && !e->link_comm) {
		snprintf(e->red_why, sizeof e->red_why, "the pipelines are split over processes and their links go "
			 "through the host (%s)", e->links_host ? e->links_host : "see the links line");
		e->red_host = e->red_why;
		return PH_OK;
	}
	if ((rc = nccl_fits(e, err)) || e->red_host)
		return rc;
	if (!(e->nccl = calloc((size_t)P, sizeof *e->nccl)))
		return ph_fail(err, PH_ENOMEM, "out of memory");
	/* rank k's communicator: every process that runs rank k, one per
	 * process group of a pipeline (member: the process's rank over span;
	 * whole pipelines, span 1: every process).  Every id first (the
	 * broadcasts are every process's), then each process joins its
	 * ranks' in rank order, so the members of each meet. */
	unsigned char(*ids)[PH_NCCL_ID_BYTES] = calloc((size_t)P, sizeof *ids);
	if (!ids)
		return ph_fail(err, PH_ENOMEM, "out of memory");
	rc = PH_OK;
	for (int k = 0; k < P && !rc; k++) {
		int root = owner0(e, k);
		if (cm->rank == root)
			rc = e->dev->nccl_unique_id(ids[k], err);
		if (!rc)
			rc = cm->ops->bcast(ids[k], sizeof ids[k], root, err);
	}
	for (int k = e->rank_lo; k < e->rank_hi && !rc; k++)
		rc = e->dev->nccl_open(e->rs[k], ids[k], cm->size / e->span, cm->rank / e->span, &e->nccl[k], err);
	free(ids);
	return rc;
}

int ph_engine_create(ph_engine **out, ph_model *m, ph_plan *p, const ph_config *c, ph_err *err)
{
	int R = ph_config_local_replicas(c);
	*out = NULL;
	int rc = ph_eng_create_one(out, m, p, c, 0, err);
	ph_engine *e = *out;
	if (!e)
		return rc;
	if (!(e->rep = calloc((size_t)R, sizeof *e->rep)))
		return rc ? rc : ph_fail(err, PH_ENOMEM, "out of memory");
	e->rep[0] = e;
	e->nrep = 1;
	if (rc)
		return rc;
	for (int r = 1; r < R; r++) {
		/* layer states of its own: a layer may keep per-call state
		 * (cuDNN descriptors made on first use), and replicas run at
		 * the same time */
		ph_model *own = calloc(1, sizeof *own);
		if (!own)
			return ph_fail(err, PH_ENOMEM, "out of memory");
		if ((rc = ph_model_build(own, c, &m->input, m->max_batch, err))) {
			ph_model_free(own);
			free(own);
			return rc;
		}
		rc = ph_eng_create_one(&e->rep[r], own, p, c, r, err);
		if (e->rep[r])
			e->rep[r]->own_model = own, e->nrep++;
		else
			ph_model_free(own), free(own);
		if (rc)
			return rc;
	}
	if ((rc = ph_eng_groups_create(e, err)))
		return rc;
	if (R > 1 || c->comm.size > 1)
		return open_reduction(e, err);
	return PH_OK;
}

void ph_engine_destroy(ph_engine *e)
{
	if (!e)
		return;
	ph_engine **rep = e->rep;
	if (rep)
		ph_eng_groups_destroy(e);
	ph_eng_shard_free(e);
	for (int r = 1; r < e->nrep; r++) {
		ph_model *own = rep[r]->own_model;
		ph_eng_destroy_one(rep[r]);
		if (own) {
			ph_model_free(own);
			free(own);
		}
	}
	ph_eng_destroy_one(e);
	free(rep);
}
