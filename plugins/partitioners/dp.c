/* SPDX-License-Identifier: MIT */
/*
 * dp: the exact balanced split (PipeDream's planner, restricted to one
 * pipeline).  A stage's time is its compute plus its communication:
 *
 *     time(stage) = sum (fwd + bwd cost)
 *                 + (act_bytes at its input boundary + at its output boundary)
 *                   / link_bytes_per_s              (when link_bytes_per_s > 0)
 *
 * and its memory is
 *
 *     mem(stage s) = sum param_bytes * state_factor + sum keep_bytes * in_flight[s]
 *
 * which must not exceed mem_limit[s] where that is > 0.  Among the splits
 * that fit, we minimise the slowest stage (the pipeline's throughput); among
 * those, the peak stage memory; among those, the distance to the uniform
 * layer split (sum of |boundary - uniform boundary|); then the earliest
 * boundaries.  Each criterion is one dynamic programme over (stage, first
 * layer), restricted by the ones before it: O(K n^2) at worst, and far
 * less where stop() below cuts a stage's scan short.
 *
 * When no split fits, the error names the stage that is furthest over its
 * limit in the split that minimises the worst overshoot, and by how much.
 */
#include <math.h>
#include <stdlib.h>

#include <pipehost/plugin.h>

#include "cuts.h"

static int check_problem(const ph_partition_problem *pb, ph_err *err)
{
	int rc = cuts_check(pb, "dp", err);
	if (!rc)
		rc = cuts_check_costs(pb, "dp", err);
	if (!rc)
		rc = cuts_check_values(pb, "dp", pb->param_bytes, "parameter bytes", err);
	if (!rc)
		rc = cuts_check_values(pb, "dp", pb->act_bytes, "activation bytes", err);
	if (!rc)
		rc = cuts_check_values(pb, "dp", pb->keep_bytes, "kept bytes", err);
	if (rc)
		return rc;
	if (!(pb->state_factor >= 0) || isinf(pb->state_factor) ||
	    !(pb->link_bytes_per_s >= 0))
		return ph_fail(err, PH_EINVAL, "dp: state_factor %g and link bandwidth %g must be >= 0",
			       pb->state_factor, pb->link_bytes_per_s);
	return PH_OK;
}

/* ------------------------------------------------------------------ */

typedef struct {
	const ph_partition_problem *pb;
	double *cost, *param, *keep; /* prefix sums, n+1 each */
	double tmax, mmax;           /* filters for the later passes */
	int pass;                    /* which criteria apply as filters */
} work;

enum { FIT = 1, TIME = 2, MEM = 4 };

/* Layers i..j-1 as one stage.  Each (s, i, j) always gives the same double,
 * so comparing against an optimum computed from the same call is exact. */
static double stage_time(const work *w, int i, int j)
{
	const ph_partition_problem *pb = w->pb;
	double t = w->cost[j] - w->cost[i];
	if (pb->link_bytes_per_s > 0) {
		double moved = (i > 0 ? pb->act_bytes[i - 1] : 0) + (j < pb->n ? pb->act_bytes[j - 1] : 0);
		t += moved / pb->link_bytes_per_s;
	}
	return t;
}

static double stage_mem(const work *w, int s, int i, int j)
{
	const ph_partition_problem *pb = w->pb;
	double flight = pb->in_flight ? pb->in_flight[s] : 1;
	return (w->param[j] - w->param[i]) * pb->state_factor + (w->keep[j] - w->keep[i]) * flight;
}

static double stage_limit(const work *w, int s)
{
	const ph_partition_problem *pb = w->pb;
	return pb->mem_limit && pb->mem_limit[s] > 0 ? pb->mem_limit[s] : INFINITY;
}

/* The values the passes minimise the largest of (cuts_value_fn). */
static double v_time(const void *w, int s, int i, int j) { return stage_time(w, i, j); }
static double v_mem(const void *w, int s, int i, int j) { return stage_mem(w, s, i, j); }

/* Memory over the limit (negative: under; -inf: no limit). */
static double v_over(const void *ctx, int s, int i, int j)
{
	const work *w = ctx;
	double lim = stage_limit(w, s);
	return isinf(lim) ? -INFINITY : stage_mem(w, s, i, j) - lim;
}

/* Whether stage s may be layers i..j-1 under the filters of this pass
 * (cuts_allowed_fn: the cut points are cuts.c's). */
static int past_filters(const work *w, int s, double time, double mem)
{
	return ((w->pass & FIT) && mem > stage_limit(w, s)) || ((w->pass & TIME) && time > w->tmax) ||
	       ((w->pass & MEM) && mem > w->mmax);
}

static int allowed(const void *ctx, int s, int i, int j)
{
	const work *w = ctx;
	return !past_filters(w, s, stage_time(w, i, j), stage_mem(w, s, i, j));
}

/* cuts_stop_fn: from end j on, a stage's compute (w->cost[j] - w->cost[i],
 * which its time only adds transfers to) and its memory only grow, each a
 * difference of prefix sums of values >= 0 (rounding is monotone too).  So
 * once either is past a filter, or past the best value found, no later end
 * helps.  Each pass is then O(K n x the longest stage worth trying), not
 * O(K n^2): 4096 layers into 64 stages took 20 s. */
static int stop(const void *ctx, cuts_value_fn value, int s, int i, int j, double best)
{
	const work *w = ctx;
	const ph_partition_problem *pb = w->pb;
	if (pb->in_flight && pb->in_flight[s] < 0)
		return 0; /* memory would not grow with j */
	double compute = w->cost[j] - w->cost[i], mem = stage_mem(w, s, i, j);
	/* allowed()'s filters, with compute as the time's lower bound */
	if (past_filters(w, s, compute, mem))
		return 1;
	if (value == v_time)
		return compute >= best;
	if (value == v_mem)
		return mem >= best;
	if (value == v_over)
		return v_over(w, s, i, j) >= best;
	return 0;
}

/* "3.2 GiB" */
static const char *human(double bytes, char *buf, size_t len)
{
	const char *unit[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	int u = 0;
	while (fabs(bytes) >= 1024 && u < 4)
		bytes /= 1024, u++;
	snprintf(buf, len, u ? "%.1f %s" : "%.0f %s", bytes, unit[u]);
	return buf;
}

/* No split fits: report the least bad one. */
static int explain_misfit(work *w, cuts_dp *dp, int *first, ph_err *err)
{
	const ph_partition_problem *pb = w->pb;
	w->pass = 0;
	double worst = cuts_bottleneck(dp, v_over);
	cuts_walk_bottleneck(dp, v_over, worst, first);
	int s = 0;
	for (int t = 0; t < pb->stages; t++)
		if (v_over(w, t, first[t], first[t + 1]) == worst) {
			s = t;
			break;
		}
	int a = first[s], b = first[s + 1] - 1;
	char need[32], over[32], lim[32];
	return ph_fail(err, PH_EINVAL, "dp: no split of %d layers into %d stages fits memory; at best stage %d "
		       "(layers %d..%d, %s..%s) needs %s, %s over its %s limit; raise [partition] memory, "
		       "add stages, or turn on recompute",
		       pb->n, pb->stages, s, a, b, pb->names ? pb->names[a] : "?", pb->names ? pb->names[b] : "?",
		       human(stage_mem(w, s, a, b + 1), need, sizeof need), human(worst, over, sizeof over),
		       human(stage_limit(w, s), lim, sizeof lim));
}

static int dp_partition(const void *config, const ph_partition_problem *pb,
			int *first, ph_err *warn, ph_err *err)
{
	int rc = check_problem(pb, err);
	if (rc)
		return rc;
	int n = pb->n, K = pb->stages;
	work w = { .pb = pb };
	cuts_dp dp = { .allowed = allowed, .stop = stop, .ctx = &w };
	w.cost = malloc(sizeof(double) * (size_t)(n + 1));
	w.param = malloc(sizeof(double) * (size_t)(n + 1));
	w.keep = malloc(sizeof(double) * (size_t)(n + 1));
	int *target = malloc(sizeof *target * (size_t)(K + 1));
	if (!w.cost || !w.param || !w.keep || !target) {
		rc = ph_fail(err, PH_ENOMEM, "dp: out of memory for %d layers x %d stages", n, K);
		goto out;
	}
	if ((rc = cuts_dp_init(&dp, pb, "dp", err)))
		goto out;
	w.cost[0] = w.param[0] = w.keep[0] = 0;
	for (int i = 0; i < n; i++) {
		w.cost[i + 1] = w.cost[i] + pb->fwd_cost[i] + pb->bwd_cost[i];
		w.param[i + 1] = w.param[i] + pb->param_bytes[i];
		w.keep[i + 1] = w.keep[i] + pb->keep_bytes[i];
	}
	cuts_uniform_target(n, K, target);

	w.pass = FIT;
	w.tmax = cuts_bottleneck(&dp, v_time);
	if (isinf(w.tmax)) {
		rc = explain_misfit(&w, &dp, first, err);
		goto out;
	}
	w.pass = FIT | TIME;
	w.mmax = cuts_bottleneck(&dp, v_mem);
	w.pass = FIT | TIME | MEM;
	rc = cuts_nearest(&dp, target, first, "dp", err);
out:
	cuts_dp_free(&dp);
	free(w.cost);
	free(w.param);
	free(w.keep);
	free(target);
	return rc;
}

static const ph_partitioner_ops dp_ops = {
	.head = PH_HEAD_NOOPT(ph_partitioner_ops, "dp",
			      "exact: least slowest stage (compute + boundary transfers) within memory limits"),
	.partition = dp_partition,
};

static const ph_partitioner_ops *const partitioners[] = { &dp_ops, NULL };
PH_PLUGIN(NULL, partitioners, NULL)
