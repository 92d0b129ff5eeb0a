/* SPDX-License-Identifier: MIT */
/*
 * 1f1b: PipeDream-Flush, the order of PyTorch's Schedule1F1B and Megatron's
 * non-interleaved schedule (Narayanan et al., 2021).
 *
 * Rank r first runs w = min(p-r-1, m) warm-up forwards: just enough that the
 * last rank's first backward can start as soon as its forward is done.  It
 * then alternates one forward and one backward (steady state) and drains
 * the remaining backwards.  For p = 4, m = 8, rank 0 runs
 *
 *     F0 F1 F2 | F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 | B5 B6 B7
 *
 * so at most p-r micro-batches are in flight on rank r (GPipe holds m).
 * Backwards run in micro-batch order, so gradients accumulate in the same
 * order as under every other built-in schedule.
 */
#include <pipehost/plugin.h>

static int onef1b_check(const void *config, const ph_schedule_shape *sh, ph_err *err)
{
	if (sh->ranks < 1 || sh->microbatches < 1)
		return ph_fail(err, PH_EINVAL, "1f1b: need at least 1 rank and 1 micro-batch (got %d ranks, %d micro-batches)",
			       sh->ranks, sh->microbatches);
	if (sh->ranks > 65535)
		return ph_fail(err, PH_EINVAL, "1f1b: %d ranks is more than the 65535 chunk indices an action can name",
			       sh->ranks);
	if (sh->chunks_per_rank != 1)
		return ph_fail(err, PH_EINVAL, "1f1b: runs one chunk per rank, not %d; use schedule = interleaved for virtual chunks",
			       sh->chunks_per_rank);
	if (sh->microbatches > 0x3fffffff)
		return ph_fail(err, PH_EINVAL, "1f1b: %d micro-batches is too many actions to list", sh->microbatches);
	return PH_OK;
}

static int onef1b_generate(const void *config, const ph_schedule_shape *sh, int rank,
			   ph_action *out, int cap, int *n, ph_err *err)
{
	int rc = onef1b_check(config, sh, err);
	if (rc)
		return rc;
	int p = sh->ranks, m = sh->microbatches;
	if (rank < 0 || rank >= p)
		return ph_fail(err, PH_EINVAL, "1f1b: rank %d is outside 0..%d", rank, p - 1);
	*n = 2 * m; /* set even on failure, so a caller can size its buffer */
	if (cap < 2 * m)
		return ph_fail(err, PH_EINVAL, "1f1b: rank %d needs room for %d actions, got %d", rank, 2 * m, cap);

	int warmup = p - rank - 1 < m ? p - rank - 1 : m;
	int k = 0, f = 0, b = 0;
#define EMIT(kind_, mb_) (out[k++] = (ph_action){ .kind = (kind_), .chunk = (uint16_t)rank, .mb = (mb_) })
	while (f < warmup)
		EMIT(PH_ACT_F, f++);
	while (f < m) { /* steady state: one forward, one backward */
		EMIT(PH_ACT_F, f++);
		EMIT(PH_ACT_B, b++);
	}
	while (b < m) /* cool-down */
		EMIT(PH_ACT_B, b++);
#undef EMIT
	return PH_OK;
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
