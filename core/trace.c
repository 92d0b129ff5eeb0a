/* SPDX-License-Identifier: MIT */
/* Chrome trace JSON (the "Trace Event Format"): one complete event ("ph":
 * "X") per op with microsecond timestamps, pid = process (0 without
 * mpirun), tid = rank, and metadata events naming each thread "rank N".
 * Perfetto and chrome://tracing open it. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "outputs.h"
#include "plan.h"
#include "trace.h"

/* "F3", "2B0" (chunk first when v > 1), "send-act 3", "recv-grad 3". */
static void event_name(const ph_trace_event *e, int v, char *buf, size_t len)
{
	static const char *const comm[] = { "recv-act", "send-act", "recv-grad", "send-grad" };
	if (e->kind <= PH_OP_W) {
		ph_action a = { e->kind, 0, (uint16_t)e->chunk, e->mb };
		ph_action_str(&a, v, buf, len);
	} else if (e->kind <= PH_OP_SEND_GRAD) {
		snprintf(buf, len, "%s %d", comm[e->kind - PH_OP_RECV_ACT], e->mb);
	} else if (e->kind == PH_OP_UPDATE) {
		snprintf(buf, len, "update %lld", (long long)e->step); /* with step s's gradients */
	} else {
		snprintf(buf, len, "op%d %d", e->kind, e->mb);
	}
}

/* ns as microseconds with three decimals, exactly (no binary rounding). */
static void micros(char *buf, size_t len, long long ns)
{
	snprintf(buf, len, "%lld.%03lld", ns / 1000, ns % 1000);
}

int ph_trace_write_chrome(const char *path, const ph_trace_event *ev, int n, int ranks, int v, ph_err *err)
{
	/* times the nanosecond timestamps cannot hold: refused before the
	 * file is touched (llround of them is undefined) */
	for (int k = 0; k < n; k++)
		if (!(fabs(ev[k].t0) <= PH_TRACE_MAX_S && fabs(ev[k].t1) <= PH_TRACE_MAX_S))
			return ph_fail(err, PH_EINVAL, "--trace %s: rank %d's op at %g..%g s is past the %g s a trace's "
				       "nanosecond timestamps hold; nothing written", path, ev[k].rank, ev[k].t0, ev[k].t1,
				       PH_TRACE_MAX_S);
	/* through core/outputs.h: a symlink followed, a device or FIFO
	 * written through, a file replaced atomically */
	ph_outfile o;
	FILE *f;
	int rc = ph_outstream_open(&o, &f, path, "--trace", err);
	if (rc)
		return rc;
	/* the processes (mpirun) and which ranks each ran: one named track
	 * per (process, rank) with events; without mpirun every rank, as before */
	int procs = 1;
	for (int k = 0; k < n; k++)
		if (ev[k].proc >= procs)
			procs = ev[k].proc + 1;
	unsigned char *ran = calloc((size_t)procs * (size_t)(ranks > 0 ? ranks : 1), 1);
	if (!ran) {
		ph_outstream_abort(&o, f);
		return ph_fail(err, PH_ENOMEM, "out of memory");
	}
	for (int r = 0; procs == 1 && r < ranks; r++)
		ran[r] = 1;
	for (int k = 0; k < n; k++)
		if (ev[k].rank >= 0 && ev[k].rank < ranks)
			ran[(size_t)ev[k].proc * ranks + ev[k].rank] = 1;
	fprintf(f, "{\"traceEvents\":[\n");
	for (int q = 0; q < procs; q++) {
		if (procs == 1)
			fprintf(f, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":0,\"tid\":0,\"args\":{\"name\":\"pipehost\"}}");
		else
			fprintf(f, "%s{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,"
				   "\"args\":{\"name\":\"pipehost process %d\"}}",
				q ? ",\n" : "", q, q);
		for (int r = 0; r < ranks; r++) {
			if (!ran[(size_t)q * ranks + r])
				continue;
			fprintf(f, ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":\"rank %d\"}}",
				q, r, r);
			fprintf(f, ",\n{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,"
				   "\"args\":{\"sort_index\":%d}}", q, r, r);
		}
	}
	free(ran);
	for (int k = 0; k < n; k++) {
		const ph_trace_event *e = &ev[k];
		char name[64], ts[32], dur[32];
		event_name(e, v, name, sizeof name);
		/* Start and end rounded to whole ns each: a slice that ends
		 * where the next begins keeps doing so (rounding start and
		 * duration apart made them overlap by 1 ns). */
		long long t0 = llround(e->t0 * 1e9), t1 = llround(e->t1 * 1e9);
		if (t1 < t0)
			t1 = t0;
		micros(ts, sizeof ts, t0);
		micros(dur, sizeof dur, t1 - t0);
		/* A reader summing ts + dur as doubles may land one ulp past the
		 * end written; then end the slice 1 ns earlier. */
		char end[32];
		micros(end, sizeof end, t1);
		if (t1 > t0 && strtod(ts, NULL) + strtod(dur, NULL) > strtod(end, NULL))
			micros(dur, sizeof dur, t1 - t0 - 1);
		fprintf(f, ",\n{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"ts\":%s,\"dur\":%s,\"pid\":%d,\"tid\":%d,"
			   "\"args\":{\"chunk\":%d,\"mb\":%d,\"step\":%lld}}",
			name, e->kind <= PH_OP_W ? "compute" : e->kind == PH_OP_UPDATE ? "update" : "comm", ts, dur, e->proc, e->rank, e->chunk, e->mb,
			(long long)e->step);
	}
	fprintf(f, "\n],\"displayTimeUnit\":\"ms\"}\n");
	return ph_outstream_commit(&o, f, "--trace", err);
}
