/* SPDX-License-Identifier: MIT */
/*
 * Partitioner plugins: hand cases for each rule, the cut-point contract
 * (a stage only ends where cut_after allows, every stage non-empty, or a
 * clear error), and brute force over every contiguous split for the exact
 * ones (parameters, dp, and uniform under cut points).
 *
 * The plugins are dlopen()ed from $PH_PARTITIONER_DIR (default
 * plugins/partitioners/.libs), exactly as the host loads them; configs are
 * filled through the host's option parser.
 */
#include <check.h>
#include <dirent.h>
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pipehost/plugin.h>
#include "options.h"

#include "plugin-harness.h"
#include "unit-harness.h"

#define MAXN 64
#define MAXK 16

static void load_plugins(void)
{
	load_plugins_from("PH_PARTITIONER_DIR", "plugins/partitioners/.libs", PLUGIN_PARTITIONERS);
}

static const ph_partitioner_ops *find(const char *name)
{
	return (const ph_partitioner_ops *)find_head("partitioner", name);
}

/* ------------------------------------------------------------------ */
/* A problem with every per-layer array, defaults a test overrides.     */

typedef struct {
	int n, K;
	double fwd[MAXN], bwd[MAXN], par[MAXN], act[MAXN], keep[MAXN];
	char namebuf[MAXN][16];
	const char *names[MAXN], *types[MAXN];
	uint8_t cut[MAXN];
	double lim[MAXK];
	int flight[MAXK];
	double state_factor, link;
	ph_partition_problem pb;
	/* the config the host would fill from the option table */
	_Alignas(16) unsigned char cfg[4096];
	const ph_partitioner_ops *ops;
} fixture;

static fixture F;

static void fx(const char *name, int n, int K)
{
	memset(&F, 0, sizeof F);
	REQUIRE(n <= MAXN && K <= MAXK, "fixture too small for n=%d K=%d", n, K);
	F.n = n, F.K = K;
	for (int i = 0; i < n; i++) {
		F.fwd[i] = 1, F.bwd[i] = 2, F.par[i] = 1, F.act[i] = 1, F.keep[i] = 1;
		snprintf(F.namebuf[i], sizeof F.namebuf[i], "L%d", i);
		F.names[i] = F.namebuf[i];
		F.types[i] = "dense";
		F.cut[i] = 1;
	}
	for (int s = 0; s < K; s++)
		F.flight[s] = 1;
	F.state_factor = 1;
	F.ops = find(name);
	REQUIRE(F.ops->head.config_size <= sizeof F.cfg, "%s: config too big", name);
	ph_err err = { "" };
	REQUIRE(ph_options_defaults(F.ops->head.options, F.cfg, &err) == PH_OK, "%s", err.msg);
}

static void set(const char *key, const char *value)
{
	ph_err err = { "" };
	REQUIRE(ph_options_set(F.ops->head.options, F.cfg, key, value, &err) == PH_OK, "%s", err.msg);
}

/* Only cut after the listed layers (-1 ends the list). */
static void cuts_only(const int *after)
{
	memset(F.cut, 0, sizeof F.cut);
	for (; *after >= 0; after++)
		F.cut[*after] = 1;
}

static ph_err W, E; /* the last call's warning and error */
static int FIRST[MAXK + 1];

/* Run the fixture's partitioner; on success check the split's contract. */
static int run(void)
{
	F.pb = (ph_partition_problem){
		.n = F.n, .stages = F.K, .fwd_cost = F.fwd, .bwd_cost = F.bwd, .param_bytes = F.par,
		.act_bytes = F.act, .keep_bytes = F.keep, .names = F.names, .types = F.types,
		.cut_after = F.cut, .mem_limit = F.lim, .in_flight = F.flight,
		.state_factor = F.state_factor, .link_bytes_per_s = F.link,
	};
	memset(&W, 0, sizeof W);
	memset(&E, 0, sizeof E);
	for (int s = 0; s <= MAXK; s++)
		FIRST[s] = -7;
	int rc = F.ops->partition(F.cfg, &F.pb, FIRST, &W, &E);
	if (rc == PH_OK) {
		REQUIRE(FIRST[0] == 0 && FIRST[F.K] == F.n, "%s: first[0]=%d first[K]=%d",
			      F.ops->head.name, FIRST[0], FIRST[F.K]);
		for (int s = 0; s < F.K; s++)
			REQUIRE(FIRST[s] < FIRST[s + 1], "%s: stage %d is empty", F.ops->head.name, s);
		for (int s = 1; s < F.K; s++)
			REQUIRE(F.cut[FIRST[s] - 1], "%s: stage %d starts at %d, no cut allowed after %d",
				      F.ops->head.name, s, FIRST[s], FIRST[s] - 1);
		REQUIRE(E.msg[0] == 0, "%s: succeeded with error text \"%s\"", F.ops->head.name, E.msg);
	} else {
		REQUIRE(E.msg[0], "%s failed (%d) without a message", F.ops->head.name, rc);
	}
	return rc;
}

/* "5,5,4" */
static const char *sizes(void)
{
	static char s[512];
	size_t len = 0;
	s[0] = 0;
	for (int k = 0; k < F.K; k++)
		len += snprintf(s + len, sizeof s - len, "%s%d", k ? "," : "", FIRST[k + 1] - FIRST[k]);
	return s;
}

#define ASSERT_SPLIT(want)                                                        \
	do {                                                                      \
		REQUIRE(run() == PH_OK, "%s: %s", F.ops->head.name, E.msg); \
		ck_assert_str_eq(sizes(), want);                                  \
	} while (0)

#define ASSERT_FAILS(substr)                                                      \
	do {                                                                      \
		REQUIRE(run() != PH_OK, "%s succeeded: %s", F.ops->head.name, sizes()); \
		REQUIRE(strstr(E.msg, substr), "error \"%s\" lacks \"%s\"", E.msg, substr); \
	} while (0)

static unsigned long long rng_state;
static unsigned rnd(unsigned n) /* 0..n-1, deterministic */
{
	rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
	return (unsigned)(rng_state >> 33) % n;
}

/* ------------------------------------------------------------------ */
/* Brute force: every contiguous split the cut points allow.             */

typedef void (*visit_fn)(const int *first);

static void enumerate_from(int *first, int s, visit_fn visit)
{
	if (s == F.K) {
		visit(first);
		return;
	}
	for (int j = first[s] + 1; j <= F.n; j++) {
		if (j < F.n && !F.cut[j - 1])
			continue;
		if ((s == F.K - 1) != (j == F.n))
			continue;
		first[s + 1] = j;
		enumerate_from(first, s + 1, visit);
	}
}

static void enumerate(visit_fn visit)
{
	int first[MAXK + 1] = { 0 };
	enumerate_from(first, 0, visit);
}

static int uniform_target(int s)
{
	return s * (F.n / F.K) + (s < F.n % F.K ? s : F.n % F.K);
}

static long distance(const int *first)
{
	long d = 0;
	for (int s = 1; s < F.K; s++)
		d += labs((long)first[s] - uniform_target(s));
	return d;
}

/* Best split under a lexicographic score; the earliest split wins ties
 * because enumeration runs in lexicographic order. */
#define NSCORE 3
static double best_score[NSCORE];
static int best_first[MAXK + 1], best_found;
static void (*score_fn)(const int *first, double *score); /* NaN: infeasible */

static void keep_best(const int *first)
{
	double sc[NSCORE];
	score_fn(first, sc);
	if (isnan(sc[0]))
		return;
	int better = !best_found;
	for (int k = 0; k < NSCORE && !better; k++) {
		if (sc[k] < best_score[k])
			better = 1;
		else if (sc[k] > best_score[k])
			break;
	}
	if (better) {
		best_found = 1;
		memcpy(best_score, sc, sizeof sc);
		memcpy(best_first, first, sizeof best_first);
	}
}

static void brute(void (*fn)(const int *, double *))
{
	score_fn = fn;
	best_found = 0;
	enumerate(keep_best);
}

static int max_stages(void)
{
	int most = 1;
	for (int j = 1; j < F.n; j++)
		most += F.cut[j - 1];
	return most;
}

static void assert_brute_match(const char *what)
{
	REQUIRE(best_found, "%s: brute force found no split", what);
	for (int s = 0; s <= F.K; s++)
		REQUIRE(FIRST[s] == best_first[s], "%s n=%d K=%d: stage %d starts at %d, brute force says %d",
			      what, F.n, F.K, s, FIRST[s], best_first[s]);
}

/* ------------------------------------------------------------------ */

START_TEST(test_heads)
{
	const char *names[] = { "uniform", "parameters", "histogram", "type", "dp", "explicit" };
	for (int i = 0; i < 6; i++) {
		const ph_partitioner_ops *o = find(names[i]);
		check_ops_head(&o->head, sizeof(ph_partitioner_ops));
		ck_assert_ptr_nonnull(o->partition);
	}
}
END_TEST

START_TEST(test_uniform)
{
	fx("uniform", 38, 8);
	ASSERT_SPLIT("5,5,5,5,5,5,4,4");
	ck_assert_str_eq(W.msg, "");
	fx("uniform", 10, 3);
	ASSERT_SPLIT("4,3,3");
	fx("uniform", 5, 5);
	ASSERT_SPLIT("1,1,1,1,1");
	fx("uniform", 7, 1);
	ASSERT_SPLIT("7");
	fx("uniform", 1, 1);
	ASSERT_SPLIT("1");
}
END_TEST

START_TEST(test_uniform_cuts)
{
	/* Wanted boundary 4; allowed 3 and 6: 3 is nearer. */
	fx("uniform", 8, 2);
	cuts_only((int[]){ 2, 5, -1 });
	ASSERT_SPLIT("3,5");
	ck_assert_ptr_nonnull(strstr(W.msg, "stage 1 starts at layer 3 instead of 4"));
	/* Allowed 3 and 5, equally near: the earlier one. */
	fx("uniform", 8, 2);
	cuts_only((int[]){ 2, 4, -1 });
	ASSERT_SPLIT("3,5");
	/* Only block ends (every 3rd layer) may be cut: 4 and 8 are not. */
	fx("uniform", 12, 3);
	cuts_only((int[]){ 2, 5, 8, 11, -1 });
	ASSERT_SPLIT("3,6,3");
	cuts_only((int[]){ 3, 7, -1 });
	ASSERT_SPLIT("4,4,4");
	ck_assert_str_eq(W.msg, "");
}
END_TEST

START_TEST(test_uniform_impossible)
{
	fx("uniform", 10, 5);
	cuts_only((int[]){ 2, 6, -1 });
	ASSERT_FAILS("uniform: more stages (5) than allowed cut points allow (3 stages at most); lower stages or allow cuts");
	fx("uniform", 4, 5);
	ASSERT_FAILS("more stages (5) than layers (4)");
}
END_TEST

/* Under random cut points, uniform is the nearest allowed split. */
static void score_uniform(const int *first, double *sc)
{
	sc[0] = (double)distance(first), sc[1] = sc[2] = 0;
}

START_TEST(test_uniform_brute)
{
	rng_state = 1;
	for (int t = 0; t < 500; t++) {
		int n = 1 + rnd(12), K = 1 + rnd(n < 5 ? n : 5);
		fx("uniform", n, K);
		for (int i = 0; i < n; i++)
			F.cut[i] = rnd(3) != 0;
		if (K > max_stages()) {
			ASSERT_FAILS("allowed cut points allow");
			continue;
		}
		REQUIRE(run() == PH_OK, "%s", E.msg);
		brute(score_uniform);
		assert_brute_match("uniform");
		REQUIRE((W.msg[0] != 0) == (best_score[0] != 0), "uniform: warning \"%s\" at distance %g", W.msg, best_score[0]);
	}
}
END_TEST

static void set_params(const double *p, int n)
{
	for (int i = 0; i < n; i++)
		F.par[i] = p[i];
}

START_TEST(test_parameters)
{
	fx("parameters", 5, 2);
	set_params((double[]){ 1, 1, 1, 1, 4 }, 5);
	ASSERT_SPLIT("4,1");
	fx("parameters", 6, 2);
	set_params((double[]){ 5, 1, 1, 1, 1, 1 }, 6);
	ASSERT_SPLIT("1,5");
	fx("parameters", 8, 2);
	set_params((double[]){ 3, 1, 1, 1, 1, 1, 1, 3 }, 8);
	ASSERT_SPLIT("4,4");
	/* B* = 8; of the splits reaching it, the one nearest 4,4,4. */
	fx("parameters", 12, 3);
	set_params((double[]){ 4, 4, 4, 1, 1, 1, 1, 1, 1, 1, 1, 1 }, 12);
	ASSERT_SPLIT("2,5,5");
	/* No parameters at all (activations, norms): the uniform split. */
	fx("parameters", 38, 8);
	memset(F.par, 0, sizeof F.par);
	ASSERT_SPLIT("5,5,5,5,5,5,4,4");
	/* An embedding much larger than the rest gets a stage of its own. */
	fx("parameters", 10, 3);
	set_params((double[]){ 100, 10, 10, 10, 10, 10, 10, 10, 10, 100 }, 10);
	ASSERT_SPLIT("1,8,1");
}
END_TEST

START_TEST(test_parameters_errors)
{
	fx("parameters", 6, 4);
	cuts_only((int[]){ 2, -1 });
	ASSERT_FAILS("parameters: more stages (4) than allowed cut points allow (2 stages at most)");
	fx("parameters", 3, 2);
	F.par[1] = -1;
	ASSERT_FAILS("layer 1 (L1)");
	fx("parameters", 3, 2);
	F.par[2] = NAN;
	ASSERT_FAILS("layer 2 (L2)");
}
END_TEST

static void score_parameters(const int *first, double *sc)
{
	double worst = 0;
	for (int s = 0; s < F.K; s++) {
		double sum = 0;
		for (int i = first[s]; i < first[s + 1]; i++)
			sum += F.par[i];
		worst = fmax(worst, sum);
	}
	sc[0] = worst, sc[1] = (double)distance(first), sc[2] = 0;
}

START_TEST(test_parameters_brute)
{
	rng_state = 2;
	for (int t = 0; t < 1000; t++) {
		int n = 1 + rnd(12), K = 1 + rnd(n < 5 ? n : 5);
		fx("parameters", n, K);
		for (int i = 0; i < n; i++) {
			F.par[i] = rnd(4) ? rnd(50) : 0;
			F.cut[i] = rnd(4) != 0;
		}
		if (K > max_stages()) {
			ASSERT_FAILS("allowed cut points allow");
			continue;
		}
		REQUIRE(run() == PH_OK, "%s", E.msg);
		brute(score_parameters);
		assert_brute_match("parameters");
	}
}
END_TEST

static void set_costs(const double *c, int n)
{
	for (int i = 0; i < n; i++)
		F.fwd[i] = c[i], F.bwd[i] = 0;
}

START_TEST(test_histogram)
{
	/* Equal costs: layer i to floor((i+1) * K / n), capped at K-1. */
	fx("histogram", 8, 4);
	ASSERT_SPLIT("1,2,2,3");
	ck_assert_str_eq(W.msg, "");
	fx("histogram", 6, 2);
	set_costs((double[]){ 1, 1, 1, 3, 1, 1 }, 6);
	ASSERT_SPLIT("3,3");
	/* One layer holds 10/13 of the cost: stage 0 comes out empty. */
	fx("histogram", 4, 2);
	set_costs((double[]){ 10, 1, 1, 1 }, 4);
	ASSERT_SPLIT("1,3");
	ck_assert_ptr_nonnull(strstr(W.msg, "stage 0 came out empty"));
	ck_assert_ptr_nonnull(strstr(W.msg, "dp"));
	/* All costs zero: every layer counts the same. */
	fx("histogram", 8, 4);
	memset(F.fwd, 0, sizeof F.fwd);
	memset(F.bwd, 0, sizeof F.bwd);
	ASSERT_SPLIT("1,2,2,3");
	/* A forbidden cut moves the boundary, with a warning. */
	fx("histogram", 6, 2);
	cuts_only((int[]){ 3, -1 });
	ASSERT_SPLIT("4,2");
	ck_assert_ptr_nonnull(strstr(W.msg, "cut points forbid"));
	fx("histogram", 6, 3);
	cuts_only((int[]){ 1, -1 });
	ASSERT_FAILS("histogram: more stages (3) than allowed cut points allow (2 stages at most)");
}
END_TEST

/* Lingvo's PartitionSequentialLayers, written down independently: layer i
 * goes to stage min(floor(c_i * K), K - 1), c_i the cost fraction of layers
 * 0..i.  Fills first[] and returns 1 if no stage is empty, else 0. */
static int lingvo_reference(const double *cost, int n, int K, int *first)
{
	double total = 0, run_sum = 0;
	for (int i = 0; i < n; i++)
		total += cost[i];
	int count[MAXK] = { 0 };
	for (int i = 0; i < n; i++) {
		run_sum += cost[i];
		int s = (int)floor(run_sum / total * K);
		count[s < K - 1 ? s : K - 1]++;
	}
	first[0] = 0;
	for (int s = 0; s < K; s++) {
		if (count[s] == 0)
			return 0;
		first[s + 1] = first[s] + count[s];
	}
	return 1;
}

/* On random costs: where the rule leaves no stage empty, the plugin gives
 * exactly its split (and no warning); where it does, a split with no empty
 * stage (run() checks) and a warning that says why and suggests dp. */
START_TEST(test_histogram_lingvo_random)
{
	rng_state = 12345;
	int agree = 0, fallback = 0;
	for (int trial = 0; trial < 2000; trial++) {
		int n = 1 + (int)rnd(12), K = 1 + (int)rnd(n < 5 ? n : 5);
		fx("histogram", n, K);
		double cost[MAXN];
		for (int i = 0; i < n; i++)
			cost[i] = rnd(4) == 0 ? 1 + rnd(1000) : 1 + rnd(20); /* some heavy layers empty stages */
		set_costs(cost, n);
		int want[MAXK + 1];
		int clean = lingvo_reference(cost, n, K, want);
		REQUIRE(run() == PH_OK, "histogram failed: %s", E.msg);
		if (clean) {
			for (int s = 0; s <= K; s++)
				REQUIRE(FIRST[s] == want[s], "trial %d: stage %d starts at %d, Lingvo's rule says %d", trial, s,
					FIRST[s], want[s]);
			REQUIRE(W.msg[0] == 0, "trial %d: warning on a clean split: %s", trial, W.msg);
			agree++;
		} else {
			REQUIRE(strstr(W.msg, "empty") && strstr(W.msg, "dp"), "trial %d: no warning: '%s'", trial, W.msg);
			fallback++;
		}
	}
	/* both branches exercised */
	REQUIRE(agree > 500 && fallback > 100, "agree %d, fallback %d", agree, fallback);
}
END_TEST

START_TEST(test_type)
{
	fx("type", 14, 4);
	set("regex", "^transformer$");
	F.types[0] = "embedding";
	for (int i = 1; i <= 12; i++)
		F.types[i] = "transformer";
	F.types[13] = "head";
	ASSERT_SPLIT("4,3,3,4");
	ck_assert_str_eq(W.msg, "");
	/* Unmatched layers between blocks stay with the block before them. */
	fx("type", 10, 2);
	set("regex", "block");
	const char *t[] = { "emb", "block", "norm", "block", "norm", "block", "norm", "block", "norm", "head" };
	memcpy(F.types, t, sizeof t);
	ASSERT_SPLIT("5,5");
	/* A cut point moves a boundary to the nearest allowed one. */
	F.cut[4] = 0;
	ASSERT_SPLIT("4,6");
	ck_assert_ptr_nonnull(strstr(W.msg, "stage 1"));
	/* Fewer matches than stages; no match at all; a broken regex. */
	fx("type", 10, 2);
	set("regex", "block");
	memcpy(F.types, t, sizeof t);
	F.K = 5;
	ASSERT_FAILS("4 layers of type matching 'block', fewer than the 5 stages");
	set("regex", "conv");
	F.K = 2;
	ASSERT_FAILS("0 layers");
	set("regex", "(");
	ASSERT_FAILS("does not compile");
	/* regex is required: the defaults leave it empty. */
	fx("type", 4, 2);
	ASSERT_FAILS("set regex");
}
END_TEST

START_TEST(test_explicit)
{
	fx("explicit", 12, 4);
	set("bounds", "0,4,7,10");
	ASSERT_SPLIT("4,3,3,2");
	set("bounds", "0,4,7");
	ASSERT_FAILS("bounds lists 3 stages but there are 4");
	set("bounds", "1,4,7,10");
	ASSERT_FAILS("must start at 0");
	set("bounds", "0,7,4,10");
	ASSERT_FAILS("must increase");
	set("bounds", "0,4,7,12");
	ASSERT_FAILS("stage 3 starts at layer 12, but the model has layers 0..11 only");
	set("bounds", "0,4,7,10");
	F.cut[6] = 0;
	ASSERT_FAILS("stage 2 starts at layer 7 (L7), but the model may not be cut after layer 6 (L6)");
	fx("explicit", 12, 4);
	ASSERT_FAILS("set bounds");
}
END_TEST

/* ------------------------------------------------------------------ */
/* dp                                                                    */

static double st_time(int i, int j)
{
	double t = 0;
	for (int k = i; k < j; k++)
		t += F.fwd[k] + F.bwd[k];
	if (F.link > 0)
		t += ((i > 0 ? F.act[i - 1] : 0) + (j < F.n ? F.act[j - 1] : 0)) / F.link;
	return t;
}

static double st_mem(int s, int i, int j)
{
	double p = 0, k = 0;
	for (int l = i; l < j; l++)
		p += F.par[l], k += F.keep[l];
	return p * F.state_factor + k * F.flight[s];
}

static void score_dp(const int *first, double *sc)
{
	double t = 0, m = 0;
	for (int s = 0; s < F.K; s++) {
		double mem = st_mem(s, first[s], first[s + 1]);
		if (F.lim[s] > 0 && mem > F.lim[s]) {
			sc[0] = NAN;
			return;
		}
		t = fmax(t, st_time(first[s], first[s + 1]));
		m = fmax(m, mem);
	}
	sc[0] = t, sc[1] = m, sc[2] = (double)distance(first);
}

/* Least worst overshoot, for the infeasible report. */
static void score_over(const int *first, double *sc)
{
	double worst = -INFINITY;
	for (int s = 0; s < F.K; s++)
		if (F.lim[s] > 0)
			worst = fmax(worst, st_mem(s, first[s], first[s + 1]) - F.lim[s]);
	sc[0] = worst, sc[1] = sc[2] = 0;
}

START_TEST(test_dp_hand)
{
	/* Compute only: 1,1,1,1,4 into 2 -> slowest stage 4. */
	fx("dp", 5, 2);
	set_costs((double[]){ 1, 1, 1, 1, 4 }, 5);
	ASSERT_SPLIT("4,1");
	/* A huge activation after layer 1 makes that cut the worst one. */
	fx("dp", 4, 2);
	set_costs((double[]){ 1, 1, 1, 1 }, 4);
	F.act[1] = 100;
	F.link = 1;
	ASSERT_SPLIT("1,3");
	/* Memory: stage 0 keeps 4 micro-batches, so it gets fewer layers. */
	fx("dp", 8, 2);
	for (int i = 0; i < 8; i++)
		F.fwd[i] = 1, F.bwd[i] = 0, F.par[i] = 0, F.keep[i] = 1;
	F.flight[0] = 4, F.flight[1] = 1;
	F.lim[0] = 12;
	ASSERT_SPLIT("3,5");
	/* Equal time either way; the split with less peak memory wins. */
	fx("dp", 4, 2);
	for (int i = 0; i < 4; i++)
		F.fwd[i] = i == 1 || i == 2 ? 0 : 1, F.bwd[i] = 0, F.keep[i] = 0;
	F.par[0] = 5, F.par[1] = 1, F.par[2] = 9, F.par[3] = 0;
	ASSERT_SPLIT("2,2");
	F.par[2] = 1, F.par[1] = 9;
	ASSERT_SPLIT("1,3");
}
END_TEST

START_TEST(test_dp_infeasible)
{
	fx("dp", 4, 2);
	for (int i = 0; i < 4; i++)
		F.par[i] = 1 << 30, F.keep[i] = 0; /* 1 GiB each */
	F.lim[0] = F.lim[1] = 1.5 * (1 << 30);
	ASSERT_FAILS("at best stage 0 (layers 0..1, L0..L1) needs 2.0 GiB, 512.0 MiB over its 1.5 GiB limit");
	ck_assert_ptr_nonnull(strstr(E.msg, "fits memory"));
}
END_TEST

START_TEST(test_dp_brute)
{
	static const double links[] = { 0, 1, 2, 4, 0.5 };
	rng_state = 3;
	int feasible = 0, infeasible = 0;
	for (int t = 0; t < 1000; t++) {
		int n = 1 + rnd(12), K = 1 + rnd(n < 5 ? n : 5);
		fx("dp", n, K);
		/* Integers and powers of two keep every sum exact, so the
		 * brute force and the plugin agree on ties bit for bit. */
		double total_mem = 0;
		F.state_factor = (double)rnd(4);
		F.link = links[rnd(5)];
		for (int i = 0; i < n; i++) {
			F.fwd[i] = rnd(20), F.bwd[i] = rnd(3) ? rnd(40) : 0;
			F.par[i] = rnd(3) ? rnd(50) : 0;
			F.act[i] = rnd(30), F.keep[i] = rnd(10);
			F.cut[i] = rnd(5) != 0;
			total_mem += F.par[i] * F.state_factor + F.keep[i] * K;
		}
		for (int s = 0; s < K; s++) {
			F.flight[s] = 1 + rnd(K);
			F.lim[s] = rnd(3) ? 1 + rnd((unsigned)(total_mem * 2 / K) + 1) : 0;
		}
		if (K > max_stages()) {
			ASSERT_FAILS("allowed cut points allow");
			continue;
		}
		int rc = run();
		brute(score_dp);
		if (best_found) {
			REQUIRE(rc == PH_OK, "case %d: dp failed but a split fits: %s", t, E.msg);
			assert_brute_match("dp");
			feasible++;
		} else {
			REQUIRE(rc == PH_EINVAL, "case %d: dp returned a split but none fits", t);
			brute(score_over);
			int s = 0;
			while (st_mem(s, best_first[s], best_first[s + 1]) - F.lim[s] != best_score[0] ||
			       !(F.lim[s] > 0))
				s++;
			char want[64];
			snprintf(want, sizeof want, "at best stage %d (layers %d..%d,", s, best_first[s],
				 best_first[s + 1] - 1);
			REQUIRE(strstr(E.msg, want), "case %d: \"%s\" lacks \"%s\"", t, E.msg, want);
			infeasible++;
		}
	}
	/* The generator must exercise both outcomes. */
	ck_assert_int_gt(feasible, 300);
	ck_assert_int_gt(infeasible, 50);
}
END_TEST

/* Values each finite whose sum overflows: every partitioner that adds
 * them up says so, instead of a memory misfit (dp), an internal error
 * (parameters) or a split computed from infinities (histogram). */
START_TEST(test_sums_overflow)
{
	const struct { const char *name; double *values; } cases[] = {
		{ "dp", F.fwd }, { "histogram", F.fwd }, { "parameters", F.par }, { "dp", F.par },
	};
	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
		for (int K = 1; K <= 2; K++) {
			fx(cases[c].name, 3, K);
			cases[c].values[0] = cases[c].values[2] = 1e308;
			ASSERT_FAILS("summed over the 3 layers exceeds the largest double");
			ck_assert_int_eq(run(), PH_EINVAL);
		}
	}
	/* forward and backward each sum finite, both together do not */
	fx("dp", 2, 1);
	F.fwd[0] = F.bwd[1] = 1e308;
	ASSERT_FAILS("dp: forward + backward cost summed over the 2 layers exceeds the largest double");
	fx("histogram", 2, 2);
	F.fwd[0] = F.bwd[1] = 1e308;
	ASSERT_FAILS("histogram: forward + backward cost summed");
}
END_TEST

/* The checks every partitioner shares, in the same words. */
START_TEST(test_shared_checks)
{
	const char *names[] = { "uniform", "parameters", "histogram", "dp", "type", "explicit" };
	for (int k = 0; k < 6; k++) {
		char want[160];
		fx(names[k], 4, 5);
		ASSERT_FAILS("more stages (5) than layers (4); lower stages to 4 or fewer");
		snprintf(want, sizeof want, "%s: more stages (3) than allowed cut points allow (2 stages at most)", names[k]);
		fx(names[k], 6, 3);
		cuts_only((int[]){ 1, -1 });
		if (k == 4)
			set("regex", "dense");
		if (k == 5)
			set("bounds", "0,2,4");
		ASSERT_FAILS(want);
		fx(names[k], 0, 1);
		ASSERT_FAILS("need at least 1 layer and 1 stage (got 0 layers, 1 stages)");
	}
}
END_TEST

/* Every partitioner, random models: a valid split or a clean error. */
START_TEST(test_fuzz_contract)
{
	const char *names[] = { "uniform", "parameters", "histogram", "dp", "type" };
	rng_state = 4;
	for (int t = 0; t < 2000; t++) {
		int n = 1 + rnd(40), K = 1 + rnd(n < MAXK ? n : MAXK);
		fx(names[t % 5], n, K);
		if (t % 5 == 4)
			set("regex", "^b");
		for (int i = 0; i < n; i++) {
			F.fwd[i] = rnd(4) ? rnd(1000) : 0, F.bwd[i] = rnd(1000);
			F.par[i] = rnd(1000), F.keep[i] = rnd(100), F.act[i] = rnd(100);
			F.cut[i] = rnd(3) != 0;
			F.types[i] = rnd(3) ? "block" : "other";
		}
		F.link = rnd(2) ? 1000 : 0;
		int rc = run();
		if (K > max_stages())
			REQUIRE(rc != PH_OK && strstr(E.msg, "allowed cut points allow"),
				      "%s: K=%d > %d stages: rc %d \"%s\"", names[t % 5], K, max_stages(), rc, E.msg);
	}
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("partitioners");
	TCase *t = tcase_create("rules");
	tcase_add_test(t, test_heads);
	tcase_add_test(t, test_uniform);
	tcase_add_test(t, test_uniform_cuts);
	tcase_add_test(t, test_uniform_impossible);
	tcase_add_test(t, test_parameters);
	tcase_add_test(t, test_parameters_errors);
	tcase_add_test(t, test_histogram);
	tcase_add_test(t, test_type);
	tcase_add_test(t, test_explicit);
	tcase_add_test(t, test_dp_hand);
	tcase_add_test(t, test_dp_infeasible);
	tcase_add_test(t, test_sums_overflow);
	tcase_add_test(t, test_shared_checks);
	suite_add_tcase(s, t);
	TCase *b = tcase_create("brute force");
	tcase_add_test(b, test_uniform_brute);
	tcase_add_test(b, test_parameters_brute);
	tcase_add_test(b, test_dp_brute);
	tcase_add_test(b, test_histogram_lingvo_random);
	tcase_add_test(b, test_fuzz_contract);
	tcase_set_timeout(b, 30);
	suite_add_tcase(s, b);
	return s;
}

int main(void)
{
	load_plugins();
	return run_suite(suite());
}
