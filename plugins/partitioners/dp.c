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
 * boundaries.  Each criterion is one O(K n^2) dynamic programme over
 * (stage, first layer), restricted by the ones before it.
 *
 * When no split fits, the error names the stage that is furthest over its
 * limit in the split that minimises the worst overshoot, and by how much.
 */
#include <limits.h>
#include <math.h>
#include <stdlib.h>

#include <pipehost/plugin.h>

static int can_end(const ph_partition_problem *pb, int j)
{
	return j == pb->n || !pb->cut_after || pb->cut_after[j - 1];
}

static int finite_nonneg(const double *a, int n)
{
	for (int i = 0; i < n; i++)
		if (!(a[i] >= 0) || isinf(a[i]))
			return i;
	return -1;
}

static int check_problem(const ph_partition_problem *pb, ph_err *err)
{
	if (pb->n < 1 || pb->stages < 1)
		return ph_fail(err, PH_EINVAL, "dp: need at least 1 layer and 1 stage (got %d layers, %d stages)",
			       pb->n, pb->stages);
	if (pb->stages > pb->n)
		return ph_fail(err, PH_EINVAL, "dp: more stages (%d) than layers (%d); lower stages to %d or fewer",
			       pb->stages, pb->n, pb->n);
	int most = 1;
	for (int j = 1; j < pb->n; j++)
		most += can_end(pb, j);
	if (pb->stages > most)
		return ph_fail(err, PH_EINVAL, "dp: more stages (%d) than allowed cut points allow (%d stages at most); lower stages or allow cuts",
			       pb->stages, most);
	if (!pb->fwd_cost || !pb->bwd_cost || !pb->param_bytes || !pb->act_bytes || !pb->keep_bytes)
		return ph_fail(err, PH_EINVAL, "dp: the host gave no costs or sizes");
	const struct { const double *a; const char *what; } per_layer[] = {
		{ pb->fwd_cost, "forward cost" }, { pb->bwd_cost, "backward cost" },
		{ pb->param_bytes, "parameter bytes" }, { pb->act_bytes, "activation bytes" },
		{ pb->keep_bytes, "kept bytes" },
	};
	for (size_t k = 0; k < sizeof per_layer / sizeof per_layer[0]; k++) {
		int i = finite_nonneg(per_layer[k].a, pb->n);
		if (i >= 0)
			return ph_fail(err, PH_EINVAL, "dp: layer %d (%s) has %s %g; need a finite value >= 0",
				       i, pb->names ? pb->names[i] : "?", per_layer[k].what, per_layer[k].a[i]);
	}
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
	double *bt;                  /* (K+1) x (n+1) bottleneck table */
	long *dist;                  /* (K+1) x (n+1) distance table */
} work;

enum { FIT = 1, TIME = 2, MEM = 4 };

#define AT(tab, s, i) (w->tab[(size_t)(s) * (size_t)(w->pb->n + 1) + (size_t)(i)])

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

/* Memory over the limit (negative: under; -inf: no limit). */
static double stage_over(const work *w, int s, int i, int j)
{
	double lim = stage_limit(w, s);
	return isinf(lim) ? -INFINITY : stage_mem(w, s, i, j) - lim;
}

/* Whether stage s may be layers i..j-1 under the filters of this pass. */
static int allowed(const work *w, int s, int i, int j)
{
	if (!can_end(w->pb, j))
		return 0;
	if ((w->pass & FIT) && stage_mem(w, s, i, j) > stage_limit(w, s))
		return 0;
	if ((w->pass & TIME) && stage_time(w, i, j) > w->tmax)
		return 0;
	if ((w->pass & MEM) && stage_mem(w, s, i, j) > w->mmax)
		return 0;
	return 1;
}

static int may_start(const work *w, int s, int i)
{
	return i < w->pb->n && (s == 0) == (i == 0);
}

/* Least possible max over stages of value() among the splits the filters
 * allow; fills bt for walk_bottleneck().  `value`: time, memory, overshoot. */
typedef double (*value_fn)(const work *w, int s, int i, int j);

static double v_time(const work *w, int s, int i, int j) { return stage_time(w, i, j); }
static double v_mem(const work *w, int s, int i, int j) { return stage_mem(w, s, i, j); }

static double bottleneck(work *w, value_fn value)
{
	int n = w->pb->n, K = w->pb->stages;
	/* -inf: nothing left to take the max with; +inf: no way to finish. */
	for (int i = 0; i <= n; i++)
		AT(bt, K, i) = i == n ? -INFINITY : INFINITY;
	for (int s = K - 1; s >= 0; s--)
		for (int i = 0; i <= n; i++) {
			double best = INFINITY;
			if (may_start(w, s, i))
				for (int j = i + 1; j <= n; j++)
					if (allowed(w, s, i, j) && AT(bt, s + 1, j) < INFINITY) {
						double here = fmax(value(w, s, i, j), AT(bt, s + 1, j));
						if (here < best)
							best = here;
					}
			AT(bt, s, i) = best;
		}
	return AT(bt, 0, 0);
}

/* Walk bt: the earliest boundaries reaching the optimum `opt`. */
static void walk_bottleneck(const work *w, value_fn value, double opt, int *first)
{
	int n = w->pb->n, K = w->pb->stages;
	first[0] = 0;
	for (int s = 0; s < K; s++) {
		int i = first[s], j = i + 1;
		for (; j <= n; j++)
			if (allowed(w, s, i, j) && value(w, s, i, j) <= opt && AT(bt, s + 1, j) <= opt)
				break;
		first[s + 1] = j;
	}
}

/* Among the splits the filters allow, the nearest to target[], earliest. */
static void nearest(work *w, const int *target, int *first)
{
	int n = w->pb->n, K = w->pb->stages;
	for (int i = 0; i <= n; i++)
		AT(dist, K, i) = i == n ? 0 : LONG_MAX;
	for (int s = K - 1; s >= 0; s--)
		for (int i = 0; i <= n; i++) {
			long best = LONG_MAX;
			if (may_start(w, s, i))
				for (int j = i + 1; j <= n; j++)
					if (allowed(w, s, i, j) && AT(dist, s + 1, j) < best)
						best = AT(dist, s + 1, j);
			AT(dist, s, i) = best == LONG_MAX ? LONG_MAX : best + labs((long)i - target[s]);
		}
	first[0] = 0;
	for (int s = 0; s < K; s++) {
		int i = first[s], j = i + 1;
		long want = AT(dist, s, i) - labs((long)i - target[s]);
		while (!(allowed(w, s, i, j) && AT(dist, s + 1, j) == want))
			j++;
		first[s + 1] = j;
	}
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
static int explain_misfit(work *w, int *first, ph_err *err)
{
	const ph_partition_problem *pb = w->pb;
	w->pass = 0;
	double worst = bottleneck(w, stage_over);
	walk_bottleneck(w, stage_over, worst, first);
	int s = 0;
	for (int t = 0; t < pb->stages; t++)
		if (stage_over(w, t, first[t], first[t + 1]) == worst) {
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
	size_t cells = (size_t)(K + 1) * (size_t)(n + 1);
	work w = { .pb = pb };
	w.cost = malloc(sizeof(double) * (size_t)(n + 1));
	w.param = malloc(sizeof(double) * (size_t)(n + 1));
	w.keep = malloc(sizeof(double) * (size_t)(n + 1));
	w.bt = calloc(cells, sizeof *w.bt);
	w.dist = calloc(cells, sizeof *w.dist);
	int *target = malloc(sizeof *target * (size_t)(K + 1));
	if (!w.cost || !w.param || !w.keep || !w.bt || !w.dist || !target) {
		rc = ph_fail(err, PH_ENOMEM, "dp: out of memory for %d layers x %d stages", n, K);
		goto out;
	}
	w.cost[0] = w.param[0] = w.keep[0] = 0;
	for (int i = 0; i < n; i++) {
		w.cost[i + 1] = w.cost[i] + pb->fwd_cost[i] + pb->bwd_cost[i];
		w.param[i + 1] = w.param[i] + pb->param_bytes[i];
		w.keep[i + 1] = w.keep[i] + pb->keep_bytes[i];
	}
	for (int s = 0; s <= K; s++)
		target[s] = s * (n / K) + (s < n % K ? s : n % K);

	w.pass = FIT;
	w.tmax = bottleneck(&w, v_time);
	if (isinf(w.tmax)) {
		rc = explain_misfit(&w, first, err);
		goto out;
	}
	w.pass = FIT | TIME;
	w.mmax = bottleneck(&w, v_mem);
	w.pass = FIT | TIME | MEM;
	nearest(&w, target, first);
out:
	free(w.cost);
	free(w.param);
	free(w.keep);
	free(w.bt);
	free(w.dist);
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
