/* One pipeline: its memory (activation slots, parameters, the batch), one
 * worker thread per rank running its lowered action list, the ops they run
 * (forward, backward, weight, in-process links), the optimizer update,
 * evaluation, the named tensors for checkpoints and weights, and --trace.
 * The memory layout is explained with the types in engine-impl.h; links to
 * other processes are in engine-links.c, the training step over replicas
 * in engine-replicas.c. */
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cblas.h>

#include "engine-impl.h"
#include "layer_call.h"
#include "optim.h"

static void set_error(ph_engine *e, int rank, const ph_err *err)
{
	pthread_mutex_lock(&e->mu);
	if (!e->err_set) {
		e->err = *err;
		e->err_set = 1;
	}
	__atomic_store_n(&e->abort, 1, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&e->mu);
	/* wake anyone waiting on a link so they see the abort */
	for (int c = 0; c + 1 < e->plan->nchunks; c++) {
		pthread_mutex_lock(&e->links[c].mu);
		pthread_cond_broadcast(&e->links[c].cv);
		pthread_mutex_unlock(&e->links[c].mu);
	}
	(void)rank;
}

static void fill_ctx(const ph_engine *e, ph_ctx *ctx, int mb, int layer, const chunk_t *ch, void *saved)
{
	memset(ctx, 0, sizeof *ctx);
	ctx->batch = batch_of(e, mb);
	ctx->training = e->training;
	ctx->seed = (uint64_t)e->cfg->run.seed;
	ctx->step = (uint64_t)e->step;
	/* replicas draw different dropout masks: their micro-batches are
	 * numbered on after each other's, as one long pipeline's would be */
	ctx->microbatch = (uint64_t)e->replica * (uint64_t)e->m + (uint64_t)mb;
	ctx->layer = (uint64_t)layer;
	ctx->scratch = ch->scratch;
	ctx->saved = saved;
	ctx->device = PH_DEV_CPU;
	if (e->dev)
		e->dev->fill_ctx(e->rs[ch->rank], ctx);
	if (layer == e->model->n - 1) {
		ctx->targets = (e->dev ? e->d_data_y : e->data_y) + (size_t)mb * e->mbsize * e->tps;
		ctx->loss_scale = (float)(1.0 / ((double)e->mbsize * e->m * e->cfg->run.replicas * e->tps));
	}
}

/* Is chunk c's predecessor on another GPU?  Then the link copies (peer
 * copies on the copy engines) instead of handing buffers over in place. */
static int cross_gpu_in(const ph_engine *e, int c)
{
	if (!e->dev || c == 0)
		return 0;
	const int *ord = e->ordinal;
	return ord[c % e->plan->ranks] != ord[(c - 1) % e->plan->ranks];
}

/* Micro-batch mb's loss-layer output x, [loss, correct] per sample, summed
 * in sample order (the same sum for every schedule). */
static void sum_loss(ph_engine *e, int mb, const float *x)
{
	double loss = 0, correct = 0;
	for (int i = 0; i < batch_of(e, mb); i++) {
		loss += x[2 * i];
		correct += x[2 * i + 1];
	}
	e->loss_mb[mb] = loss;
	e->correct_mb[mb] = correct;
}

/* Does micro-batch mb drop its inner activations after the forward? */
static int recomputed(const ph_engine *e, int mb)
{
	int mode = e->cfg->run.recompute;
	return mode == PH_RECOMPUTE_YES || (mode == PH_RECOMPUTE_EXCEPT_LAST && mb != e->m - 1);
}

/* Forward through layers [a, upto) of chunk c into slot sl's buffers. */
static int forward_layers(ph_engine *e, int c, int mb, slot_t *sl, float *last_out, ph_err *err)
{
	chunk_t *ch = &e->chunks[c];
	const float *x = ch->mb_x[mb];
	int upto = ch->b;
	for (int l = ch->a; l < upto; l++) {
		ph_layer *L = &e->model->layers[l];
		ph_ctx ctx;
		fill_ctx(e, &ctx, mb, l, ch, sl->saved[l - ch->a]);
		ph_err e2 = { { 0 } };
		float *y = l == upto - 1 && last_out ? last_out : sl->y[l - ch->a];
		int rc = ph_layer_forward(L->ops, L->state, e->model->max_batch, &ctx, e->params[l].pw, x, y, &e2);
		if (rc)
			return ph_fail(err, rc, "layer %s (%s) forward, micro-batch %d: %s", L->cfg->name, L->ops->head.name, mb,
				       e2.msg);
		x = y;
	}
	return PH_OK;
}

/* Recomputation: rebuild a lean slot's activations and saved bytes in the
 * chunk's work buffers.  The last layer's output stays the slot's own (the
 * next chunk reads it in place), so its rerun writes a work copy instead.
 * The counter-based RNG makes dropout draw the same masks again. */
static int rematerialize(ph_engine *e, int c, int mb, slot_t *sl, ph_err *err)
{
	if (!sl->lean)
		return PH_OK;
	chunk_t *ch = &e->chunks[c];
	return forward_layers(e, c, mb, sl, ch->work_y[ch->b - 1 - ch->a], err);
}

/* A free activation slot for micro-batch mb of chunk c: at its forward,
 * or at its receive when the input comes from another process. */
int ph_eng_take_slot(ph_engine *e, int c, int mb, int *out, ph_err *err)
{
	chunk_t *ch = &e->chunks[c];
	/* training: a lean slot exactly when this micro-batch is recomputed;
	 * evaluation keeps nothing for a backward, so any free slot will do */
	int want_lean = recomputed(e, mb) && ch->work_y, s;
	for (s = 0; s < ch->nslots; s++)
		if (ch->slots[s].mb < 0 && (!e->training || ch->slots[s].lean == want_lean))
			break;
	if (s == ch->nslots)
		return ph_fail(err, PH_EINTERNAL, "chunk %d has no free activation slot for micro-batch %d", c, mb);
	slot_t *sl = &ch->slots[s];
	int rc = e->span > 1 ? ph_eng_slot_sends_done(e, sl, err) : PH_OK;
	if (rc)
		return rc;
	sl->mb = mb;
	ch->mb_slot[mb] = s;
	*out = s;
	return PH_OK;
}

static int run_forward(ph_engine *e, int c, int mb, ph_err *err)
{
	chunk_t *ch = &e->chunks[c];
	int s = ch->mb_slot[mb], rc0;
	if (s < 0 && (rc0 = ph_eng_take_slot(e, c, mb, &s, err)))
		return rc0;
	slot_t *sl = &ch->slots[s];
	if (c == 0) {
		ch->mb_x[mb] = (e->dev ? e->d_data_x : e->data_x) + (size_t)mb * e->mbsize * e->in_numel;
	} else if (sl->x_own && ch->mb_x[mb] != sl->x_own) { /* (received from another process: in place) */
		size_t bytes = (size_t)ph_shape_numel(&e->model->layers[ch->a].in) * batch_of(e, mb) * sizeof(float);
		if (e->dev) {
			int rc = e->dev->copy(e->rs[ch->rank], sl->x_own, ch->mb_x[mb], bytes, PH_COPY_D2D, err);
			if (rc)
				return rc;
		} else {
			memcpy(sl->x_own, ch->mb_x[mb], bytes);
		}
		ch->mb_x[mb] = sl->x_own;
	}
	int rc = forward_layers(e, c, mb, sl, NULL, err);
	if (rc)
		return rc;
	const float *x = sl->y[ch->b - 1 - ch->a];
	if (ch->b == e->model->n) {
		/* the loss layer's [loss, correct] per sample, summed in sample
		 * order; on the GPU, kept aside and summed after the job */
		int n = batch_of(e, mb);
		if (e->dev) {
			int rc2 = e->dev->copy(e->rs[ch->rank], e->d_loss + (size_t)mb * e->mbsize * 2, x,
					       (size_t)n * 2 * sizeof(float), PH_COPY_D2D, err);
			if (rc2)
				return rc2;
		} else {
			sum_loss(e, mb, x);
		}
		if (!e->training) {
			sl->mb = -1; /* nothing downstream reads the last chunk in evaluation */
			ch->mb_slot[mb] = -1;
		}
	}
	return PH_OK;
}

/* The gradient a layer receives: the chunk's output gradient for its last
 * layer (none for the loss), else the next layer's input gradient. */
static const float *layer_dy(const ph_engine *e, const chunk_t *ch, const slot_t *sl, int l, const float *inner)
{
	if (l == ch->b - 1)
		return l == e->model->n - 1 ? NULL : sl->dy_out;
	return inner;
}

/* Full backward (B), or its input half (I) when `split`: then each layer's
 * output gradient stays in the slot for W, and the slot stays taken. */
static int run_backward(ph_engine *e, int c, int mb, int split, ph_err *err)
{
	chunk_t *ch = &e->chunks[c];
	int s = ch->mb_slot[mb];
	if (s < 0)
		return ph_fail(err, PH_EINTERNAL, "chunk %d backward of micro-batch %d without its forward", c, mb);
	slot_t *sl = &ch->slots[s];
	int rc0 = rematerialize(e, c, mb, sl, err);
	if (rc0)
		return rc0;
	const float *dy = NULL;
	int t = 0;
	for (int l = ch->b - 1; l >= ch->a; l--) {
		ph_layer *L = &e->model->layers[l];
		const float *x = l == ch->a ? ch->mb_x[mb] : sl->y[l - 1 - ch->a];
		dy = layer_dy(e, ch, sl, l, dy);
		float *dx = l == ch->a ? (sl->dx_own && ch->mb_dx[mb] ? sl->dx_own : ch->mb_dx[mb])
				       : split ? sl->dy[l - 1 - ch->a] : ch->gbuf[t];
		ph_ctx ctx;
		fill_ctx(e, &ctx, mb, l, ch, sl->saved[l - ch->a]);
		ph_err e2 = { { 0 } };
		int rc;
		if (split && ph_layer_has_split_backward(L->ops))
			rc = ph_layer_backward_input(L->ops, L->state, e->model->max_batch, &ctx, e->params[l].pw, x,
						     sl->y[l - ch->a], dy, dx, &e2);
		else
			rc = ph_layer_backward(L->ops, L->state, e->model->max_batch, &ctx, e->params[l].pw, e->params[l].pg,
					       x, sl->y[l - ch->a], dy, dx, &e2);
		if (rc)
			return ph_fail(err, rc, "layer %s (%s) backward, micro-batch %d: %s", L->cfg->name, L->ops->head.name,
				       mb, e2.msg);
		dy = dx;
		t ^= 1;
	}
	if (sl->dx_own && ch->mb_dx[mb] && ch->mb_dx[mb] != sl->dx_own) {
		/* to the sender's GPU; SEND_GRAD's event follows on this stream */
		size_t bytes = (size_t)ph_shape_numel(&e->model->layers[ch->a].in) * batch_of(e, mb) * sizeof(float);
		int rc = e->dev->copy(e->rs[ch->rank], ch->mb_dx[mb], sl->dx_own, bytes, PH_COPY_D2D, err);
		if (rc)
			return rc;
	}
	if (!split) {
		sl->mb = -1;
		ch->mb_slot[mb] = -1;
	}
	return PH_OK;
}

/* W: the weight half for layers that split their backward, then free the slot. */
static int run_weight(ph_engine *e, int c, int mb, ph_err *err)
{
	chunk_t *ch = &e->chunks[c];
	int s = ch->mb_slot[mb];
	if (s < 0)
		return ph_fail(err, PH_EINTERNAL, "chunk %d W of micro-batch %d without its forward", c, mb);
	slot_t *sl = &ch->slots[s];
	/* another micro-batch may have used the work buffers since I */
	int rc0 = rematerialize(e, c, mb, sl, err);
	if (rc0)
		return rc0;
	for (int l = ch->b - 1; l >= ch->a; l--) {
		ph_layer *L = &e->model->layers[l];
		if (!ph_layer_has_split_backward(L->ops))
			continue;
		const float *x = l == ch->a ? ch->mb_x[mb] : sl->y[l - 1 - ch->a];
		const float *dy = layer_dy(e, ch, sl, l, l + 1 < ch->b ? sl->dy[l - ch->a] : NULL);
		ph_ctx ctx;
		fill_ctx(e, &ctx, mb, l, ch, sl->saved[l - ch->a]);
		ph_err e2 = { { 0 } };
		int rc = ph_layer_backward_weight(L->ops, L->state, e->model->max_batch, &ctx, e->params[l].pw,
						  e->params[l].pg, x, sl->y[l - ch->a], dy, &e2);
		if (rc)
			return ph_fail(err, rc, "layer %s (%s) weight gradient, micro-batch %d: %s", L->cfg->name,
				       L->ops->head.name, mb, e2.msg);
	}
	sl->mb = -1;
	ch->mb_slot[mb] = -1;
	return PH_OK;
}

static int link_wait(ph_engine *e, link_t *lk, uint8_t *flags, int mb)
{
	pthread_mutex_lock(&lk->mu);
	while (!flags[mb] && !__atomic_load_n(&e->abort, __ATOMIC_ACQUIRE))
		pthread_cond_wait(&lk->cv, &lk->mu);
	int ok = flags[mb];
	pthread_mutex_unlock(&lk->mu);
	return ok ? PH_OK : PH_EINTERNAL;
}

static void link_post(link_t *lk, uint8_t *flags, int mb)
{
	pthread_mutex_lock(&lk->mu);
	flags[mb] = 1;
	pthread_cond_broadcast(&lk->cv);
	pthread_mutex_unlock(&lk->mu);
}

static int run_op(ph_engine *e, const ph_op *o, ph_err *err)
{
	int c = o->chunk, mb = o->mb;
	if (mb >= e->active_mbs)
		return PH_OK; /* a short final evaluation round */
	chunk_t *ch = &e->chunks[c];
	switch (o->kind) {
	case PH_OP_F:
		return run_forward(e, c, mb, err);
	case PH_OP_B:
		return run_backward(e, c, mb, 0, err);
	case PH_OP_I:
		return run_backward(e, c, mb, 1, err);
	case PH_OP_W:
		return run_weight(e, c, mb, err);
	case PH_OP_SEND_ACT: {
		link_t *lk = &e->links[c];
		slot_t *sl = &ch->slots[ch->mb_slot[mb]];
		if (remote_link(e, c))
			return ph_eng_send_act(e, c, mb, sl, err);
		lk->y[mb] = sl->y[ch->b - 1 - ch->a];
		lk->dy[mb] = sl->dy_out;
		if (e->dev) {
			int rc = e->dev->event_record(e->rs[ch->rank], lk->act_ev[mb], err);
			if (rc)
				return rc;
		}
		link_post(lk, lk->act, mb);
		return PH_OK;
	}
	case PH_OP_RECV_ACT: {
		link_t *lk = &e->links[c - 1];
		if (remote_link(e, c - 1))
			return ph_eng_recv_act(e, c, mb, err);
		if (link_wait(e, lk, lk->act, mb))
			return PH_EINTERNAL;
		ch->mb_x[mb] = lk->y[mb];
		ch->mb_dx[mb] = lk->dy[mb];
		return e->dev ? e->dev->event_wait(e->rs[ch->rank], lk->act_ev[mb], err) : PH_OK;
	}
	case PH_OP_SEND_GRAD: {
		link_t *lk = &e->links[c - 1];
		if (remote_link(e, c - 1))
			return ph_eng_send_grad(e, c, mb, err);
		if (e->dev) {
			int rc = e->dev->event_record(e->rs[ch->rank], lk->grad_ev[mb], err);
			if (rc)
				return rc;
		}
		link_post(lk, lk->grad, mb);
		return PH_OK;
	}
	case PH_OP_RECV_GRAD: {
		link_t *lk = &e->links[c];
		if (remote_link(e, c))
			return ph_eng_recv_grad(e, c, mb, err);
		if (link_wait(e, lk, lk->grad, mb))
			return PH_EINTERNAL;
		return e->dev ? e->dev->event_wait(e->rs[ch->rank], lk->grad_ev[mb], err) : PH_OK;
	}
	}
	return ph_fail(err, PH_EINTERNAL, "unknown op %d", o->kind);
}

int ph_eng_step_end_batched(const ph_engine *e)
{
	const char *v = getenv("PIPEHOST_OPTIM_MANY");
	return e->dev && e->dev->optim_update_many && e->dev->sumsq_many && !(v && !strcmp(v, "0"));
}

/* A GPU rank's optimizer step: its tensors in one launch, or one launch
 * each when the step's end is not batched (ph_eng_step_end_batched). */
static int update_gpu(ph_engine *e, int rank, ph_err *err)
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
	for (int c = rank; !rc && c < e->plan->nchunks; c += e->plan->ranks)
		for (int l = e->chunks[c].a; l < e->chunks[c].b; l++) {
			const ph_layer *L = &e->model->layers[l];
			lparams_t *P = &e->params[l];
			int64_t off = 0;
			for (int p = 0; p < L->meta.nparams; p++, k++) {
				n[k] = ph_shape_numel(&L->meta.params[p].shape);
				w[k] = P->pw[p];
				g[k] = P->pg[p];
				s[k] = P->s + off * spp;
				decay[k] = !L->meta.params[p].no_decay;
				off += n[k];
			}
		}
	if (!rc && ph_eng_step_end_batched(e))
		rc = e->dev->optim_update_many(e->rs[rank], oc, e->t, e->lr, e->clip_scale, w, g, s, n, decay, count,
					       err);
	else
		for (k = 0; !rc && k < count; k++)
			rc = e->dev->optim_update(e->rs[rank], oc, e->t, e->lr, e->clip_scale, w[k], g[k], s[k], n[k],
						  decay[k], err);
	free(w);
	free(g);
	free(s);
	free(n);
	free(decay);
	return rc;
}

static int do_update(ph_engine *e, int rank)
{
	const ph_optim_config *oc = &e->cfg->optim;
	if (e->dev) {
		ph_err err = { { 0 } };
		int rc = update_gpu(e, rank, &err);
		if (rc)
			set_error(e, rank, &err);
		return rc; /* the update zeroed the gradients */
	}
	for (int c = rank; c < e->plan->nchunks; c += e->plan->ranks) {
		chunk_t *ch = &e->chunks[c];
		for (int l = ch->a; l < ch->b; l++) {
			ph_layer *L = &e->model->layers[l];
			lparams_t *P = &e->params[l];
			int spp = ph_optim_state_per_param(oc);
			int64_t off = 0;
			for (int p = 0; p < L->meta.nparams; p++) {
				int64_t n = ph_shape_numel(&L->meta.params[p].shape);
				float *g = P->pg[p];
				if (e->clip_scale != 1.0)
					for (int64_t i = 0; i < n; i++)
						g[i] = (float)(g[i] * e->clip_scale);
				ph_optim_update(oc, e->t, e->lr, P->pw[p], g, P->s + off * spp, n,
						!L->meta.params[p].no_decay);
				off += n;
			}
			if (L->param_numel)
				memset(P->g, 0, (size_t)L->param_numel * sizeof(float));
		}
	}
	return PH_OK;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

#define PH_TRACE_MAX_EVENTS (1 << 20) /* per rank; later events are dropped */

static void record(ph_engine *e, int rank, const ph_op *o, double t0, double t1)
{
	if (e->nev[rank] == e->ev_cap[rank]) {
		int cap = e->ev_cap[rank] ? e->ev_cap[rank] * 2 : 1024;
		if (cap > PH_TRACE_MAX_EVENTS)
			return;
		ph_trace_event *n = realloc(e->ev[rank], (size_t)cap * sizeof *n);
		if (!n)
			return;
		e->ev[rank] = n;
		e->ev_cap[rank] = cap;
	}
	e->ev[rank][e->nev[rank]++] = (ph_trace_event){ t0 - e->t_origin, t1 - e->t_origin, rank, o->kind, o->chunk, o->mb,
							e->training ? e->step : -1 };
}

static void *worker_main(void *arg)
{
	worker_t *w = arg;
	ph_engine *e = w->e;
	int seen = 0;
	for (;;) {
		pthread_mutex_lock(&e->mu);
		while (e->generation == seen)
			pthread_cond_wait(&e->cv_job, &e->mu);
		seen = e->generation;
		int job = e->job;
		pthread_mutex_unlock(&e->mu);
		if (job == JOB_EXIT)
			break;
		ph_err err = { { 0 } };
		int rc = e->dev ? e->dev->bind(e->rs[w->rank], &err) : PH_OK;
		if (rc) {
			/* reported below */
		} else if (job == JOB_TRAIN || job == JOB_EVAL) {
			const ph_op *ops = job == JOB_TRAIN ? e->plan->ops[w->rank] : e->eval_ops[w->rank];
			int n = job == JOB_TRAIN ? e->plan->nops[w->rank] : e->eval_nops[w->rank];
			for (int k = 0; k < n && !rc && !__atomic_load_n(&e->abort, __ATOMIC_ACQUIRE); k++) {
				double t0 = e->tracing ? now_s() : 0;
				rc = run_op(e, &ops[k], &err);
				if (e->tracing && ops[k].mb < e->active_mbs)
					record(e, w->rank, &ops[k], t0, now_s());
			}
		} else if (job == JOB_UPDATE) {
			rc = do_update(e, w->rank);
		}
		if (!rc && e->span > 1 && (job == JOB_TRAIN || job == JOB_EVAL))
			rc = ph_eng_rank_sends_done(e, w->rank, &err);
		/* a job ends when the GPU has done it: the next job may reuse
		 * any buffer, and the host reads losses and weights; after a
		 * failure too, so nothing is left in flight (the first error
		 * is the one reported) */
		if (e->dev) {
			ph_err e3 = { { 0 } };
			int rc3 = e->dev->sync(e->rs[w->rank], &e3);
			if (!rc && rc3) {
				rc = rc3;
				err = e3;
			}
		}
		if (rc && err.msg[0])
			set_error(e, w->rank, &err);
		else if (rc)
			__atomic_store_n(&e->abort, 1, __ATOMIC_RELEASE);
		pthread_mutex_lock(&e->mu);
		if (--e->pending == 0)
			pthread_cond_signal(&e->cv_done);
		pthread_mutex_unlock(&e->mu);
	}
	return NULL;
}

/* Start a job on every rank; ph_eng_dispatch_wait waits for it.  Replicas
 * run their jobs at the same time: start all, then wait for all. */
void ph_eng_dispatch_start(ph_engine *e, int job)
{
	for (int c = 0; c + 1 < e->plan->nchunks; c++) {
		memset(e->links[c].act, 0, (size_t)e->m);
		memset(e->links[c].grad, 0, (size_t)e->m);
	}
	pthread_mutex_lock(&e->mu);
	e->job = job;
	e->pending = e->rank_hi - e->rank_lo; /* this process's ranks */
	e->abort = 0;
	e->err_set = 0;
	e->generation++;
	pthread_cond_broadcast(&e->cv_job);
	pthread_mutex_unlock(&e->mu);
}

int ph_eng_dispatch_wait(ph_engine *e, ph_err *err)
{
	pthread_mutex_lock(&e->mu);
	while (e->pending > 0)
		pthread_cond_wait(&e->cv_done, &e->mu);
	pthread_mutex_unlock(&e->mu);
	if (e->abort) {
		if (e->err_set)
			*err = e->err;
		else
			ph_fail(err, PH_EINTERNAL, "a pipeline rank stopped without saying why");
		return PH_EINTERNAL;
	}
	return PH_OK;
}

static int dispatch(ph_engine *e, int job, ph_err *err)
{
	ph_eng_dispatch_start(e, job);
	return ph_eng_dispatch_wait(e, err);
}

static void init_tensor(float *w, int64_t n, const ph_param_desc *d, uint64_t seed, int layer, int p)
{
	uint64_t key = ph_rng_key(seed, 0x494E4954 /* "INIT" */, (uint64_t)layer, (uint64_t)p);
	for (int64_t i = 0; i < n; i++) {
		switch (d->init) {
		case PH_INIT_ZEROS: w[i] = 0; break;
		case PH_INIT_ONES: w[i] = 1; break;
		case PH_INIT_UNIFORM: w[i] = (2.0f * ph_rng_uniform(key, (uint64_t)i) - 1.0f) * d->init_arg; break;
		case PH_INIT_NORMAL: {
			double u1 = ph_rng_uniform(key, 2 * (uint64_t)i), u2 = ph_rng_uniform(key, 2 * (uint64_t)i + 1);
			w[i] = (float)(sqrt(-2.0 * log(1.0 - u1)) * cos(6.283185307179586 * u2) * d->init_arg);
			break;
		}
		}
	}
}

static void *zalloc(size_t bytes)
{
	return calloc(1, bytes ? bytes : 1);
}

/* Zeroed memory where rank computes: host memory, or its GPU's. */
void *ph_eng_balloc(ph_engine *e, int rank, size_t bytes)
{
	if (!e->dev)
		return zalloc(bytes);
	void *p = NULL;
	ph_err err = { { 0 } };
	if (e->dev->alloc(e->rs[rank], bytes, &p, &err)) {
		if (!e->err_set) {
			e->err = err; /* the GPU's own words, for the caller to pass on */
			e->err_set = 1;
		}
		return NULL;
	}
	return p;
}

static void bfree(ph_engine *e, int rank, void *p)
{
	if (!p)
		return;
	if (e->dev)
		e->dev->free(e->rs[rank], p);
	else
		free(p);
}

/* Evaluation runs forward only, R micro-batches a round, chunks in order
 * on each rank; R is bounded by the slots training already sized. */
static int make_eval_lists(ph_engine *e, ph_err *err)
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

static int alloc_chunks(ph_engine *e, ph_err *err)
{
	ph_plan *p = e->plan;
	ph_model *m = e->model;
	e->chunks = calloc((size_t)p->nchunks, sizeof *e->chunks);
	if (!e->chunks)
		return ph_fail(err, PH_ENOMEM, "out of memory");
	for (int c = 0; c < p->nchunks; c++) {
		chunk_t *ch = &e->chunks[c];
		ch->a = p->first[c];
		ch->b = p->first[c + 1];
		ch->rank = c % p->ranks;
		if (!owns(e, ch->rank))
			continue; /* another process runs it: no memory here */
		ch->nslots = p->slots[c] > 0 ? p->slots[c] : 1;
		int nl = ch->b - ch->a;
		if (e->cfg->run.recompute == PH_RECOMPUTE_EXCEPT_LAST)
			ch->nslots++; /* the lean slots plus one full one for the last micro-batch */
		size_t scratch = 0, gmax = 0;
		for (int l = ch->a; l < ch->b; l++) {
			ph_layer *L = &m->layers[l];
			/* on a GPU a layer may ask for another amount (ABI 1.2) */
			size_t need = e->dev && L->meta.device_scratch_bytes ? L->meta.device_scratch_bytes
									    : L->meta.scratch_bytes;
			if (need > scratch)
				scratch = need;
			size_t in = (size_t)ph_shape_numel(&L->in);
			if (in > gmax)
				gmax = in;
		}
		ch->scratch = ph_eng_balloc(e, ch->rank, scratch);
		ch->gbuf[0] = ph_eng_balloc(e, ch->rank, gmax * e->mbsize * sizeof(float));
		ch->gbuf[1] = ph_eng_balloc(e, ch->rank, gmax * e->mbsize * sizeof(float));
		ch->mb_slot = malloc((size_t)e->m * sizeof *ch->mb_slot);
		ch->mb_x = calloc((size_t)e->m, sizeof *ch->mb_x);
		ch->mb_dx = calloc((size_t)e->m, sizeof *ch->mb_dx);
		ch->slots = calloc((size_t)ch->nslots, sizeof *ch->slots);
		if (!ch->scratch || !ch->gbuf[0] || !ch->gbuf[1] || !ch->mb_slot || !ch->mb_x || !ch->mb_dx || !ch->slots)
			return ph_fail(err, PH_ENOMEM, "out of memory for chunk %d", c);
		for (int mb = 0; mb < e->m; mb++)
			ch->mb_slot[mb] = -1;
		int mode = e->cfg->run.recompute;
		if (mode != PH_RECOMPUTE_NO) {
			/* one set of activations and saved bytes, shared by the lean slots */
			ch->work_y = calloc((size_t)nl, sizeof *ch->work_y);
			ch->work_saved = calloc((size_t)nl, sizeof *ch->work_saved);
			if (!ch->work_y || !ch->work_saved)
				return ph_fail(err, PH_ENOMEM, "out of memory");
			for (int l = ch->a; l < ch->b; l++) {
				ph_layer *L = &m->layers[l];
				size_t yb = (size_t)ph_shape_numel(&L->meta.out) * e->mbsize * sizeof(float);
				size_t sb = L->meta.saved_bytes * e->mbsize;
				ch->work_y[l - ch->a] = ph_eng_balloc(e, ch->rank, yb);
				ch->work_saved[l - ch->a] = ph_eng_balloc(e, ch->rank, sb);
				if (!ch->work_y[l - ch->a] || !ch->work_saved[l - ch->a])
					return ph_fail(err, PH_ENOMEM, "out of memory for activations of layer %s", L->cfg->name);
				ch->act_bytes += yb + sb;
			}
		}
		for (int s = 0; s < ch->nslots; s++) {
			slot_t *sl = &ch->slots[s];
			sl->mb = -1;
			/* except_last: the last slot keeps everything, for micro-batch m-1 */
			sl->lean = ch->work_y && (mode == PH_RECOMPUTE_YES || s + 1 < ch->nslots);
			sl->y = calloc((size_t)nl, sizeof *sl->y);
			sl->saved = calloc((size_t)nl, sizeof *sl->saved);
			if (!sl->y || !sl->saved)
				return ph_fail(err, PH_ENOMEM, "out of memory");
			for (int l = ch->a; l < ch->b; l++) {
				ph_layer *L = &m->layers[l];
				if (sl->lean && l + 1 < ch->b) {
					sl->y[l - ch->a] = ch->work_y[l - ch->a];
					sl->saved[l - ch->a] = ch->work_saved[l - ch->a];
					continue;
				}
				size_t yb = (size_t)ph_shape_numel(&L->meta.out) * e->mbsize * sizeof(float);
				size_t sb = sl->lean ? 0 : L->meta.saved_bytes * e->mbsize;
				sl->y[l - ch->a] = ph_eng_balloc(e, ch->rank, yb);
				/* a lean slot's last layer keeps its output, not its saved bytes */
				sl->saved[l - ch->a] = sl->lean ? ch->work_saved[l - ch->a] : ph_eng_balloc(e, ch->rank, sb);
				if (!sl->y[l - ch->a] || !sl->saved[l - ch->a])
					return ph_fail(err, PH_ENOMEM, "out of memory for activations of layer %s",
						       L->cfg->name);
				ch->act_bytes += yb + sb;
			}
			if (e->split) {
				if (!(sl->dy = calloc((size_t)nl, sizeof *sl->dy)))
					return ph_fail(err, PH_ENOMEM, "out of memory");
				for (int l = ch->a; l + 1 < ch->b; l++) {
					size_t out = (size_t)ph_shape_numel(&m->layers[l].meta.out) * e->mbsize;
					if (!(sl->dy[l - ch->a] = ph_eng_balloc(e, ch->rank, out * sizeof(float))))
						return ph_fail(err, PH_ENOMEM, "out of memory for gradients of layer %s",
							       m->layers[l].cfg->name);
					ch->act_bytes += out * sizeof(float);
				}
			}
			int remote_in = c > 0 && remote_link(e, c - 1);
			if ((remote_in || (c + 1 < p->nchunks && remote_link(e, c))) && s == 0) {
				/* one MPI message per micro-batch and direction */
				size_t in = (size_t)ph_shape_numel(&m->layers[ch->a].in) * e->mbsize * sizeof(float);
				size_t out = (size_t)ph_shape_numel(&m->layers[ch->b - 1].meta.out) * e->mbsize * sizeof(float);
				size_t big = remote_in && in > out ? in : out;
				int64_t tags = (int64_t)p->nchunks * e->m * 2;
				if (big > INT_MAX)
					return ph_fail(err, PH_EUNSUPPORTED,
						       "the activations between chunks %d and %d are %.2f GiB per micro-batch, "
						       "more than one MPI message carries (2 GiB); use more micro-batches",
						       remote_in ? c - 1 : c, remote_in ? c : c + 1, big / 1073741824.0);
				if (tags - 1 > e->cfg->comm.tag_ub)
					return ph_fail(err, PH_EUNSUPPORTED,
						       "the plan's links need MPI tags up to %lld and this MPI allows %d; "
						       "use fewer micro-batches or chunks",
						       (long long)(tags - 1), e->cfg->comm.tag_ub);
			}
			if ((e->split && c > 0) || cross_gpu_in(e, c) || remote_in) {
				size_t in = (size_t)ph_shape_numel(&m->layers[ch->a].in) * e->mbsize * sizeof(float);
				if (!(sl->x_own = ph_eng_balloc(e, ch->rank, in)))
					return ph_fail(err, PH_ENOMEM, "out of memory");
				ch->act_bytes += in;
			}
			if (cross_gpu_in(e, c) || remote_in) {
				size_t in = (size_t)ph_shape_numel(&m->layers[ch->a].in) * e->mbsize * sizeof(float);
				if (!(sl->dx_own = ph_eng_balloc(e, ch->rank, in)))
					return ph_fail(err, PH_ENOMEM, "out of memory");
				ch->act_bytes += in;
			}
			if (c + 1 < p->nchunks) {
				size_t out = (size_t)ph_shape_numel(&m->layers[ch->b - 1].meta.out) * e->mbsize;
				if (!(sl->dy_out = ph_eng_balloc(e, ch->rank, out * sizeof(float))))
					return ph_fail(err, PH_ENOMEM, "out of memory");
				ch->act_bytes += out * sizeof(float);
			}
		}
	}
	return PH_OK;
}

/* The host copy of parameter tensor q of layer l. */
static float *host_param(ph_engine *e, int l, int q)
{
	lparams_t *P = &e->params[l];
	return P->hw + (P->pw[q] - P->w);
}

/* Every rank on a GPU: load the backend, check that each layer has a CUDA
 * twin, and open each rank's stream and handles. */
static int open_devices(ph_engine *e, ph_err *err)
{
	const ph_config *c = e->cfg;
	if (!(e->dev = ph_cuda_backend(err)))
		return PH_EUNSUPPORTED;
	for (int l = 0; l < e->model->n; l++) {
		const ph_layer *L = &e->model->layers[l];
		if (!(L->ops->devices & PH_DEV_CUDA))
			return ph_fail(err, PH_EUNSUPPORTED,
				       "layer %s (%s) has no CUDA implementation, and [run] devices = %s puts it on a GPU; "
				       "use devices = cpu, or a layer plugin built with CUDA",
				       L->cfg->name, L->ops->head.name, c->run.devices);
	}
	if (!(e->rs = calloc((size_t)e->plan->ranks, sizeof *e->rs)))
		return ph_fail(err, PH_ENOMEM, "out of memory");
	for (int r = 0; r < e->plan->ranks; r++) {
		int rc = e->dev->open(e->ordinal[r], c->run.precision, &e->rs[r], err);
		if (rc)
			return rc;
	}
	return PH_OK;
}

int ph_eng_upload_one(ph_engine *e, ph_err *err)
{
	if (!e->dev)
		return PH_OK;
	int spp = ph_optim_state_per_param(&e->cfg->optim);
	for (int l = 0; l < e->model->n; l++) {
		lparams_t *P = &e->params[l];
		size_t n = (size_t)e->model->layers[l].param_numel;
		void *rs = e->rs[layer_rank(e, l)];
		int rc;
		if ((rc = e->dev->copy(rs, P->w, P->hw, n * sizeof(float), PH_COPY_H2D, err)) ||
		    (rc = e->dev->copy(rs, P->s, P->hs, n * spp * sizeof(float), PH_COPY_H2D, err)))
			return rc;
	}
	return PH_OK;
}

/* Bring the host mirrors up to date (weights, or optimizer state too). */
static int download_tensors(ph_engine *e, int state, ph_err *err)
{
	if (!e->dev)
		return PH_OK;
	int spp = ph_optim_state_per_param(&e->cfg->optim);
	for (int l = 0; l < e->model->n; l++) {
		lparams_t *P = &e->params[l];
		size_t n = (size_t)e->model->layers[l].param_numel;
		void *rs = e->rs[layer_rank(e, l)];
		int rc = state ? e->dev->copy(rs, P->hs, P->s, n * spp * sizeof(float), PH_COPY_D2H, err)
			       : e->dev->copy(rs, P->hw, P->w, n * sizeof(float), PH_COPY_D2H, err);
		if (rc)
			return rc;
	}
	return PH_OK;
}

/* One pipeline: this process's replica `local`. */
int ph_eng_create_one(ph_engine **out, ph_model *m, ph_plan *p, const ph_config *c, int local, ph_err *err)
{
	ph_engine *e = calloc(1, sizeof *e);
	if (!e)
		return ph_fail(err, PH_ENOMEM, "out of memory");
	*out = e;
	e->model = m;
	e->plan = p;
	e->cfg = c;
	e->span = ph_config_split(c);
	if (e->span > 1) {
		/* this process's share of its replica's ranks */
		int per = p->ranks / e->span, part = c->comm.rank % e->span;
		e->replica = c->comm.rank / e->span;
		e->proc_base = e->replica * e->span;
		e->rank_lo = part * per;
		e->rank_hi = e->rank_lo + per;
	} else {
		e->replica = c->comm.rank * ph_config_local_replicas(c) + local;
		e->rank_lo = 0;
		e->rank_hi = p->ranks;
	}
	e->ordinal = c->place.ordinal + (size_t)local * p->ranks;
	e->m = p->m;
	e->mbsize = m->max_batch;
	e->in_numel = (int)ph_shape_numel(&m->input);
	e->tps = m->targets_per_sample;
	e->clip_scale = 1.0;
	for (int r = 0; r < p->ranks; r++)
		for (int k = 0; k < p->nops[r]; k++)
			e->split |= p->ops[r][k].kind == PH_OP_I;
	pthread_mutex_init(&e->mu, NULL);
	pthread_cond_init(&e->cv_job, NULL);
	pthread_cond_init(&e->cv_done, NULL);
	int rc0;

	if (c->place.cuda && (rc0 = open_devices(e, err)))
		return rc0;

	/* BLAS threads: share the cores among the ranks of every replica. */
	long cores = sysconf(_SC_NPROCESSORS_ONLN),
	     busy = (long)(e->rank_hi - e->rank_lo) * ph_config_local_replicas(c); /* this process's ranks */
	int threads = (int)c->run.threads;
	if (threads <= 0)
		threads = (int)(cores / busy) > 0 ? (int)(cores / busy) : 1;
	openblas_set_num_threads(threads);

	int spp = ph_optim_state_per_param(&c->optim);
	e->params = calloc((size_t)m->n, sizeof *e->params);
	if (!e->params)
		return ph_fail(err, PH_ENOMEM, "out of memory");
	for (int l = 0; l < m->n; l++) {
		ph_layer *L = &m->layers[l];
		lparams_t *P = &e->params[l];
		size_t n = (size_t)L->param_numel;
		int r = layer_rank(e, l);
		P->w = ph_eng_balloc(e, r, n * sizeof(float));
		P->g = ph_eng_balloc(e, r, n * sizeof(float));
		P->s = ph_eng_balloc(e, r, n * spp * sizeof(float));
		P->hw = e->dev ? zalloc(n * sizeof(float)) : P->w;
		P->hs = e->dev ? zalloc(n * spp * sizeof(float)) : P->s;
		if (!P->w || !P->g || !P->s || !P->hw || !P->hs)
			return ph_fail(err, PH_ENOMEM, "out of memory for the parameters of layer %s%s%s", L->cfg->name,
				       e->err_set ? ": " : "", e->err_set ? e->err.msg : "");
		if (e->dev && e->dev->param_block && n && (rc0 = e->dev->param_block(e->rs[r], P->w, (int64_t)n, err)))
			return rc0;
		int64_t off = 0;
		for (int q = 0; q < L->meta.nparams; q++) {
			int64_t k = ph_shape_numel(&L->meta.params[q].shape);
			P->pw[q] = P->w + off;
			P->pg[q] = P->g + off;
			init_tensor(P->hw + off, k, &L->meta.params[q], (uint64_t)c->run.seed, l, q);
			off += k;
		}
	}
	for (int k = 0; k < m->nties; k++) {
		const ph_tie *t = &m->ties[k];
		memcpy(host_param(e, t->dst_layer, t->dst_param), host_param(e, t->src_layer, t->src_param),
		       (size_t)ph_shape_numel(&m->layers[t->src_layer].meta.params[t->src_param].shape) * sizeof(float));
	}
	if ((rc0 = ph_eng_upload_one(e, err)))
		return rc0;
	if (e->dev && m->nties) {
		if (!(e->tie_tmp = calloc((size_t)m->nties, sizeof *e->tie_tmp)))
			return ph_fail(err, PH_ENOMEM, "out of memory");
		for (int k = 0; k < m->nties; k++) {
			const ph_tie *t = &m->ties[k];
			int rs = layer_rank(e, t->src_layer), rd = layer_rank(e, t->dst_layer);
			if (e->ordinal[rs] == e->ordinal[rd])
				continue;
			size_t n = (size_t)ph_shape_numel(&m->layers[t->src_layer].meta.params[t->src_param].shape);
			if (!(e->tie_tmp[k] = ph_eng_balloc(e, rs, n * sizeof(float))))
				return ph_fail(err, PH_ENOMEM, "out of GPU memory for the tied copy in layer %s%s%s",
					       m->layers[t->dst_layer].cfg->name, e->err_set ? ": " : "", e->err_set ? e->err.msg : "");
		}
	}
	int rc = alloc_chunks(e, err);
	if (rc) {
		if (e->err_set) {
			/* err->msg cannot be both the format's argument and its output */
			char what[sizeof err->msg];
			snprintf(what, sizeof what, "%s", err->msg);
			ph_fail(err, rc, "%s: %s", what, e->err.msg);
		}
		return rc;
	}
	e->links = calloc((size_t)(p->nchunks > 1 ? p->nchunks - 1 : 1), sizeof *e->links);
	if (!e->links)
		return ph_fail(err, PH_ENOMEM, "out of memory");
	for (int k = 0; k + 1 < p->nchunks; k++) {
		link_t *lk = &e->links[k];
		pthread_mutex_init(&lk->mu, NULL);
		pthread_cond_init(&lk->cv, NULL);
		lk->y = calloc((size_t)e->m, sizeof *lk->y);
		lk->dy = calloc((size_t)e->m, sizeof *lk->dy);
		lk->act = calloc((size_t)e->m, 1);
		lk->grad = calloc((size_t)e->m, 1);
		lk->act_ev = calloc((size_t)e->m, sizeof *lk->act_ev);
		lk->grad_ev = calloc((size_t)e->m, sizeof *lk->grad_ev);
		if (!lk->y || !lk->dy || !lk->act || !lk->grad || !lk->act_ev || !lk->grad_ev)
			return ph_fail(err, PH_ENOMEM, "out of memory");
		/* recorded by the sender of each: chunk k sends activations, k+1 gradients */
		for (int mb = 0; e->dev && mb < e->m; mb++)
			if ((rc = e->dev->event_create(e->rs[k % p->ranks], &lk->act_ev[mb], err)) ||
			    (rc = e->dev->event_create(e->rs[(k + 1) % p->ranks], &lk->grad_ev[mb], err)))
				return rc;
	}
	size_t B = (size_t)e->mbsize * e->m;
	e->data_x = zalloc(B * e->in_numel * sizeof(float));
	e->data_y = zalloc(B * e->tps * sizeof(int32_t));
	e->loss_mb = calloc((size_t)e->m, sizeof(double));
	e->correct_mb = calloc((size_t)e->m, sizeof(double));
	if (!e->data_x || !e->data_y || !e->loss_mb || !e->correct_mb)
		return ph_fail(err, PH_ENOMEM, "out of memory for the input batch");
	if (e->dev) {
		int last = (p->nchunks - 1) % p->ranks;
		e->d_data_x = ph_eng_balloc(e, 0, B * e->in_numel * sizeof(float));
		e->d_data_y = ph_eng_balloc(e, last, B * e->tps * sizeof(int32_t));
		e->d_loss = ph_eng_balloc(e, last, B * 2 * sizeof(float));
		e->h_loss = zalloc(B * 2 * sizeof(float));
		if (!e->d_data_x || !e->d_data_y || !e->d_loss || !e->h_loss)
			return ph_fail(err, PH_ENOMEM, "out of GPU memory for the input batch%s%s", e->err_set ? ": " : "",
				       e->err_set ? e->err.msg : "");
	}
	if ((rc = make_eval_lists(e, err)))
		return rc;
	e->threads = calloc((size_t)p->ranks, sizeof *e->threads);
	e->workers = calloc((size_t)p->ranks, sizeof *e->workers);
	if (!e->threads || !e->workers)
		return ph_fail(err, PH_ENOMEM, "out of memory");
	for (int r = e->rank_lo; r < e->rank_hi; r++) {
		int k = r - e->rank_lo;
		e->workers[k] = (worker_t){ e, r };
		if (pthread_create(&e->threads[k], NULL, worker_main, &e->workers[k]))
			return ph_fail(err, PH_ENOMEM, "cannot start the worker thread of rank %d", r);
		e->nthreads_started++;
	}
	return PH_OK;
}

/* GPU: the loss layer's outputs of nmb micro-batches, summed per
 * micro-batch in sample order, as the CPU path does in run_forward. */
static int gather_losses(ph_engine *e, int nmb, ph_err *err)
{
	if (!e->dev)
		return PH_OK;
	int last = (e->plan->nchunks - 1) % e->plan->ranks;
	int rc = e->dev->copy(e->rs[last], e->h_loss, e->d_loss, (size_t)nmb * e->mbsize * 2 * sizeof(float),
			      PH_COPY_D2H, err);
	if (rc)
		return rc;
	for (int mb = 0; mb < nmb; mb++)
		sum_loss(e, mb, e->h_loss + (size_t)mb * e->mbsize * 2);
	return PH_OK;
}

/* GPU: the batch in host memory goes to the first rank (inputs) and the
 * last (targets). */
static int upload_batch(ph_engine *e, size_t samples, ph_err *err)
{
	if (!e->dev)
		return PH_OK;
	int last = (e->plan->nchunks - 1) % e->plan->ranks, rc;
	if ((rc = e->dev->copy(e->rs[0], e->d_data_x, e->data_x, samples * e->in_numel * sizeof(float), PH_COPY_H2D,
			       err)) ||
	    (rc = e->dev->copy(e->rs[last], e->d_data_y, e->data_y, samples * e->tps * sizeof(int32_t), PH_COPY_H2D,
			       err)))
		return rc;
	return PH_OK;
}

void ph_eng_collect(ph_engine *e, int nmb, ph_stats *st)
{
	if (!owns(e, (e->plan->nchunks - 1) % e->plan->ranks))
		return; /* the loss layer runs in another process */
	/* micro-batch order, so the sum is the same for every schedule */
	for (int mb = 0; mb < nmb; mb++) {
		st->loss_sum += e->loss_mb[mb];
		st->correct += e->correct_mb[mb];
		st->targets += (int64_t)batch_of(e, mb) * e->tps;
	}
}

/* One replica's share of the batch in, and its forward and backward
 * passes started; ph_eng_train_wait waits for them and sums the losses. */
int ph_eng_train_begin(ph_engine *e, int64_t step, const float *x, const int32_t *y, ph_err *err)
{
	size_t B = (size_t)e->mbsize * e->m;
	memcpy(e->data_x, x, B * e->in_numel * sizeof(float));
	memcpy(e->data_y, y, B * e->tps * sizeof(int32_t));
	e->training = 1;
	e->step = step;
	e->active_mbs = e->m;
	e->last_batch = e->mbsize;
	int rc = upload_batch(e, B, err);
	if (rc)
		return rc;
	ph_eng_dispatch_start(e, JOB_TRAIN);
	return PH_OK;
}

int ph_eng_train_wait(ph_engine *e, ph_err *err)
{
	int rc = ph_eng_dispatch_wait(e, err);
	return rc ? rc : gather_losses(e, e->m, err);
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
		int64_t n = count - start < round ? count - start : round;
		for (int64_t i = 0; i < n; i++)
			idx[i] = start + i;
		ph_data_gather(ds, idx, (int)n, e->data_x, e->data_y);
		e->active_mbs = (int)((n + e->mbsize - 1) / e->mbsize);
		e->last_batch = (int)(n - (int64_t)(e->active_mbs - 1) * e->mbsize);
		if (!(rc = upload_batch(e, (size_t)n, err)) && !(rc = dispatch(e, JOB_EVAL, err)))
			rc = gather_losses(e, e->active_mbs, err);
		for (int c = 0; c < e->plan->nchunks; c++) {
			chunk_t *ch = &e->chunks[c];
			for (int s = 0; s < ch->nslots; s++)
				ch->slots[s].mb = -1;
			for (int mb = 0; ch->mb_slot && mb < e->m; mb++)
				ch->mb_slot[mb] = -1;
		}
		if (!rc)
			ph_eng_collect(e, e->active_mbs, st);
	}
	free(idx);
	/* split over processes: the loss layer's process has the figures */
	if (!rc && e->span > 1) {
		double mine[3] = { st->loss_sum, st->correct, (double)st->targets }, *all;
		int N = e->cfg->comm.size;
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
	}
	return rc;
}

int ph_engine_tensors(ph_engine *e, ph_tensor_ref **refs, int *n, ph_err *err)
{
	int total = 0, rc = download_tensors(e, 0, err);
	if (rc)
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
			t[k].data = host_param(e, l, q);
		}
	}
	*refs = t;
	*n = total;
	return PH_OK;
}

int ph_engine_state_tensors(ph_engine *e, ph_tensor_ref **refs, int *n, ph_err *err)
{
	int spp = ph_optim_state_per_param(&e->cfg->optim), total = 0, rc = download_tensors(e, 1, err);
	if (rc)
		return rc;
	for (int l = 0; l < e->model->n; l++)
		total += e->model->layers[l].meta.nparams * spp;
	ph_tensor_ref *t = calloc((size_t)(total ? total : 1), sizeof *t);
	if (!t)
		return ph_fail(err, PH_ENOMEM, "out of memory");
	int k = 0;
	for (int l = 0; l < e->model->n; l++) {
		ph_layer *L = &e->model->layers[l];
		int64_t off = 0;
		for (int q = 0; q < L->meta.nparams; q++) {
			int64_t numel = ph_shape_numel(&L->meta.params[q].shape);
			for (int j = 0; j < spp; j++, k++) {
				/* state j of tensor q lives at s + off*spp + j*numel (optim.h layout) */
				snprintf(t[k].name, sizeof t[k].name, "%s.%s.%s", L->cfg->name, L->meta.params[q].name,
					 spp == 1 ? "momentum" : j == 0 ? "adam_m" : "adam_v");
				t[k].shape = L->meta.params[q].shape;
				t[k].data = e->params[l].hs + off * spp + (int64_t)j * numel;
			}
			off += numel;
		}
	}
	*refs = t;
	*n = total;
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

int ph_engine_trace(ph_engine *e, ph_err *err)
{
	int P = e->plan->ranks;
	e->ev = calloc((size_t)P, sizeof *e->ev);
	e->nev = calloc((size_t)P, sizeof *e->nev);
	e->ev_cap = calloc((size_t)P, sizeof *e->ev_cap);
	if (!e->ev || !e->nev || !e->ev_cap)
		return ph_fail(err, PH_ENOMEM, "out of memory");
	e->t_origin = now_s();
	e->tracing = 1;
	return PH_OK;
}

int ph_engine_write_trace(ph_engine *e, const char *path, ph_err *err)
{
	int total = 0;
	for (int r = 0; r < e->plan->ranks; r++)
		total += e->nev[r];
	ph_trace_event *all = malloc((size_t)(total ? total : 1) * sizeof *all);
	if (!all)
		return ph_fail(err, PH_ENOMEM, "out of memory");
	int k = 0;
	for (int r = 0; r < e->plan->ranks; r++)
		for (int i = 0; i < e->nev[r]; i++)
			all[k++] = e->ev[r][i];
	int rc = ph_trace_write_chrome(path, all, total, e->plan->ranks, e->plan->v, err);
	free(all);
	return rc;
}

void ph_eng_destroy_one(ph_engine *e)
{
	if (e->ev)
		for (int r = 0; r < e->plan->ranks; r++)
			free(e->ev[r]);
	free(e->ev);
	free(e->nev);
	free(e->ev_cap);
	if (e->nthreads_started) {
		pthread_mutex_lock(&e->mu);
		e->job = JOB_EXIT;
		e->generation++;
		pthread_cond_broadcast(&e->cv_job);
		pthread_mutex_unlock(&e->mu);
		for (int r = 0; r < e->nthreads_started; r++)
			pthread_join(e->threads[r], NULL);
	}
	if (e->chunks)
		for (int c = 0; c < e->plan->nchunks; c++) {
			chunk_t *ch = &e->chunks[c];
			for (int s = 0; ch->slots && s < ch->nslots; s++) {
				for (int l = 0; l < ch->b - ch->a; l++) {
					if (ch->slots[s].lean && l + 1 < ch->b - ch->a)
						continue; /* the chunk's work buffers */
					if (ch->slots[s].y)
						bfree(e, ch->rank, ch->slots[s].y[l]);
					if (ch->slots[s].saved && !ch->slots[s].lean)
						bfree(e, ch->rank, ch->slots[s].saved[l]);
				}
				for (int l = 0; ch->slots[s].dy && l < ch->b - ch->a; l++)
					bfree(e, ch->rank, ch->slots[s].dy[l]);
				free(ch->slots[s].dy);
				free(ch->slots[s].y);
				free(ch->slots[s].saved);
				bfree(e, ch->rank, ch->slots[s].dy_out);
				bfree(e, ch->rank, ch->slots[s].x_own);
				bfree(e, ch->rank, ch->slots[s].dx_own);
			}
			for (int l = 0; ch->work_y && l < ch->b - ch->a; l++) {
				bfree(e, ch->rank, ch->work_y[l]);
				if (ch->work_saved) /* NULL when its calloc failed */
					bfree(e, ch->rank, ch->work_saved[l]);
			}
			free(ch->work_y);
			free(ch->work_saved);
			free(ch->slots);
			bfree(e, ch->rank, ch->scratch);
			bfree(e, ch->rank, ch->gbuf[0]);
			bfree(e, ch->rank, ch->gbuf[1]);
			free(ch->mb_slot);
			free(ch->mb_x);
			free(ch->mb_dx);
		}
	free(e->chunks);
	if (e->links)
		for (int k = 0; k + 1 < e->plan->nchunks; k++) {
			free(e->links[k].y);
			free(e->links[k].dy);
			free(e->links[k].act);
			free(e->links[k].grad);
			for (int mb = 0; e->dev && mb < e->m; mb++) {
				if (e->links[k].act_ev)
					e->dev->event_destroy(e->links[k].act_ev[mb]);
				if (e->links[k].grad_ev)
					e->dev->event_destroy(e->links[k].grad_ev[mb]);
			}
			free(e->links[k].act_ev);
			free(e->links[k].grad_ev);
		}
	free(e->links);
	if (e->params)
		for (int l = 0; l < e->model->n; l++) {
			int r = e->plan ? layer_rank(e, l) : 0;
			if (e->dev) {
				free(e->params[l].hw);
				free(e->params[l].hs);
			}
			bfree(e, r, e->params[l].w);
			bfree(e, r, e->params[l].g);
			bfree(e, r, e->params[l].s);
		}
	free(e->params);
	if (e->eval_ops)
		for (int r = 0; r < e->plan->ranks; r++)
			free(e->eval_ops[r]);
	free(e->eval_ops);
	free(e->eval_nops);
	free(e->data_x);
	free(e->data_y);
	free(e->loss_mb);
	free(e->correct_mb);
	if (e->dev) {
		int last = (e->plan->nchunks - 1) % e->plan->ranks;
		bfree(e, 0, e->d_data_x);
		bfree(e, last, e->d_data_y);
		bfree(e, last, e->d_loss);
		free(e->h_loss);
		for (int k = 0; e->tie_tmp && k < e->model->nties; k++)
			bfree(e, layer_rank(e, e->model->ties[k].src_layer), e->tie_tmp[k]);
		free(e->tie_tmp);
		for (int k = 0; e->red_tmp && k < e->plan->ranks; k++)
			bfree(e, k, e->red_tmp[k]);
		free(e->red_tmp);
		for (int k = 0; e->ss_dev && k < e->plan->ranks; k++)
			bfree(e, k, e->ss_dev[k]);
		free(e->ss_dev);
		for (int k = 0; e->ss_host && k < e->plan->ranks; k++)
			free(e->ss_host[k]);
		free(e->ss_host);
		for (int k = 0; e->nccl && k < e->plan->ranks; k++)
			if (e->nccl[k])
				e->dev->nccl_close(e->nccl[k]);
		free(e->nccl);
		for (int r = 0; e->rs && r < e->plan->ranks; r++)
			e->dev->close(e->rs[r]);
		free(e->rs);
	}
	free(e->gathered);
	free(e->threads);
	free(e->workers);
	free(e);
}
