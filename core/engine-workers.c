/* SPDX-License-Identifier: MIT */
/* The worker threads: one per pipeline rank this process runs, each
 * running its rank's lowered list (a training pass), its forward-only list
 * (evaluation) or its update, one job at a time as the main thread starts
 * them; and a training pass's batch in and losses out. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "engine-impl.h"

void ph_eng_set_error(ph_engine *e, int code, const ph_err *err)
{
	pthread_mutex_lock(&e->mu);
	if (!e->err_set) {
		e->err = *err;
		e->err_code = code;
		e->err_set = 1;
	}
	__atomic_store_n(&e->abort, 1, __ATOMIC_RELEASE);
	pthread_cond_broadcast(&e->cv_prep); /* a rank waiting for a stream's step */
	pthread_mutex_unlock(&e->mu);
	/* wake anyone waiting on a link so they see the abort */
	ph_eng_links_wake(e);
}

/* One job on one rank: its ops in list order, stopping at the first error
 * of any rank. */
static int run_job(ph_engine *e, int rank, int job, ph_err *err)
{
	if (job == JOB_UPDATE)
		return ph_eng_update_rank(e, rank, err);
	const ph_op *ops = job == JOB_TRAIN ? e->plan->ops[rank] : job == JOB_STREAM ? e->sops[rank] : e->eval_ops[rank];
	int n = job == JOB_TRAIN ? e->plan->nops[rank] : job == JOB_STREAM ? e->snops[rank] : e->eval_nops[rank];
	int rc = PH_OK;
	for (int k = 0; k < n && !rc && !__atomic_load_n(&e->abort, __ATOMIC_ACQUIRE); k++) {
		double t0 = e->tracing ? ph_eng_now() : 0;
		rc = ph_eng_run_op(e, &ops[k], err);
		if (e->tracing && ops[k].mb < e->active_mbs)
			ph_eng_trace_record(e, rank, &ops[k], t0, ph_eng_now());
	}
	if (!rc && e->span > 1)
		rc = ph_link_rank_sends_done(e, rank, err);
	return rc;
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
		int rc = e->dev->bind(e->rs[w->rank], &err);
		if (!rc)
			rc = run_job(e, w->rank, job, &err);
		/* a job ends when the device has done it: the next job may
		 * reuse any buffer, and the host reads losses and weights;
		 * after a failure too, so nothing is left in flight (the first
		 * error is the one reported) */
		ph_err e3 = { { 0 } };
		int rc3 = e->dev->sync(e->rs[w->rank], &e3);
		if (!rc && rc3) {
			rc = rc3;
			err = e3;
		}
		if (rc && err.msg[0]) {
			ph_eng_set_error(e, rc, &err);
		} else if (rc) {
			pthread_mutex_lock(&e->mu);
			__atomic_store_n(&e->abort, 1, __ATOMIC_RELEASE);
			pthread_cond_broadcast(&e->cv_prep);
			pthread_mutex_unlock(&e->mu);
			ph_eng_links_wake(e); /* as ph_eng_set_error does: no rank waits forever */
		}
		pthread_mutex_lock(&e->mu);
		if (--e->pending == 0)
			pthread_cond_signal(&e->cv_done);
		pthread_mutex_unlock(&e->mu);
	}
	return NULL;
}

int ph_eng_start_workers(ph_engine *e, ph_err *err)
{
	e->threads = calloc((size_t)e->plan->ranks, sizeof *e->threads);
	e->workers = calloc((size_t)e->plan->ranks, sizeof *e->workers);
	if (!e->threads || !e->workers)
		return ph_fail(err, PH_ENOMEM, "out of memory");
	/* the workers never take SIGINT or SIGTERM: the main thread's step
	 * loop is where a stop is seen (signals.c) */
	sigset_t stops, old;
	sigemptyset(&stops);
	sigaddset(&stops, SIGINT);
	sigaddset(&stops, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &stops, &old);
	int rc = PH_OK;
	for (int r = e->rank_lo; r < e->rank_hi && !rc; r++) {
		int k = r - e->rank_lo;
		e->workers[k] = (worker_t){ e, r };
		if (pthread_create(&e->threads[k], NULL, worker_main, &e->workers[k]))
			rc = ph_fail(err, PH_ENOMEM, "cannot start the worker thread of rank %d", r);
		else
			e->nthreads_started++;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return rc;
}

void ph_eng_stop_workers(ph_engine *e)
{
	if (e->nthreads_started) {
		pthread_mutex_lock(&e->mu);
		e->job = JOB_EXIT;
		e->generation++;
		pthread_cond_broadcast(&e->cv_job);
		pthread_mutex_unlock(&e->mu);
		for (int r = 0; r < e->nthreads_started; r++)
			pthread_join(e->threads[r], NULL);
	}
	free(e->threads);
	free(e->workers);
}

void ph_eng_dispatch_start(ph_engine *e, int job)
{
	ph_eng_links_reset(e);
	pthread_mutex_lock(&e->mu);
	e->job = job;
	e->pending = e->rank_hi - e->rank_lo; /* this process's ranks */
	/* atomic: another replica's workers poll this flag (any_abort) */
	__atomic_store_n(&e->abort, 0, __ATOMIC_RELEASE);
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
	if (__atomic_load_n(&e->abort, __ATOMIC_ACQUIRE)) {
		/* the rank's own code: main tells a run out of memory what to do
		 * by PH_ENOMEM, whichever rank ran out */
		if (e->err_set && e->err_code) {
			*err = e->err;
			return e->err_code;
		}
		return ph_fail(err, PH_EINTERNAL, "%s", e->err_set ? e->err.msg : "a pipeline rank stopped without saying why");
	}
	return PH_OK;
}

/* ---- A pass's batch in, its losses out -------------------------------- */

int ph_eng_upload_batch(ph_engine *e, size_t samples, ph_err *err)
{
	int last = (e->plan->nchunks - 1) % e->plan->ranks, rc;
	if ((rc = e->dev->copy(e->rs[0], e->d_data_x, e->data_x, samples * e->in_numel * sizeof(float), PH_COPY_H2D,
			       err)) ||
	    (rc = e->dev->copy(e->rs[last], e->d_data_y, e->data_y, samples * e->tps * sizeof(int32_t), PH_COPY_H2D,
			       err)))
		return rc;
	return PH_OK;
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

int ph_eng_gather_losses(ph_engine *e, int nmb, ph_err *err)
{
	int last = (e->plan->nchunks - 1) % e->plan->ranks;
	int rc = e->dev->copy(e->rs[last], e->h_loss, e->d_loss, (size_t)nmb * e->mbsize * 2 * sizeof(float),
			      PH_COPY_D2H, err);
	if (rc)
		return rc;
	for (int mb = 0; mb < nmb; mb++)
		sum_loss(e, mb, e->h_loss + (size_t)mb * e->mbsize * 2);
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

int ph_eng_train_begin(ph_engine *e, int64_t step, const float *x, const int32_t *y, ph_err *err)
{
	size_t B = (size_t)e->mbsize * e->m;
	memcpy(e->data_x, x, B * e->in_numel * sizeof(float));
	memcpy(e->data_y, y, B * e->tps * sizeof(int32_t));
	e->training = 1;
	e->step = step;
	for (int r = 0; e->updated && r < e->plan->ranks; r++)
		e->updated[r] = step; /* every update before this step is done */
	e->active_mbs = e->m;
	e->last_batch = e->mbsize;
	int rc = ph_eng_upload_batch(e, B, err);
	if (rc)
		return rc;
	ph_eng_dispatch_start(e, JOB_TRAIN);
	return PH_OK;
}

int ph_eng_train_wait(ph_engine *e, ph_err *err)
{
	int rc = ph_eng_dispatch_wait(e, err);
	return rc ? rc : ph_eng_gather_losses(e, e->m, err);
}
