/* --trace: every op of every rank with real timestamps, one event list per
 * rank (each worker writes only its own), written as Chrome trace JSON. */
#include <stdlib.h>
#include <time.h>

#include "engine-impl.h"

#define PH_TRACE_MAX_EVENTS (1 << 20) /* per rank; later events are dropped */

double ph_eng_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void ph_eng_trace_record(ph_engine *e, int rank, const ph_op *o, double t0, double t1)
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

int ph_engine_trace(ph_engine *e, ph_err *err)
{
	int P = e->plan->ranks;
	e->ev = calloc((size_t)P, sizeof *e->ev);
	e->nev = calloc((size_t)P, sizeof *e->nev);
	e->ev_cap = calloc((size_t)P, sizeof *e->ev_cap);
	if (!e->ev || !e->nev || !e->ev_cap)
		return ph_fail(err, PH_ENOMEM, "out of memory");
	e->t_origin = ph_eng_now();
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

void ph_eng_trace_free(ph_engine *e)
{
	if (e->ev)
		for (int r = 0; r < e->plan->ranks; r++)
			free(e->ev[r]);
	free(e->ev);
	free(e->nev);
	free(e->ev_cap);
}
