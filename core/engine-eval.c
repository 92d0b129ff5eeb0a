/* SPDX-License-Identifier: MIT */
/* Evaluation, and the engine's tensors for the outside: a forward-only
 * pass over a dataset through the same pipeline (its own op lists), and
 * the weights and optimizer state as named tensors pointing into the host
 * copies (checkpoints, init files, --save-weights), with the copies to
 * and from the devices that keep them current. */
#include <stdlib.h>
#include <string.h>

#include "engine-impl.h"
#include "signals.h"
#include "optim.h"

/* Evaluation runs forward only, R micro-batches a round, chunks in order
 * on each rank; R is bounded by the slots training already sized. */
int ph_eng_eval_lists(ph_engine *e, ph_err *err)
{
	ph_plan *p = e->plan;
	int R = e->m;
	for (int c = 0; c + 1 < p->nchunks; c++)
		if (p->slots[c] < R)
			R = p->slots[c];
	e->eval_R = R;
	e->eval_ops = calloc((size_t)p->ranks, sizeof *e->eval_ops);
	e->eval_nops = calloc((size_t)p->ranks, sizeof *e->eval_nops);
	if (!e->eval_ops || !e->eval_nops)
		return ph_fail(err, PH_ENOMEM, "out of memory");
	for (int r = 0; r < p->ranks; r++) {
		e->eval_ops[r] = calloc((size_t)p->v * R * 3, sizeof(ph_op));
		if (!e->eval_ops[r])
			return ph_fail(err, PH_ENOMEM, "out of memory");
		int n = 0;
		for (int c = r; c < p->nchunks; c += p->ranks)
			for (int mb = 0; mb < R; mb++) {
				if (c > 0)
					e->eval_ops[r][n++] = (ph_op){ PH_OP_RECV_ACT, c, mb };
				e->eval_ops[r][n++] = (ph_op){ PH_OP_F, c, mb };
				if (c + 1 < p->nchunks)
					e->eval_ops[r][n++] = (ph_op){ PH_OP_SEND_ACT, c, mb };
			}
		e->eval_nops[r] = n;
	}
	return PH_OK;
}

void ph_eng_eval_lists_free(ph_engine *e)
{
	if (e->eval_ops)
		for (int r = 0; r < e->plan->ranks; r++)
			free(e->eval_ops[r]);
	free(e->eval_ops);
	free(e->eval_nops);
}

/* The host copy of parameter tensor q of layer l. */
static float *host_param(ph_engine *e, int l, int q)
{
	return e->params[l].hw + param_off(e, l, q);
}

int ph_eng_upload_one(ph_engine *e, ph_err *err)
{
	int spp = ph_optim_state_per_param(&e->cfg->optim);
	for (int l = 0; l < e->model->n; l++) {
		lparams_t *P = &e->params[l];
		size_t n = (size_t)e->model->layers[l].param_numel;
		void *rs = e->rs[layer_rank(e, l)];
		int rc;
		if (!here(e, layer_rank(e, l)))
			continue; /* its host copies are all there is */
		if ((rc = e->dev->copy(rs, P->w, P->hw, n * sizeof(float), PH_COPY_H2D, err)) ||
		    (rc = e->dev->copy(rs, P->s, P->hs, n * spp * sizeof(float), PH_COPY_H2D, err)))
			return rc;
	}
	return ph_eng_versions_upload(e, err);
}

/* Bring the host mirrors up to date (weights, or optimizer state too). */
static int download_tensors(ph_engine *e, int state, ph_err *err)
{
	int spp = ph_optim_state_per_param(&e->cfg->optim);
	for (int l = 0; l < e->model->n; l++) {
		lparams_t *P = &e->params[l];
		size_t n = (size_t)e->model->layers[l].param_numel;
		void *rs = e->rs[layer_rank(e, l)];
		if (!here(e, layer_rank(e, l)))
			continue; /* ph_engine_gather filled its host copies */
		int rc = state ? e->dev->copy(rs, P->hs, P->s, n * spp * sizeof(float), PH_COPY_D2H, err)
			       : e->dev->copy(rs, P->hw, P->w, n * sizeof(float), PH_COPY_D2H, err);
		if (rc)
			return rc;
	}
	return state ? ph_eng_versions_download(e, err) : PH_OK;
}

/* An evaluation round's micro-batches leave the chunks' activation slots:
 * every slot free again for the next round or the next training step. */
static void free_eval_slots(ph_engine *q)
{
	for (int c = 0; c < q->plan->nchunks; c++) {
		chunk_t *ch = &q->chunks[c];
		for (int s = 0; s < ch->nslots; s++)
			ch->slots[s].mb = -1;
		for (int mb = 0; ch->mb_slot && mb < q->mcap; mb++)
			ch->mb_slot[mb] = -1;
	}
}

/* Sharded parameters: a layer needs the other replicas' rows (their
 * experts), so every replica of this process runs the same round and
 * their collectives pair up; replica 0's figures count (engine-group.c).
 * Under mpirun every process runs it, as evaluation always does. */
static int eval_all_replicas(ph_engine *e, int64_t n, ph_err *err)
{
	int rc = PH_OK, started = 0;
	for (; started < e->nrep && !rc; started++) {
		ph_engine *q = e->rep[started];
		if (q != e) {
			memcpy(q->data_x, e->data_x, (size_t)n * e->in_numel * sizeof(float));
			memcpy(q->data_y, e->data_y, (size_t)n * e->tps * sizeof(int32_t));
			q->active_mbs = e->active_mbs;
			q->last_batch = e->last_batch;
			q->training = 0;
			q->step = 0;
		}
		if ((rc = ph_eng_upload_batch(q, (size_t)n, err)))
			break;
		ph_eng_dispatch_start(q, JOB_EVAL);
	}
	int echo = 0; /* ph_eng_tell */
	for (int r = 0; r < started; r++) {
		ph_err one = { { 0 } };
		ph_eng_tell(&rc, err, &echo, ph_eng_dispatch_wait(e->rep[r], &one), &one);
	}
	if (!rc)
		rc = ph_eng_gather_losses(e, e->active_mbs, err);
	for (int r = 1; r < e->nrep; r++) /* replica 0's: after the round */
		free_eval_slots(e->rep[r]);
	return rc;
}

int ph_engine_eval(ph_engine *e, const ph_dataset *ds, int64_t count, ph_stats *st, ph_err *err)
{
	memset(st, 0, sizeof *st);
	if (count > ds->n)
		count = ds->n;
	int64_t round = (int64_t)e->eval_R * e->mbsize;
	e->training = 0;
	e->step = 0;
	int64_t *idx = malloc((size_t)round * sizeof *idx);
	if (!idx)
		return ph_fail(err, PH_ENOMEM, "out of memory");
	int rc = PH_OK;
	for (int64_t start = 0; start < count && !rc; start += round) {
		/* SIGINT/SIGTERM stop an evaluation between rounds; the processes
		 * of a split pipeline decide together (core/signals.h) */
		int stop = 0;
		if (ph_stop_catching() && (e->span > 1 ? (rc = ph_stop_agree(&e->cfg->comm, &stop, err)) || stop
						       : ph_stop_local()))
			break;
		int64_t n = count - start < round ? count - start : round;
		for (int64_t i = 0; i < n; i++)
			idx[i] = start + i;
		ph_data_gather(ds, idx, (int)n, e->data_x, e->data_y);
		e->active_mbs = (int)((n + e->mbsize - 1) / e->mbsize);
		e->last_batch = (int)(n - (int64_t)(e->active_mbs - 1) * e->mbsize);
		if (ph_eng_has_shards(e) && e->nrep > 1)
			rc = eval_all_replicas(e, n, err);
		else if (!(rc = ph_eng_upload_batch(e, (size_t)n, err))) {
			ph_eng_dispatch_start(e, JOB_EVAL);
			if (!(rc = ph_eng_dispatch_wait(e, err)))
				rc = ph_eng_gather_losses(e, e->active_mbs, err);
		}
		free_eval_slots(e);
		if (!rc)
			ph_eng_collect(e, e->active_mbs, st);
	}
	free(idx);
	/* split over processes: the loss layer's process has the figures */
	if (!rc && e->span > 1 && !ph_stop_agreed())
		rc = ph_eng_split_eval_stats(e, st, err);
	return rc;
}

int ph_engine_tensors(ph_engine *e, ph_tensor_ref **refs, int *n, ph_err *err)
{
	int total = 0, rc = download_tensors(e, 0, err);
	if (rc || (rc = ph_eng_shard_gather(e, 0, err)))
		return rc;
	for (int l = 0; l < e->model->n; l++)
		total += e->model->layers[l].meta.nparams;
	ph_tensor_ref *t = calloc((size_t)(total ? total : 1), sizeof *t);
	if (!t)
		return ph_fail(err, PH_ENOMEM, "out of memory");
	int k = 0;
	for (int l = 0; l < e->model->n; l++) {
		ph_layer *L = &e->model->layers[l];
		for (int q = 0; q < L->meta.nparams; q++, k++) {
			snprintf(t[k].name, sizeof t[k].name, "%s.%s", L->cfg->name, L->meta.params[q].name);
			t[k].shape = L->meta.params[q].shape;
			t[k].data = ph_eng_shard_whole(e, l, q, 0, 0); /* a sharded tensor's whole */
			if (!t[k].data)
				t[k].data = host_param(e, l, q);
		}
	}
	/* a tied copy is stored once, under its source's name */
	ph_model_mark_ties(e->model, t, total);
	/* weights alone (an init file): an upload restarts the versions */
	e->versions_follow = 1;
	*refs = t;
	*n = total;
	return PH_OK;
}

int ph_engine_state_tensors(ph_engine *e, ph_tensor_ref **refs, int *n, ph_err *err)
{
	int spp = ph_optim_state_per_param(&e->cfg->optim), total = 0, rc = download_tensors(e, 1, err);
	const char *one = e->cfg->optim.type == PH_OPTIM_LION ? "lion_m" : "momentum"; /* spp == 1's name */
	if (rc || (rc = ph_eng_shard_gather(e, 1, err)))
		return rc;
	for (int l = 0; l < e->model->n; l++)
		total += e->model->layers[l].meta.nparams * spp;
	int prev = ph_eng_versions_count(e); /* a delayed update's W(t-1), last */
	total += prev;
	ph_tensor_ref *t = calloc((size_t)(total ? total : 1), sizeof *t);
	if (!t)
		return ph_fail(err, PH_ENOMEM, "out of memory");
	int k = 0;
	for (int l = 0; l < e->model->n; l++) {
		ph_layer *L = &e->model->layers[l];
		int64_t off = 0;
		for (int q = 0; q < L->meta.nparams; q++) {
			int64_t numel = ph_param_local_numel(L, q);
			for (int j = 0; j < spp; j++, k++) {
				/* state j of tensor q lives at s + off*spp + j*numel (optim.h layout) */
				snprintf(t[k].name, sizeof t[k].name, "%s.%s.%s", L->cfg->name, L->meta.params[q].name,
					 spp == 1 ? one : j == 0 ? "adam_m" : "adam_v");
				t[k].shape = L->meta.params[q].shape;
				t[k].data = ph_eng_shard_whole(e, l, q, 1, j); /* a sharded tensor's whole */
				if (!t[k].data)
					t[k].data = e->params[l].hs + off * spp + (int64_t)j * numel;
			}
			off += numel;
		}
	}
	ph_eng_versions_tensors(e, t + (total - prev));
	*refs = t;
	*n = total;
	return PH_OK;
}

int ph_engine_gpu_memory(const ph_engine *e, int *ordinal, size_t *bytes, size_t (*phase)[3], int max, int *n,
			 ph_err *err)
{
	*n = 0;
	if (!e->dev->mem_held || e->dev->struct_size < sizeof(ph_device_ops))
		return PH_OK;
	for (int q = 0; q < (e->rep ? e->nrep : 1); q++) {
		const ph_engine *c = e->rep ? e->rep[q] : e;
		for (int r = 0; r < c->plan->ranks; r++) {
			if (!owns(c, r) || !c->rs[r])
				continue;
			int o, seen = 0, rc;
			size_t b;
			if ((rc = c->dev->mem_held(c->rs[r], &o, &b, err)))
				return rc;
			for (int k = 0; k < *n; k++)
				seen |= ordinal[k] == o;
			if (!seen && *n < max) {
				ordinal[*n] = o;
				if (phase)
					for (int k = 0; k < 3; k++)
						phase[*n][k] = c->mem_phase ? c->mem_phase[r][k] : 0;
				bytes[(*n)++] = b;
			}
		}
	}
	return PH_OK;
}

double ph_engine_activation_bytes(const ph_engine *e, int rank)
{
	if (!owns(e, rank))
		return -1; /* another process runs it */
	double total = 0;
	for (int c = rank; c < e->plan->nchunks; c += e->plan->ranks)
		total += (double)e->chunks[c].act_bytes;
	return total;
}

