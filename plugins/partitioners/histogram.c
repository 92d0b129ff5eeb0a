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
#include <limits.h>
#include <math.h>
#include <stdlib.h>

#include <pipehost/plugin.h>

static int can_end(const ph_partition_problem *pb, int j)
{
	return j == pb->n || !pb->cut_after || pb->cut_after[j - 1];
}

static int check_problem(const ph_partition_problem *pb, ph_err *err)
{
	if (pb->n < 1 || pb->stages < 1)
		return ph_fail(err, PH_EINVAL, "histogram: need at least 1 layer and 1 stage (got %d layers, %d stages)",
			       pb->n, pb->stages);
	if (pb->stages > pb->n)
		return ph_fail(err, PH_EINVAL, "histogram: more stages (%d) than layers (%d); lower stages to %d or fewer",
			       pb->stages, pb->n, pb->n);
	int most = 1;
	for (int j = 1; j < pb->n; j++)
		most += can_end(pb, j);
	if (pb->stages > most)
		return ph_fail(err, PH_EINVAL, "histogram: more stages (%d) than allowed cut points allow (%d stages at most); lower stages or allow cuts",
			       pb->stages, most);
	if (!pb->fwd_cost || !pb->bwd_cost)
		return ph_fail(err, PH_EINVAL, "histogram: the host gave no layer costs");
	for (int i = 0; i < pb->n; i++) {
		double c = pb->fwd_cost[i] + pb->bwd_cost[i];
		if (!(pb->fwd_cost[i] >= 0 && pb->bwd_cost[i] >= 0) || isinf(c))
			return ph_fail(err, PH_EINVAL, "histogram: layer %d (%s) has cost %g + %g; need finite values >= 0",
				       i, pb->names ? pb->names[i] : "?", pb->fwd_cost[i], pb->bwd_cost[i]);
	}
	return PH_OK;
}

/* Boundaries nearest to target[] that the cut points allow. */
static int nearest(const ph_partition_problem *pb, const int *target, int *first, ph_err *err)
{
	int n = pb->n, K = pb->stages;
	long *d = malloc(sizeof *d * (size_t)(K + 1) * (size_t)(n + 1));
	if (!d)
		return ph_fail(err, PH_ENOMEM, "histogram: out of memory for %d layers x %d stages", n, K);
#define D(s, i) d[(size_t)(s) * (size_t)(n + 1) + (size_t)(i)]
	for (int i = 0; i <= n; i++)
		D(K, i) = i == n ? 0 : LONG_MAX;
	for (int s = K - 1; s >= 0; s--)
		for (int i = 0; i <= n; i++) {
			long best = LONG_MAX;
			if (i < n && (s == 0) == (i == 0))
				for (int j = i + 1; j <= n; j++)
					if (can_end(pb, j) && D(s + 1, j) < best)
						best = D(s + 1, j);
			D(s, i) = best == LONG_MAX ? LONG_MAX : best + labs((long)i - target[s]);
		}
	first[0] = 0;
	for (int s = 0; s < K; s++) {
		int i = first[s], j = i + 1;
		long want = D(s, i) - labs((long)i - target[s]);
		while (!(can_end(pb, j) && D(s + 1, j) == want))
			j++;
		first[s + 1] = j;
	}
#undef D
	free(d);
	return PH_OK;
}

static int histogram_partition(const void *config, const ph_partition_problem *pb,
			       int *first, ph_err *warn, ph_err *err)
{
	int rc = check_problem(pb, err);
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
		if (target[s] > 0 && !can_end(pb, target[s]))
			banned = s;
	if (empty < 0 && banned < 0) {
		for (int s = 0; s <= K; s++)
			first[s] = target[s];
	} else {
		rc = nearest(pb, target, first, err);
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
