/* SPDX-License-Identifier: MIT */
/*
 * cuts: the cut points, problem checks and split-finding dynamic
 * programmes every partitioner plugin shares (see cuts.h).
 */
#include <limits.h>
#include <math.h>
#include <stdlib.h>

#include "cuts.h"

int cuts_can_end(const ph_partition_problem *pb, int j)
{
	return j == pb->n || !pb->cut_after || pb->cut_after[j - 1];
}

int cuts_check(const ph_partition_problem *pb, const char *who, ph_err *err)
{
	if (pb->n < 1 || pb->stages < 1)
		return ph_fail(err, PH_EINVAL, "%s: need at least 1 layer and 1 stage (got %d layers, %d stages)", who,
			       pb->n, pb->stages);
	if (pb->stages > pb->n)
		return ph_fail(err, PH_EINVAL, "%s: more stages (%d) than layers (%d); lower stages to %d or fewer", who,
			       pb->stages, pb->n, pb->n);
	int most = 1;
	for (int j = 1; j < pb->n; j++)
		most += cuts_can_end(pb, j);
	if (pb->stages > most)
		return ph_fail(err, PH_EINVAL,
			       "%s: more stages (%d) than allowed cut points allow (%d stages at most); lower stages or allow cuts",
			       who, pb->stages, most);
	return PH_OK;
}

static const char *name_of(const ph_partition_problem *pb, int i)
{
	return pb->names && pb->names[i] ? pb->names[i] : "?";
}

int cuts_check_values(const ph_partition_problem *pb, const char *who, const double *a, const char *what,
		      ph_err *err)
{
	if (!a)
		return ph_fail(err, PH_EINVAL, "%s: the host gave no %s", who, what);
	double total = 0;
	for (int i = 0; i < pb->n; i++) {
		if (!(a[i] >= 0) || isinf(a[i]))
			return ph_fail(err, PH_EINVAL, "%s: layer %d (%s) has %s %g; need a finite value >= 0", who, i,
				       name_of(pb, i), what, a[i]);
		total += a[i];
	}
	if (isinf(total))
		return ph_fail(err, PH_EINVAL, "%s: %s summed over the %d layers exceeds the largest double; give them "
			       "in a larger unit", who, what, pb->n);
	return PH_OK;
}

int cuts_check_costs(const ph_partition_problem *pb, const char *who, ph_err *err)
{
	int rc = cuts_check_values(pb, who, pb->fwd_cost, "forward cost", err);
	if (!rc)
		rc = cuts_check_values(pb, who, pb->bwd_cost, "backward cost", err);
	if (rc)
		return rc;
	double total = 0;
	for (int i = 0; i < pb->n; i++)
		total += pb->fwd_cost[i] + pb->bwd_cost[i];
	if (isinf(total))
		return ph_fail(err, PH_EINVAL, "%s: forward + backward cost summed over the %d layers exceeds the largest "
			       "double; give the costs in a larger unit", who, pb->n);
	return PH_OK;
}

void cuts_uniform_target(int n, int K, int *target)
{
	for (int s = 0; s <= K; s++)
		target[s] = s * (n / K) + (s < n % K ? s : n % K);
}

int cuts_dp_init(cuts_dp *dp, const ph_partition_problem *pb, const char *who, ph_err *err)
{
	size_t cells = (size_t)(pb->stages + 1) * (size_t)(pb->n + 1);
	dp->pb = pb;
	dp->bt = calloc(cells, sizeof *dp->bt);
	dp->dist = calloc(cells, sizeof *dp->dist);
	if (!dp->bt || !dp->dist) {
		cuts_dp_free(dp);
		return ph_fail(err, PH_ENOMEM, "%s: out of memory for %d layers x %d stages", who, pb->n, pb->stages);
	}
	return PH_OK;
}

void cuts_dp_free(cuts_dp *dp)
{
	free(dp->bt);
	free(dp->dist);
	dp->bt = NULL;
	dp->dist = NULL;
}

#define AT(tab, s, i) (dp->tab[(size_t)(s) * (size_t)(dp->pb->n + 1) + (size_t)(i)])

/* Whether stage s may start at layer i at all. */
static int may_start(const cuts_dp *dp, int s, int i)
{
	return i < dp->pb->n && (s == 0) == (i == 0);
}

/* Whether stage s may be layers i..j-1. */
static int allowed(const cuts_dp *dp, int s, int i, int j)
{
	return cuts_can_end(dp->pb, j) && (!dp->allowed || dp->allowed(dp->ctx, s, i, j));
}

double cuts_bottleneck(cuts_dp *dp, cuts_value_fn value)
{
	int n = dp->pb->n, K = dp->pb->stages;
	/* -inf: nothing left to take the max with; +inf: no way to finish. */
	for (int i = 0; i <= n; i++)
		AT(bt, K, i) = i == n ? -INFINITY : INFINITY;
	for (int s = K - 1; s >= 0; s--)
		for (int i = 0; i <= n; i++) {
			double best = INFINITY;
			if (may_start(dp, s, i))
				for (int j = i + 1; j <= n && !(dp->stop && dp->stop(dp->ctx, value, s, i, j, best)); j++)
					if (allowed(dp, s, i, j) && AT(bt, s + 1, j) < INFINITY) {
						double here = fmax(value(dp->ctx, s, i, j), AT(bt, s + 1, j));
						if (here < best)
							best = here;
					}
			AT(bt, s, i) = best;
		}
	return AT(bt, 0, 0);
}

void cuts_walk_bottleneck(const cuts_dp *dp, cuts_value_fn value, double opt, int *first)
{
	int n = dp->pb->n, K = dp->pb->stages;
	first[0] = 0;
	for (int s = 0; s < K; s++) {
		int i = first[s], j = i + 1;
		for (; j <= n; j++)
			if (allowed(dp, s, i, j) && value(dp->ctx, s, i, j) <= opt && AT(bt, s + 1, j) <= opt)
				break;
		first[s + 1] = j;
	}
}

int cuts_nearest(cuts_dp *dp, const int *target, int *first, const char *who, ph_err *err)
{
	int n = dp->pb->n, K = dp->pb->stages;
	/* AT(dist, s, i): least distance for stages s..K-1 when stage s starts at i. */
	for (int i = 0; i <= n; i++)
		AT(dist, K, i) = i == n ? 0 : LONG_MAX;
	for (int s = K - 1; s >= 0; s--)
		for (int i = 0; i <= n; i++) {
			long best = LONG_MAX;
			if (may_start(dp, s, i))
				for (int j = i + 1; j <= n && !(dp->stop && dp->stop(dp->ctx, NULL, s, i, j, INFINITY)); j++)
					if (allowed(dp, s, i, j) && AT(dist, s + 1, j) < best)
						best = AT(dist, s + 1, j);
			AT(dist, s, i) = best == LONG_MAX ? LONG_MAX : best + labs((long)i - target[s]);
		}
	if (AT(dist, 0, 0) == LONG_MAX)
		return ph_fail(err, PH_EINTERNAL, "%s: no split of %d layers into %d stages fits the cut points", who, n, K);
	/* Walk forward taking the earliest boundary that stays optimal. */
	first[0] = 0;
	for (int s = 0; s < K; s++) {
		int i = first[s], j = i + 1;
		long want = AT(dist, s, i) - labs((long)i - target[s]);
		while (!(allowed(dp, s, i, j) && AT(dist, s + 1, j) == want))
			j++;
		first[s + 1] = j;
	}
	return PH_OK;
}

int cuts_nearest_allowed(const ph_partition_problem *pb, const int *target, int *first, const char *who,
			 ph_err *err)
{
	cuts_dp dp = { 0 };
	int rc = cuts_dp_init(&dp, pb, who, err);
	if (rc == PH_OK)
		rc = cuts_nearest(&dp, target, first, who, err);
	cuts_dp_free(&dp);
	return rc;
}
