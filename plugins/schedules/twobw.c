/* SPDX-License-Identifier: MIT */
/*
 * 2bw: PipeDream-2BW (Narayanan et al., "Memory-Efficient Pipeline-Parallel
 * DNN Training", ICML 2021).  The order is 1F1B, but meant to run across
 * steps without a flush: the micro-batches of step t are numbered t*m ..
 * t*m+m-1 of one endless stream, and the stream is ordered 1F1B.  For p = 4,
 * m = 4, rank 0 runs
 *
 *     F0 F1 F2 | F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 ...      (steps 0 and 1)
 *
 * so step 1's forwards F4..F6 overlap step 0's backwards B1..B3.  Because
 * step t+1 starts before step t's gradients are complete, every micro-batch
 * of step t runs on W(t-1), the weights before the last update, and the
 * update is delayed by one step:
 *
 *     W(t+1) = W(t) - lr * grad f(W(t-1)),   W(-1) = W(0)
 *
 * Each rank holds two versions: W(t-1), which step t's micro-batches read,
 * and W(t), which the optimizer owns (and step t+1's micro-batches will
 * read).  m >= p makes two enough: W(t) exists (step t-1's last backward
 * is done) before step t+1's first forward, and step t's last backward is
 * done before W(t+1) overwrites W(t-1).
 *
 * The plugin only orders (order-1f1b.h) and declares (flags,
 * weight_versions); the host keeps the versions (core/engine-versions.c).
 * For one step the order is 1f1b's; for k * m micro-batches it is k steps
 * without a flush, which the engine runs as one stream
 * (core/engine-stream.c) and --simulate runs to show the steady state.
 */
#include "order-1f1b.h"

static int twobw_check(const void *config, const ph_schedule_shape *sh, ph_err *err)
{
	(void)config;
	int rc = order_1f1b_check("2bw", "set [run] chunks = 1", sh, err);
	if (!rc && sh->microbatches < sh->ranks)
		return ph_fail(err, PH_EINVAL, "2bw: needs micro_batches >= stages (got %d micro-batches, %d stages): "
			       "with fewer, two weight versions cannot cover the micro-batches in flight; raise "
			       "[run] micro_batches", sh->microbatches, sh->ranks);
	return rc;
}

/* 1F1B over the stream; for one step the last step's drain ends the list
 * (the next step's forwards fill it when the engine runs a stream) */
static int twobw_generate(const void *config, const ph_schedule_shape *sh, int rank, ph_action *out, int cap,
			  int *n, ph_err *err)
{
	int rc = twobw_check(config, sh, err);
	return rc ? rc : order_1f1b_list("2bw", sh, rank, out, cap, n, err);
}

static int twobw_versions(const void *config, const ph_schedule_shape *sh, int rank)
{
	(void)config, (void)sh, (void)rank;
	return 2;
}

static const ph_schedule_ops twobw_ops = {
	.head = PH_HEAD_NOOPT(ph_schedule_ops, "2bw",
			      "PipeDream-2BW: 1F1B across steps, no flush; two weight versions, update delayed one step"),
	.max_chunks_per_rank = 1,
	.check = twobw_check,
	.generate = twobw_generate,
	.flags = PH_SCHED_NO_FLUSH | PH_SCHED_DELAYED_UPDATE,
	.weight_versions = twobw_versions,
};

static const ph_schedule_ops *const schedules[] = { &twobw_ops, NULL };
PH_PLUGIN(NULL, NULL, schedules)
