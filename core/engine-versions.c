/* SPDX-License-Identifier: MIT */
/* Weight versions for asynchronous schedules: the bookkeeping of a
 * schedule that declares PH_SCHED_DELAYED_UPDATE (2bw, plugin.h).  A
 * synchronous schedule has one version per layer, P->w, which the
 * optimizer updates and every micro-batch reads; none of this runs.
 *
 * Delayed update.  Each layer has a second buffer P->v beside P->w:
 *
 *     P->w  W(t)     the optimizer's weights (what --save-weights writes,
 *                    what evaluation reads)
 *     P->v  W(t-1)   what the forward and backward of step t's
 *                    micro-batches read (P->fw points into it)
 *
 * At step t's update, on each rank before its optimizer op:
 *     v = w          (now W(t), the weights step t+1 runs on)
 *     w = w - lr*g   (the optimizer: W(t+1), with g = grad f(W(t-1)))
 * At the start v = w (W(-1) = W(0)).  Weights loaded from a file start
 * that way too; a checkpoint holds v as LAYER.PARAM.prev among the
 * optimizer state, so a resume continues exactly.
 *
 * Per-micro-batch updates (PH_SCHED_UPDATE_PER_MB, pipedream).  A layer on
 * rank r keeps a ring of K = weight_versions(r) versions, version u (the
 * weights after u updates, counted over the run) in slot u mod K.  The
 * forward and backward of micro-batch n = step * m + j read version
 * max(0, n - K + 1); right after the backward of micro-batch n the rank
 * updates P->w with that micro-batch's gradient (optimizer step n + 1)
 * and copies it into slot (n + 1) mod K, over version n + 1 - K, which
 * micro-batch n was the last to read.  The ring goes into checkpoints as
 * LAYER.PARAM.stashJofK (slot J of K): a resume must keep the same K per
 * layer, since slot J holds version u with u mod K = J.
 *
 * Neither rule depends on when a rank runs what, so the engine runs these
 * schedules' steps as one stream (engine-stream.c) with the bits of a
 * drain every step.  Under the stream a micro-batch of step t reads W(t-1)
 * from w until its rank's update of step t-1 ran, from v after it
 * (compute_params), and odd steps' gradients go to g2. */
#include <stdlib.h>
#include <string.h>

#include "engine-impl.h"
#include "optim.h"

/* Per-micro-batch updates: one ring of versions per layer, on its rank.
 * What such a schedule cannot run with is refused by
 * ph_plan_check_per_mb, before the profiler and again here. */
static int alloc_rings(ph_engine *e, ph_err *err)
{
	const ph_config *c = e->cfg;
	const char *name = c->schedule->head.name;
	int refused = ph_plan_check_per_mb(e->model, c, err);
	if (refused)
		return refused;
	ph_schedule_shape shape = { e->plan->ranks, e->plan->v, e->plan->m };
	for (int l = 0; l < e->model->n; l++) {
		lparams_t *P = &e->params[l];
		const ph_layer *L = &e->model->layers[l];
		size_t n = (size_t)L->param_numel;
		int r = layer_rank(e, l), rc;
		int K = ph_schedule_weight_versions(c->schedule, c->schedule_config, &shape, r);
		if (K < 1 || K > 4096)
			return ph_fail(err, PH_EINVAL, "schedule %s keeps %d weight versions on rank %d (1..4096 make sense)",
				       name, K, r);
		P->nring = K;
		P->ring = ph_eng_balloc(e, r, (size_t)K * n * sizeof(float));
		P->rw = calloc((size_t)K, sizeof *P->rw);
		if (!P->ring || !P->rw)
			return ph_fail(err, PH_ENOMEM, "out of memory for the %d weight versions of layer %s (%.1f MiB)", K,
				       L->cfg->name, (double)K * n * sizeof(float) / (1024.0 * 1024.0));
		P->hring = e->dev->host_memory ? P->ring : calloc((size_t)K * n + 1, sizeof(float));
		if (!P->hring)
			return ph_fail(err, PH_ENOMEM, "out of memory");
		for (int k = 0; k < K; k++) {
			/* every slot starts as W(0): version 0, and what a
			 * micro-batch before the K-1th reads */
			if (n && (rc = e->dev->copy(e->rs[r], P->ring + (size_t)k * n, P->w, n * sizeof(float),
						    PH_COPY_D2D, err)))
				return rc;
			for (int q = 0; q < L->meta.nparams; q++)
				P->rw[k][q] = P->ring + (size_t)k * n + (P->pw[q] - P->w);
		}
	}
	return PH_OK;
}

float *const *ph_eng_versions_stashed(const ph_engine *e, int l, int mb)
{
	const lparams_t *P = &e->params[l];
	int64_t u = e->step * e->m + mb - P->nring + 1;
	return P->rw[u < 0 ? 0 : u % P->nring];
}

int ph_eng_versions_update_mb(ph_engine *e, int c, int mb, ph_err *err)
{
	const ph_optim_config *oc = &e->cfg->optim;
	const int spp = ph_optim_state_per_param(oc);
	const int64_t n = e->step * e->m + mb; /* this micro-batch, over the run */
	const double lr = e->stream ? e->lrs[mb / e->m] : e->lr; /* its step's rate */
	void *rs = e->rs[e->chunks[c].rank];
	for (int l = e->chunks[c].a; l < e->chunks[c].b; l++) {
		const ph_layer *L = &e->model->layers[l];
		lparams_t *P = &e->params[l];
		int64_t off = 0;
		int rc;
		for (int q = 0; q < L->meta.nparams; q++) {
			int64_t k = ph_shape_numel(&L->meta.params[q].shape);
			if ((rc = e->dev->optim_update(rs, oc, n + 1, lr, 1.0, P->pw[q], P->pg[q], P->s + off * spp, k,
						       !L->meta.params[q].no_decay, err)))
				return rc;
			off += k;
		}
		size_t numel = (size_t)L->param_numel;
		if (numel && (rc = e->dev->copy(rs, P->ring + (size_t)((n + 1) % P->nring) * numel, P->w,
						numel * sizeof(float), PH_COPY_D2D, err)))
			return rc;
	}
	return PH_OK;
}

int ph_eng_versions_alloc(ph_engine *e, ph_err *err)
{
	const ph_config *c = e->cfg;
	uint32_t flags = ph_schedule_flags(c->schedule);
	for (int l = 0; l < e->model->n; l++)
		for (int q = 0; q < e->model->layers[l].meta.nparams; q++)
			e->params[l].fw[q] = e->params[l].pw[q];
	e->delayed = !!(flags & PH_SCHED_DELAYED_UPDATE);
	e->per_mb = !e->delayed && (flags & PH_SCHED_UPDATE_PER_MB);
	if (e->per_mb)
		return alloc_rings(e, err);
	if (!e->delayed)
		return PH_OK;
	ph_schedule_shape shape = { e->plan->ranks, e->plan->v, e->plan->m };
	for (int r = 0; r < e->plan->ranks; r++) {
		int nv = ph_schedule_weight_versions(c->schedule, c->schedule_config, &shape, r);
		if (nv < 2)
			return ph_fail(err, PH_EINVAL, "schedule %s asks for a delayed update but keeps %d weight version(s) "
				       "on rank %d; it needs 2 (a bug in the plugin)", c->schedule->head.name, nv, r);
	}
	for (int l = 0; l < e->model->n; l++) {
		lparams_t *P = &e->params[l];
		size_t n = (size_t)e->model->layers[l].param_numel;
		int r = layer_rank(e, l), rc;
		if (!here(e, r)) {
			/* another process runs it: W(t-1)'s host copy alone */
			if (!(P->hv = calloc(n ? n : 1, sizeof(float))))
				return ph_fail(err, PH_ENOMEM, "out of memory");
			continue;
		}
		if (!(P->v = ph_eng_balloc(e, r, n * sizeof(float))))
			return ph_fail(err, PH_ENOMEM, "out of memory for the second weight version of layer %s (%.1f MiB)",
				       e->model->layers[l].cfg->name, (double)n * sizeof(float) / (1024.0 * 1024.0));
		P->hv = e->dev->host_memory ? P->v : calloc(n ? n : 1, sizeof(float));
		if (!P->hv)
			return ph_fail(err, PH_ENOMEM, "out of memory");
		/* W(-1) = W(0) */
		if (n && (rc = e->dev->copy(e->rs[r], P->v, P->w, n * sizeof(float), PH_COPY_D2D, err)))
			return rc;
		for (int q = 0; q < e->model->layers[l].meta.nparams; q++)
			P->fw[q] = P->v + param_off(e, l, q);
	}
	return PH_OK;
}

void ph_eng_versions_free(ph_engine *e)
{
	for (int l = 0; e->params && l < e->model->n; l++) {
		lparams_t *P = &e->params[l];
		if (P->hv != P->v)
			free(P->hv);
		ph_eng_bfree(e, layer_rank(e, l), P->v);
		P->v = P->hv = NULL;
		if (P->hring != P->ring)
			free(P->hring);
		ph_eng_bfree(e, layer_rank(e, l), P->ring);
		free(P->rw);
		P->ring = P->hring = NULL;
		P->rw = NULL;
	}
}

int ph_eng_versions_advance(ph_engine *e, int rank, ph_err *err)
{
	if (!e->delayed)
		return PH_OK;
	for (int c = rank; c < e->plan->nchunks; c += e->plan->ranks)
		for (int l = e->chunks[c].a; l < e->chunks[c].b; l++) {
			size_t n = (size_t)e->model->layers[l].param_numel;
			int rc;
			if (n && (rc = e->dev->copy(e->rs[rank], e->params[l].v, e->params[l].w, n * sizeof(float),
						    PH_COPY_D2D, err)))
				return rc;
		}
	return PH_OK;
}

int ph_eng_versions_count(const ph_engine *e)
{
	int k = 0;
	for (int l = 0; (e->delayed || e->per_mb) && l < e->model->n; l++)
		k += e->model->layers[l].meta.nparams * (e->per_mb ? e->params[l].nring : 1);
	return k;
}

void ph_eng_versions_tensors(ph_engine *e, ph_tensor_ref *t)
{
	int k = 0;
	for (int l = 0; e->per_mb && l < e->model->n; l++) {
		const ph_layer *L = &e->model->layers[l];
		const lparams_t *P = &e->params[l];
		for (int q = 0; q < L->meta.nparams; q++)
			for (int j = 0; j < P->nring; j++, k++) {
				/* slot j of K: a run that keeps another K finds no such
				 * name and is refused (core/checkpoint.c says why) */
				snprintf(t[k].name, sizeof t[k].name, "%s.%s.stash%dof%d", L->cfg->name,
					 L->meta.params[q].name, j, P->nring);
				t[k].shape = L->meta.params[q].shape;
				t[k].data = P->hring + (size_t)j * L->param_numel + (P->pw[q] - P->w);
			}
	}
	e->versions_follow = 0;
	if (!e->delayed)
		return;
	for (int l = 0; l < e->model->n; l++) {
		const ph_layer *L = &e->model->layers[l];
		for (int q = 0; q < L->meta.nparams; q++, k++) {
			snprintf(t[k].name, sizeof t[k].name, "%s.%s.prev", L->cfg->name, L->meta.params[q].name);
			t[k].shape = L->meta.params[q].shape;
			t[k].data = e->params[l].hv + param_off(e, l, q);
		}
	}
	/* whoever asked for the state will write or read it: an upload
	 * takes .prev as it stands */
	e->versions_follow = 0;
}

int ph_eng_versions_download(ph_engine *e, ph_err *err)
{
	for (int l = 0; e->per_mb && l < e->model->n; l++) {
		const lparams_t *P = &e->params[l];
		size_t n = (size_t)e->model->layers[l].param_numel * P->nring;
		int rc;
		if ((rc = e->dev->copy(e->rs[layer_rank(e, l)], P->hring, P->ring, n * sizeof(float), PH_COPY_D2H, err)))
			return rc;
	}
	for (int l = 0; e->delayed && l < e->model->n; l++) {
		size_t n = (size_t)e->model->layers[l].param_numel;
		int rc;
		if (here(e, layer_rank(e, l)) &&
		    (rc = e->dev->copy(e->rs[layer_rank(e, l)], e->params[l].hv, e->params[l].v, n * sizeof(float),
				       PH_COPY_D2H, err)))
			return rc;
	}
	return PH_OK;
}

int ph_eng_versions_upload(ph_engine *e, ph_err *err)
{
	for (int l = 0; e->per_mb && l < e->model->n; l++) {
		lparams_t *P = &e->params[l];
		size_t n = (size_t)e->model->layers[l].param_numel;
		int rc;
		/* weights from a file without the state: every slot W(0) */
		for (int j = 0; e->versions_follow && n && j < P->nring; j++)
			memcpy(P->hring + (size_t)j * n, P->hw, n * sizeof(float));
		if ((rc = e->dev->copy(e->rs[layer_rank(e, l)], P->ring, P->hring, n * P->nring * sizeof(float),
				       PH_COPY_H2D, err)))
			return rc;
	}
	for (int l = 0; e->delayed && l < e->model->n; l++) {
		lparams_t *P = &e->params[l];
		size_t n = (size_t)e->model->layers[l].param_numel;
		int rc;
		/* weights from a file without the state: W(-1) = W(0) again */
		if (e->versions_follow && n)
			memcpy(P->hv, P->hw, n * sizeof(float));
		if (here(e, layer_rank(e, l)) &&
		    (rc = e->dev->copy(e->rs[layer_rank(e, l)], P->v, P->hv, n * sizeof(float), PH_COPY_H2D, err)))
			return rc;
	}
	e->versions_follow = 0;
	return PH_OK;
}

/* A pipeline split over processes (ph_engine_gather): W(t-1) of every
 * layer from the process of replica 0 that runs it, to every process, so
 * that process 0's checkpoint holds the .prev a resume needs. */
int ph_eng_versions_gather(ph_engine *e, ph_err *err)
{
	for (int l = 0; e->delayed && l < e->model->n; l++) {
		lparams_t *P = &e->params[l];
		size_t bytes = (size_t)e->model->layers[l].param_numel * sizeof(float);
		int rc;
		if (bytes && (rc = ph_eng_split_bcast_owner(e, layer_rank(e, l), P->v, P->hv, bytes, err)))
			return rc;
	}
	return PH_OK;
}

void ph_eng_versions_copy(ph_engine *dst, const ph_engine *src)
{
	for (int l = 0; dst->delayed && l < dst->model->n; l++)
		memcpy(dst->params[l].hv, src->params[l].hv, (size_t)dst->model->layers[l].param_numel * sizeof(float));
	dst->versions_follow = src->versions_follow;
}
