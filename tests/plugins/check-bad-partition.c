/* SPDX-License-Identifier: MIT */
/* Two partitioners, each wrong in one way pipehost --check-plugin must
 * name (tests/test-check-plugin.sh): check_past_bounds splits evenly but
 * writes one entry past first[stages] (an off-by-one a run would pay for
 * in the host's memory), and check_silent refuses every model of more than
 * 2 stages without saying why. */
#include <pipehost/plugin.h>

/* first[k] = k n / stages: contiguous, none empty for n >= stages, and
 * every profile of the checker allows its cuts */
static void even(const ph_partition_problem *pb, int *first)
{
	for (int k = 0; k <= pb->stages; k++)
		first[k] = k * pb->n / pb->stages;
}

static int past_bounds(const void *config, const ph_partition_problem *pb, int *first, ph_err *warn, ph_err *err)
{
	(void)config, (void)warn, (void)err;
	even(pb, first);
	first[pb->stages + 1] = pb->n; /* the bug: the array has stages + 1 entries */
	return PH_OK;
}

static int silent(const void *config, const ph_partition_problem *pb, int *first, ph_err *warn, ph_err *err)
{
	(void)config, (void)warn, (void)err;
	if (pb->stages > 2)
		return PH_EUNSUPPORTED; /* the bug: no message */
	even(pb, first);
	return PH_OK;
}

static const ph_partitioner_ops past_ops = {
	.head = PH_HEAD_NOOPT(ph_partitioner_ops, "check_past_bounds", "writes past first[stages] (a test)"),
	.partition = past_bounds,
};
static const ph_partitioner_ops silent_ops = {
	.head = PH_HEAD_NOOPT(ph_partitioner_ops, "check_silent", "refuses without a reason (a test)"),
	.partition = silent,
};

static const ph_partitioner_ops *const partitioners[] = { &past_ops, &silent_ops, NULL };
PH_PLUGIN(NULL, partitioners, NULL)
