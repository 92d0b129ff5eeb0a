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
 * Each partitioner is one self-contained file, so any of them doubles as an
 * example of an out-of-tree plugin.
 */
#include <limits.h>
#include <stdlib.h>

#include <pipehost/plugin.h>

/* May a stage end just before layer j (i.e. after layer j-1)? */
static int can_end(const ph_partition_problem *pb, int j)
{
	return j == pb->n || !pb->cut_after || pb->cut_after[j - 1];
}

/* Enough layers and cut points for the stages asked for? */
static int check_problem(const ph_partition_problem *pb, ph_err *err)
{
	if (pb->n < 1 || pb->stages < 1)
		return ph_fail(err, PH_EINVAL, "uniform: need at least 1 layer and 1 stage (got %d layers, %d stages)",
			       pb->n, pb->stages);
	if (pb->stages > pb->n)
		return ph_fail(err, PH_EINVAL, "uniform: more stages (%d) than layers (%d); lower stages to %d or fewer",
			       pb->stages, pb->n, pb->n);
	int most = 1;
	for (int j = 1; j < pb->n; j++)
		most += can_end(pb, j);
	if (pb->stages > most)
		return ph_fail(err, PH_EINVAL, "uniform: more stages (%d) than allowed cut points allow (%d stages at most); lower stages or allow cuts",
			       pb->stages, most);
	return PH_OK;
}

/* Boundaries nearest to target[] (see the top), allowed by the cuts. */
static int nearest(const ph_partition_problem *pb, const int *target, int *first, ph_err *err)
{
	int n = pb->n, K = pb->stages;
	/* d[s*(n+1)+i]: least distance for stages s..K-1 when stage s starts at i. */
	long *d = malloc(sizeof *d * (size_t)(K + 1) * (size_t)(n + 1));
	if (!d)
		return ph_fail(err, PH_ENOMEM, "uniform: out of memory for %d layers x %d stages", n, K);
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
	int rc = PH_OK;
	if (D(0, 0) == LONG_MAX) {
		rc = ph_fail(err, PH_EINTERNAL, "uniform: no split of %d layers into %d stages fits the cut points", n, K);
	} else {
		/* Walk forward taking the earliest boundary that stays optimal. */
		first[0] = 0;
		for (int s = 0; s < K; s++) {
			int i = first[s], j = i + 1;
			long want = D(s, i) - labs((long)i - target[s]);
			while (!(can_end(pb, j) && D(s + 1, j) == want))
				j++;
			first[s + 1] = j;
		}
	}
#undef D
	free(d);
	return rc;
}

static int uniform_partition(const void *config, const ph_partition_problem *pb,
			     int *first, ph_err *warn, ph_err *err)
{
	int rc = check_problem(pb, err);
	if (rc)
		return rc;
	int n = pb->n, K = pb->stages;
	int *target = malloc(sizeof *target * (size_t)(K + 1));
	if (!target)
		return ph_fail(err, PH_ENOMEM, "uniform: out of memory");
	for (int s = 0; s <= K; s++)
		target[s] = s * (n / K) + (s < n % K ? s : n % K);
	rc = nearest(pb, target, first, err);
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
