/* SPDX-License-Identifier: MIT */
/* A schedule that deadlocks on two ranks or more: even ranks run each
 * micro-batch's F then its B in ascending order, odd ranks every F in
 * descending order and then the Bs in ascending order.  Rank 0 waits for
 * micro-batch 0's gradient, which rank 1 sends only after its forwards,
 * the first of which waits for micro-batch m-1's activation from rank 0.
 * Every action appears once, each B follows its F and each chunk's Bs go
 * in micro-batch order, so only the host's deadlock simulation can refuse
 * it; on one rank it is valid.  pipehost --check-plugin must fail it on
 * p >= 2 (tests/test-check-plugin.sh). */
#include <pipehost/plugin.h>

static int generate(const void *config, const ph_schedule_shape *sh, int rank, ph_action *out, int cap, int *n,
		    ph_err *err)
{
	int m = sh->microbatches;
	if (cap < 2 * m)
		return ph_fail(err, PH_EINVAL, "check_deadlock: need room for %d actions", 2 * m);
	for (int i = 0; i < m; i++) {
		if (rank % 2) {
			out[i] = (ph_action){ .kind = PH_ACT_F, .chunk = (uint16_t)rank, .mb = m - 1 - i };
			out[m + i] = (ph_action){ .kind = PH_ACT_B, .chunk = (uint16_t)rank, .mb = i };
		} else {
			out[2 * i] = (ph_action){ .kind = PH_ACT_F, .chunk = (uint16_t)rank, .mb = i };
			out[2 * i + 1] = (ph_action){ .kind = PH_ACT_B, .chunk = (uint16_t)rank, .mb = i };
		}
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
