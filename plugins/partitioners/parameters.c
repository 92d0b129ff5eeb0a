/*
 * parameters: balance parameter bytes, so that parameters, gradients and
 * optimizer state take about the same memory on every stage.
 *
 * Exact: a dynamic programme over (stage, first layer) finds the least
 * possible largest stage sum B* among contiguous, non-empty splits that
 * respect the cut points (O(K n^2); n is a few hundred layers at most).
 * Many splits usually reach B* (layers without parameters can move freely),
 * so a second pass picks among them the one nearest the uniform layer split
 * (least total |boundary - uniform boundary|), then the earliest
 * boundaries: deterministic, and with no parameters at all it is uniform.
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
		return ph_fail(err, PH_EINVAL, "parameters: need at least 1 layer and 1 stage (got %d layers, %d stages)",
			       pb->n, pb->stages);
	if (pb->stages > pb->n)
		return ph_fail(err, PH_EINVAL, "parameters: more stages (%d) than layers (%d); lower stages to %d or fewer",
			       pb->stages, pb->n, pb->n);
	int most = 1;
	for (int j = 1; j < pb->n; j++)
		most += can_end(pb, j);
	if (pb->stages > most)
		return ph_fail(err, PH_EINVAL, "parameters: more stages (%d) than allowed cut points allow (%d stages at most); lower stages or allow cuts",
			       pb->stages, most);
	if (!pb->param_bytes)
		return ph_fail(err, PH_EINVAL, "parameters: the host gave no parameter sizes");
	for (int i = 0; i < pb->n; i++)
		if (!(pb->param_bytes[i] >= 0) || isinf(pb->param_bytes[i]))
			return ph_fail(err, PH_EINVAL, "parameters: layer %d (%s) has parameter bytes %g; need a finite value >= 0",
				       i, pb->names ? pb->names[i] : "?", pb->param_bytes[i]);
	return PH_OK;
}

typedef struct {
	const ph_partition_problem *pb;
	double *prefix; /* prefix[i] = parameter bytes of layers 0..i-1 */
	double cap;     /* the second pass allows stage sums up to this */
	double *bt;     /* (K+1) x (n+1) tables */
	long *dist;
} work;

#define AT(tab, s, i) (w->tab[(size_t)(s) * (size_t)(w->pb->n + 1) + (size_t)(i)])

/* Parameter bytes of layers i..j-1: the same pair always gives the same
 * double, so comparing against B* (itself one such sum) is exact. */
static double sum(const work *w, int i, int j)
{
	return w->prefix[j] - w->prefix[i];
}

/* Whether stage s may start at i at all. */
static int may_start(const work *w, int s, int i)
{
	return i < w->pb->n && (s == 0) == (i == 0);
}

/* Pass 1: AT(bt, s, i) = least largest sum over stages s..K-1 from layer i. */
static double bottleneck(work *w)
{
	int n = w->pb->n, K = w->pb->stages;
	for (int i = 0; i <= n; i++)
		AT(bt, K, i) = i == n ? 0 : INFINITY;
	for (int s = K - 1; s >= 0; s--)
		for (int i = 0; i <= n; i++) {
			double best = INFINITY;
			if (may_start(w, s, i))
				for (int j = i + 1; j <= n; j++)
					if (can_end(w->pb, j)) {
						double here = fmax(sum(w, i, j), AT(bt, s + 1, j));
						if (here < best)
							best = here;
					}
			AT(bt, s, i) = best;
		}
	return AT(bt, 0, 0);
}

/* Pass 2: among splits with every stage <= cap, the one nearest target[]. */
static void nearest(work *w, const int *target, int *first)
{
	int n = w->pb->n, K = w->pb->stages;
	for (int i = 0; i <= n; i++)
		AT(dist, K, i) = i == n ? 0 : LONG_MAX;
	for (int s = K - 1; s >= 0; s--)
		for (int i = 0; i <= n; i++) {
			long best = LONG_MAX;
			if (may_start(w, s, i))
				for (int j = i + 1; j <= n && sum(w, i, j) <= w->cap; j++)
					if (can_end(w->pb, j) && AT(dist, s + 1, j) < best)
						best = AT(dist, s + 1, j);
			AT(dist, s, i) = best == LONG_MAX ? LONG_MAX : best + labs((long)i - target[s]);
		}
	first[0] = 0;
	for (int s = 0; s < K; s++) {
		int i = first[s], j = i + 1;
		long want = AT(dist, s, i) - labs((long)i - target[s]);
		while (!(can_end(w->pb, j) && sum(w, i, j) <= w->cap && AT(dist, s + 1, j) == want))
			j++;
		first[s + 1] = j;
	}
}

static int parameters_partition(const void *config, const ph_partition_problem *pb,
				int *first, ph_err *warn, ph_err *err)
{
	int rc = check_problem(pb, err);
	if (rc)
		return rc;
	int n = pb->n, K = pb->stages;
	size_t cells = (size_t)(K + 1) * (size_t)(n + 1);
	work w = { .pb = pb };
	w.prefix = malloc(sizeof *w.prefix * (size_t)(n + 1));
	w.bt = calloc(cells, sizeof *w.bt);
	w.dist = calloc(cells, sizeof *w.dist);
	int *target = malloc(sizeof *target * (size_t)(K + 1));
	if (!w.prefix || !w.bt || !w.dist || !target) {
		rc = ph_fail(err, PH_ENOMEM, "parameters: out of memory for %d layers x %d stages", n, K);
		goto out;
	}
	w.prefix[0] = 0;
	for (int i = 0; i < n; i++)
		w.prefix[i + 1] = w.prefix[i] + pb->param_bytes[i];
	for (int s = 0; s <= K; s++)
		target[s] = s * (n / K) + (s < n % K ? s : n % K);
	w.cap = bottleneck(&w);
	if (isinf(w.cap)) { /* check_problem() rules this out */
		rc = ph_fail(err, PH_EINTERNAL, "parameters: no split of %d layers into %d stages fits the cut points", n, K);
		goto out;
	}
	nearest(&w, target, first);
out:
	free(w.prefix);
	free(w.bt);
	free(w.dist);
	free(target);
	return rc;
}

static const ph_partitioner_ops parameters_ops = {
	.head = PH_HEAD_NOOPT(ph_partitioner_ops, "parameters",
			      "balance parameter bytes: least largest stage, exact (ties: nearest uniform)"),
	.partition = parameters_partition,
};

static const ph_partitioner_ops *const partitioners[] = { &parameters_ops, NULL };
PH_PLUGIN(NULL, partitioners, NULL)
