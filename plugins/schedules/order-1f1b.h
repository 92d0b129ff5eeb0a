/* SPDX-License-Identifier: MIT */
/*
 * The 1F1B order that 1f1b, 2bw and pipedream all list (one chunk a rank):
 * rank r runs w = min(p-r-1, m) warm-up forwards, then one forward and one
 * backward until the forwards are done, then the remaining backwards.  For
 * p = 4, m = 8, rank 0 runs
 *
 *     F0 F1 F2 | F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 | B5 B6 B7
 *
 * so at most p-r micro-batches are in flight on rank r, and F(n) comes
 * after B(n - (p - r)): what 2bw's and pipedream's weight versions count
 * on.  Listed for k * m micro-batches, it is k steps without a flush.
 * Included by each of those plugins (each is its own module).
 */
#ifndef PH_SCHEDULES_ORDER_1F1B_H
#define PH_SCHEDULES_ORDER_1F1B_H

#include <pipehost/plugin.h>

/* The shapes the order can list; chunks_hint says what to do about
 * virtual chunks. */
static inline int order_1f1b_check(const char *name, const char *chunks_hint, const ph_schedule_shape *sh, ph_err *err)
{
	if (sh->ranks < 1 || sh->microbatches < 1)
		return ph_fail(err, PH_EINVAL, "%s: need at least 1 rank and 1 micro-batch (got %d ranks, %d micro-batches)",
			       name, sh->ranks, sh->microbatches);
	if (sh->ranks > 65535)
		return ph_fail(err, PH_EINVAL, "%s: %d ranks is more than the 65535 chunk indices an action can name", name,
			       sh->ranks);
	if (sh->chunks_per_rank != 1)
		return ph_fail(err, PH_EINVAL, "%s: runs one chunk per rank, not %d; %s", name, sh->chunks_per_rank,
			       chunks_hint);
	if (sh->microbatches > 0x3fffffff)
		return ph_fail(err, PH_EINVAL, "%s: %d micro-batches is too many actions to list", name, sh->microbatches);
	return PH_OK;
}

/* Rank's list into out[cap]; *n is set even on failure, so a caller can
 * size its buffer. */
static inline int order_1f1b_list(const char *name, const ph_schedule_shape *sh, int rank, ph_action *out, int cap,
				  int *n, ph_err *err)
{
	int p = sh->ranks, m = sh->microbatches;
	if (rank < 0 || rank >= p)
		return ph_fail(err, PH_EINVAL, "%s: rank %d is outside 0..%d", name, rank, p - 1);
	*n = 2 * m;
	if (cap < 2 * m)
		return ph_fail(err, PH_EINVAL, "%s: rank %d needs room for %d actions, got %d", name, rank, 2 * m, cap);
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

#endif
