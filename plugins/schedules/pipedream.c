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
 * see different staleness (K is p - r): that is PipeDream's semantics, and
 * why a layer that moves to another rank runs another algorithm.
 *
 * [schedule] delay = D >= p - 1 is PipeDream's vertical sync: every rank
 * runs micro-batch n on version max(0, n - D), the one rank 0 finds when
 * D = p - 1, so a micro-batch sees one version of the whole model.  Every
 * rank then keeps D + 1 versions (rank r: r more than stashing).  The
 * staleness no longer depends on the rank, so a fixed D gives the same
 * weights for every partition and every stage count up to D + 1.  D
 * below p - 1 would read a version rank 0 has not made yet: refused.
 *
 * The plugin only orders and declares (flags, weight_versions); the host
 * keeps the versions (core/engine-versions.c), ring slot u mod K for
 * version u, for any K >= p - r.
 */
#include "order-1f1b.h"

typedef struct {
	int64_t delay; /* 0: weight stashing; D >= p - 1: vertical sync */
} pipedream_config;

static const ph_option pipedream_options[] = {
	PH_OPT_INT_(pipedream_config, delay, "delay", "0", 0, 4095,
		    "0: weight stashing (rank r runs micro-batch n on the weights after n-(p-r)+1 updates); "
		    "D >= stages-1: vertical sync, every rank on the weights after n-D updates (same bits "
		    "for every partition and stage count up to D+1)"),
	PH_OPT_END
};

static int pipedream_check(const void *config, const ph_schedule_shape *sh, ph_err *err)
{
	const pipedream_config *c = config;
	int rc = order_1f1b_check("pipedream", "set [run] chunks = 1", sh, err);
	if (!rc && c && c->delay > 0 && c->delay < sh->ranks - 1)
		return ph_fail(err, PH_EINVAL, "pipedream: delay = %lld is less than stages - 1 = %d: rank 0 runs "
			       "micro-batch n's forward before version n - %lld (the weights after n - %lld updates) "
			       "exists; set [schedule] delay >= %d (vertical sync) or 0 (weight stashing)",
			       (long long)c->delay, sh->ranks - 1, (long long)c->delay, (long long)c->delay,
			       sh->ranks - 1);
	return rc;
}

/* 1F1B: F(n) after B(n - (p - r)), as the versions assume */
static int pipedream_generate(const void *config, const ph_schedule_shape *sh, int rank, ph_action *out, int cap,
			      int *n, ph_err *err)
{
	int rc = pipedream_check(config, sh, err);
	return rc ? rc : order_1f1b_list("pipedream", sh, rank, out, cap, n, err);
}

/* K: micro-batch n reads version n - K + 1 */
static int pipedream_versions(const void *config, const ph_schedule_shape *sh, int rank)
{
	const pipedream_config *c = config;
	return c && c->delay > 0 ? (int)c->delay + 1 : sh->ranks - rank;
}

static const ph_schedule_ops pipedream_ops = {
	.head = PH_HEAD(ph_schedule_ops, "pipedream",
			"PipeDream: 1F1B across steps, update after every backward, weight stashing (p - r versions); "
			"delay = D: vertical sync",
			pipedream_options, pipedream_config),
	.max_chunks_per_rank = 1,
	.check = pipedream_check,
	.generate = pipedream_generate,
	.flags = PH_SCHED_NO_FLUSH | PH_SCHED_UPDATE_PER_MB,
	.weight_versions = pipedream_versions,
};

static const ph_schedule_ops *const schedules[] = { &pipedream_ops, NULL };
PH_PLUGIN(NULL, NULL, schedules)
