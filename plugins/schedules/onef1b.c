/* SPDX-License-Identifier: MIT */
/*
 * 1f1b: PipeDream-Flush, the order of PyTorch's Schedule1F1B and Megatron's
 * non-interleaved schedule (Narayanan et al., 2021).
 *
 * Rank r first runs w = min(p-r-1, m) warm-up forwards: just enough that the
 * last rank's first backward can start as soon as its forward is done.  It
 * then alternates one forward and one backward (steady state) and drains
 * the remaining backwards (order-1f1b.h).  For p = 4, m = 8, rank 0 runs
 *
 *     F0 F1 F2 | F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 | B5 B6 B7
 *
 * so at most p-r micro-batches are in flight on rank r (GPipe holds m).
 * Backwards run in micro-batch order, so gradients accumulate in the same
 * order as under every other built-in schedule.  Each step drains.
 */
#include "order-1f1b.h"

static int onef1b_check(const void *config, const ph_schedule_shape *sh, ph_err *err)
{
	(void)config;
	return order_1f1b_check("1f1b", "use schedule = interleaved for virtual chunks", sh, err);
}

static int onef1b_generate(const void *config, const ph_schedule_shape *sh, int rank, ph_action *out, int cap,
			   int *n, ph_err *err)
{
	int rc = onef1b_check(config, sh, err);
	return rc ? rc : order_1f1b_list("1f1b", sh, rank, out, cap, n, err);
}

static const ph_schedule_ops onef1b_ops = {
	.head = PH_HEAD_NOOPT(ph_schedule_ops, "1f1b",
			      "PipeDream-Flush 1F1B: warm-up, one forward one backward, drain (holds <= p micro-batches)"),
	.max_chunks_per_rank = 1,
	.check = onef1b_check,
	.generate = onef1b_generate,
};

static const ph_schedule_ops *const schedules[] = { &onef1b_ops, NULL };
PH_PLUGIN(NULL, NULL, schedules)
