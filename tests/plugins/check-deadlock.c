/* SPDX-License-Identifier: MIT */
/* A schedule that deadlocks on two ranks or more: even ranks take the
 * micro-batches in ascending order, odd ranks in descending order, each
 * F then its B.  Every action appears once and each B follows its F, so only
 * the host's deadlock simulation can refuse it; on one rank it is valid.
 * pipehost --check-plugin must fail it on p >= 2 (tests/test-check-plugin.sh). */
#include <pipehost/plugin.h>

static int generate(const void *config, const ph_schedule_shape *sh, int rank, ph_action *out, int cap, int *n,
		    ph_err *err)
{
	int m = sh->microbatches;
	if (cap < 2 * m)
		return ph_fail(err, PH_EINVAL, "check_deadlock: need room for %d actions", 2 * m);
	for (int i = 0; i < m; i++) {
		int mb = rank % 2 ? m - 1 - i : i;
		out[2 * i] = (ph_action){ .kind = PH_ACT_F, .chunk = (uint16_t)rank, .mb = mb };
		out[2 * i + 1] = (ph_action){ .kind = PH_ACT_B, .chunk = (uint16_t)rank, .mb = mb };
	}
	*n = 2 * m;
	return PH_OK;
}

static const ph_schedule_ops ops = {
	.head = PH_HEAD_NOOPT(ph_schedule_ops, "check_deadlock", "deadlocks on 2 ranks or more (a test)"),
	.max_chunks_per_rank = 1,
	.check = NULL,
	.generate = generate,
};

static const ph_schedule_ops *const schedules[] = { &ops, NULL };
PH_PLUGIN(NULL, NULL, schedules)
