/* SPDX-License-Identifier: MIT */
/* The optimizer update: what happens between a step's backward passes
 * (and the replicas' gradient sum) and the next step.  The main thread
 * gets the gradients ready (ph_eng_prepare_update): tied copies of a
 * tensor get the sum of their gradients, and the clip norm is taken over
 * every tensor, in layer order, a tied copy once.  Then every rank's
 * worker updates its own tensors (ph_eng_update_rank) with its device's
 * optimizer op, which clips, steps and zeroes each gradient. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine-impl.h"
#include "optim.h"

int ph_eng_step_end_batched(const ph_engine *e)
{
	return e->dev->optim_update_many && e->dev->sumsq_many && !env_is_zero("PIPEHOST_OPTIM_MANY");
}

/* A rank's optimizer step: its tensors in one launch, or one call each
 * when the step's end is not batched (ph_eng_step_end_batched).  The
 * update leaves the gradients zeroed for the next step. */
int ph_eng_update_rank(ph_engine *e, int rank, ph_err *err)
{
	return ph_eng_update_rank_at(e, rank, 0, e->t, e->lr, e->clip_scale, err);
}

int ph_eng_update_rank_at(ph_engine *e, int rank, int par, int64_t t, double lr, double clip_scale, ph_err *err)
{
	const ph_optim_config *oc = &e->cfg->optim;
	const int spp = ph_optim_state_per_param(oc);
	int count = 0;
	for (int c = rank; c < e->plan->nchunks; c += e->plan->ranks)
		for (int l = e->chunks[c].a; l < e->chunks[c].b; l++)
			count += e->model->layers[l].meta.nparams;
	if (!count)
		return PH_OK;
	float **w = calloc((size_t)count, sizeof *w), **g = calloc((size_t)count, sizeof *g),
	      **s = calloc((size_t)count, sizeof *s);
	int64_t *n = calloc((size_t)count, sizeof *n);
	int *decay = calloc((size_t)count, sizeof *decay);
	int rc = PH_OK, k = 0;
	if (!w || !g || !s || !n || !decay)
		rc = ph_fail(err, PH_ENOMEM, "out of memory");
	else /* a delayed update: keep W(t) before it becomes W(t+1) */
		rc = ph_eng_versions_advance(e, rank, err);
	for (int c = rank; !rc && c < e->plan->nchunks; c += e->plan->ranks)
		for (int l = e->chunks[c].a; l < e->chunks[c].b && !rc; l++) {
			const ph_layer *L = &e->model->layers[l];
			lparams_t *P = &e->params[l];
			int64_t off = 0;
			if (P->alias) {
				/* its weights are the source's, which the update below
				 * moves; its gradient (summed into the source's) is
				 * zeroed for the next step as the update would */
				rc = e->dev->zero(e->rs[rank], grad_tensors(e, l, par)[0],
						  (size_t)L->param_numel * sizeof(float), err);
				continue;
			}
			for (int p = 0; p < L->meta.nparams; p++, k++) {
				n[k] = ph_param_local_numel(L, p);
				w[k] = P->pw[p];
				g[k] = grad_tensors(e, l, par)[p];
				s[k] = P->s + off * spp;
				decay[k] = !L->meta.params[p].no_decay;
				off += n[k];
			}
		}
	count = k; /* less the shared tied copies */
	if (!rc && ph_eng_step_end_batched(e))
		rc = e->dev->optim_update_many(e->rs[rank], oc, t, lr, clip_scale, w, g, s, n, decay, count, err);
	else
		for (k = 0; !rc && k < count; k++)
			rc = e->dev->optim_update(e->rs[rank], oc, t, lr, clip_scale, w[k], g[k], s[k], n[k], decay[k],
						  err);
	free(w);
	free(g);
	free(s);
	free(n);
	free(decay);
	return rc;
}

/* Clipping: scale the gradients down when their norm, sqrt(total), passes
 * [optimizer] clip. */
double ph_eng_clip_scale_of(const ph_engine *e, double total)
{
	return ph_clip_scale(e->cfg->optim.clip, total);
}

void ph_eng_set_clip_scale(ph_engine *e, double total)
{
	e->clip_scale = ph_eng_clip_scale_of(e, total);
}

/* Is tie k's source tied to another copy too?  Then the running sum left
 * tie k's copy with a partial sum, and it gets the whole one after. */
static int shares_source(const ph_model *m, int k)
{
	for (int j = 0; j < m->nties; j++)
		if (j != k && m->ties[j].src_layer == m->ties[k].src_layer && m->ties[j].src_param == m->ties[k].src_param)
			return 1;
	return 0;
}

/* The device slots of sumsq_batched: one double per tensor a rank
 * holds (a tied copy has none), and their host copies; made once. */
static int alloc_sumsq_slots(ph_engine *e, ph_err *err)
{
	const int P = e->plan->ranks;
	e->ss_dev = calloc((size_t)P, sizeof *e->ss_dev);
	e->ss_host = calloc((size_t)P, sizeof *e->ss_host);
	if (!e->ss_dev || !e->ss_host) { /* both or neither: the next call's guard reads ss_dev */
		free(e->ss_dev);
		free(e->ss_host);
		e->ss_dev = NULL;
		e->ss_host = NULL;
		return ph_fail(err, PH_ENOMEM, "out of memory");
	}
	for (int r = 0; r < P; r++) {
		size_t k = 0;
		for (int l = 0; l < e->model->n; l++)
			for (int q = 0; layer_rank(e, l) == r && q < e->model->layers[l].meta.nparams; q++)
				k += !tied_copy(e->model, l, q);
		if (!k)
			continue;
		if (!(e->ss_host[r] = malloc(k * sizeof(double))))
			return ph_fail(err, PH_ENOMEM, "out of memory");
		if (!(e->ss_dev[r] = ph_eng_balloc(e, r, k * sizeof(double))))
			return ph_fail(err, PH_ENOMEM, "GPU memory for the clip norm: %s", e->err.msg);
	}
	return PH_OK;
}

/* Rank r's tensors for the clip norm, in layer order, a tied copy not at
 * all, into one sumsq_many call: the slots sumsq_to would fill one by one. */
static int sumsq_many_rank(ph_engine *e, int r, int par, int *used, ph_err *err)
{
	int count = 0, rc = PH_OK;
	for (int l = 0; l < e->model->n; l++)
		if (layer_rank(e, l) == r)
			for (int q = 0; q < e->model->layers[l].meta.nparams; q++)
				count += !tied_copy(e->model, l, q);
	if (!count)
		return PH_OK;
	const float **g = calloc((size_t)count, sizeof *g);
	int64_t *n = calloc((size_t)count, sizeof *n);
	if (!g || !n)
		rc = ph_fail(err, PH_ENOMEM, "out of memory");
	for (int l = 0, k = 0; !rc && l < e->model->n; l++)
		if (layer_rank(e, l) == r)
			for (int q = 0; q < e->model->layers[l].meta.nparams; q++)
				if (!tied_copy(e->model, l, q)) {
					g[k] = grad_tensors(e, l, par)[q];
					n[k++] = ph_param_local_numel(&e->model->layers[l], q);
				}
	if (!rc)
		rc = e->dev->sumsq_many(e->rs[r], g, n, count, e->ss_dev[r], err);
	used[r] = count;
	free(g);
	free(n);
	return rc;
}

/* The clip norm's sum over every tensor: each tensor's sum of
 * squares queued into the next slot of its rank's device array (all of a
 * rank's in one sumsq_many where the backend has it), one copy back per
 * rank, then the host adds them in layer order (a tied copy not at all):
 * the order and the numbers of one sumsq() per tensor, without a round
 * trip per tensor. */
static int sumsq_batched(ph_engine *e, int par, double *total, ph_err *err)
{
	const int P = e->plan->ranks;
	int rc = PH_OK;
	if (!e->ss_dev && (rc = alloc_sumsq_slots(e, err)))
		return rc;
	int *used = calloc((size_t)P, sizeof *used); /* slots filled, then read, per rank */
	if (!used)
		return ph_fail(err, PH_ENOMEM, "out of memory");
	if (ph_eng_step_end_batched(e)) {
		for (int r = 0; r < P && !rc; r++)
			rc = sumsq_many_rank(e, r, par, used, err);
	} else {
		for (int l = 0; l < e->model->n && !rc; l++) {
			const ph_layer *L = &e->model->layers[l];
			const int r = layer_rank(e, l);
			for (int q = 0; q < L->meta.nparams && !rc; q++)
				if (!tied_copy(e->model, l, q))
					rc = e->dev->sumsq_to(e->rs[r], grad_tensors(e, l, par)[q],
							      ph_param_local_numel(L, q), &e->ss_dev[r][used[r]++], err);
		}
	}
	for (int r = 0; r < P && !rc; r++)
		if (used[r])
			rc = e->dev->copy(e->rs[r], e->ss_host[r], e->ss_dev[r], (size_t)used[r] * sizeof(double),
					  PH_COPY_D2H, err);
	if (!rc) {
		memset(used, 0, (size_t)P * sizeof *used);
		double t = 0, sh = 0;
		for (int l = 0; l < e->model->n; l++) {
			const int r = layer_rank(e, l);
			for (int q = 0; q < e->model->layers[l].meta.nparams; q++) {
				double v = tied_copy(e->model, l, q) ? 0.0 : e->ss_host[r][used[r]++];
				if (e->model->layers[l].meta.sharded_params >> q & 1u)
					sh += v; /* ph_eng_shard_clip adds every replica's */
				else
					t += v;
			}
		}
		*total = t;
		e->clip_shard = sh;
	}
	free(used);
	return rc;
}

/* The clip norm's sum over every tensor, one device call per tensor, in
 * layer order, a tied copy not at all. */
static int sumsq_each(ph_engine *e, int par, double *total, ph_err *err)
{
	double t = 0, sh = 0;
	for (int l = 0; l < e->model->n; l++) {
		const ph_layer *L = &e->model->layers[l];
		for (int q = 0; q < L->meta.nparams; q++) {
			double ss = 0;
			int rc;
			if (tied_copy(e->model, l, q))
				continue;
			if ((rc = e->dev->sumsq(e->rs[layer_rank(e, l)], grad_tensors(e, l, par)[q],
						ph_param_local_numel(L, q), &ss, err)))
				return rc;
			if (L->meta.sharded_params >> q & 1u)
				sh += ss; /* ph_eng_shard_clip adds every replica's */
			else
				t += ss;
		}
	}
	*total = t;
	e->clip_shard = sh;
	return PH_OK;
}

/* Tie k: a = a + b; b = a, on the source's rank.  A copy on another GPU is
 * brought over, summed and sent back. */
static int tie_sum(ph_engine *e, int k, int par, ph_err *err)
{
	const ph_tie *t = &e->model->ties[k];
	int64_t n = ph_shape_numel(&e->model->layers[t->src_layer].meta.params[t->src_param].shape);
	void *rs = e->rs[layer_rank(e, t->src_layer)];
	float *gs = grad_tensors(e, t->src_layer, par)[t->src_param], *gd = grad_tensors(e, t->dst_layer, par)[t->dst_param];
	size_t bytes = (size_t)n * sizeof(float);
	int rc, done = 0;
	if (e->span > 1 && ((rc = ph_eng_split_tie(e, k, &done, err)) || done))
		return rc;
	if (!e->tie_tmp || !e->tie_tmp[k])
		return e->dev->tie_sum(rs, gs, gd, n, err);
	if ((rc = e->dev->copy(rs, e->tie_tmp[k], gd, bytes, PH_COPY_D2D, err)) ||
	    (rc = e->dev->tie_sum(rs, gs, e->tie_tmp[k], n, err)))
		return rc;
	return e->dev->copy(rs, gd, e->tie_tmp[k], bytes, PH_COPY_D2D, err);
}

int ph_eng_prepare_update(ph_engine *e, ph_err *err)
{
	return ph_eng_prepare_grads(e, 0, &e->clip_scale, err);
}

int ph_eng_prepare_grads(ph_engine *e, int par, double *clip_scale, ph_err *err)
{
	int rc;
	/* Tied copies: all get the sum of their gradients (in one fixed order),
	 * so the same update keeps them bitwise equal. */
	for (int k = 0; k < e->model->nties; k++)
		if ((rc = tie_sum(e, k, par, err)))
			return rc;
	/* with several copies of one tensor, the earlier ones hold a partial sum */
	for (int k = 0; k < e->model->nties; k++) {
		const ph_tie *t = &e->model->ties[k];
		int64_t n = ph_shape_numel(&e->model->layers[t->src_layer].meta.params[t->src_param].shape);
		if (shares_source(e->model, k) && here(e, layer_rank(e, t->src_layer)) && here(e, layer_rank(e, t->dst_layer)) &&
		    (rc = e->dev->copy(e->rs[layer_rank(e, t->src_layer)], grad_tensors(e, t->dst_layer, par)[t->dst_param],
				       grad_tensors(e, t->src_layer, par)[t->src_param], (size_t)n * sizeof(float), PH_COPY_D2D,
				       err)))
			return rc;
	}
	*clip_scale = 1.0;
	if (e->cfg->optim.clip > 0) {
		/* tensor by tensor in layer order (the same sum for every
		 * partition); a tied copy counts once */
		double total = 0;
		if (e->span > 1)
			rc = ph_eng_split_sumsq(e, &total, err);
		else if (e->dev->sumsq_to)
			rc = sumsq_batched(e, par, &total, err);
		else
			rc = sumsq_each(e, par, &total, err);
		if (rc)
			return rc;
		e->clip_total = total;
		*clip_scale = ph_eng_clip_scale_of(e, total + e->clip_shard);
	}
	/* the tie sums ran on the main thread's queue of one rank; the
	 * update runs on every rank's own stream */
	for (int r = 0; r < e->plan->ranks; r++)
		if ((rc = e->dev->sync(e->rs[r], err)))
			return rc;
	return PH_OK;
}
