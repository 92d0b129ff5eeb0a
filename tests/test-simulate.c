/* SPDX-License-Identifier: MIT */
/*
 * The simulator (core/simulate.c), the Chrome trace and SVG writers, and the
 * table schedule plugin.
 *
 * Plans are built the way the host builds them: the real schedule plugins
 * are dlopen()ed from $PH_SCHEDULE_DIR (default plugins/schedules/.libs),
 * their actions lowered and validated by ph_plan_set_actions.  With free
 * links, F = 1 and B = 2 per stage, the textbook bubble fractions come out
 * exactly, on every rank, for every shape tried:
 *
 *     gpipe, 1f1b    (p-1) / (m+p-1)          any m, also m < p
 *     interleaved    (p-1) / (v*m+p-1)        m a multiple of p, v = 2..4
 *     zb-h1          (p-1) / (3m+p-1)         F = I = W = 1, m >= p
 *                    1 - 3m / (2p+2m-1)       m < p (no schedule does better)
 *
 * Set PH_SIM_SVG_DIR=DIR to also write DIR/{gpipe,1f1b,interleaved,zb-h1}.svg
 * (p = 4, m = 8, v = 2 for interleaved) for a look at the timelines.
 */
#include <check.h>
#include <cjson/cJSON.h>
#include <dirent.h>
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <pipehost/plugin.h>
#include "config.h"
#include "model.h"
#include "options.h"
#include "plan.h"
#include "simulate.h"
#include "trace.h"

#include "plugin-harness.h"

#define EXACT 1e-12

static char tmpdir[256];

static void load_plugins(void)
{
	load_plugins_from("PH_SCHEDULE_DIR", "plugins/schedules/.libs", PLUGIN_SCHEDULES);
}

static const ph_schedule_ops *find(const char *name)
{
	return (const ph_schedule_ops *)find_head("schedule", name);
}

/* The config struct of a plugin, with its defaults; `file` set for table. */
static void *config_for(const ph_schedule_ops *ops, const char *file)
{
	static _Alignas(16) unsigned char buf[4096];
	memset(buf, 0, sizeof buf);
	REQUIRE(ops->head.config_size <= sizeof buf, "%s: config too big", ops->head.name);
	if (file) { /* table's only key is required: no default to fill */
		REQUIRE(strcmp(ops->head.name, "table") == 0, "file given for %s", ops->head.name);
		snprintf((char *)buf, PH_STR_MAX, "%s", file);
		return buf;
	}
	ph_err err = { "" };
	REQUIRE(ph_options_defaults(ops->head.options, buf, &err) == PH_OK, "%s", err.msg);
	return buf;
}

/* A plan with its own action lists: what ph_plan_build does minus the partition. */
typedef struct {
	ph_plan pl;
	ph_action *lists[64];
	int n[64];
} built_t;

static void built_free(built_t *b)
{
	for (int r = 0; r < b->pl.ranks; r++)
		free(b->lists[r]);
	ph_plan_free(&b->pl);
	memset(b, 0, sizeof *b);
}

/* Generate (check() first, as the host does), lower and validate. */
static int build(const char *name, const char *file, int p, int v, int m, built_t *b, ph_err *err)
{
	const ph_schedule_ops *o = find(name);
	const void *cfg = config_for(o, file);
	ph_schedule_shape sh = { p, v, m };
	memset(b, 0, sizeof *b);
	b->pl.ranks = p, b->pl.v = v, b->pl.nchunks = p * v, b->pl.m = m;
	int rc;
	if (o->check && (rc = o->check(cfg, &sh, err)))
		return rc;
	int cap = 4 * v * m;
	for (int r = 0; r < p; r++) {
		b->lists[r] = calloc((size_t)cap, sizeof(ph_action));
		REQUIRE(b->lists[r], "out of memory");
		if ((rc = o->generate(cfg, &sh, r, b->lists[r], cap, &b->n[r], err)))
			return rc;
	}
	return ph_plan_set_actions(&b->pl, b->lists, b->n, err);
}

static void build_ok(const char *name, int p, int v, int m, built_t *b)
{
	ph_err err = { "" };
	int rc = build(name, NULL, p, v, m, b, &err);
	REQUIRE(rc == PH_OK, "%s p=%d v=%d m=%d: %s", name, p, v, m, err.msg);
}

/* Uniform per-chunk costs. */
typedef struct {
	double f[256], b[256], i[256], w[256], link[256], act[256];
} costs_t;

static void uniform(costs_t *c, int n, double f, double b, double i, double w)
{
	memset(c, 0, sizeof *c);
	for (int k = 0; k < n; k++)
		c->f[k] = f, c->b[k] = b, c->i[k] = i, c->w[k] = w;
}

/* Simulate `name` with stage costs F = 1, B = 2 (split: I = W = 1), spread
 * over v chunks, and check every rank's bubble against `want`. */
static void check_bubble(const char *name, int p, int v, int m, double want)
{
	built_t b;
	build_ok(name, p, v, m, &b);
	costs_t c;
	uniform(&c, p * v, 1.0 / v, 2.0 / v, 1.0 / v, 1.0 / v);
	ph_sim_result r;
	ph_err err = { "" };
	int rc = ph_simulate(&b.pl, c.f, c.b, c.i, c.w, NULL, NULL, &r, &err);
	REQUIRE(rc == PH_OK, "%s p=%d v=%d m=%d: %s", name, p, v, m, err.msg);
	for (int k = 0; k < p; k++)
		REQUIRE(fabs(r.bubble[k] - want) <= EXACT,
			"%s p=%d v=%d m=%d rank %d: bubble %.17g, want %.17g (step %.17g, busy %.17g)", name, p, v, m, k,
			r.bubble[k], want, r.step_time, r.busy[k]);
	ph_sim_free(&r);
	built_free(&b);
}

static const int grid_m[] = { 1, 2, 3, 4, 5, 7, 8, 9, 12, 16, 31 };
#define NGRID_M ((int)(sizeof grid_m / sizeof grid_m[0]))

START_TEST(test_bubble_gpipe_1f1b)
{
	const char *names[] = { "gpipe", "1f1b" };
	for (int s = 0; s < 2; s++)
		for (int p = 1; p <= 8; p++)
			for (int j = 0; j < NGRID_M; j++) {
				int m = grid_m[j];
				check_bubble(names[s], p, 1, m, (double)(p - 1) / (m + p - 1));
			}
}
END_TEST

START_TEST(test_bubble_interleaved)
{
	for (int p = 1; p <= 8; p++)
		for (int v = 1; v <= 4; v++)
			for (int k = 1; k <= 4; k++) {
				int m = k * p;
				check_bubble("interleaved", p, v, m, (double)(p - 1) / (v * m + p - 1));
			}
}
END_TEST

/* zb-h1 reaches (p-1)/(3m+p-1) when m >= p.  With m < p no schedule can:
 * rank 0's first I ends at 2p at the earliest (p forwards down, p input
 * gradients up), and rank 0 still has m-1 I's and m W's to run after it, so
 * a step takes at least 2p + 2m - 1 > 3m + p - 1; zb-h1 takes exactly that. */
START_TEST(test_bubble_zbh1)
{
	for (int p = 1; p <= 8; p++)
		for (int j = 0; j < NGRID_M; j++) {
			int m = grid_m[j];
			if (m >= p)
				check_bubble("zb-h1", p, 1, m, (double)(p - 1) / (3 * m + p - 1));
			else
				check_bubble("zb-h1", p, 1, m, 1.0 - 3.0 * m / (2 * p + 2 * m - 1));
		}
}
END_TEST

/* Micro-batches between F and B (or W): gpipe holds all m, 1f1b min(p-r, m). */
START_TEST(test_peak_inflight)
{
	const char *names[] = { "gpipe", "1f1b", "zb-h1" };
	for (int s = 0; s < 3; s++)
		for (int p = 1; p <= 8; p++)
			for (int j = 0; j < NGRID_M; j++) {
				int m = grid_m[j];
				built_t b;
				build_ok(names[s], p, 1, m, &b);
				costs_t c;
				uniform(&c, p, 1, 2, 1, 1);
				for (int k = 0; k < p; k++)
					c.act[k] = 1000.0 * (k + 1);
				ph_sim_result r;
				ph_err err = { "" };
				REQUIRE(ph_simulate(&b.pl, c.f, c.b, c.i, c.w, NULL, c.act, &r, &err) == PH_OK, "%s", err.msg);
				for (int k = 0; k < p; k++) {
					int want = s == 0 ? m : s == 1 ? (p - k < m ? p - k : m) : (p < m ? p : m);
					REQUIRE(r.peak_inflight[k] == want, "%s p=%d m=%d rank %d: peak in-flight %d, want %d",
						names[s], p, m, k, r.peak_inflight[k], want);
					REQUIRE(r.peak_act_bytes[k] == want * c.act[k], "%s p=%d m=%d rank %d: peak bytes %g, want %g",
						names[s], p, m, k, r.peak_act_bytes[k], want * c.act[k]);
					/* the plan's per-chunk count agrees when a rank has one chunk */
					REQUIRE(b.pl.slots[k] == want, "%s p=%d m=%d: plan slots %d, simulator %d", names[s], p,
						m, b.pl.slots[k], want);
				}
				ph_sim_free(&r);
				built_free(&b);
			}
}
END_TEST

/* Interleaved: rank r holds Megatron's warm-up plus one,
 * min(2(p-r-1) + (v-1)p + 1, v*m), summed over its v chunks. */
START_TEST(test_peak_inflight_interleaved)
{
	for (int p = 1; p <= 8; p++)
		for (int v = 2; v <= 4; v++)
			for (int k = 1; k <= 4; k++) {
				int m = k * p;
				built_t b;
				build_ok("interleaved", p, v, m, &b);
				costs_t c;
				uniform(&c, p * v, 1.0 / v, 2.0 / v, 0, 0);
				ph_sim_result r;
				ph_err err = { "" };
				REQUIRE(ph_simulate(&b.pl, c.f, c.b, NULL, NULL, NULL, NULL, &r, &err) == PH_OK, "%s", err.msg);
				for (int q = 0; q < p; q++) {
					int want = 2 * (p - q - 1) + (v - 1) * p + 1;
					if (want > v * m)
						want = v * m;
					REQUIRE(r.peak_inflight[q] == want, "interleaved p=%d v=%d m=%d rank %d: peak %d, want %d",
						p, v, m, q, r.peak_inflight[q], want);
				}
				ph_sim_free(&r);
				built_free(&b);
			}
}
END_TEST

/* Link time delays each hop by its boundary's time, both ways. */
START_TEST(test_links)
{
	built_t b;
	build_ok("gpipe", 2, 1, 1, &b);
	costs_t c;
	uniform(&c, 2, 1, 2, 0, 0);
	c.link[0] = 0.5;
	ph_sim_result r;
	ph_err err = { "" };
	ck_assert_int_eq(ph_simulate(&b.pl, c.f, c.b, NULL, NULL, c.link, NULL, &r, &err), PH_OK);
	/* F on rank 0 [0,1], +0.5, F on rank 1 [1.5,2.5], B [2.5,4.5], +0.5, B on rank 0 [5,7] */
	ck_assert_double_eq_tol(r.step_time, 7.0, EXACT);
	ck_assert_int_eq(r.nevents, 4);
	ck_assert_double_eq_tol(r.events[1].t0, 5.0, EXACT); /* rank 0's B */
	ck_assert_double_eq_tol(r.events[2].t0, 1.5, EXACT); /* rank 1's F */
	ck_assert_double_eq_tol(r.bubble[0], 4.0 / 7.0, EXACT);
	ph_sim_free(&r);
	built_free(&b);

	/* gpipe, p = 4, m = 8, link l: the 2(p-1) hops of the fill and the drain add l each */
	build_ok("gpipe", 4, 1, 8, &b);
	uniform(&c, 4, 1, 2, 0, 0);
	for (int k = 0; k < 3; k++)
		c.link[k] = 0.25;
	ck_assert_int_eq(ph_simulate(&b.pl, c.f, c.b, NULL, NULL, c.link, NULL, &r, &err), PH_OK);
	ck_assert_double_eq_tol(r.step_time, 3.0 * (8 + 3) + 2 * 3 * 0.25, EXACT);
	ph_sim_free(&r);
	built_free(&b);

	/* 1f1b, p = 2, m = 2, link 0.5: rank 0 F0 [0,1] F1 [1,2]; rank 1 F0 [1.5,2.5]
	 * B0 [2.5,4.5] F1 [4.5,5.5] B1 [5.5,7.5]; rank 0 B0 [5,7] B1 [8,10].  The
	 * steady state pays the round trip too: 1f1b loses more than gpipe's 2(p-1)l. */
	build_ok("1f1b", 2, 1, 2, &b);
	uniform(&c, 2, 1, 2, 0, 0);
	c.link[0] = 0.5;
	ck_assert_int_eq(ph_simulate(&b.pl, c.f, c.b, NULL, NULL, c.link, NULL, &r, &err), PH_OK);
	ck_assert_double_eq_tol(r.step_time, 10.0, EXACT);
	ck_assert_double_eq_tol(r.busy[0], 6.0, EXACT);
	ph_sim_free(&r);
	built_free(&b);
}
END_TEST

/* Events: one per compute op, in list order, never overlapping on a rank. */
START_TEST(test_events)
{
	built_t b;
	build_ok("zb-h1", 4, 1, 8, &b);
	costs_t c;
	uniform(&c, 4, 1, 2, 1, 1);
	ph_sim_result r;
	ph_err err = { "" };
	ck_assert_int_eq(ph_simulate(&b.pl, c.f, c.b, c.i, c.w, NULL, NULL, &r, &err), PH_OK);
	ck_assert_int_eq(r.nevents, 4 * 3 * 8);
	int k = 0;
	for (int q = 0; q < 4; q++)
		for (int j = 0; j < b.n[q]; j++, k++) {
			const ph_trace_event *e = &r.events[k];
			ck_assert_int_eq(e->rank, q);
			ck_assert_int_eq(e->kind, b.lists[q][j].kind);
			ck_assert_int_eq(e->mb, b.lists[q][j].mb);
			ck_assert_double_eq_tol(e->t1 - e->t0, 1.0, EXACT);
			if (j)
				ck_assert(e->t0 >= r.events[k - 1].t1);
		}
	/* zero bubble in the steady state: rank 0 is busy from 0 to 3m */
	ck_assert_double_eq_tol(r.busy[0], 24.0, EXACT);
	ck_assert_double_eq_tol(r.step_time, 27.0, EXACT);
	ph_sim_free(&r);
	built_free(&b);
}
END_TEST

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	char *s = malloc((size_t)n + 1);
	if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
		free(s);
		s = NULL;
	}
	if (s)
		s[n] = 0;
	fclose(f);
	return s;
}

START_TEST(test_chrome_trace)
{
	built_t b;
	build_ok("interleaved", 2, 2, 2, &b);
	costs_t c;
	uniform(&c, 4, 0.5e-3, 1e-3, 0, 0);
	ph_sim_result r;
	ph_err err = { "" };
	ck_assert_int_eq(ph_simulate(&b.pl, c.f, c.b, NULL, NULL, NULL, NULL, &r, &err), PH_OK);
	/* add two comm events, as a real run records them */
	ph_trace_event ev[64];
	REQUIRE(r.nevents + 2 <= 64, "too many events");
	memcpy(ev, r.events, (size_t)r.nevents * sizeof *ev);
	ev[r.nevents] = (ph_trace_event){ 0.5e-3, 0.75e-3, 0, PH_OP_SEND_ACT, 0, 1, 3, 0 };
	ev[r.nevents + 1] = (ph_trace_event){ 0.5e-3, 0.5e-3, 1, PH_OP_RECV_GRAD, 1, 0, 3, 0 };
	char path[512];
	snprintf(path, sizeof path, "%s/trace.json", tmpdir);
	ck_assert_int_eq(ph_trace_write_chrome(path, ev, r.nevents + 2, 2, 2, &err), PH_OK);
	char tmp[600];
	snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
	ck_assert_int_ne(access(tmp, F_OK), 0); /* renamed, not left behind */
	char *text = slurp(path);
	ck_assert_ptr_nonnull(text);
	cJSON *root = cJSON_Parse(text);
	REQUIRE(root, "not JSON: %.200s", text);
	ck_assert_str_eq(cJSON_GetObjectItem(root, "displayTimeUnit")->valuestring, "ms");
	cJSON *evs = cJSON_GetObjectItem(root, "traceEvents");
	ck_assert(cJSON_IsArray(evs));
	int x = 0, threads = 0;
	const cJSON *e;
	cJSON_ArrayForEach(e, evs)
	{
		const char *ph = cJSON_GetObjectItem(e, "ph")->valuestring;
		const char *name = cJSON_GetObjectItem(e, "name")->valuestring;
		if (strcmp(ph, "M") == 0) {
			if (strcmp(name, "thread_name") == 0) {
				char want[32];
				int tid = cJSON_GetObjectItem(e, "tid")->valueint;
				snprintf(want, sizeof want, "rank %d", tid);
				ck_assert_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(e, "args"), "name")->valuestring, want);
				threads++;
			}
			continue;
		}
		ck_assert_str_eq(ph, "X");
		ck_assert_int_eq(cJSON_GetObjectItem(e, "pid")->valueint, 0);
		const cJSON *args = cJSON_GetObjectItem(e, "args");
		int tid = cJSON_GetObjectItem(e, "tid")->valueint;
		if (x < r.nevents) {
			const ph_trace_event *s = &r.events[x];
			char want[32];
			snprintf(want, sizeof want, "%d%c%d", s->chunk, "FBIW"[s->kind], s->mb);
			ck_assert_str_eq(name, want);
			ck_assert_str_eq(cJSON_GetObjectItem(e, "cat")->valuestring, "compute");
			ck_assert_int_eq(tid, s->rank);
			ck_assert_double_eq_tol(cJSON_GetObjectItem(e, "ts")->valuedouble, s->t0 * 1e6, 1e-3);
			ck_assert_double_eq_tol(cJSON_GetObjectItem(e, "dur")->valuedouble, (s->t1 - s->t0) * 1e6, 1e-3);
			ck_assert_int_eq(cJSON_GetObjectItem(args, "chunk")->valueint, s->chunk);
			ck_assert_int_eq(cJSON_GetObjectItem(args, "mb")->valueint, s->mb);
			ck_assert_int_eq(cJSON_GetObjectItem(args, "step")->valueint, 0);
		} else if (x == r.nevents) {
			ck_assert_str_eq(name, "send-act 1");
			ck_assert_str_eq(cJSON_GetObjectItem(e, "cat")->valuestring, "comm");
			ck_assert_double_eq_tol(cJSON_GetObjectItem(e, "dur")->valuedouble, 250.0, 1e-3);
			ck_assert_int_eq(cJSON_GetObjectItem(args, "step")->valueint, 3);
		} else {
			ck_assert_str_eq(name, "recv-grad 0");
			ck_assert_int_eq(tid, 1);
		}
		x++;
	}
	ck_assert_int_eq(x, r.nevents + 2);
	ck_assert_int_eq(threads, 2);
	cJSON_Delete(root);
	free(text);
	/* a directory that does not exist: an error naming the path, no file */
	snprintf(path, sizeof path, "%s/no-such-dir/trace.json", tmpdir);
	ck_assert_int_eq(ph_trace_write_chrome(path, ev, r.nevents, 2, 2, &err), PH_EIO);
	ck_assert_ptr_nonnull(strstr(err.msg, "no-such-dir/trace.json"));
	ph_sim_free(&r);
	built_free(&b);
}
END_TEST

/* Simulate p = 4, m = 8 of a schedule and write its SVG to path. */
static void write_svg(const char *name, int v, const char *path, const char *extra)
{
	built_t b;
	build_ok(name, 4, v, 8, &b);
	costs_t c;
	uniform(&c, 4 * v, 1.0 / v, 2.0 / v, 1.0 / v, 1.0 / v);
	ph_sim_result r;
	ph_err err = { "" };
	ck_assert_int_eq(ph_simulate(&b.pl, c.f, c.b, c.i, c.w, NULL, NULL, &r, &err), PH_OK);
	char title[256];
	snprintf(title, sizeof title, "%s: p = 4, v = %d, m = 8; F = 1, B = 2%s per stage; bubble %.1f%%%s", name, v,
		 strcmp(name, "zb-h1") ? "" : " (I = W = 1)", 100.0 * r.bubble[0], extra);
	REQUIRE(ph_svg_write(path, r.events, r.nevents, 4, v, title, &err) == PH_OK, "%s", err.msg);
	ph_sim_free(&r);
	built_free(&b);
}

START_TEST(test_svg)
{
	char path[512];
	snprintf(path, sizeof path, "%s/t.svg", tmpdir);
	write_svg("interleaved", 2, path, " <&>");
	char *s = slurp(path);
	ck_assert_ptr_nonnull(s);
	ck_assert(strncmp(s, "<?xml", 5) == 0);
	ck_assert_ptr_nonnull(strstr(s, "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\""));
	ck_assert_ptr_nonnull(strstr(s, "&lt;&amp;&gt;")); /* the title is escaped */
	ck_assert_ptr_nonnull(strstr(s, ">4F0</text>"));   /* chunk-prefixed labels */
	ck_assert_ptr_nonnull(strstr(s, ">rank 3</text>"));
	ck_assert_ptr_nonnull(strstr(s, "F  forward"));    /* legend */
	ck_assert_ptr_nonnull(strstr(s, "</svg>\n"));
	/* one box per op */
	int boxes = 0;
	for (const char *q = s; (q = strstr(q, "<g><title>")); q++)
		boxes++;
	ck_assert_int_eq(boxes, 4 * 2 * 2 * 8);
	free(s);
	const char *dir = getenv("PH_SIM_SVG_DIR");
	if (dir && *dir) {
		const char *names[] = { "gpipe", "1f1b", "interleaved", "zb-h1" };
		for (int k = 0; k < 4; k++) {
			snprintf(path, sizeof path, "%s/%s.svg", dir, names[k]);
			write_svg(names[k], k == 2 ? 2 : 1, path, "");
		}
	}
}
END_TEST

/* ph_svg_write's own guard (the CLI refuses earlier, from the plan's op
 * count: test-svg-limit.sh): one box past PH_SVG_MAX_BOXES is refused
 * before the file is opened, and a file already there keeps its bytes
 * (196,608 boxes drawn: test-svg-limit.sh). */
START_TEST(test_svg_limit)
{
	int n = PH_SVG_MAX_BOXES + 1;
	ph_trace_event *ev = calloc((size_t)n, sizeof *ev);
	ck_assert_ptr_nonnull(ev);
	for (int k = 0; k < n; k++)
		ev[k] = (ph_trace_event){ .t0 = k, .t1 = k + 0.5, .rank = k % 4, .kind = PH_OP_F, .mb = k / 4 };
	char path[512];
	snprintf(path, sizeof path, "%s/limit.svg", tmpdir);
	FILE *f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fputs("before\n", f);
	fclose(f);
	ph_err err = { "" };
	ck_assert_int_eq(ph_svg_write(path, ev, n, 4, 1, NULL, &err), PH_EINVAL);
	REQUIRE(strstr(err.msg, "200001 boxes") && strstr(err.msg, "--trace"), "%s", err.msg);
	char *s = slurp(path);
	ck_assert_ptr_nonnull(s);
	ck_assert_str_eq(s, "before\n");
	free(s);
	free(ev);
}
END_TEST

/* --simulate's report on the tiny model, built as the CLI builds it. */
START_TEST(test_report)
{
	const char *top = getenv("top_srcdir"), *plugins = getenv("PIPEHOST_PLUGIN_PATH");
	if (!top || !*top)
		top = ".";
	if (!plugins || !*plugins)
		plugins = "plugins/layers/.libs:plugins/schedules/.libs:plugins/partitioners/.libs";
	char ini[1024];
	snprintf(ini, sizeof ini, "%s/tests/fixtures/tiny.ini", top);
	const char *sets[] = { "run.stages=3", "run.micro_batches=8", "schedule.type=zb-h1" };
	ph_registry reg;
	ph_config cfg;
	ph_model model;
	ph_plan plan;
	memset(&reg, 0, sizeof reg);
	memset(&model, 0, sizeof model);
	memset(&plan, 0, sizeof plan);
	ph_err err = { "" };
	REQUIRE(ph_config_read(&cfg, ini, sets, 3, &err) == PH_OK, "%s", err.msg);
	REQUIRE(ph_registry_load_path(&reg, plugins, &err) == PH_OK, "%s", err.msg);
	REQUIRE(ph_config_resolve(&cfg, &reg, &err) == PH_OK, "%s", err.msg);
	ph_shape in = { 3, { 1, 8, 8 } };
	REQUIRE(ph_model_build(&model, &cfg, &in, (int)(cfg.run.batch / cfg.run.micro_batches), &err) == PH_OK, "%s",
		err.msg);
	REQUIRE(ph_plan_build(&plan, &model, &cfg, NULL, NULL, &err) == PH_OK, "%s", err.msg);
	char svg[512], trace[512];
	snprintf(svg, sizeof svg, "%s/report.svg", tmpdir);
	snprintf(trace, sizeof trace, "%s/report.json", tmpdir);
	char *text = NULL;
	size_t len = 0;
	FILE *out = open_memstream(&text, &len);
	int rc = ph_simulate_report(&plan, &model, &cfg, NULL, NULL, 1e9, svg, trace, out, &err);
	fclose(out);
	REQUIRE(rc == PH_OK, "%s", err.msg);
	REQUIRE(strstr(text, "simulate: schedule zb-h1, 3 rank(s) x 1 chunk(s), 8 micro-batches of 4; costs: meta FLOPs"),
		"%s", text);
	REQUIRE(strstr(text, "links 1 GB/s"), "%s", text);
	REQUIRE(strstr(text, "step time "), "%s", text);
	for (int r = 0; r < 3; r++) {
		char row[32];
		snprintf(row, sizeof row, "\n  %d ", r);
		REQUIRE(strstr(text, row), "no row for rank %d: %s", r, text);
	}
	REQUIRE(strstr(text, "timeline written to") && strstr(text, "trace written to"), "%s", text);
	char *json = slurp(trace);
	ck_assert_ptr_nonnull(json);
	cJSON *root = cJSON_Parse(json);
	REQUIRE(root, "trace is not JSON");
	int x = 0;
	const cJSON *e;
	cJSON_ArrayForEach(e, cJSON_GetObjectItem(root, "traceEvents"))
		x += strcmp(cJSON_GetObjectItem(e, "ph")->valuestring, "X") == 0;
	ck_assert_int_eq(x, 3 * 3 * 8); /* F, I, W of 8 micro-batches on 3 ranks */
	cJSON_Delete(root);
	free(json);
	ck_assert_int_eq(access(svg, R_OK), 0);
	free(text);
	ph_plan_free(&plan);
	ph_model_free(&model);
	ph_config_free(&cfg);
	ph_registry_free(&reg);
}
END_TEST

/* ------------------------------------------------------------------ */
/* The table plugin.                                                    */

static char *write_file(const char *name, const char *text)
{
	static char path[4][512];
	static int k;
	char *p = path[k++ % 4];
	snprintf(p, 512, "%s/%s", tmpdir, name);
	FILE *f = fopen(p, "w");
	REQUIRE(f, "cannot write %s", p);
	fputs(text, f);
	fclose(f);
	return p;
}

/* Generate from a table file and say what the host would: "" or the error. */
static const char *table_err(const char *file, int p, int v, int m)
{
	static ph_err err;
	built_t b;
	memset(&err, 0, sizeof err);
	build("table", file, p, v, m, &b, &err);
	built_free(&b);
	return err.msg;
}

START_TEST(test_table_parse)
{
	const ph_schedule_ops *o = find("table");
	ck_assert_int_eq(o->max_chunks_per_rank, 16);
	ck_assert_ptr_nonnull(o->check);
	/* comments, blank lines, commas and blanks, CRLF, lowercase */
	char *f = write_file("ok.csv", "# 1f1b, p = 2, m = 4\n\n  # rank 0\nF0,F1 B0, ,F2,B1 F3  B2,b3\r\n"
				       "\t\nF0 B0 F1 B1 F2 B2 F3 B3 # rank 1\n# trailing comment\n");
	ck_assert_str_eq(table_err(f, 2, 1, 4), "");
	/* equal to 1f1b's order */
	built_t t, ref;
	ph_err err = { "" };
	ck_assert_int_eq(build("table", f, 2, 1, 4, &t, &err), PH_OK);
	build_ok("1f1b", 2, 1, 4, &ref);
	for (int r = 0; r < 2; r++) {
		ck_assert_int_eq(t.n[r], ref.n[r]);
		ck_assert(memcmp(t.lists[r], ref.lists[r], (size_t)t.n[r] * sizeof(ph_action)) == 0);
	}
	built_free(&t);
	built_free(&ref);

	char want[1024];
	f = write_file("bad.csv", "F0 F1 B0 F2 B1 F3 B2 B3\n# rank 1\nF0 X3 B0\n");
	snprintf(want, sizeof want, "%s:3: 'X3' is not an action; write F3, B3, I3 or W3 (chunk-prefixed like 1F3 when "
		 "chunks > 1)", f);
	ck_assert_str_eq(table_err(f, 2, 1, 4), want);
	const char *bad[] = { "F", "3", "F-1", "FF1", "F1x", "1 F", "F1.0", "F\xc3\xa9" };
	for (int k = 0; k < (int)(sizeof bad / sizeof bad[0]); k++) {
		char text[64];
		snprintf(text, sizeof text, "F0 B0\n%s\n", bad[k]);
		f = write_file("bad.csv", text);
		const char *msg = table_err(f, 2, 1, 1);
		REQUIRE(strstr(msg, ":2: '") && strstr(msg, "is not an action"), "'%s': %s", bad[k], msg);
	}
	f = write_file("big.csv", "F0 B0\nF0 B1234567890\n");
	REQUIRE(strstr(table_err(f, 2, 1, 1), "big.csv:2: 'B1234567890': the number is too large"), "%s",
		table_err(f, 2, 1, 1));

	/* rows vs ranks */
	f = write_file("few.csv", "# only one rank\nF0 B0\n\n");
	snprintf(want, sizeof want, "%s:3: the file ends after 1 row(s) of actions, but [run] stages = 2; write one "
		 "row per rank, rank 0 first", f);
	ck_assert_str_eq(table_err(f, 2, 1, 1), want);
	f = write_file("many.csv", "F0 B0\nF0 B0\n\n# extra\nF0 B0\n");
	snprintf(want, sizeof want, "%s:5: a row for rank 2, but [run] stages = 2; write one row per rank, 2 in all", f);
	ck_assert_str_eq(table_err(f, 2, 1, 1), want);
	f = write_file("empty.csv", "# nothing\n");
	snprintf(want, sizeof want, "%s: the file holds no row of actions, but [run] stages = 1; write one row per "
		 "rank, rank 0 first", f);
	ck_assert_str_eq(table_err(f, 1, 1, 1), want);

	/* chunks > 1: every action names its chunk */
	f = write_file("v2.csv", "0F0 2F0 2B0 0B0\nF0 3F0 3B0 1B0\n");
	snprintf(want, sizeof want, "%s:2: 'F0' needs its chunk in front when chunks > 1: rank 1 holds chunks 1..3 in "
		 "steps of 2 (e.g. 1F0)", f);
	ck_assert_str_eq(table_err(f, 2, 2, 1), want);
	f = write_file("v2.csv", "0F0 2F0 2B0 0B0\n1F0 3F0 3B0 1B0\n");
	ck_assert_str_eq(table_err(f, 2, 2, 1), "");
	/* a chunk the rank does not hold: left to the host's check */
	f = write_file("v2.csv", "0F0 2F0 2B0 0B0\n1F0 2F0 3B0 1B0\n");
	ck_assert_str_eq(table_err(f, 2, 2, 1), "schedule: rank 1 position 1: 2F0 runs chunk 2, which rank 0 holds");

	/* too many actions for the host's buffer: the size needed comes back */
	f = write_file("long.csv", "F0 B0 F0 B0 F0 B0 F0 B0 F0\n");
	ph_schedule_shape sh = { 1, 1, 1 };
	ph_action a[4];
	int n = 0;
	ck_assert_int_eq(o->generate(config_for(o, f), &sh, 0, a, 4, &n, &err), PH_EINVAL);
	ck_assert_int_eq(n, 9);
	ck_assert_ptr_nonnull(strstr(err.msg, "rank 0 lists 9 actions"));

	/* no such file; no file set */
	snprintf(want, sizeof want, "%s/nope.csv", tmpdir);
	REQUIRE(strstr(table_err(want, 1, 1, 1), "cannot open schedule table") &&
			strstr(table_err(want, 1, 1, 1), "No such file"),
		"%s", table_err(want, 1, 1, 1));
	ck_assert_int_eq(o->check(config_for(o, ""), &sh, &err), PH_EINVAL);
	ck_assert_str_eq(err.msg, "table: no file given; set [schedule] file = my-schedule.csv");
}
END_TEST

/* The fixtures the CLI test trains with give exactly the built-in orders. */
START_TEST(test_table_fixtures)
{
	const char *top = getenv("top_srcdir");
	if (!top || !*top)
		top = ".";
	struct {
		const char *file, *name;
		int p, v, m;
	} fx[] = {
		{ "1f1b-p2-m4.csv", "1f1b", 2, 1, 4 },
		{ "gpipe-p2-m4.csv", "gpipe", 2, 1, 4 },
		{ "zb-h1-p2-m4.csv", "zb-h1", 2, 1, 4 },
		{ "interleaved-p2-v2-m4.csv", "interleaved", 2, 2, 4 },
	};
	for (int k = 0; k < 4; k++) {
		char path[1024];
		snprintf(path, sizeof path, "%s/tests/fixtures/schedules/%s", top, fx[k].file);
		built_t t, ref;
		ph_err err = { "" };
		REQUIRE(build("table", path, fx[k].p, fx[k].v, fx[k].m, &t, &err) == PH_OK, "%s", err.msg);
		build_ok(fx[k].name, fx[k].p, fx[k].v, fx[k].m, &ref);
		for (int r = 0; r < fx[k].p; r++) {
			REQUIRE(t.n[r] == ref.n[r], "%s rank %d: %d actions, %s has %d", fx[k].file, r, t.n[r], fx[k].name,
				ref.n[r]);
			for (int j = 0; j < t.n[r]; j++) {
				char got[16], want[16];
				ph_action_str(&t.lists[r][j], fx[k].v, got, sizeof got);
				ph_action_str(&ref.lists[r][j], fx[k].v, want, sizeof want);
				REQUIRE(strcmp(got, want) == 0, "%s rank %d position %d: %s, %s has %s", fx[k].file, r, j,
					got, fx[k].name, want);
			}
		}
		built_free(&t);
		built_free(&ref);
	}
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("simulate");
	TCase *t = tcase_create("simulator");
	tcase_add_test(t, test_bubble_gpipe_1f1b);
	tcase_add_test(t, test_bubble_interleaved);
	tcase_add_test(t, test_bubble_zbh1);
	tcase_add_test(t, test_peak_inflight);
	tcase_add_test(t, test_peak_inflight_interleaved);
	tcase_add_test(t, test_links);
	tcase_add_test(t, test_events);
	suite_add_tcase(s, t);
	TCase *o = tcase_create("outputs");
	tcase_add_test(o, test_chrome_trace);
	tcase_add_test(o, test_svg);
	tcase_add_test(o, test_svg_limit);
	tcase_add_test(o, test_report);
	suite_add_tcase(s, o);
	TCase *tb = tcase_create("table");
	tcase_add_test(tb, test_table_parse);
	tcase_add_test(tb, test_table_fixtures);
	suite_add_tcase(s, tb);
	return s;
}

static void rm_tmpdir(void)
{
	char cmd[600];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", tmpdir);
}

int main(void)
{
	load_plugins();
	snprintf(tmpdir, sizeof tmpdir, "/tmp/ph-test-simulate.XXXXXX");
	if (!mkdtemp(tmpdir)) {
		perror("mkdtemp");
		return EXIT_FAILURE;
	}
	SRunner *sr = srunner_create(suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	rm_tmpdir();
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
