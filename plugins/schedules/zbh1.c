/* SPDX-License-Identifier: MIT */
/*
 * zb-h1: ZB-H1 from "Zero Bubble Pipeline Parallelism" (Qi et al., ICLR'24).
 * The backward is split into I (input gradient, on the critical path to the
 * previous rank) and W (weight gradient, needed only by the optimizer step).
 * Deferring W lets I reach the previous rank sooner and W fill the bubbles
 * that 1F1B leaves.  Peak memory is 1F1B's worst rank's: every rank holds
 * at most p micro-batches between F and W.
 *
 * Rank r (one chunk per rank):
 *   - warm-up: w = min(p - r, m) forwards;
 *   - then, while forwards remain: I, maybe W, F;
 *   - then, while input gradients remain: I, maybe W;
 *   - then the remaining W.
 * "Maybe W" runs the oldest pending W once more than r input gradients are
 * waiting for theirs: rank r lets W lag I by r micro-batches, which is what
 * keeps the last rank's I's flowing upstream without a gap.  For p = 4,
 * m = 8 this gives, on rank 1,
 *
 *     F0 F1 F2 I0 F3 I1 W0 F4 I2 W1 F5 I3 W2 F6 I4 W3 F7 I5 W4 I6 W5 I7 W6 W7
 *
 * Every I follows its F, every W its I, and I's and W's each run in
 * micro-batch order, so gradients accumulate in micro-batch order as under
 * every other built-in schedule.
 */
#include <pipehost/plugin.h>

static int zbh1_check(const void *config, const ph_schedule_shape *sh, ph_err *err)
{
	if (sh->ranks < 1 || sh->microbatches < 1)
		return ph_fail(err, PH_EINVAL, "zb-h1: need at least 1 rank and 1 micro-batch (got %d ranks, %d micro-batches)",
			       sh->ranks, sh->microbatches);
	if (sh->ranks > 65535)
		return ph_fail(err, PH_EINVAL, "zb-h1: %d ranks is more than the 65535 chunk indices an action can name",
			       sh->ranks);
	if (sh->chunks_per_rank != 1)
		return ph_fail(err, PH_EINVAL, "zb-h1: runs one chunk per rank, not %d; use schedule = interleaved for virtual chunks",
			       sh->chunks_per_rank);
	if (sh->microbatches > 0x1fffffff)
		return ph_fail(err, PH_EINVAL, "zb-h1: %d micro-batches is too many actions to list", sh->microbatches);
	return PH_OK;
}

static int zbh1_generate(const void *config, const ph_schedule_shape *sh, int rank,
			 ph_action *out, int cap, int *n, ph_err *err)
{
	int rc = zbh1_check(config, sh, err);
	if (rc)
		return rc;
	int p = sh->ranks, m = sh->microbatches;
	if (rank < 0 || rank >= p)
		return ph_fail(err, PH_EINVAL, "zb-h1: rank %d is outside 0..%d", rank, p - 1);
	*n = 3 * m; /* set even on failure, so a caller can size its buffer */
	if (cap < 3 * m)
		return ph_fail(err, PH_EINVAL, "zb-h1: rank %d needs room for %d actions, got %d", rank, 3 * m, cap);

	int warmup = p - rank < m ? p - rank : m;
	int k = 0, f = 0, i = 0, w = 0;
#define EMIT(kind_, mb_) (out[k++] = (ph_action){ .kind = (kind_), .chunk = (uint16_t)rank, .mb = (mb_) })
	while (f < warmup)
		EMIT(PH_ACT_F, f++);
	while (i < m) {
		EMIT(PH_ACT_I, i++);
		if (i - w > rank)
			EMIT(PH_ACT_W, w++);
		if (f < m)
			EMIT(PH_ACT_F, f++);
	}
	while (w < m)
		EMIT(PH_ACT_W, w++);
#undef EMIT
	return PH_OK;
}

static const ph_schedule_ops zbh1_ops = {
	.head = PH_HEAD_NOOPT(ph_schedule_ops, "zb-h1",
			      "Zero Bubble H1: split backward (I, W), W deferred into bubbles; 1F1B memory"),
	.max_chunks_per_rank = 1,
	.check = zbh1_check,
	.generate = zbh1_generate,
};

static const ph_schedule_ops *const schedules[] = { &zbh1_ops, NULL };
PH_PLUGIN(NULL, NULL, schedules)
