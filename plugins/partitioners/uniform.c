/* SPDX-License-Identifier: MIT */
/*
 * uniform: the same number of layers on every stage, GPipe's default.
 * n layers into K stages: every stage gets n/K layers and the first n mod K
 * stages one more (38 into 8: 5,5,5,5,5,5,4,4).
 *
 * Cut constraints (cut_after) may forbid that exact split.  Then we take the
 * allowed split nearest to it: the one whose stage boundaries are closest
 * in total (sum over stages of |boundary - uniform boundary|, in layers),
 * and among equally near ones the one with the earliest boundaries.  A
 * small dynamic programme finds it exactly; the warning says it happened.
 *
 * The cut points, the checks and the dynamic programme are cuts.c's,
 * shared by every partitioner.
 */
#include <stdlib.h>

#include <pipehost/plugin.h>

#include "cuts.h"

static int uniform_partition(const void *config, const ph_partition_problem *pb,
			     int *first, ph_err *warn, ph_err *err)
{
	int rc = cuts_check(pb, "uniform", err);
	if (rc)
		return rc;
	int K = pb->stages;
	int *target = malloc(sizeof *target * (size_t)(K + 1));
	if (!target)
		return ph_fail(err, PH_ENOMEM, "uniform: out of memory");
	cuts_uniform_target(pb->n, K, target);
	/* every even boundary allowed (the common case): the split itself,
	 * which the nearest-allowed search would find at O(K n^2) (a minute
	 * at 10,000 layers in 512 chunks) */
	int all_allowed = 1;
	for (int s = 1; s < K && all_allowed; s++)
		all_allowed = target[s] > target[s - 1] && cuts_can_end(pb, target[s]);
	if (all_allowed) {
		for (int s = 0; s <= K; s++)
			first[s] = target[s];
		free(target);
		return PH_OK;
	}
	rc = cuts_nearest_allowed(pb, target, first, "uniform", err);
	if (rc == PH_OK) {
		for (int s = 1; s < K; s++)
			if (first[s] != target[s]) {
				ph_fail(warn, PH_OK, "uniform: cut points forbid an even split; stage %d starts at layer %d instead of %d",
					s, first[s], target[s]);
				break;
			}
	}
	free(target);
	return rc;
}

static const ph_partitioner_ops uniform_ops = {
	.head = PH_HEAD_NOOPT(ph_partitioner_ops, "uniform",
			      "equal layer counts per stage (first n mod K stages get one more)"),
	.partition = uniform_partition,
};

static const ph_partitioner_ops *const partitioners[] = { &uniform_ops, NULL };
PH_PLUGIN(NULL, partitioners, NULL)
