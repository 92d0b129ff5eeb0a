/* SPDX-License-Identifier: MIT */
/* The schedule simulator (--simulate): run a lowered plan on a cost model and
 * say how long a step takes, how much of it each rank idles (the pipeline
 * bubble), and how many micro-batches and activation bytes each rank holds at
 * its peak.  Also the SVG timeline writer.
 *
 * Model.  Every rank executes its lowered op list (plan.h) in order, one op at
 * a time.  A compute op (F, B, I, W) starts as soon as the rank is free and its
 * inputs are there, and takes its chunk's duration.  Sends and receives take no
 * compute time:
 *
 *   - SEND_ACT of (c, mb) at time t makes the activation ready for chunk c+1
 *     at t + link[c];  RECV_ACT of (c+1, mb) waits for that moment;
 *   - SEND_GRAD of (c, mb) at time t makes the gradient ready for chunk c-1
 *     at t + link[c-1];  RECV_GRAD of (c-1, mb) waits for that moment.
 *
 * link[c] is the transfer time of chunk c's output boundary (the same wire
 * carries the activation forward and its gradient back).  Sends never block
 * (unbounded mailboxes, as in the plan's deadlock check).  The step starts at
 * 0 on every rank and ends when the last rank finishes its list.
 *
 * With F = 1 and B = 2 per stage and free links, the classic results come out
 * exactly: bubble (p-1)/(m+p-1) for gpipe and 1f1b on every rank,
 * (p-1)/(v*m+p-1) for interleaved, (p-1)/(3m+p-1) for zb-h1 with
 * F = I = W = 1 and m >= p (with m < p, 1 - 3m/(2p+2m-1): the first input
 * gradient needs a 2p round trip before rank 0 can run its m-1 other I's and
 * m W's).  tests/test-simulate.c checks them over a grid of shapes. */
#ifndef PH_CORE_SIMULATE_H
#define PH_CORE_SIMULATE_H

#include <stdio.h>

#include "plan.h"
#include "trace.h"

typedef struct {
	int ranks;
	double step_time;        /* when the last rank finishes, from 0 */
	double *busy;            /* [ranks] time spent in F, B, I, W */
	double *bubble;          /* [ranks] idle fraction: 1 - busy / step_time (0 if step_time is 0) */
	int *peak_inflight;      /* [ranks] most micro-batches between an F and its B (or W),
				  * summed over the rank's chunks */
	double *peak_act_bytes;  /* [ranks] most act_bytes held at once (same counting) */
	ph_trace_event *events;  /* one per compute op, rank by rank in list order; step 0
				  * (the report numbers a no-flush stream's steps) */
	int nevents;
} ph_sim_result;

/* Simulate plan p (lowered by ph_plan_set_actions or ph_plan_build).
 * Durations are per chunk, [p->nchunks], in any one time unit (seconds for
 * the CLI):
 *   f, b    forward and full backward; required;
 *   i, w    input- and weight-gradient halves for I and W ops;
 *           NULL: I takes b and W takes 0;
 *   link    transfer time of chunk c's output boundary; NULL = free links;
 *   act_bytes  bytes chunk c holds per in-flight micro-batch; NULL = 0.
 * Fills r (free with ph_sim_free, also after a failure).  Fails only on a plan
 * that deadlocks (ph_plan_set_actions refuses those) or out of memory. */
int ph_simulate(const ph_plan *p, const double *f, const double *b, const double *i, const double *w,
		const double *link, const double *act_bytes, ph_sim_result *r, ph_err *err);
/* Recomputation ([run] recompute): a micro-batch whose slot kept only its
 * output reruns its chunk's forward at the start of its B or I, and again
 * at its W (the engine's work buffers may hold another micro-batch's by
 * then; engine-ops.c rematerialize). */
typedef struct {
	const unsigned char *lean; /* [p->m]: 1 = this micro-batch is recomputed */
	const double *before_b;    /* [nchunks] the rerun before B or I */
	const double *before_w;    /* [nchunks] the rerun before W (0: no split layer, no rerun) */
} ph_sim_rerun;

/* The same with ranks sharing `concurrency` compute units (the CPU's cores
 * divided by BLAS threads per rank, when ranks share one CPU): compute ops
 * are granted earliest-ready first to the unit that frees first.  0, or as
 * many units as ranks, is ph_simulate.  rerun: NULL = no recomputation. */
int ph_simulate_shared(const ph_plan *p, const double *f, const double *b, const double *i, const double *w,
		       const double *link, const double *act_bytes, const ph_sim_rerun *rerun, int concurrency,
		       ph_sim_result *r, ph_err *err);
void ph_sim_free(ph_sim_result *r);

/* The longest step --simulate reports: 1e9 s (about 32 years).  Beyond it
 * a timeline is no use to anyone, and the no-flush stream of several steps
 * stays inside what a trace's nanosecond timestamps hold (PH_TRACE_MAX_S).
 * A longer or non-finite step (a link_bandwidth of 1e-300 GB/s, a damaged
 * measured cost) is refused with one line naming its cause, before the
 * report is printed or a file written. */
#define PH_SIM_MAX_S 1e9

/* The CLI's --simulate: per-chunk costs from per-layer costs, link times from
 * boundary activations, one simulated step, a report and the files.
 *   layer_fwd, layer_bwd  per-layer seconds for one micro-batch (what
 *       profile.c measures); NULL = the layers' meta FLOPs (per sample, times
 *       the micro-batch size) at [partition] device_tflops;
 *       I and W: a layer with a split backward and parameters spends half
 *       its backward in each; any other layer spends it all in I;
 *   link_bytes_per_s  boundary bandwidth (4 * output numel * micro-batch size
 *       bytes cross each boundary each way); 0 = free;
 *   svg_path, trace_path  SVG timeline and Chrome trace JSON; NULL = none.
 * Under [run] recompute, B, I and W of a recomputed micro-batch first
 * rerun the chunk's forward (ph_sim_rerun).  CPU ranks share the cores as
 * the run's BLAS threads do: the cores (PIPEHOST_SIM_CORES, else this
 * machine's) over the ranks of every local replica (ph_config_busy), each
 * replica running this plan at once; with less than one core a replica,
 * every duration stretches by what it lacks.  GPU ranks share nothing.
 * Prints step time, and per rank busy time, bubble fraction, peak in-flight
 * micro-batches and the activation MiB the engine allocates for them (its
 * chunks' slots: the run's "activation memory per rank"), to out.  A layer
 * cost that is negative or not finite, a step longer than PH_SIM_MAX_S, or
 * a PIPEHOST_SIM_CORES that is no count: PH_EINVAL, nothing printed or
 * written.  An svg_path for a plan of more than PH_SVG_MAX_BOXES compute
 * ops (times the steps drawn, for a schedule without a flush): PH_EINVAL
 * before the simulation, nothing printed or written. */
int ph_simulate_report(const ph_plan *p, const ph_model *m, const ph_config *c, const double *layer_fwd,
		       const double *layer_bwd, double link_bytes_per_s, const char *svg_path,
		       const char *trace_path, FILE *out, ph_err *err);

/* The most boxes (compute ops) an SVG timeline draws: about 32 MB of SVG.
 * Past it a browser stalls on the file, and its boxes are slivers of a
 * pixel in the drawing's 2400 px (64 ranks x 8 chunks x 4096 micro-batches
 * once wrote 671 MB); the Chrome trace (--trace) has no such limit. */
#define PH_SVG_MAX_BOXES 200000

/* SVG 1.1 timeline of the compute events (F, B, I, W; other kinds are
 * skipped): one row per rank, one box per op coloured by kind, labelled "F3"
 * (or "2F3", chunk first, when v > 1), a time axis and a legend.  Works for
 * simulated and recorded (--trace) events alike.  title may be NULL.
 * Temp file + rename.  More than PH_SVG_MAX_BOXES boxes: PH_EINVAL, one
 * line saying how many and what to do, before the file is opened. */
int ph_svg_write(const char *path, const ph_trace_event *ev, int n, int ranks, int v, const char *title,
		 ph_err *err);

#endif
