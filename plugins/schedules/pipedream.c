/* SPDX-License-Identifier: MIT */
/*
 * pipedream: asynchronous 1F1B with weight stashing (Harlap et al. 2018,
 * Narayanan et al., "PipeDream: Generalized Pipeline Parallelism for DNN
 * Training", SOSP 2019).  The order is 1F1B over the stream of every
 * step's micro-batches (as 2bw's); rank r updates its weights after every
 * backward, with that micro-batch's gradient alone.  With K = p - r micro-
 * batches in flight on rank r, the forward of micro-batch n (counted over
 * steps) finds the weights after the updates of micro-batches 0 .. n - K,
 * version max(0, n - K + 1); the rank stashes that version and runs the
 * micro-batch's backward on it, so a rank keeps up to K versions.  Ranks
 * see different staleness (K is p - r): that is PipeDream's semantics.
 *
 * The plugin only orders and declares (flags, weight_versions); the host
 * keeps the versions (core/engine-versions.c).
 */
#include "order-1f1b.h"

static int pipedream_check(const void *config, const ph_schedule_shape *sh, ph_err *err)
{
	(void)config;
	return order_1f1b_check("pipedream", "set [run] chunks = 1", sh, err);
}

/* 1F1B: F(n) after B(n - (p - r)), as the versions assume */
static int pipedream_generate(const void *config, const ph_schedule_shape *sh, int rank, ph_action *out, int cap,
			      int *n, ph_err *err)
{
	int rc = pipedream_check(config, sh, err);
	return rc ? rc : order_1f1b_list("pipedream", sh, rank, out, cap, n, err);
}

static int pipedream_versions(const void *config, const ph_schedule_shape *sh, int rank)
{
	(void)config;
	return sh->ranks - rank;
}

static const ph_schedule_ops pipedream_ops = {
	.head = PH_HEAD_NOOPT(ph_schedule_ops, "pipedream",
			      "PipeDream: 1F1B across steps, update after every backward, weight stashing (p - r versions)"),
	.max_chunks_per_rank = 1,
	.check = pipedream_check,
	.generate = pipedream_generate,
	.flags = PH_SCHED_NO_FLUSH | PH_SCHED_UPDATE_PER_MB,
	.weight_versions = pipedream_versions,
};

static const ph_schedule_ops *const schedules[] = { &pipedream_ops, NULL };
PH_PLUGIN(NULL, NULL, schedules)
