/* SPDX-License-Identifier: MIT */
/* Timelines: what each rank did when.  The engine records one event per
 * lowered op on a real run (--trace); the simulator produces the same events
 * from the cost model (--simulate).  Both are written as Chrome trace JSON
 * (opens in Perfetto and chrome://tracing). */
#ifndef PH_CORE_TRACE_H
#define PH_CORE_TRACE_H

#include <pipehost/plugin.h>

typedef struct {
	double t0, t1;     /* seconds from the start of the step or run */
	int rank;
	uint8_t kind;      /* ph_op_kind (plan.h) */
	int chunk, mb;
	int64_t step;      /* optimizer step (real runs), 0 in simulation */
	int proc;          /* the process that ran it (mpirun), 0 otherwise */
} ph_trace_event;

/* The latest time a trace can hold: its timestamps are whole nanoseconds in
 * 64 bits (9.2e9 s, 292 years); 9e9 s leaves room for the rounding.  An
 * event outside [-PH_TRACE_MAX_S, PH_TRACE_MAX_S], or not finite, is
 * refused before the file is opened (it once came out as
 * "ts":-9223372036854775.-808, which no reader parses). */
#define PH_TRACE_MAX_S 9e9

/* Write events as Chrome trace JSON ("traceEvents", one complete event "X"
 * per op, pid = process (0 without mpirun), tid = rank, names like "F3" /
 * "2B0" / "send-act 3").  Times are whole nanoseconds, each slice's end
 * rounded on its own, so a slice ends at or before the next one of its
 * track starts (also when a reader adds ts + dur in binary floating point).
 * Temp file + rename: never a half-written trace; a symlink is followed, a
 * device or FIFO written through (core/outputs.h).  Times past
 * PH_TRACE_MAX_S: PH_EINVAL, nothing written. */
int ph_trace_write_chrome(const char *path, const ph_trace_event *ev, int n, int ranks, int v, ph_err *err);

#endif
