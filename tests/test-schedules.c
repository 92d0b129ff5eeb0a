/* SPDX-License-Identifier: MIT */
/*
 * Schedule plugins: exact orders for the shapes the papers print, and, for
 * every shape up to p = 8, v = 4, m = 32, the rules the host's plan checker
 * enforces (every action once, backward after forward, W after I, no
 * deadlock) plus the one the engine's bitwise reproducibility rests on:
 * each chunk's gradients accumulate in micro-batch order.
 *
 * The plugins are dlopen()ed from $PH_SCHEDULE_DIR (default
 * plugins/schedules/.libs, where libtool leaves them in the build tree),
 * exactly as the host loads them.
 */
#include <check.h>
#include <dirent.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pipehost/plugin.h>
#include "options.h"

#include "plugin-harness.h"
#include "unit-harness.h"

#define MAX_P 8
#define MAX_V 4
#define MAX_M 32
#define MAX_ACTS (3 * MAX_V * MAX_M)

/* dlopen every .so in the directory and collect its schedules. */
static void load_plugins(void)
{
	load_plugins_from("PH_SCHEDULE_DIR", "plugins/schedules/.libs", PLUGIN_SCHEDULES);
}

static const ph_schedule_ops *find(const char *name)
{
	return (const ph_schedule_ops *)find_head("schedule", name);
}

/* A config filled from the option table's defaults, as the host would. */
static void *config_for(const ph_schedule_ops *ops)
{
	static _Alignas(16) unsigned char buf[4096];
	memset(buf, 0, sizeof buf);
	REQUIRE(ops->head.config_size <= sizeof buf, "%s: config too big", ops->head.name);
	ph_err err = { "" };
	REQUIRE(ph_options_defaults(ops->head.options, buf, &err) == PH_OK, "%s", err.msg);
	return buf;
}

static int gen(const ph_schedule_ops *ops, int p, int v, int m, int rank,
	       ph_action *out, int *n, ph_err *err)
{
	ph_schedule_shape sh = { p, v, m };
	const void *cfg = config_for(ops);
	if (ops->check) {
		int rc = ops->check(cfg, &sh, err);
		if (rc)
			return rc;
	}
	/* Poison the buffer: a slot the plugin counts but never writes shows. */
	memset(out, 0xff, sizeof(ph_action) * MAX_ACTS);
	int rc = ops->generate(cfg, &sh, rank, out, MAX_ACTS, n, err);
	REQUIRE(rc != PH_OK || (*n >= 0 && *n <= MAX_ACTS), "%s: %d actions in a buffer of %d",
		ops->head.name, *n, MAX_ACTS);
	return rc;
}

/* "F3", or "0F3" with the chunk in front for interleaved lists. */
static const char *order(const char *name, int p, int v, int m, int rank, int with_chunk)
{
	static char s[4096];
	ph_action a[MAX_ACTS];
	int n = -1;
	ph_err err = { "" };
	int rc = gen(find(name), p, v, m, rank, a, &n, &err);
	REQUIRE(rc == PH_OK, "%s p=%d v=%d m=%d rank %d: %s", name, p, v, m, rank, err.msg);
	size_t len = 0;
	s[0] = 0;
	for (int i = 0; i < n; i++) {
		char c = "FBIW"[a[i].kind & 3];
		if (with_chunk)
			len += snprintf(s + len, sizeof s - len, "%s%d%c%d", i ? " " : "", a[i].chunk, c, a[i].mb);
		else
			len += snprintf(s + len, sizeof s - len, "%s%c%d", i ? " " : "", c, a[i].mb);
	}
	return s;
}

#define ASSERT_ORDER(name, p, v, m, rank, chunk, want) \
	ck_assert_str_eq(order(name, p, v, m, rank, chunk), want)

START_TEST(test_heads)
{
	const char *names[] = { "gpipe", "1f1b", "interleaved", "zb-h1" };
	const int maxv[] = { 1, 1, 8, 1 };
	for (int i = 0; i < 4; i++) {
		const ph_schedule_ops *o = find(names[i]);
		check_ops_head(&o->head, sizeof(ph_schedule_ops));
		ck_assert_ptr_nonnull(o->generate);
		ck_assert_int_eq(o->max_chunks_per_rank, maxv[i]);
	}
}
END_TEST

START_TEST(test_gpipe_order)
{
	for (int r = 0; r < 4; r++)
		ASSERT_ORDER("gpipe", 4, 1, 8, r, 0, "F0 F1 F2 F3 F4 F5 F6 F7 B0 B1 B2 B3 B4 B5 B6 B7");
	ASSERT_ORDER("gpipe", 1, 1, 1, 0, 0, "F0 B0");
}
END_TEST

START_TEST(test_1f1b_order)
{
	ASSERT_ORDER("1f1b", 4, 1, 8, 0, 0, "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7");
	ASSERT_ORDER("1f1b", 4, 1, 8, 1, 0, "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5 B6 B7");
	ASSERT_ORDER("1f1b", 4, 1, 8, 2, 0, "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 B7");
	ASSERT_ORDER("1f1b", 4, 1, 8, 3, 0, "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7");
	/* Fewer micro-batches than ranks: warm-up is capped at m. */
	ASSERT_ORDER("1f1b", 4, 1, 2, 0, 0, "F0 F1 B0 B1");
	ASSERT_ORDER("1f1b", 4, 1, 2, 2, 0, "F0 F1 B0 B1");
	ASSERT_ORDER("1f1b", 4, 1, 2, 3, 0, "F0 B0 F1 B1");
}
END_TEST

START_TEST(test_interleaved_order)
{
	ASSERT_ORDER("interleaved", 4, 2, 8, 0, 1,
		     "0F0 0F1 0F2 0F3 4F0 4F1 4F2 4F3 0F4 0F5 0F6 4B0 0F7 4B1 4F4 4B2 "
		     "4F5 4B3 4F6 0B0 4F7 0B1 0B2 0B3 4B4 4B5 4B6 4B7 0B4 0B5 0B6 0B7");
	ASSERT_ORDER("interleaved", 4, 2, 8, 1, 1,
		     "1F0 1F1 1F2 1F3 5F0 5F1 5F2 5F3 1F4 5B0 1F5 5B1 1F6 5B2 1F7 5B3 "
		     "5F4 1B0 5F5 1B1 5F6 1B2 5F7 1B3 5B4 5B5 5B6 5B7 1B4 1B5 1B6 1B7");
	ASSERT_ORDER("interleaved", 4, 2, 8, 2, 1,
		     "2F0 2F1 2F2 2F3 6F0 6F1 6F2 6B0 6F3 6B1 2F4 6B2 2F5 6B3 2F6 2B0 "
		     "2F7 2B1 6F4 2B2 6F5 2B3 6F6 6B4 6F7 6B5 6B6 6B7 2B4 2B5 2B6 2B7");
	ASSERT_ORDER("interleaved", 4, 2, 8, 3, 1,
		     "3F0 3F1 3F2 3F3 7F0 7B0 7F1 7B1 7F2 7B2 7F3 7B3 3F4 3B0 3F5 3B1 "
		     "3F6 3B2 3F7 3B3 7F4 7B4 7F5 7B5 7F6 7B6 7F7 7B7 3B4 3B5 3B6 3B7");
}
END_TEST

/* One chunk per rank: interleaved is exactly 1f1b. */
START_TEST(test_interleaved_v1_is_1f1b)
{
	char want[4096];
	for (int p = 1; p <= MAX_P; p++)
		for (int m = p; m <= MAX_M; m += p)
			for (int r = 0; r < p; r++) {
				snprintf(want, sizeof want, "%s", order("1f1b", p, 1, m, r, 1));
				ck_assert_str_eq(order("interleaved", p, 1, m, r, 1), want);
			}
}
END_TEST

START_TEST(test_interleaved_refuses)
{
	const ph_schedule_ops *o = find("interleaved");
	ph_err err = { "" };
	ph_schedule_shape sh = { 4, 2, 10 };
	ck_assert_int_eq(o->check(NULL, &sh, &err), PH_EINVAL);
	/* the rule, not counts: only the host knows the batch they must
	 * split (core/config.c names counts that do) */
	ck_assert_str_eq(err.msg, "interleaved: 10 micro-batches is not a multiple of 4 ranks; use a multiple of 4");
	sh.microbatches = 3;
	ck_assert_int_eq(o->check(NULL, &sh, &err), PH_EINVAL);
	ck_assert_str_eq(err.msg, "interleaved: 3 micro-batches is not a multiple of 4 ranks; use a multiple of 4");
	/* generate() refuses too, for a host that skips check(). */
	ph_action a[MAX_ACTS];
	int n;
	ck_assert_int_eq(o->generate(NULL, &sh, 0, a, MAX_ACTS, &n, &err), PH_EINVAL);
	sh = (ph_schedule_shape){ 4, 9, 8 };
	ck_assert_int_eq(o->check(NULL, &sh, &err), PH_EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "9 chunks"));
}
END_TEST

START_TEST(test_zbh1_order)
{
	ASSERT_ORDER("zb-h1", 4, 1, 8, 0, 0,
		     "F0 F1 F2 F3 I0 W0 F4 I1 W1 F5 I2 W2 F6 I3 W3 F7 I4 W4 I5 W5 I6 W6 I7 W7");
	ASSERT_ORDER("zb-h1", 4, 1, 8, 1, 0,
		     "F0 F1 F2 I0 F3 I1 W0 F4 I2 W1 F5 I3 W2 F6 I4 W3 F7 I5 W4 I6 W5 I7 W6 W7");
	ASSERT_ORDER("zb-h1", 4, 1, 8, 2, 0,
		     "F0 F1 I0 F2 I1 F3 I2 W0 F4 I3 W1 F5 I4 W2 F6 I5 W3 F7 I6 W4 I7 W5 W6 W7");
	ASSERT_ORDER("zb-h1", 4, 1, 8, 3, 0,
		     "F0 I0 F1 I1 F2 I2 F3 I3 W0 F4 I4 W1 F5 I5 W2 F6 I6 W3 F7 I7 W4 W5 W6 W7");
}
END_TEST

/* Shapes a one-chunk schedule cannot serve, ranks out of range, short buffers. */
START_TEST(test_refusals)
{
	const char *names[] = { "gpipe", "1f1b", "zb-h1", "interleaved" };
	for (int i = 0; i < 4; i++) {
		const ph_schedule_ops *o = find(names[i]);
		ph_action a[MAX_ACTS];
		int n = -1;
		ph_err err = { "" };
		ph_schedule_shape sh = { 4, 1, 8 };
		if (i < 3) {
			sh.chunks_per_rank = 2;
			ck_assert_int_eq(o->check(NULL, &sh, &err), PH_EINVAL);
			REQUIRE(strstr(err.msg, "interleaved"), "%s: %s", names[i], err.msg);
			sh.chunks_per_rank = 1;
		}
		ck_assert_int_eq(o->generate(NULL, &sh, 4, a, MAX_ACTS, &n, &err), PH_EINVAL);
		ck_assert_ptr_nonnull(strstr(err.msg, "rank 4"));
		ck_assert_int_eq(o->generate(NULL, &sh, -1, a, MAX_ACTS, &n, &err), PH_EINVAL);
		ck_assert_int_eq(o->generate(NULL, &sh, 0, a, 3, &n, &err), PH_EINVAL);
		ck_assert_int_eq(n, i == 2 ? 24 : 16); /* the size it needs */
		sh.microbatches = 0;
		ck_assert_int_eq(o->generate(NULL, &sh, 0, a, MAX_ACTS, &n, &err), PH_EINVAL);
		sh = (ph_schedule_shape){ 0, 1, 8 };
		ck_assert_int_eq(o->generate(NULL, &sh, 0, a, MAX_ACTS, &n, &err), PH_EINVAL);
	}
}
END_TEST

/* ------------------------------------------------------------------ */
/* The plan rules, checked on every small shape.                        */

enum { ST_F, ST_B, ST_I, ST_W, ST_N };

typedef struct {
	int p, v, m, nch;
	ph_action acts[MAX_P][MAX_ACTS];
	int n[MAX_P];
	/* count / list position of each action kind per (chunk, mb) */
	int cnt[ST_N][MAX_P * MAX_V][MAX_M];
	int pos[ST_N][MAX_P * MAX_V][MAX_M];
	char done[ST_N][MAX_P * MAX_V][MAX_M];
} plan;

static plan P;

/* Whether action a may run now: its inputs exist (unbounded buffers). */
static int ready(const ph_action *a)
{
	int c = a->chunk, i = a->mb, last = P.nch - 1;
	switch (a->kind) {
	case PH_ACT_F:
		return c == 0 || P.done[ST_F][c - 1][i];
	case PH_ACT_B:
	case PH_ACT_I: /* the gradient from the next chunk, whichever half sent it */
		return P.done[ST_F][c][i] &&
		       (c == last || P.done[ST_B][c + 1][i] || P.done[ST_I][c + 1][i]);
	case PH_ACT_W:
		return P.done[ST_I][c][i];
	}
	return 0;
}

/* Run every rank's list as far as it can; return how many actions ran. */
static int simulate(void)
{
	int next[MAX_P] = { 0 }, ran = 0, progress = 1;
	memset(P.done, 0, sizeof P.done);
	while (progress) {
		progress = 0;
		for (int r = 0; r < P.p; r++)
			while (next[r] < P.n[r] && ready(&P.acts[r][next[r]])) {
				const ph_action *a = &P.acts[r][next[r]++];
				P.done[a->kind][a->chunk][a->mb] = 1;
				ran++;
				progress = 1;
			}
	}
	return ran;
}

static void check_plan(const char *name, int p, int v, int m)
{
	const ph_schedule_ops *o = find(name);
	P.p = p, P.v = v, P.m = m, P.nch = p * v;
	memset(P.cnt, 0, sizeof P.cnt);
	int total = 0;
	for (int r = 0; r < p; r++) {
		ph_err err = { "" };
		int rc = gen(o, p, v, m, r, P.acts[r], &P.n[r], &err);
		REQUIRE(rc == PH_OK, "%s p=%d v=%d m=%d rank %d: %s", name, p, v, m, r, err.msg);
		total += P.n[r];
		int last[ST_N][MAX_V]; /* last micro-batch accumulated per local chunk */
		for (int k = 0; k < ST_N; k++)
			for (int c = 0; c < MAX_V; c++)
				last[k][c] = -1;
		for (int k = 0; k < P.n[r]; k++) {
			const ph_action *a = &P.acts[r][k];
			REQUIRE(a->kind <= PH_ACT_W && a->chunk < P.nch && a->chunk % p == r &&
					      a->mb >= 0 && a->mb < m,
				      "%s p=%d v=%d m=%d rank %d action %d: kind %d chunk %d mb %d out of range",
				      name, p, v, m, r, k, a->kind, a->chunk, a->mb);
			P.cnt[a->kind][a->chunk][a->mb]++;
			P.pos[a->kind][a->chunk][a->mb] = k;
			/* Gradients accumulate in B or W order: must be micro-batch order. */
			if (a->kind == PH_ACT_B || a->kind == PH_ACT_W) {
				int lc = a->chunk / p;
				REQUIRE(a->mb > last[a->kind][lc],
					      "%s p=%d v=%d m=%d rank %d: chunk %d accumulates mb %d after mb %d",
					      name, p, v, m, r, a->chunk, a->mb, last[a->kind][lc]);
				last[a->kind][lc] = a->mb;
			}
		}
	}
	for (int c = 0; c < P.nch; c++)
		for (int i = 0; i < m; i++) {
			const char *where = name;
			REQUIRE(P.cnt[ST_F][c][i] == 1, "%s p=%d v=%d m=%d: F chunk %d mb %d runs %d times",
				      where, p, v, m, c, i, P.cnt[ST_F][c][i]);
			int b = P.cnt[ST_B][c][i], ii = P.cnt[ST_I][c][i], w = P.cnt[ST_W][c][i];
			REQUIRE((b == 1 && ii == 0 && w == 0) || (b == 0 && ii == 1 && w == 1),
				      "%s p=%d v=%d m=%d: chunk %d mb %d has B x%d, I x%d, W x%d",
				      where, p, v, m, c, i, b, ii, w);
			int bk = b ? ST_B : ST_I;
			REQUIRE(P.pos[bk][c][i] > P.pos[ST_F][c][i],
				      "%s p=%d v=%d m=%d: chunk %d mb %d backward before its forward",
				      where, p, v, m, c, i);
			if (!b)
				REQUIRE(P.pos[ST_W][c][i] > P.pos[ST_I][c][i],
					      "%s p=%d v=%d m=%d: chunk %d mb %d W before I", where, p, v, m, c, i);
		}
	int ran = simulate();
	REQUIRE(ran == total, "%s p=%d v=%d m=%d: deadlock after %d of %d actions",
		      name, p, v, m, ran, total);
}

static const char *const all_names[] = { "gpipe", "1f1b", "interleaved", "zb-h1" };

START_TEST(test_every_shape)
{
	const char *name = all_names[_i];
	const ph_schedule_ops *o = find(name);
	int shapes = 0;
	for (int p = 1; p <= MAX_P; p++)
		for (int v = 1; v <= MAX_V && v <= o->max_chunks_per_rank; v++)
			for (int m = 1; m <= MAX_M; m++) {
				ph_schedule_shape sh = { p, v, m };
				ph_err err = { "" };
				if (o->check && o->check(NULL, &sh, &err) != PH_OK) {
					/* Only interleaved refuses a shape, and only m % p. */
					REQUIRE(strcmp(name, "interleaved") == 0 && m % p,
						      "%s refused p=%d v=%d m=%d: %s", name, p, v, m, err.msg);
					continue;
				}
				check_plan(name, p, v, m);
				shapes++;
			}
	ck_assert_int_gt(shapes, 0);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("schedules");
	TCase *t = tcase_create("orders");
	tcase_add_test(t, test_heads);
	tcase_add_test(t, test_gpipe_order);
	tcase_add_test(t, test_1f1b_order);
	tcase_add_test(t, test_interleaved_order);
	tcase_add_test(t, test_interleaved_v1_is_1f1b);
	tcase_add_test(t, test_interleaved_refuses);
	tcase_add_test(t, test_zbh1_order);
	tcase_add_test(t, test_refusals);
	suite_add_tcase(s, t);
	TCase *v = tcase_create("validity");
	tcase_add_loop_test(v, test_every_shape, 0, 4);
	tcase_set_timeout(v, 30);
	suite_add_tcase(s, v);
	return s;
}

int main(void)
{
	load_plugins();
	return run_suite(suite());
}
