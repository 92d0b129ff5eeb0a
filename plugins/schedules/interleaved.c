/* SPDX-License-Identifier: MIT */
/*
 * interleaved: Megatron-LM's interleaved 1F1B (Narayanan et al., SC'21).
 * Rank r holds v model chunks, r, r+p, ..., r+(v-1)p, so a micro-batch
 * crosses every rank v times and the pipeline bubble shrinks by v.
 *
 * Order, as in Megatron's forward_backward_pipelining_with_interleaving:
 * there are v*m forward steps and v*m backward steps per rank.  Step k
 * belongs to a group of p*v steps; inside the group, runs of p consecutive
 * steps share a chunk:
 *
 *     virtual chunk  (k mod pv) / p      (backward: reversed, v-1 - that)
 *     micro-batch    (k / pv) * p + k mod p
 *
 * Rank r runs w = (p-r-1)*2 + (v-1)*p warm-up forwards (capped at v*m),
 * then alternates forward step w+i with backward step i, then drains the
 * backwards.  This needs m to be a multiple of p, which check() enforces.
 * Inside each chunk both forwards and backwards go in micro-batch order, so
 * gradients accumulate in the same order as under every other schedule.
 *
 * With v = 1 Megatron's warm-up formula would run p-r-1 extra forwards for
 * nothing; we use the plain 1F1B warm-up instead, so v = 1 gives exactly
 * the 1f1b order.
 */
#include <pipehost/plugin.h>

#define MAX_CHUNKS 8

static int interleaved_check(const void *config, const ph_schedule_shape *sh, ph_err *err)
{
	int p = sh->ranks, v = sh->chunks_per_rank, m = sh->microbatches;
	if (p < 1 || v < 1 || m < 1)
		return ph_fail(err, PH_EINVAL, "interleaved: need at least 1 rank, 1 chunk and 1 micro-batch (got %d, %d, %d)",
			       p, v, m);
	if (v > MAX_CHUNKS)
		return ph_fail(err, PH_EINVAL, "interleaved: %d chunks per rank is more than the %d supported", v, MAX_CHUNKS);
	if ((long)p * v > 65535)
		return ph_fail(err, PH_EINVAL, "interleaved: %d ranks x %d chunks is more than the 65535 chunk indices an action can name",
			       p, v);
	if ((long)2 * v * m > 0x7fffffffL)
		return ph_fail(err, PH_EINVAL, "interleaved: %d micro-batches x %d chunks is too many actions to list", m, v);
	if (m % p) {
		/* The rule, not a count: the batch must split into the count too,
		 * and only the host knows the batch (it names counts that fit). */
		return ph_fail(err, PH_EINVAL, "interleaved: %d micro-batches is not a multiple of %d ranks; use a multiple "
			       "of %d", m, p, p);
	}
	return PH_OK;
}

/* Global chunk and micro-batch of forward or backward step k on `rank`. */
static ph_action step(const ph_schedule_shape *sh, int rank, int k, int backward)
{
	int p = sh->ranks, v = sh->chunks_per_rank;
	int vc = k % (p * v) / p;
	if (backward)
		vc = v - 1 - vc;
	return (ph_action){ .kind = backward ? PH_ACT_B : PH_ACT_F,
			    .chunk = (uint16_t)(rank + vc * p),
			    .mb = k / (p * v) * p + k % p };
}

static int interleaved_generate(const void *config, const ph_schedule_shape *sh, int rank,
				ph_action *out, int cap, int *n, ph_err *err)
{
	int rc = interleaved_check(config, sh, err);
	if (rc)
		return rc;
	int p = sh->ranks, v = sh->chunks_per_rank, m = sh->microbatches;
	if (rank < 0 || rank >= p)
		return ph_fail(err, PH_EINVAL, "interleaved: rank %d is outside 0..%d", rank, p - 1);
	int steps = v * m;
	*n = 2 * steps; /* set even on failure, so a caller can size its buffer */
	if (cap < 2 * steps)
		return ph_fail(err, PH_EINVAL, "interleaved: rank %d needs room for %d actions, got %d",
			       rank, 2 * steps, cap);

	long w = v == 1 ? p - rank - 1 : (long)(p - rank - 1) * 2 + (long)(v - 1) * p;
	int warmup = w < steps ? (int)w : steps;
	int k = 0, f = 0, b = 0;
	while (f < warmup)
		out[k++] = step(sh, rank, f++, 0);
	while (f < steps) { /* steady state: one forward, one backward */
		out[k++] = step(sh, rank, f++, 0);
		out[k++] = step(sh, rank, b++, 1);
	}
	while (b < steps) /* cool-down */
		out[k++] = step(sh, rank, b++, 1);
	return PH_OK;
}

static const ph_schedule_ops interleaved_ops = {
	.head = PH_HEAD_NOOPT(ph_schedule_ops, "interleaved",
			      "Megatron interleaved 1F1B: v chunks per rank, bubble / v (m must be a multiple of p)"),
	.max_chunks_per_rank = MAX_CHUNKS,
	.check = interleaved_check,
	.generate = interleaved_generate,
};

static const ph_schedule_ops *const schedules[] = { &interleaved_ops, NULL };
PH_PLUGIN(NULL, NULL, schedules)
