/* SPDX-License-Identifier: MIT */
/*
 * gpipe: GPipe's fill-drain order (Huang et al., 2019).  Every rank runs the
 * forwards of all m micro-batches, then their backwards.
 *
 *     rank r:  F0 F1 ... F(m-1)  B0 B1 ... B(m-1)
 *
 * Backwards go in micro-batch order 0..m-1 (not the reverse that the data
 * dependencies alone would allow) so that parameter gradients accumulate in
 * the same order under every schedule: that is what makes CPU training
 * bitwise identical across schedules.  The price is holding all m
 * micro-batches' activations at once; 1f1b holds at most p.
 */
#include <pipehost/plugin.h>

static int gpipe_check(const void *config, const ph_schedule_shape *sh, ph_err *err)
{
	if (sh->ranks < 1 || sh->microbatches < 1)
		return ph_fail(err, PH_EINVAL, "gpipe: need at least 1 rank and 1 micro-batch (got %d ranks, %d micro-batches)",
			       sh->ranks, sh->microbatches);
	if (sh->ranks > 65535)
		return ph_fail(err, PH_EINVAL, "gpipe: %d ranks is more than the 65535 chunk indices an action can name",
			       sh->ranks);
	if (sh->chunks_per_rank != 1)
		return ph_fail(err, PH_EINVAL, "gpipe: runs one chunk per rank, not %d; use schedule = interleaved for virtual chunks",
			       sh->chunks_per_rank);
	if (sh->microbatches > 0x3fffffff)
		return ph_fail(err, PH_EINVAL, "gpipe: %d micro-batches is too many actions to list", sh->microbatches);
	return PH_OK;
}

static int gpipe_generate(const void *config, const ph_schedule_shape *sh, int rank,
			  ph_action *out, int cap, int *n, ph_err *err)
{
	int rc = gpipe_check(config, sh, err);
	if (rc)
		return rc;
	if (rank < 0 || rank >= sh->ranks)
		return ph_fail(err, PH_EINVAL, "gpipe: rank %d is outside 0..%d", rank, sh->ranks - 1);
	int m = sh->microbatches;
	*n = 2 * m; /* set even on failure, so a caller can size its buffer */
	if (cap < 2 * m)
		return ph_fail(err, PH_EINVAL, "gpipe: rank %d needs room for %d actions, got %d", rank, 2 * m, cap);
	for (int i = 0; i < m; i++)
		out[i] = (ph_action){ .kind = PH_ACT_F, .chunk = (uint16_t)rank, .mb = i };
	for (int i = 0; i < m; i++)
		out[m + i] = (ph_action){ .kind = PH_ACT_B, .chunk = (uint16_t)rank, .mb = i };
	return PH_OK;
}

static const ph_schedule_ops gpipe_ops = {
	.head = PH_HEAD_NOOPT(ph_schedule_ops, "gpipe",
			      "GPipe fill-drain: all forwards, then all backwards (holds m micro-batches)"),
	.max_chunks_per_rank = 1,
	.check = gpipe_check,
	.generate = gpipe_generate,
};

static const ph_schedule_ops *const schedules[] = { &gpipe_ops, NULL };
PH_PLUGIN(NULL, NULL, schedules)
