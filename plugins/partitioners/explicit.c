/* SPDX-License-Identifier: MIT */
/*
 * explicit: the user names each stage's first layer, e.g. bounds = 0,4,7,10
 * for four stages of a model with more than 10 layers.  For hand-tuned
 * splits and for reproducing a split another tool chose.  Nothing is moved:
 * a list that is not a valid split for this model is an error that says
 * what is wrong with it.
 */
#include <pipehost/plugin.h>

#include "cuts.h"

typedef struct {
	ph_intlist bounds;
} explicit_config;

static const ph_option explicit_options[] = {
	PH_OPT_INTLIST_(explicit_config, bounds, "bounds", NULL, 0, PH_NO_MAX,
			"first layer of each stage, increasing from 0, one per stage (e.g. 0,4,7,10)"),
	PH_OPT_END
};

static int explicit_partition(const void *config, const ph_partition_problem *pb,
			      int *first, ph_err *warn, ph_err *err)
{
	const explicit_config *cfg = config;
	int n = pb->n, K = pb->stages;
	int rc = cuts_check(pb, "explicit", err);
	if (rc)
		return rc;
	if (!cfg || cfg->bounds.n < 1)
		return ph_fail(err, PH_EINVAL, "explicit: set bounds to the first layer of each of the %d stages, e.g. bounds = 0,...", K);
	const ph_intlist *b = &cfg->bounds;
	if (b->n != K)
		return ph_fail(err, PH_EINVAL, "explicit: bounds lists %d stage%s but there are %d stages; give one first layer per stage",
			       b->n, b->n == 1 ? "" : "s", K);
	if (b->v[0] != 0)
		return ph_fail(err, PH_EINVAL, "explicit: bounds must start at 0 (the first stage starts at the first layer), not %lld",
			       (long long)b->v[0]);
	for (int s = 1; s < K; s++) {
		if (b->v[s] <= b->v[s - 1])
			return ph_fail(err, PH_EINVAL, "explicit: bounds must increase: stage %d starts at %lld, not after stage %d's %lld",
				       s, (long long)b->v[s], s - 1, (long long)b->v[s - 1]);
		if (b->v[s] >= n)
			return ph_fail(err, PH_EINVAL, "explicit: stage %d starts at layer %lld, but the model has layers 0..%d only",
				       s, (long long)b->v[s], n - 1);
		int j = (int)b->v[s];
		if (!cuts_can_end(pb, j))
			return ph_fail(err, PH_EINVAL, "explicit: stage %d starts at layer %d (%s), but the model may not be cut after layer %d (%s); move that bound",
				       s, j, pb->names ? pb->names[j] : "?", j - 1, pb->names ? pb->names[j - 1] : "?");
	}
	for (int s = 0; s < K; s++)
		first[s] = (int)b->v[s];
	first[K] = n;
	return PH_OK;
}

static const ph_partitioner_ops explicit_ops = {
	.head = PH_HEAD(ph_partitioner_ops, "explicit", "stage boundaries given by hand: bounds = 0,4,7,10",
			explicit_options, explicit_config),
	.partition = explicit_partition,
};

static const ph_partitioner_ops *const partitioners[] = { &explicit_ops, NULL };
PH_PLUGIN(NULL, partitioners, NULL)
