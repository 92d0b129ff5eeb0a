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
 * The engine still ends each step with every rank idle (the update job is
 * a barrier); the versions make the arithmetic that of a pipeline that
 * never drains, so an engine that overlaps steps would give the same bits. */
#include <stdlib.h>
#include <string.h>

#include "engine-impl.h"

int ph_eng_versions_alloc(ph_engine *e, ph_err *err)
{
	const ph_config *c = e->cfg;
	uint32_t flags = ph_schedule_flags(c->schedule);
	for (int l = 0; l < e->model->n; l++)
		for (int q = 0; q < e->model->layers[l].meta.nparams; q++)
			e->params[l].fw[q] = e->params[l].pw[q];
	e->delayed = !!(flags & PH_SCHED_DELAYED_UPDATE);
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
			P->fw[q] = P->v + (P->pw[q] - P->w);
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
	if (!e->delayed)
		return 0;
	int k = 0;
	for (int l = 0; l < e->model->n; l++)
		k += e->model->layers[l].meta.nparams;
	return k;
}

void ph_eng_versions_tensors(ph_engine *e, ph_tensor_ref *t)
{
	if (!e->delayed)
		return;
	int k = 0;
	for (int l = 0; l < e->model->n; l++) {
		const ph_layer *L = &e->model->layers[l];
		for (int q = 0; q < L->meta.nparams; q++, k++) {
			snprintf(t[k].name, sizeof t[k].name, "%s.%s.prev", L->cfg->name, L->meta.params[q].name);
			t[k].shape = L->meta.params[q].shape;
			t[k].data = e->params[l].hv + (e->params[l].pw[q] - e->params[l].w);
		}
	}
	/* whoever asked for the state will write or read it: an upload
	 * takes .prev as it stands */
	e->versions_follow = 0;
}

int ph_eng_versions_download(ph_engine *e, ph_err *err)
{
	for (int l = 0; e->delayed && l < e->model->n; l++) {
		size_t n = (size_t)e->model->layers[l].param_numel;
		int rc;
		if ((rc = e->dev->copy(e->rs[layer_rank(e, l)], e->params[l].hv, e->params[l].v, n * sizeof(float),
				       PH_COPY_D2H, err)))
			return rc;
	}
	return PH_OK;
}

int ph_eng_versions_upload(ph_engine *e, ph_err *err)
{
	for (int l = 0; e->delayed && l < e->model->n; l++) {
		lparams_t *P = &e->params[l];
		size_t n = (size_t)e->model->layers[l].param_numel;
		int rc;
		/* weights from a file without the state: W(-1) = W(0) again */
		if (e->versions_follow && n)
			memcpy(P->hv, P->hw, n * sizeof(float));
		if ((rc = e->dev->copy(e->rs[layer_rank(e, l)], P->v, P->hv, n * sizeof(float), PH_COPY_H2D, err)))
			return rc;
	}
	e->versions_follow = 0;
	return PH_OK;
}

void ph_eng_versions_copy(ph_engine *dst, const ph_engine *src)
{
	for (int l = 0; dst->delayed && l < dst->model->n; l++)
		memcpy(dst->params[l].hv, src->params[l].hv, (size_t)dst->model->layers[l].param_numel * sizeof(float));
	dst->versions_follow = src->versions_follow;
}
