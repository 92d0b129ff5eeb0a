/* SPDX-License-Identifier: MIT */
/* A schedule broken in one way per build (-DAUDIT=N), each a bug a third
 * audit found that a run or pipehost --check-plugin reported badly or let
 * through (tests/test-plugin-loader.sh).  Fill-drain otherwise (every
 * forward, then every backward, one chunk per rank):
 *   1 PH_SCHED_DELAYED_UPDATE without a weight_versions hook (1 version)
 *   2 generate fails with an empty message
 *   3 max_chunks_per_rank = 0
 *   4 rank 0's first forward names chunk 77 (out of range)
 *   5 PH_SCHED_UPDATE_PER_MB (PipeDream's stashing) with 1 weight version:
 *     fill-drain runs micro-batch 1's forward before micro-batch 0's
 *     backward, so it would read a version the ring never held (it once
 *     trained other weights than 1F1B order's, silently)
 *   6 PH_SCHED_UPDATE_PER_MB with split backwards (I, W): the update
 *     follows a B only */
#include <pipehost/plugin.h>

#ifndef AUDIT
#define AUDIT 0
#endif

static int generate(const void *config, const ph_schedule_shape *sh, int rank, ph_action *out, int cap, int *n,
		    ph_err *err)
{
	(void)config;
	int m = sh->microbatches;
	if (sh->chunks_per_rank != 1)
		return ph_fail(err, PH_EINVAL, "audit_sched: one chunk per rank only");
	if (cap < 2 * m)
		return ph_fail(err, PH_EINVAL, "audit_sched: room for %d actions, got %d", 2 * m, cap);
#if AUDIT == 2
	(void)out;
	(void)rank;
	*n = 0;
	return PH_EINVAL; /* the bug: no message */
#else
	for (int mb = 0; mb < m; mb++) {
#if AUDIT != 6
		out[mb] = (ph_action){ .kind = PH_ACT_F, .chunk = (uint16_t)rank, .mb = mb };
#endif
#if AUDIT == 4
		if (rank == 0 && mb == 0)
			out[mb].chunk = 77;
#endif
#if AUDIT == 6
		/* one micro-batch at a time: F, I, W (1 version serves it) */
		if (cap < 3 * m)
			return ph_fail(err, PH_EINVAL, "audit_sched: room for %d actions, got %d", 3 * m, cap);
		out[3 * mb] = (ph_action){ .kind = PH_ACT_F, .chunk = (uint16_t)rank, .mb = mb };
		out[3 * mb + 1] = (ph_action){ .kind = PH_ACT_I, .chunk = (uint16_t)rank, .mb = mb };
		out[3 * mb + 2] = (ph_action){ .kind = PH_ACT_W, .chunk = (uint16_t)rank, .mb = mb };
#else
		out[m + mb] = (ph_action){ .kind = PH_ACT_B, .chunk = (uint16_t)rank, .mb = mb };
#endif
	}
	*n = AUDIT == 6 ? 3 * m : 2 * m;
	return PH_OK;
#endif
}

static const ph_schedule_ops ops = {
	.head = PH_HEAD_NOOPT(ph_schedule_ops, "audit_sched", "fill-drain, broken one way (a test)"),
#if AUDIT == 3
	.max_chunks_per_rank = 0,
#else
	.max_chunks_per_rank = 1,
#endif
#if AUDIT == 1
	.flags = PH_SCHED_DELAYED_UPDATE,
#elif AUDIT == 5 || AUDIT == 6
	.flags = PH_SCHED_UPDATE_PER_MB,
#endif
	.generate = generate,
};

static const ph_schedule_ops *const schedules[] = { &ops, NULL };
PH_PLUGIN(NULL, NULL, schedules)
