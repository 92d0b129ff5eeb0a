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
	dp->floor = calloc((size_t)pb->n + 1, sizeof *dp->floor);
	if (!dp->bt || !dp->dist || !dp->floor) {
		cuts_dp_free(dp);
		return ph_fail(err, PH_ENOMEM, "%s: out of memory for %d layers x %d stages", who, pb->n, pb->stages);
	}
	return PH_OK;
}

void cuts_dp_free(cuts_dp *dp)
{
	free(dp->bt);
	free(dp->dist);
	free(dp->floor);
	dp->bt = NULL;
	dp->dist = NULL;
	dp->floor = NULL;
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

/* The first j in [a, b] with floor[j] < best, or b + 1 (floor does not
 * increase with j). */
static int first_below(const double *floor, int a, int b, double best)
{
	int lo = a, hi = b + 1;
	while (lo < hi) {
		const int mid = lo + (hi - lo) / 2;
		if (floor[mid] < best)
			hi = mid;
		else
			lo = mid + 1;
	}
	return lo;
}

/*
 * AT(bt, s, i) = min over ends j of max(value(s, i, j), AT(bt, s + 1, j)).
 * The scan over j starts late and stops early, and the table is still
 * that of every j tried (only a value strictly below the best so far
 * changes it):
 * - it starts with a value in hand, from the end the next start (i + 1)
 *   took, which is usually at or near this one's;
 * - it skips the ends j whose floor[j], the least AT(bt, s + 1, j') over
 *   j' <= j, is not below that value: none of them can do better.  The
 *   floor does not increase with j, so they are a prefix, found by
 *   bisection;
 * - it stops where dp->stop says no later end can do better.
 * 20,002 layers into 64 stages: each pass scanned about n^2 / 2 ends;
 * now it scans those between the two bounds, near the balanced cut.
 */
double cuts_bottleneck(cuts_dp *dp, cuts_value_fn value)
{
	int n = dp->pb->n, K = dp->pb->stages;
	/* -inf: nothing left to take the max with; +inf: no way to finish. */
	for (int i = 0; i <= n; i++)
		AT(bt, K, i) = i == n ? -INFINITY : INFINITY;
	for (int s = K - 1; s >= 0; s--) {
		double low = INFINITY;
		for (int j = 0; j <= n; j++) {
			if (AT(bt, s + 1, j) < low)
				low = AT(bt, s + 1, j);
			dp->floor[j] = low;
		}
		int warm = -1; /* the end the previous start took */
		for (int i = n; i >= 0; i--) {
			double best = INFINITY;
			int took = -1;
			if (may_start(dp, s, i)) {
				if (warm > i && allowed(dp, s, i, warm) && AT(bt, s + 1, warm) < INFINITY) {
					best = fmax(value(dp->ctx, s, i, warm), AT(bt, s + 1, warm));
					took = warm;
				}
				for (int j = first_below(dp->floor, i + 1, n, best);
				     j <= n && !(dp->stop && dp->stop(dp->ctx, value, s, i, j, best)); j++)
					if (allowed(dp, s, i, j) && AT(bt, s + 1, j) < INFINITY) {
						double here = fmax(value(dp->ctx, s, i, j), AT(bt, s + 1, j));
						if (here < best) {
							best = here;
							took = j;
						}
					}
			}
			AT(bt, s, i) = best;
			if (took >= 0)
				warm = took;
		}
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
	/* The ends j are tried outward from the next stage's target t, where
	 * AT(dist, s + 1, j) >= |j - t| (its own term): each way stops once
	 * that bound reaches the best so far.  They start below the first end
	 * dp->stop rules out (found by bisection; any end it rules out would
	 * do, so this holds even where stop() is not monotone), and rightward
	 * stop() also ends the scan; leftward each end is checked alone (a
	 * stop at j says nothing of the ends before j), and it also stops
	 * once floor[j], the least AT(dist, s + 1, j') over j' <= j, reaches
	 * the best: a start far left of its target has a long way to go
	 * before the distance to the target alone does.  The last stage can
	 * only end at n.  The table is the full scan's. */
	for (int s = K - 1; s >= 0; s--) {
		double low = INFINITY; /* the dist table's longs, exact in a double below 2^53 */
		for (int j = 0; j <= n; j++) {
			if (AT(dist, s + 1, j) != LONG_MAX && (double)AT(dist, s + 1, j) < low)
				low = (double)AT(dist, s + 1, j);
			dp->floor[j] = low;
		}
		for (int i = 0; i <= n; i++) {
			long best = LONG_MAX;
			if (may_start(dp, s, i) && s + 1 == K) {
				if (allowed(dp, s, i, n))
					best = AT(dist, K, n);
			} else if (may_start(dp, s, i)) {
				int lo = i + 1, hi = n + 1; /* hi: an end stop() rules out, or n + 1 */
				while (dp->stop && lo < hi) {
					const int mid = lo + (hi - lo) / 2;
					if (dp->stop(dp->ctx, NULL, s, i, mid, INFINITY))
						hi = mid;
					else
						lo = mid + 1;
				}
				const long t = target[s + 1];
				int j0 = t > hi - 1 ? hi - 1 : (int)t;
				if (j0 < i + 1)
					j0 = i + 1;
				for (int j = j0; j <= n && !(dp->stop && dp->stop(dp->ctx, NULL, s, i, j, INFINITY)); j++) {
					if (j - t >= best)
						break;
					if (allowed(dp, s, i, j) && AT(dist, s + 1, j) < best)
						best = AT(dist, s + 1, j);
				}
				for (int j = j0 - 1; j >= i + 1; j--) {
					if (t - j >= best || dp->floor[j] >= (double)best)
						break;
					if (allowed(dp, s, i, j) && AT(dist, s + 1, j) < best)
						best = AT(dist, s + 1, j);
				}
			}
			AT(dist, s, i) = best == LONG_MAX ? LONG_MAX : best + labs((long)i - target[s]);
		}
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
