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
#include <pipehost/plugin.h>

static int pipedream_check(const void *config, const ph_schedule_shape *sh, ph_err *err)
{
	(void)config;
	if (sh->ranks < 1 || sh->microbatches < 1)
		return ph_fail(err, PH_EINVAL, "pipedream: need at least 1 rank and 1 micro-batch (got %d ranks, %d "
			       "micro-batches)", sh->ranks, sh->microbatches);
	if (sh->ranks > 65535)
		return ph_fail(err, PH_EINVAL, "pipedream: %d ranks is more than the 65535 chunk indices an action can name",
			       sh->ranks);
	if (sh->chunks_per_rank != 1)
		return ph_fail(err, PH_EINVAL, "pipedream: runs one chunk per rank, not %d; set [run] chunks = 1",
			       sh->chunks_per_rank);
	if (sh->microbatches > 0x3fffffff)
		return ph_fail(err, PH_EINVAL, "pipedream: %d micro-batches is too many actions to list", sh->microbatches);
	return PH_OK;
}

static int pipedream_generate(const void *config, const ph_schedule_shape *sh, int rank, ph_action *out, int cap,
			      int *n, ph_err *err)
{
	int rc = pipedream_check(config, sh, err);
	if (rc)
		return rc;
	int p = sh->ranks, m = sh->microbatches;
	if (rank < 0 || rank >= p)
		return ph_fail(err, PH_EINVAL, "pipedream: rank %d is outside 0..%d", rank, p - 1);
	*n = 2 * m;
	if (cap < 2 * m)
		return ph_fail(err, PH_EINVAL, "pipedream: rank %d needs room for %d actions, got %d", rank, 2 * m, cap);
	/* 1F1B: F(n) after B(n - (p - r)), as the versions assume */
	int warmup = p - rank - 1 < m ? p - rank - 1 : m;
	int k = 0, f = 0, b = 0;
#define EMIT(kind_, mb_) (out[k++] = (ph_action){ .kind = (kind_), .chunk = (uint16_t)rank, .mb = (mb_) })
	while (f < warmup)
		EMIT(PH_ACT_F, f++);
	while (f < m) {
		EMIT(PH_ACT_F, f++);
		EMIT(PH_ACT_B, b++);
	}
	while (b < m)
		EMIT(PH_ACT_B, b++);
#undef EMIT
	return PH_OK;
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
