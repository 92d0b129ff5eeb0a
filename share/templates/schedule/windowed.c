/* SPDX-License-Identifier: MIT */
/*
 * windowed: a template schedule plugin.  Fill-drain in windows of `window`
 * micro-batches: each rank runs the forwards of a window, then their
 * backwards, then the next window.  window = m is GPipe; a small window
 * holds fewer activations and leaves a bigger bubble.
 *
 *     rank r, m = 4, window = 2:   F0 F1 B0 B1 F2 F3 B2 B3
 *
 * A schedule only orders each rank's compute actions; the host adds the
 * sends and receives and refuses an order that would deadlock or skip an
 * action (pipehost --check-plugin runs those checks).  Backwards go in
 * micro-batch order so that gradients add up in the same order as under the
 * shipped schedules (bitwise identical training on the CPU).
 * Build: make (see Makefile); test: make check.
 */
#include <pipehost/plugin.h>

#include "windowed.h"

static const ph_option windowed_options[] = {
	PH_OPT_INT_(windowed_config, window, "window", "2", 1, 1 << 20,
		    "micro-batches run forward before their backwards"),
	PH_OPT_END
};

/* Refuse what this schedule cannot order, saying what would work. */
static int windowed_check(const void *config, const ph_schedule_shape *sh, ph_err *err)
{
	if (sh->ranks < 1 || sh->microbatches < 1)
		return ph_fail(err, PH_EINVAL, "windowed: need at least 1 rank and 1 micro-batch (got %d, %d)", sh->ranks,
			       sh->microbatches);
	if (sh->chunks_per_rank != 1)
		return ph_fail(err, PH_EINVAL, "windowed: runs one chunk per rank, not %d; set [run] chunks = 1",
			       sh->chunks_per_rank);
	if (sh->ranks > 65535 || sh->microbatches > (1 << 28))
		return ph_fail(err, PH_EINVAL, "windowed: %d ranks x %d micro-batches is too many to list", sh->ranks,
			       sh->microbatches);
	return PH_OK;
}

static int windowed_generate(const void *config, const ph_schedule_shape *sh, int rank, ph_action *out, int cap,
			     int *n, ph_err *err)
{
	const windowed_config *c = config;
	int rc = windowed_check(config, sh, err);
	if (rc)
		return rc;
	if (rank < 0 || rank >= sh->ranks)
		return ph_fail(err, PH_EINVAL, "windowed: rank %d is outside 0..%d", rank, sh->ranks - 1);
	int m = sh->microbatches, w = (int)c->window;
	*n = 2 * m;
	if (cap < 2 * m)
		return ph_fail(err, PH_EINVAL, "windowed: rank %d needs room for %d actions, got %d", rank, 2 * m, cap);
	int k = 0;
	for (int start = 0; start < m; start += w) {
		int end = start + w < m ? start + w : m;
		for (int mb = start; mb < end; mb++)
			out[k++] = (ph_action){ .kind = PH_ACT_F, .chunk = (uint16_t)rank, .mb = mb };
		for (int mb = start; mb < end; mb++)
			out[k++] = (ph_action){ .kind = PH_ACT_B, .chunk = (uint16_t)rank, .mb = mb };
	}
	return PH_OK;
}

static const ph_schedule_ops windowed_ops = {
	.head = PH_HEAD(ph_schedule_ops, "windowed", "fill-drain in windows of `window` micro-batches (a template)",
			windowed_options, windowed_config),
	.max_chunks_per_rank = 1,
	.check = windowed_check,
	.generate = windowed_generate,
};

static const ph_schedule_ops *const schedules[] = { &windowed_ops, NULL };
PH_PLUGIN(NULL, NULL, schedules)
