/* SPDX-License-Identifier: MIT */
/* Sharded parameters (plugin ABI 1.5, ph_layer_meta.sharded_params): a
 * tensor whose d[0] rows are split over the R replicas of the stage, each
 * replica holding and training rows [r d[0]/R, (r+1) d[0]/R) (expert
 * parallelism: each replica owns E/R experts).
 *
 * What the rest of the engine does with them:
 *   - layout (engine.c): a replica's arena holds its rows only
 *     (ph_param_local_numel); initialisation draws those rows of the whole
 *     tensor's counter-based values, so every R starts from the same model;
 *   - the replicas' gradient sum skips them (engine-replicas.c): their rows
 *     belong to one replica, whose gradient is already the whole one;
 *   - the clip norm: every replica's sum of squares over its shards, added
 *     in replica order to the rest (ph_eng_shard_clip), the same on every
 *     replica and every placement;
 *   - named tensors (checkpoints, --save-weights, an init file): the whole
 *     tensor, gathered from every replica's rows into a host copy kept
 *     here, and scattered back after a write (ph_engine_upload_tensors).
 *     Under mpirun the other processes' rows come with ph_engine_gather,
 *     which every process calls before saving. */
#include <stdlib.h>
#include <string.h>

#include "engine-impl.h"
#include "optim.h"

/* Whole copies of each sharded tensor: weights and optimizer state. */
typedef struct {
	float **w;           /* [layers * PH_MAX_PARAMS] numel, or NULL */
	float **s;           /* [layers * PH_MAX_PARAMS] spp * numel */
	int have[2];         /* weights, state: gathered (scatter puts back only those) */
} whole_t;

int ph_eng_has_shards(const ph_engine *e)
{
	for (int l = 0; l < e->model->n; l++)
		if (e->model->layers[l].meta.sharded_params)
			return 1;
	return 0;
}

int ph_engine_eval_together(const ph_engine *e)
{
	return e->cfg->comm.size > 1 && ph_eng_has_shards(e);
}

static int sharded(const ph_layer *L, int q)
{
	return (int)(L->meta.sharded_params >> q & 1u);
}

/* Offset of tensor q in layer l's block (weights), in floats. */
static int64_t offset_of(const ph_layer *L, int q)
{
	int64_t off = 0;
	for (int p = 0; p < q; p++)
		off += ph_param_local_numel(L, p);
	return off;
}

int ph_eng_summed_run(const ph_layer *L, int i, int64_t *off, int64_t *n)
{
	int64_t at = 0;
	int run = 0;
	for (int q = 0; q < L->meta.nparams;) {
		if (sharded(L, q)) {
			at += ph_param_local_numel(L, q++);
			continue;
		}
		int64_t start = at;
		while (q < L->meta.nparams && !sharded(L, q))
			at += ph_param_local_numel(L, q++);
		if (run++ == i) {
			*off = start;
			*n = at - start;
			return 1;
		}
	}
	return 0;
}

int ph_eng_shard_clip(ph_engine *e, ph_err *err)
{
	const ph_comm *cm = &e->cfg->comm;
	int R = (int)e->cfg->run.replicas, nl = e->nrep, rc = PH_OK;
	double *all = calloc((size_t)R, sizeof *all), *mine = calloc((size_t)nl, sizeof *mine);
	if (!all || !mine) {
		rc = ph_fail(err, PH_ENOMEM, "out of memory");
		goto out;
	}
	for (int r = 0; r < nl; r++)
		mine[r] = e->rep[r]->clip_shard;
	if (cm->size > 1)
		rc = cm->ops->allgather(mine, all, (size_t)nl * sizeof *mine, err);
	else
		memcpy(all, mine, (size_t)nl * sizeof *mine);
	if (rc)
		goto out;
	/* the same sum on every replica: theirs in replica order after the rest */
	double total = e->clip_total;
	for (int j = 0; j < R; j++)
		total += all[j];
	for (int r = 0; r < nl; r++) {
		e->rep[r]->clip_scale = 1.0;
		ph_eng_set_clip_scale(e->rep[r], total);
	}
out:
	free(all);
	free(mine);
	return rc;
}

static whole_t *wholes(ph_engine *e, ph_err *err)
{
	if (e->shard)
		return e->shard;
	whole_t *W = calloc(1, sizeof *W);
	size_t n = (size_t)e->model->n * PH_MAX_PARAMS;
	if (!W || !(W->w = calloc(n, sizeof *W->w)) || !(W->s = calloc(n, sizeof *W->s))) {
		if (W)
			free(W->w);
		free(W);
		ph_fail(err, PH_ENOMEM, "out of memory");
		return NULL;
	}
	int spp = ph_optim_state_per_param(&e->cfg->optim);
	for (int l = 0; l < e->model->n; l++) {
		const ph_layer *L = &e->model->layers[l];
		for (int q = 0; q < L->meta.nparams; q++) {
			if (!sharded(L, q))
				continue;
			size_t numel = (size_t)ph_shape_numel(&L->meta.params[q].shape);
			W->w[l * PH_MAX_PARAMS + q] = calloc(numel ? numel : 1, sizeof(float));
			W->s[l * PH_MAX_PARAMS + q] = calloc(numel * spp + 1, sizeof(float));
			if (!W->w[l * PH_MAX_PARAMS + q] || !W->s[l * PH_MAX_PARAMS + q]) {
				e->shard = W;
				ph_eng_shard_free(e);
				ph_fail(err, PH_ENOMEM, "out of memory for the whole of layer %s's sharded %s", L->cfg->name,
					L->meta.params[q].name);
				return NULL;
			}
		}
	}
	e->shard = W;
	return W;
}

float *ph_eng_shard_whole(ph_engine *e, int l, int q, int state, int j)
{
	whole_t *W = e->shard;
	const ph_layer *L = &e->model->layers[l];
	if (!W || !sharded(L, q))
		return NULL;
	return state ? W->s[l * PH_MAX_PARAMS + q] + (size_t)j * ph_shape_numel(&L->meta.params[q].shape)
		     : W->w[l * PH_MAX_PARAMS + q];
}

/* Replica q's rows of tensor (l, p) in its host copy: weights, or state j
 * (optim.h's layout: state j of a tensor at s + off * spp + j * numel). */
static float *rows_of(ph_engine *q, int l, int p, int state, int j, int spp)
{
	const ph_layer *L = &q->model->layers[l];
	int64_t off = offset_of(L, p), nl = ph_param_local_numel(L, p);
	return state ? q->params[l].hs + off * spp + (int64_t)j * nl : q->params[l].hw + off;
}

/* Every local replica's rows into the whole copies; under mpirun (mpi) the
 * other processes' too: each process's replicas are consecutive, so the
 * gathered blocks in process order are the rows in replica order. */
static int gather(ph_engine *e, int state, int mpi, ph_err *err)
{
	whole_t *W = wholes(e, err);
	if (!W)
		return PH_ENOMEM;
	const ph_comm *cm = &e->cfg->comm;
	int spp = ph_optim_state_per_param(&e->cfg->optim), rc = PH_OK;
	for (int l = 0; l < e->model->n && !rc; l++) {
		const ph_layer *L = &e->model->layers[l];
		if (!L->meta.sharded_params)
			continue;
		/* the device's copies to the host mirrors (nothing on the CPU) */
		size_t n = (size_t)L->param_numel;
		for (int r = 0; r < e->nrep && !rc; r++) {
			ph_engine *q = e->rep[r];
			void *rs = q->rs[layer_rank(q, l)];
			rc = state ? q->dev->copy(rs, q->params[l].hs, q->params[l].s, n * spp * sizeof(float), PH_COPY_D2H, err)
				   : q->dev->copy(rs, q->params[l].hw, q->params[l].w, n * sizeof(float), PH_COPY_D2H, err);
		}
		for (int p = 0; p < L->meta.nparams && !rc; p++) {
			if (!sharded(L, p))
				continue;
			size_t nl = (size_t)ph_param_local_numel(L, p), numel = nl * (size_t)L->shards;
			for (int j = 0; j < (state ? spp : 1) && !rc; j++) {
				float *whole = ph_eng_shard_whole(e, l, p, state, j);
				float *mine = whole + (size_t)e->replica * nl;
				for (int r = 0; r < e->nrep; r++)
					memcpy(mine + (size_t)r * nl, rows_of(e->rep[r], l, p, state, j, spp), nl * sizeof(float));
				if (mpi && cm->size > 1) {
					/* allgather wants separate buffers: send a copy */
					float *pack = malloc((size_t)e->nrep * nl * sizeof(float));
					if (!pack)
						return ph_fail(err, PH_ENOMEM, "out of memory");
					memcpy(pack, mine, (size_t)e->nrep * nl * sizeof(float));
					rc = cm->ops->allgather(pack, whole, (size_t)e->nrep * nl * sizeof(float), err);
					free(pack);
				}
				(void)numel;
			}
		}
	}
	if (!rc)
		W->have[state] = 1;
	return rc;
}

int ph_eng_shard_gather(ph_engine *e, int state, ph_err *err)
{
	if (!ph_eng_has_shards(e))
		return PH_OK;
	/* under mpirun ph_engine_gather brought the other processes' rows */
	return gather(e, state, 0, err);
}

/* ph_engine_gather's part (every process): the whole tensors everywhere. */
int ph_eng_shard_gather_all(ph_engine *e, ph_err *err)
{
	int rc;
	if (!ph_eng_has_shards(e) || e->cfg->comm.size == 1)
		return PH_OK;
	if ((rc = gather(e, 0, 1, err)))
		return rc;
	return gather(e, 1, 1, err);
}

void ph_eng_shard_scatter(ph_engine *e)
{
	whole_t *W = e->shard;
	int spp = ph_optim_state_per_param(&e->cfg->optim);
	if (!W)
		return;
	for (int l = 0; l < e->model->n; l++) {
		const ph_layer *L = &e->model->layers[l];
		for (int p = 0; p < L->meta.nparams; p++) {
			if (!sharded(L, p))
				continue;
			size_t nl = (size_t)ph_param_local_numel(L, p);
			for (int r = 0; r < e->nrep; r++) {
				ph_engine *q = e->rep[r];
				if (W->have[0])
					memcpy(rows_of(q, l, p, 0, 0, spp),
					       ph_eng_shard_whole(e, l, p, 0, 0) + (size_t)q->replica * nl, nl * sizeof(float));
				for (int j = 0; W->have[1] && j < spp; j++)
					memcpy(rows_of(q, l, p, 1, j, spp),
					       ph_eng_shard_whole(e, l, p, 1, j) + (size_t)q->replica * nl, nl * sizeof(float));
			}
		}
	}
}

void ph_eng_shard_free(ph_engine *e)
{
	whole_t *W = e->shard;
	if (!W)
		return;
	for (size_t i = 0; i < (size_t)e->model->n * PH_MAX_PARAMS; i++) {
		free(W->w[i]);
		free(W->s[i]);
	}
	free(W->w);
	free(W->s);
	free(W);
	e->shard = NULL;
}
