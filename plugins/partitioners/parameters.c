/* SPDX-License-Identifier: MIT */
/*
 * parameters: balance parameter bytes, so that parameters, gradients and
 * optimizer state take about the same memory on every stage.
 *
 * Exact: a dynamic programme over (stage, first layer) finds the least
 * possible largest stage sum B* among contiguous, non-empty splits that
 * respect the cut points (O(K n^2) at worst; stop() below cuts a stage's
 * scan short once its sum is past what can help).
 * Many splits usually reach B* (layers without parameters can move freely),
 * so a second pass picks among them the one nearest the uniform layer split
 * (least total |boundary - uniform boundary|), then the earliest
 * boundaries: deterministic, and with no parameters at all it is uniform.
 */
#include <stdlib.h>

#include <pipehost/plugin.h>

#include "cuts.h"

/* prefix[i] = parameter bytes of layers 0..i-1; the second pass allows
 * stage sums up to cap. */
typedef struct {
	const double *prefix;
	double cap;
} sums;

/* Parameter bytes of layers i..j-1: the same pair always gives the same
 * double, so comparing against B* (itself one such sum) is exact. */
static double stage_bytes(const void *ctx, int s, int i, int j)
{
	const sums *w = ctx;
	return w->prefix[j] - w->prefix[i];
}

static int under_cap(const void *ctx, int s, int i, int j)
{
	return stage_bytes(ctx, s, i, j) <= ((const sums *)ctx)->cap;
}

/* cuts_stop_fn: a stage's bytes only grow with its end j (a difference
 * of prefix sums of values >= 0; rounding is monotone too), so no later
 * end helps once they reach the best largest sum found for this start
 * (pass 1: cuts_bottleneck gives the value) or pass the cap (pass 2: it
 * gives none).  The tables, and the split, are the full scan's: `--plan`
 * of 10,002 layers into 64 x 8 chunks took 312 s, and takes 7. */
static int stop(const void *ctx, cuts_value_fn value, int s, int i, int j, double best)
{
	double b = stage_bytes(ctx, s, i, j);
	return value ? b >= best : b > ((const sums *)ctx)->cap;
}

static int parameters_partition(const void *config, const ph_partition_problem *pb,
				int *first, ph_err *warn, ph_err *err)
{
	int rc = cuts_check(pb, "parameters", err);
	if (!rc)
		rc = cuts_check_values(pb, "parameters", pb->param_bytes, "parameter bytes", err);
	if (rc)
		return rc;
	int n = pb->n, K = pb->stages;
	double *prefix = malloc(sizeof *prefix * (size_t)(n + 1));
	int *target = malloc(sizeof *target * (size_t)(K + 1));
	sums w = { prefix, 0 };
	cuts_dp dp = { .ctx = &w, .stop = stop };
	if (!prefix || !target) {
		rc = ph_fail(err, PH_ENOMEM, "parameters: out of memory for %d layers x %d stages", n, K);
		goto out;
	}
	if ((rc = cuts_dp_init(&dp, pb, "parameters", err)))
		goto out;
	prefix[0] = 0;
	for (int i = 0; i < n; i++)
		prefix[i + 1] = prefix[i] + pb->param_bytes[i];
	cuts_uniform_target(n, K, target);
	/* Pass 1: B*, the least largest stage; pass 2: nearest uniform under it. */
	w.cap = cuts_bottleneck(&dp, stage_bytes);
	dp.allowed = under_cap;
	rc = cuts_nearest(&dp, target, first, "parameters", err);
out:
	cuts_dp_free(&dp);
	free(prefix);
	free(target);
	return rc;
}

static const ph_partitioner_ops parameters_ops = {
	.head = PH_HEAD_NOOPT(ph_partitioner_ops, "parameters",
			      "balance parameter bytes: least largest stage, exact (ties: nearest uniform)"),
	.partition = parameters_partition,
};

static const ph_partitioner_ops *const partitioners[] = { &parameters_ops, NULL };
PH_PLUGIN(NULL, partitioners, NULL)
