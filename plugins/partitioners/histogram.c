/* SPDX-License-Identifier: MIT */
/*
 * histogram: Lingvo's cost-histogram split (GPipe's partition by cost).
 * With c_i the fraction of the total cost (fwd + bwd) in layers 0..i,
 * layer i goes to stage min(floor(c_i * K), K - 1).  One pass, no search:
 * a layer lands where its cumulative cost says, so a stage can come out
 * empty when one layer holds more than 1/K of the cost.
 *
 * When that happens, or the cut points forbid a boundary it chose, we take
 * the nearest valid split (least total |boundary - histogram boundary|,
 * then earliest boundaries) and say so in the warning, suggesting the dp
 * partitioner, which minimises the slowest stage exactly.  With all costs
 * zero every layer counts the same.
 */
#include <math.h>
#include <stdlib.h>

#include <pipehost/plugin.h>

#include "cuts.h"

static int histogram_partition(const void *config, const ph_partition_problem *pb,
			       int *first, ph_err *warn, ph_err *err)
{
	int rc = cuts_check(pb, "histogram", err);
	if (!rc)
		rc = cuts_check_costs(pb, "histogram", err);
	if (rc)
		return rc;
	int n = pb->n, K = pb->stages;
	double total = 0;
	for (int i = 0; i < n; i++)
		total += pb->fwd_cost[i] + pb->bwd_cost[i];
	int *target = malloc(sizeof *target * (size_t)(K + 1));
	if (!target)
		return ph_fail(err, PH_ENOMEM, "histogram: out of memory");

	/* target[s] = first layer whose histogram stage is >= s. */
	for (int s = 0; s <= K; s++)
		target[s] = n;
	double cum = 0;
	for (int i = 0; i < n; i++) {
		/* Multiply before dividing: exact for integer-valued costs. */
		cum += total > 0 ? pb->fwd_cost[i] + pb->bwd_cost[i] : 1;
		double frac_k = floor(cum * K / (total > 0 ? total : n));
		int s = frac_k < K - 1 ? (int)frac_k : K - 1;
		for (int t = 0; t <= s; t++)
			if (target[t] == n)
				target[t] = i;
	}

	int empty = -1, banned = -1;
	for (int s = 0; s < K && empty < 0; s++)
		if (target[s + 1] <= target[s])
			empty = s;
	for (int s = 1; s < K && banned < 0; s++)
		if (target[s] > 0 && !cuts_can_end(pb, target[s]))
			banned = s;
	if (empty < 0 && banned < 0) {
		for (int s = 0; s <= K; s++)
			first[s] = target[s];
	} else {
		rc = cuts_nearest_allowed(pb, target, first, "histogram", err);
		/* The layer at target[empty] jumped over stage `empty`. */
		int big = empty >= 0 ? target[empty] : 0;
		if (rc == PH_OK && empty >= 0)
			ph_fail(warn, PH_OK, "histogram: stage %d came out empty (layer %d, %s, holds %.0f%% of the cost); "
				"used the nearest non-empty split; partitioner = dp balances such models exactly",
				empty, big, pb->names ? pb->names[big] : "?",
				total > 0 ? 100 * (pb->fwd_cost[big] + pb->bwd_cost[big]) / total : 100.0 / n);
		else if (rc == PH_OK)
			ph_fail(warn, PH_OK, "histogram: the cut points forbid starting stage %d at layer %d; "
				"used the nearest allowed split; partitioner = dp balances under cut points exactly",
				banned, target[banned]);
	}
	free(target);
	return rc;
}

static const ph_partitioner_ops histogram_ops = {
	.head = PH_HEAD_NOOPT(ph_partitioner_ops, "histogram",
			      "Lingvo cost histogram: layer i to stage floor(cumulative cost fraction * K)"),
	.partition = histogram_partition,
};

static const ph_partitioner_ops *const partitioners[] = { &histogram_ops, NULL };
PH_PLUGIN(NULL, partitioners, NULL)
