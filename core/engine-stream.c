/* SPDX-License-Identifier: MIT */
/* A no-flush schedule's steps run as one stream (PH_SCHED_NO_FLUSH with a
 * delayed or per-micro-batch update: 2bw, pipedream).  The engine takes k
 * steps' batches at once and runs the schedule's order for k * m
 * micro-batches (ph_plan_stream) as one job: step t+1's forwards fill the
 * bubble that step t's backwards would leave, and the pipeline drains
 * only at the job's end, which the training loop puts at evaluation,
 * checkpoints and the run's end ([run] window caps k).
 *
 * Micro-batch n of the stream is step n / m's micro-batch n % m
 * (mb_step, mb_in_step): its data, RNG draws and loss are that step's, so
 * a stream gives the bits of k jobs of one step each.
 *
 * Pipedream needs nothing more: each backward updates its rank's weights
 * (engine-versions.c), in stream order.
 *
 * A delayed update (2bw) runs inside the ranks' lists, as two ops the
 * engine adds to the schedule's:
 *
 *     STEP_DONE(t)  after the rank's last backward of step t (and the
 *                   sends right after it): the rank's step-t gradients
 *                   are whole.  The last rank to get there makes every
 *                   rank's ready, as the step's end does (tie sums, the
 *                   clip scale over every tensor), on its own thread.
 *     UPDATE(t)     before the rank's first op of step t+2, or at the
 *                   list's end: waits until step t's gradients are
 *                   ready, then w -> v and w = W(t+1) with them.
 *
 * Step t+1's backwards run between the two, so they add into a second
 * gradient buffer: step t's gradients are in g when t is even and in g2
 * when it is odd (grad_params).  A micro-batch of step t reads W(t-1):
 * v once its rank's update of step t-1 has run, w before (the same
 * bytes; compute_params).  With m >= p every rank's STEP_DONE(t) comes
 * before any rank waits in UPDATE(t) for it; the lists are checked for
 * deadlock anyway, as the plan's are.
 *
 * Replicas in one process share the counting: the last of every
 * replica's ranks to get to STEP_DONE(t) also sums the replicas' step-t
 * gradients first (the driver's counters, replica 0's).
 *
 * Under mpirun with whole pipelines per process, that thread sums every
 * process's gradients too (an allgather from a worker: MPI gives
 * MPI_THREAD_MULTIPLE there), once a step, in step order in every process.
 *
 * Not built: a stream on GPUs (the ready step runs tie sums across
 * ranks' devices from one thread), a pipeline split over processes, a
 * split backward, or parameters sharded over replicas.  Those run one step
 * a job, with the same arithmetic. */
#include <stdlib.h>
#include <string.h>

#include "engine-impl.h"

void ph_eng_stream_mode(ph_engine *e)
{
	e->stream = e->plan->streams;
	e->mcap = e->stream ? e->m * (int)e->cfg->run.window : e->m;
}

int ph_eng_stream_alloc(ph_engine *e, ph_err *err)
{
	const int P = e->plan->ranks;
	if (e->delayed && !(e->updated = calloc((size_t)P, sizeof *e->updated)))
		return ph_fail(err, PH_ENOMEM, "out of memory");
	if (!e->stream)
		return PH_OK;
	e->lrs = calloc((size_t)e->cfg->run.window, sizeof *e->lrs);
	e->sops = calloc((size_t)P, sizeof *e->sops);
	e->snops = calloc((size_t)P, sizeof *e->snops);
	if (!e->lrs || !e->sops || !e->snops)
		return ph_fail(err, PH_ENOMEM, "out of memory");
	for (int l = 0; e->delayed && l < e->model->n; l++) {
		lparams_t *P2 = &e->params[l];
		size_t n = (size_t)e->model->layers[l].param_numel;
		if (!(P2->g2 = ph_eng_balloc(e, P2->rank, (n ? n : 1) * sizeof(float))))
			return ph_fail(err, PH_ENOMEM, "out of memory for the second gradient buffer of layer %s (%.1f MiB)",
				       e->model->layers[l].cfg->name, (double)n * sizeof(float) / (1024.0 * 1024.0));
		for (int q = 0; q < e->model->layers[l].meta.nparams; q++)
			P2->pg2[q] = P2->g2 + (P2->pg[q] - P2->g);
	}
	return PH_OK;
}

static void free_lists(ph_engine *e)
{
	for (int r = 0; e->sops && r < e->plan->ranks; r++) {
		free(e->sops[r]);
		e->sops[r] = NULL;
		if (e->snops) /* its calloc may have failed where sops's did not */
			e->snops[r] = 0;
	}
	e->sk = 0;
}

void ph_eng_stream_free(ph_engine *e)
{
	free_lists(e);
	free(e->sops);
	free(e->snops);
	free(e->lrs);
	free(e->updated);
	for (int l = 0; e->params && l < e->model->n; l++) {
		ph_eng_bfree(e, e->params[l].rank, e->params[l].g2);
		e->params[l].g2 = NULL;
	}
}

/* Rank r's list of the stream with its delayed updates: STEP_DONE(s)
 * after the last backward of step s and the sends right after it,
 * UPDATE(s) before the first op of step s+2 (or at the end). */
static int add_updates(const ph_engine *e, int r, const ph_op *in, int n, int k, ph_op *out, int *nout, ph_err *err)
{
	const int m = e->m;
	int *done_at = malloc((size_t)k * sizeof *done_at), *upd_at = malloc((size_t)k * sizeof *upd_at);
	if (!done_at || !upd_at) {
		free(done_at);
		free(upd_at);
		return ph_fail(err, PH_ENOMEM, "out of memory");
	}
	/* one pass: the last backward of each step, the first op of each */
	for (int s = 0; s < k; s++)
		done_at[s] = -1, upd_at[s] = n;
	for (int i = 0; i < n; i++) {
		if (in[i].kind > PH_OP_SEND_GRAD)
			continue;
		int s = in[i].mb / m;
		if (in[i].kind == PH_OP_B)
			done_at[s] = i;
		if (s >= 2 && upd_at[s - 2] == n)
			upd_at[s - 2] = i; /* (first op of step s, for now) */
	}
	/* UPDATE(s) before the first op of any later step than s + 1 */
	for (int s = k - 2; s >= 0; s--)
		if (s + 1 < k && upd_at[s + 1] < upd_at[s])
			upd_at[s] = upd_at[s + 1];
	for (int s = 0; s < k; s++)
		while (done_at[s] >= 0 && done_at[s] + 1 < n &&
		       (in[done_at[s] + 1].kind == PH_OP_SEND_GRAD || in[done_at[s] + 1].kind == PH_OP_SEND_ACT))
			done_at[s]++;
	int rc = PH_OK, j = 0;
	for (int s = 0; s < k && !rc; s++)
		if (done_at[s] < 0 || done_at[s] >= upd_at[s])
			rc = ph_fail(err, PH_EINTERNAL, "schedule %s: rank %d of a %d-step stream has %s of step %d before its "
				     "last backward; a delayed update needs 1F1B's order", e->cfg->schedule->head.name, r, k,
				     done_at[s] < 0 ? "no backward" : "an op", s + 2);
	/* both positions grow with s (backwards in order, and upd_at is a
	 * suffix minimum), so one walk places them */
	for (int i = 0, su = 0, sd = 0; !rc && i <= n; i++) {
		for (; su < k && upd_at[su] == i; su++)
			out[j++] = (ph_op){ .kind = PH_OP_UPDATE, .chunk = r, .mb = su };
		if (i == n)
			break;
		out[j++] = in[i];
		for (; sd < k && done_at[sd] == i; sd++)
			out[j++] = (ph_op){ .kind = PH_OP_STEP_DONE, .chunk = r, .mb = sd };
	}
	if (!rc && j != n + 2 * k)
		rc = ph_fail(err, PH_EINTERNAL, "schedule %s: rank %d's %d-step stream placed %d of its %d update ops",
			     e->cfg->schedule->head.name, r, k, j - n, 2 * k);
	*nout = j;
	free(done_at);
	free(upd_at);
	return rc;
}

/* Run every rank's list in the abstract: a receive waits for its send,
 * an UPDATE(s) for every rank's STEP_DONE(s).  All must finish. */
static int check_lists(const ph_engine *e, int k, ph_err *err)
{
	const int P = e->plan->ranks, C = e->plan->nchunks, M = k * e->m;
	int *pos = calloc((size_t)P, sizeof *pos), *done = calloc((size_t)k, sizeof *done);
	uint8_t *act = calloc((size_t)C * M, 1), *grad = calloc((size_t)C * M, 1);
	int rc = PH_OK;
	if (!pos || !done || !act || !grad) {
		rc = ph_fail(err, PH_ENOMEM, "out of memory");
		goto out;
	}
	for (int moved = 1; moved;) {
		moved = 0;
		for (int r = 0; r < P; r++)
			for (; pos[r] < e->snops[r]; pos[r]++) {
				const ph_op *o = &e->sops[r][pos[r]];
				if ((o->kind == PH_OP_RECV_ACT && !act[(size_t)(o->chunk - 1) * M + o->mb]) ||
				    (o->kind == PH_OP_RECV_GRAD && !grad[(size_t)(o->chunk + 1) * M + o->mb]) ||
				    (o->kind == PH_OP_UPDATE && done[o->mb] < P))
					break;
				if (o->kind == PH_OP_SEND_ACT)
					act[(size_t)o->chunk * M + o->mb] = 1;
				else if (o->kind == PH_OP_SEND_GRAD)
					grad[(size_t)o->chunk * M + o->mb] = 1;
				else if (o->kind == PH_OP_STEP_DONE)
					done[o->mb]++;
				moved = 1;
			}
	}
	for (int r = 0; r < P && !rc; r++)
		if (pos[r] < e->snops[r])
			rc = ph_fail(err, PH_EINTERNAL, "schedule %s: a %d-step stream would wait forever on rank %d at op %d "
				     "of %d", e->cfg->schedule->head.name, k, r, pos[r], e->snops[r]);
out:
	free(pos);
	free(done);
	free(act);
	free(grad);
	return rc;
}

/* The lists of a k-step stream (kept until another k is asked for). */
static int build_lists(ph_engine *e, int k, ph_err *err)
{
	if (e->sk == k)
		return PH_OK;
	free_lists(e);
	ph_plan sp;
	int rc = ph_plan_stream(e->plan, e->cfg, k, &sp, err);
	for (int r = 0; !rc && r < e->plan->ranks; r++) {
		int n = sp.nops[r];
		if (!(e->sops[r] = malloc(((size_t)n + 2 * (size_t)k) * sizeof(ph_op)))) {
			rc = ph_fail(err, PH_ENOMEM, "out of memory");
			break;
		}
		if (e->delayed)
			rc = add_updates(e, r, sp.ops[r], n, k, e->sops[r], &e->snops[r], err);
		else {
			memcpy(e->sops[r], sp.ops[r], (size_t)n * sizeof(ph_op));
			e->snops[r] = n;
		}
	}
	ph_plan_free(&sp);
	if (!rc && e->delayed)
		rc = check_lists(e, k, err);
	if (rc) {
		free_lists(e);
		return rc;
	}
	e->sk = k;
	return PH_OK;
}

/* The replica whose counters every replica of this process shares. */
static ph_engine *driver(ph_engine *e)
{
	return e->rep0 ? e->rep0 : e;
}

static int any_abort(const ph_engine *d)
{
	for (int r = 0; r < d->nrep; r++)
		if (__atomic_load_n(&d->rep[r]->abort, __ATOMIC_ACQUIRE))
			return 1;
	return 0;
}

static const char stopped_msg[] = PH_ENG_ECHO_STREAM;

int ph_eng_stream_step_done(ph_engine *e, int rank, int s, ph_err *err)
{
	(void)rank;
	ph_engine *d = driver(e);
	const int64_t t = e->step + s;
	const int par = (int)(t & 1);
	pthread_mutex_lock(&d->mu);
	int last = ++d->arrived[par] == d->plan->ranks * d->nrep;
	if (last)
		d->arrived[par] = 0;
	pthread_mutex_unlock(&d->mu);
	if (!last)
		return PH_OK;
	/* every rank's step-t gradients are whole, in every replica, and no
	 * one writes them (step t+1's go to the other buffer): the step's
	 * end, as ph_engine_train_step does it */
	double scale = 1.0, one;
	int rc = d->cfg->run.replicas > 1 ? ph_eng_replicas_sum(d, par, err) : PH_OK;
	for (int r = 0; !rc && r < d->nrep; r++)
		if (!(rc = ph_eng_prepare_grads(d->rep[r], par, &one, err)) && r == 0)
			scale = one; /* (the replicas' sums are equal, so are their scales) */
	if (rc)
		return rc;
	pthread_mutex_lock(&d->mu);
	d->clip_scales[par] = scale;
	d->prepared = t + 1;
	pthread_cond_broadcast(&d->cv_prep);
	pthread_mutex_unlock(&d->mu);
	return PH_OK;
}

int ph_eng_stream_update(ph_engine *e, int rank, int s, ph_err *err)
{
	ph_engine *d = driver(e);
	const int64_t t = e->step + s;
	pthread_mutex_lock(&d->mu);
	/* a replica that fails wakes its own; look at the others now and then */
	while (d->prepared <= t && !any_abort(d))
		ph_eng_wait_ms(&d->cv_prep, &d->mu, 20);
	int ready = d->prepared > t;
	double scale = d->clip_scales[t & 1];
	pthread_mutex_unlock(&d->mu);
	if (!ready)
		return ph_fail(err, PH_EINTERNAL, "%s", stopped_msg);
	int rc = ph_eng_update_rank_at(e, rank, (int)(t & 1), t + 1, e->lrs[s], scale, err);
	e->updated[rank] = t + 1;
	return rc;
}

int ph_engine_window(const ph_engine *e)
{
	return e->stream ? (int)e->cfg->run.window : 1;
}

void ph_engine_print_window(const ph_engine *e, FILE *f)
{
	const char *name = e->cfg->schedule->head.name;
	if (e->stream)
		fprintf(f, "%s: up to %d steps run as one stream; the pipeline drains only at evaluation, checkpoints and the "
			   "end ([run] window)\n", name, ph_engine_window(e));
	else if (e->plan->stream_why)
		fprintf(f, "%s: the pipeline drains every step: %s; the arithmetic is the same\n", name, e->plan->stream_why);
}

int ph_engine_train_steps(ph_engine *e, int64_t step, int k, const float *x, const int32_t *y, const double *lr,
			  ph_stats *st, ph_err *err)
{
	const size_t per = (size_t)e->mbsize * e->m, B = per * (size_t)e->cfg->run.replicas; /* samples a step */
	if (!e->stream) {
		for (int i = 0; i < k; i++) {
			int rc = ph_engine_train_step(e, step + i, x + i * B * e->in_numel, y + i * B * e->tps, lr[i], &st[i],
						      err);
			if (rc)
				return rc;
		}
		return PH_OK;
	}
	if (k < 1 || k > e->cfg->run.window)
		return ph_fail(err, PH_EINTERNAL, "a stream of %d steps (window %lld)", k, (long long)e->cfg->run.window);
	int rc = PH_OK, started = 0;
	/* each replica's share of each step, one step after the other */
	for (int r = 0; r < e->nrep && !rc; r++) {
		ph_engine *q = e->rep[r];
		if ((rc = build_lists(q, k, err)))
			break;
		for (int i = 0; i < k; i++) {
			size_t from = (size_t)i * B + (size_t)q->replica * per;
			memcpy(q->data_x + (size_t)i * per * e->in_numel, x + from * e->in_numel,
			       per * e->in_numel * sizeof(float));
			memcpy(q->data_y + (size_t)i * per * e->tps, y + from * e->tps, per * e->tps * sizeof(int32_t));
		}
		q->training = 1;
		q->step = step;
		q->active_mbs = k * e->m;
		q->last_batch = e->mbsize;
		q->lr = lr[0];
		memcpy(q->lrs, lr, (size_t)k * sizeof *lr);
		for (int j = 0; q->updated && j < e->plan->ranks; j++)
			q->updated[j] = step;
		rc = ph_eng_upload_batch(q, (size_t)k * per, err);
	}
	if (rc)
		return rc;
	e->arrived[0] = e->arrived[1] = 0;
	e->prepared = step;
	for (; started < e->nrep; started++)
		ph_eng_dispatch_start(e->rep[started], JOB_STREAM);
	/* every replica's end; the first failure in replica order that is
	 * not another's echo is the one to tell */
	int echo = 0;
	for (int r = 0; r < started; r++) {
		ph_err one = { { 0 } };
		int rc2 = ph_eng_dispatch_wait(e->rep[r], &one);
		if (!rc2)
			rc2 = ph_eng_gather_losses(e->rep[r], k * e->m, &one);
		ph_eng_tell(&rc, err, &echo, rc2, &one);
	}
	if (rc)
		return rc;
	/* each step's figures: per replica in micro-batch order, then over
	 * every replica of every process in replica order, as
	 * ph_engine_train_step sums them (process-major is replica order) */
	const ph_comm *cm = &e->cfg->comm;
	const int R = e->nrep, total = R * cm->size;
	double *mine = calloc((size_t)k * R * 3, sizeof *mine), *all = calloc((size_t)k * total * 3, sizeof *all);
	if (!mine || !all) {
		free(mine);
		free(all);
		return ph_fail(err, PH_ENOMEM, "out of memory");
	}
	for (int i = 0; i < k; i++)
		for (int r = 0; r < R; r++) {
			const ph_engine *q = e->rep[r];
			double *v = mine + ((size_t)i * R + r) * 3;
			for (int j = i * e->m; j < (i + 1) * e->m; j++) {
				v[0] += q->loss_mb[j];
				v[1] += q->correct_mb[j];
				v[2] += (double)batch_of(q, j) * e->tps;
			}
		}
	if (cm->size > 1)
		rc = cm->ops->allgather(mine, all, (size_t)k * R * 3 * sizeof *mine, err);
	else
		memcpy(all, mine, (size_t)k * R * 3 * sizeof *mine);
	for (int i = 0; !rc && i < k; i++) {
		memset(&st[i], 0, sizeof st[i]);
		for (int p = 0; p < cm->size; p++)
			for (int r = 0; r < R; r++) {
				const double *v = all + (((size_t)p * k + i) * R + r) * 3;
				st[i].loss_sum += v[0];
				st[i].correct += v[1];
				st[i].targets += (int64_t)v[2];
			}
	}
	free(mine);
	free(all);
	return rc;
}
