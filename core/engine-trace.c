/* SPDX-License-Identifier: MIT */
/* --trace: every op of every rank with real timestamps, one event list per
 * rank (each worker writes only its own), written as Chrome trace JSON.
 * Under mpirun every process records its own ranks and process 0 gathers
 * them all into the one file (a pid per process). */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "engine-impl.h"

#define PH_TRACE_MAX_EVENTS (1 << 20) /* per rank; later events are dropped, and counted */

double ph_eng_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void ph_eng_trace_record(ph_engine *e, int rank, const ph_op *o, double t0, double t1)
{
	if (o->kind == PH_OP_STEP_DONE)
		return; /* a counter, not work */
	if (e->nev[rank] == e->ev_cap[rank]) {
		int cap = e->ev_cap[rank] ? e->ev_cap[rank] * 2 : 1024;
		if (cap > e->ev_max && e->ev_cap[rank] < e->ev_max)
			cap = e->ev_max;
		ph_trace_event *n = cap > e->ev_max ? NULL : realloc(e->ev[rank], (size_t)cap * sizeof *n);
		if (!n) {
			e->ev_dropped[rank]++; /* said when the trace is written */
			return;
		}
		e->ev[rank] = n;
		e->ev_cap[rank] = cap;
	}
	/* a stream's micro-batch n is step n / m's n % m; its update names
	 * the step the gradients came from */
	int upd = o->kind == PH_OP_UPDATE;
	int64_t step = !e->training ? -1 : upd ? e->step + o->mb : mb_step(e, o->mb);
	int mb = upd ? 0 : e->training ? mb_in_step(e, o->mb) : o->mb;
	e->ev[rank][e->nev[rank]++] = (ph_trace_event){ t0 - e->t_origin, t1 - e->t_origin, rank, o->kind, o->chunk, mb,
							step, e->cfg->comm.rank };
}

int ph_engine_trace(ph_engine *e, ph_err *err)
{
	int P = e->plan->ranks;
	e->ev = calloc((size_t)P, sizeof *e->ev);
	e->nev = calloc((size_t)P, sizeof *e->nev);
	e->ev_cap = calloc((size_t)P, sizeof *e->ev_cap);
	e->ev_dropped = calloc((size_t)P, sizeof *e->ev_dropped);
	if (!e->ev || !e->nev || !e->ev_cap || !e->ev_dropped)
		return ph_fail(err, PH_ENOMEM, "out of memory");
	/* PIPEHOST_TRACE_EVENTS lowers the cap (the tests' long run in short) */
	e->ev_max = PH_TRACE_MAX_EVENTS;
	const char *cap = getenv("PIPEHOST_TRACE_EVENTS");
	if (cap && *cap) {
		char *end;
		long v = strtol(cap, &end, 10);
		if (*end || v < 16 || v > PH_TRACE_MAX_EVENTS)
			return ph_fail(err, PH_EINVAL, "PIPEHOST_TRACE_EVENTS=%.40s: not a count of events from 16 to %d; unset "
				       "it", cap, PH_TRACE_MAX_EVENTS);
		e->ev_max = (int)v;
	}
	/* the processes start their clocks together (as near as a collective
	 * gets them), so their timelines line up in the one trace */
	const ph_comm *cm = &e->cfg->comm;
	int go = 0, rc;
	if (cm->size > 1 && (rc = cm->ops->max_int(&go, err)))
		return rc;
	e->t_origin = ph_eng_now();
	e->tracing = 1;
	return PH_OK;
}

/* Under mpirun: every process's events to process 0 (the counts by
 * allgather, then each process's list by broadcast from it, one at a time,
 * so no process holds more than its own and one other's besides process
 * 0).  *all grows by the others' events. */
static int gather_events(ph_engine *e, ph_trace_event **all, int *total, ph_err *err)
{
	const ph_comm *cm = &e->cfg->comm;
	int *counts = calloc((size_t)cm->size, sizeof *counts), rc = PH_OK;
	if (!counts)
		return ph_fail(err, PH_ENOMEM, "out of memory");
	if ((rc = cm->ops->allgather(total, counts, sizeof *total, err)))
		goto out;
	long long sum = 0;
	for (int q = 0; q < cm->size; q++)
		sum += counts[q];
	if (ph_comm_writer(cm)) {
		ph_trace_event *n = realloc(*all, (size_t)(sum ? sum : 1) * sizeof *n);
		if (!n) {
			rc = ph_fail(err, PH_ENOMEM, "out of memory");
			goto out; /* the others then block in bcast; main aborts them */
		}
		*all = n;
	}
	long long at = counts[0];
	for (int q = 1; q < cm->size; q++) {
		if (!counts[q])
			continue;
		size_t bytes = (size_t)counts[q] * sizeof **all;
		ph_trace_event *buf = ph_comm_writer(cm) ? *all + at : cm->rank == q ? *all : malloc(bytes);
		if (!buf) {
			rc = ph_fail(err, PH_ENOMEM, "out of memory");
			goto out;
		}
		rc = cm->ops->bcast(buf, bytes, q, err);
		if (!ph_comm_writer(cm) && cm->rank != q)
			free(buf);
		if (rc)
			goto out;
		at += counts[q];
	}
	if (ph_comm_writer(cm))
		*total = (int)sum;
out:
	free(counts);
	return rc;
}

int ph_engine_write_trace(ph_engine *e, const char *path, ph_err *err)
{
	int total = 0;
	if (e->tracing)
		for (int r = 0; r < e->plan->ranks; r++)
			total += e->nev[r];
	/* a long run's trace keeps its beginning: where it ends, read before
	 * the ranks' lists go */
	int64_t dropped = 0, upto = -1;
	int oom = 0; /* a rank short of its cap dropped events for want of memory: gaps, not a cut end */
	for (int r = 0; e->tracing && r < e->plan->ranks; r++)
		if (e->ev_dropped[r]) {
			dropped += e->ev_dropped[r];
			oom |= e->nev[r] < e->ev_max;
			int64_t last = e->nev[r] ? e->ev[r][e->nev[r] - 1].step : -1;
			if (upto < 0 || (last >= 0 && last < upto))
				upto = last;
		}
	ph_trace_event *all = malloc((size_t)(total ? total : 1) * sizeof *all);
	if (!all)
		return ph_fail(err, PH_ENOMEM, "out of memory");
	/* each rank's list freed once copied: the write holds the events
	 * about once, not twice (a million events a rank, 8 ranks: 400 MB) */
	int k = 0;
	if (e->tracing)
		for (int r = 0; r < e->plan->ranks; r++) {
			for (int i = 0; i < e->nev[r]; i++)
				all[k++] = e->ev[r][i];
			free(e->ev[r]);
			e->ev[r] = NULL;
			e->nev[r] = e->ev_cap[r] = 0;
		}
	const ph_comm *cm = &e->cfg->comm;
	int rc = PH_OK;
	if (cm->size > 1)
		rc = gather_events(e, &all, &total, err);
	if (!rc && ph_comm_writer(cm))
		rc = ph_trace_write_chrome(path, all, total, e->plan->ranks, e->plan->v, err);
	free(all);
	if (!rc && oom && ph_comm_writer(cm)) {
		printf("note: --trace %s lacks %lld events that found no memory to be kept in: the trace has gaps%s; "
		       "trace a shorter run (--set run.steps=N)\n", path, (long long)dropped,
		       cm->size > 1 ? " in this process" : "");
		fflush(stdout);
	} else if (!rc && dropped && ph_comm_writer(cm)) {
		printf("note: --trace %s keeps the first %d events of each rank: %lld later ones were dropped", path,
		       e->ev_max, (long long)dropped);
		if (upto > 0) /* the last event kept is in step upto + 1 (1-based), which may be cut */
			printf(" (every rank is whole up to step %lld)", (long long)upto);
		printf("%s; trace a shorter run (--set run.steps=N) or resume from a checkpoint near the steps to see\n",
		       cm->size > 1 ? " in this process" : "");
		fflush(stdout);
	}
	return rc;
}

void ph_eng_trace_free(ph_engine *e)
{
	if (e->ev)
		for (int r = 0; r < e->plan->ranks; r++)
			free(e->ev[r]);
	free(e->ev);
	free(e->nev);
	free(e->ev_cap);
	free(e->ev_dropped);
}
