/* SPDX-License-Identifier: MIT */
/*
 * greedy: a template partitioner plugin.  Walks the layers in order and
 * closes a stage once it holds its share of the total cost (forward plus
 * backward), where a cut is allowed, keeping one layer at least for each
 * stage still to come.  Fast and simple, not optimal (the shipped dp is).
 *
 * A partitioner answers first[s], the first layer of stage s, for
 * s = 0..stages-1, and first[stages] = n; the host refuses an answer that
 * leaves a stage empty or cuts where cut_after forbids it (pipehost
 * --check-plugin runs those checks on a few synthetic models).
 * Build: make (see Makefile); test: make check.
 */
#include <pipehost/plugin.h>

static int greedy_partition(const void *config, const ph_partition_problem *pb, int *first, ph_err *warn,
			    ph_err *err)
{
	int n = pb->n, K = pb->stages;
	if (n < 1 || K < 1 || K > n)
		return ph_fail(err, PH_EINVAL, "greedy: cannot cut %d layers into %d stages; lower stages", n, K);
	double total = 0;
	for (int l = 0; l < n; l++)
		total += pb->fwd_cost[l] + pb->bwd_cost[l];
	int k = 1;
	double acc = 0;
	first[0] = 0;
	for (int l = 0; l < n && k < K; l++) {
		acc += pb->fwd_cost[l] + pb->bwd_cost[l];
		int may_cut = !pb->cut_after || pb->cut_after[l];
		int layers_left = n - (l + 1), stages_left = K - k;
		/* cut when this stage has its share, or when every layer left is needed */
		if (may_cut && layers_left >= stages_left && (acc >= total * k / K || layers_left == stages_left))
			first[k++] = l + 1;
	}
	if (k < K)
		return ph_fail(err, PH_EINVAL, "greedy: the allowed cuts leave room for %d stages, not %d; allow more cuts "
			       "or lower stages", k, K);
	first[K] = n;
	return PH_OK;
}

static const ph_partitioner_ops greedy_ops = {
	.head = PH_HEAD_NOOPT(ph_partitioner_ops, "greedy", "fill each stage to its share of the cost (a template)"),
	.partition = greedy_partition,
};

static const ph_partitioner_ops *const partitioners[] = { &greedy_ops, NULL };
PH_PLUGIN(NULL, partitioners, NULL)
