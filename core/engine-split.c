/* SPDX-License-Identifier: MIT */
/* A pipeline split over processes (mpirun, replicas < processes; on the
 * CPU or on GPUs): which ranks this process runs, and the collectives the
 * split needs besides the links' messages (engine-links.c): the clip norm
 * over every process's tensors, tied copies in two processes, evaluation
 * figures, and every layer to every process before saving.  Which process
 * runs which rank: owns, owner and owner0 (engine-impl.h).
 *
 * Failures under mpirun: a process that fails returns its error to main(),
 * which prints it and aborts every process (core/main.c).  Nothing here
 * waits for the others to agree: a process stuck in a collective or a link
 * receive could not answer. */
#include <stdlib.h>
#include <string.h>

#include "engine-impl.h"
#include "optim.h"

void ph_eng_split_init(ph_engine *e, int local)
{
	const ph_config *c = e->cfg;
	const ph_plan *p = e->plan;
	ph_split_share sh = ph_config_split_share(c, p->ranks);
	e->span = sh.span;
	if (e->span > 1) {
		/* this process's share of its replica's ranks */
		e->replica = c->comm.rank / e->span;
		e->proc_base = sh.base;
		e->rank_lo = sh.lo;
		e->rank_hi = sh.lo + sh.per;
	} else {
		e->replica = c->comm.rank * ph_config_local_replicas(c) + local;
		e->rank_lo = 0;
		e->rank_hi = p->ranks;
	}
}

/* The clip norm's sum of squares when the pipeline is split over
 * processes: each tensor's from the process of replica 0 that runs it,
 * added in layer order as one process would. */
int ph_eng_split_sumsq(ph_engine *e, double *total, ph_err *err)
{
	int T = 0, N = e->cfg->comm.size;
	for (int l = 0; l < e->model->n; l++)
		T += e->model->layers[l].meta.nparams;
	double *mine = calloc((size_t)(T ? T : 1), sizeof *mine), *all = calloc((size_t)N * (T ? T : 1), sizeof *all);
	int rc = PH_OK;
	if (!mine || !all) {
		rc = ph_fail(err, PH_ENOMEM, "out of memory");
		goto out;
	}
	for (int l = 0, t = 0; l < e->model->n && !rc; l++) {
		const ph_layer *L = &e->model->layers[l];
		for (int q = 0; q < L->meta.nparams && !rc; q++, t++)
			if (owns(e, layer_rank(e, l)))
				rc = e->dev->sumsq(e->rs[layer_rank(e, l)], e->params[l].pg[q],
						   ph_shape_numel(&L->meta.params[q].shape), &mine[t], err);
	}
	if (rc)
		goto out;
	if ((rc = e->cfg->comm.ops->allgather(mine, all, (size_t)T * sizeof *mine, err)))
		goto out;
	*total = 0;
	for (int l = 0, t = 0; l < e->model->n; l++) {
		const ph_layer *L = &e->model->layers[l];
		for (int q = 0; q < L->meta.nparams; q++, t++) {
			int copy = tied_copy(e->model, l, q);
			if (!copy)
				*total += all[(size_t)owner0(e, layer_rank(e, l)) * T + t];
		}
	}
out:
	free(mine);
	free(all);
	return rc;
}

/* On GPUs each process holds its own ranks' tensors alone (here()): the
 * holder of each copy gets the other copy's gradient as host bytes, puts
 * it in a device buffer of its rank and adds it to its own.  The source's
 * holder computes src + dst, the copy's dst + src: the same float (IEEE
 * addition commutes), so both copies stay bitwise equal, and equal to
 * what one process holding both computes. */
static int split_tie_gpu(ph_engine *e, int k, ph_err *err)
{
	const ph_tie *t = &e->model->ties[k];
	const int rs = layer_rank(e, t->src_layer), rd = layer_rank(e, t->dst_layer);
	const int ps = owner0(e, rs), pd = owner0(e, rd);
	const int64_t n = ph_shape_numel(&e->model->layers[t->src_layer].meta.params[t->src_param].shape);
	const size_t bytes = (size_t)n * sizeof(float);
	const ph_comm *cm = &e->cfg->comm;
	float *hs = malloc(bytes ? bytes : 1), *hd = malloc(bytes ? bytes : 1);
	int rc = PH_OK;
	if (!hs || !hd) {
		rc = ph_fail(err, PH_ENOMEM, "out of host memory for a tied copy's gradient (%.1f MiB)",
			     (double)bytes / 1048576.0);
		goto out;
	}
	/* both copies as they are, to every process (a collective: all call it) */
	if ((cm->rank == pd && (rc = e->dev->copy(e->rs[rd], hd, e->params[t->dst_layer].pg[t->dst_param], bytes,
						  PH_COPY_D2H, err))) ||
	    (rc = cm->ops->bcast(hd, bytes, pd, err)) ||
	    (cm->rank == ps && (rc = e->dev->copy(e->rs[rs], hs, e->params[t->src_layer].pg[t->src_param], bytes,
						  PH_COPY_D2H, err))) ||
	    (rc = cm->ops->bcast(hs, bytes, ps, err)))
		goto out;
	for (int side = 0; side < 2 && !rc; side++) {
		int r = side ? rd : rs;
		if (!here(e, r))
			continue;
		float *mine = side ? e->params[t->dst_layer].pg[t->dst_param] : e->params[t->src_layer].pg[t->src_param];
		if (!e->tie_tmp[k] && !(e->tie_tmp[k] = ph_eng_balloc(e, r, bytes)))
			rc = ph_fail(err, PH_ENOMEM, "out of GPU memory for the tied copy in layer %s%s%s",
				     e->model->layers[t->dst_layer].cfg->name, e->err_set ? ": " : "",
				     e->err_set ? e->err.msg : "");
		else if (!(rc = e->dev->copy(e->rs[r], e->tie_tmp[k], side ? hs : hd, bytes, PH_COPY_H2D, err)))
			rc = e->dev->tie_sum(e->rs[r], mine, e->tie_tmp[k], n, err);
	}
out:
	free(hs);
	free(hd);
	return rc;
}

int ph_eng_split_tie(ph_engine *e, int k, int *done, ph_err *err)
{
	const ph_tie *t = &e->model->ties[k];
	float *gs = e->params[t->src_layer].pg[t->src_param], *gd = e->params[t->dst_layer].pg[t->dst_param];
	size_t bytes = (size_t)ph_shape_numel(&e->model->layers[t->src_layer].meta.params[t->src_param].shape) *
		       sizeof(float);
	int ps = owner0(e, layer_rank(e, t->src_layer)), pd = owner0(e, layer_rank(e, t->dst_layer)), rc;
	*done = 0;
	if (ps == pd) {
		/* one process sums them (tie_sum); the others hold neither */
		*done = !here(e, layer_rank(e, t->src_layer));
		return PH_OK;
	}
	if (!e->dev->host_memory) {
		*done = 1;
		return split_tie_gpu(e, k, err);
	}
	/* every process gets both copies (the replicas' sums are equal, so
	 * replica 0's will do) and sums them alike */
	if ((rc = e->cfg->comm.ops->bcast(gd, bytes, pd, err)) || (rc = e->cfg->comm.ops->bcast(gs, bytes, ps, err)))
		return rc;
	return PH_OK;
}

int ph_eng_split_eval_stats(ph_engine *e, ph_stats *st, ph_err *err)
{
	double mine[3] = { st->loss_sum, st->correct, (double)st->targets }, *all;
	int N = e->cfg->comm.size, rc;
	if (!(all = calloc((size_t)N * 3, sizeof *all)))
		return ph_fail(err, PH_ENOMEM, "out of memory");
	if (!(rc = e->cfg->comm.ops->allgather(mine, all, sizeof mine, err))) {
		memset(st, 0, sizeof *st);
		for (int q = 0; q < e->span; q++) { /* replica 0's processes: one evaluated */
			st->loss_sum += all[3 * q];
			st->correct += all[3 * q + 1];
			st->targets += (int64_t)all[3 * q + 2];
		}
	}
	free(all);
	return rc;
}

int ph_eng_split_bcast_owner(ph_engine *e, int k, void *dev, void *host, size_t bytes, ph_err *err)
{
	int root = owner0(e, k), me = e->cfg->comm.rank, gpu = !e->dev->host_memory, rc;
	if (gpu && me == root && (rc = e->dev->copy(e->rs[k], host, dev, bytes, PH_COPY_D2H, err)))
		return rc;
	if ((rc = e->cfg->comm.ops->bcast(host, bytes, root, err)))
		return rc;
	if (gpu && me != root && here(e, k) && (rc = e->dev->copy(e->rs[k], dev, host, bytes, PH_COPY_H2D, err)))
		return rc;
	return PH_OK;
}

/* Split pipelines: each layer's weights and optimizer state from the
 * process of replica 0 that runs it, to every process (engine.h).  On
 * GPUs the host copies go through the device (ph_eng_split_bcast_owner),
 * so saving then downloads the root's values everywhere. */
int ph_engine_gather(ph_engine *e, ph_err *err)
{
	if (e->span == 1)
		return ph_eng_shard_gather_all(e, err); /* sharded tensors' rows */
	int spp = ph_optim_state_per_param(&e->cfg->optim);
	for (int l = 0; l < e->model->n; l++) {
		lparams_t *P = &e->params[l];
		size_t n = (size_t)e->model->layers[l].param_numel;
		int k = layer_rank(e, l), rc;
		if (P->alias)
			continue; /* a tied copy sharing its source's memory */
		if ((rc = ph_eng_split_bcast_owner(e, k, P->w, P->hw, n * sizeof(float), err)) ||
		    (rc = ph_eng_split_bcast_owner(e, k, P->s, P->hs, n * spp * sizeof(float), err)))
			return rc;
	}
	return ph_eng_versions_gather(e, err); /* 2bw's W(t-1) */
}

