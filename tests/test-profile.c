/* SPDX-License-Identifier: MIT */
/*
 * The profiler (core/profile.c) and the plan's JSON (core/planjson.c), on
 * small models built by hand from in-test layer ops: no plugin, no INI.
 *
 *  - the cache key changes with everything it lists and nothing else;
 *  - the cache path honours profile_cache, XDG_CACHE_HOME and HOME;
 *  - the cache file round-trips, and a stale, foreign or truncated file is
 *    a miss that says why;
 *  - ph_profile_costs measures (a slower layer costs more), caches, and a
 *    second call is a hit with the same numbers; a failing layer is named;
 *  - cold first calls do not reach the median; profile_cache = off;
 *  - a cached time that is not finite or absurdly large is a miss;
 *  - cost = auto at a huge micro-batch plans on the FLOPs at once, and
 *    cost = profile there is refused when it cannot fit;
 *  - the JSON has every field of the schema, and its numbers add up.
 */
#include "build-config.h"
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "planjson.h"
#include "profile.h"

/* ------------------------------------------------------------------ */
/* In-test layers: "busy" spins `work` multiply-adds per element of its
 * output; "fail" refuses its forward; "loss" is a loss layer.          */

typedef struct {
	ph_shape in, out;
	int work;
	int fail;
	int cold; /* this many more calls are cold: 100 times the work */
} fake_state;

static int fake_forward(void *state, const ph_ctx *ctx, float *const *params, const float *x, float *y,
			ph_err *err)
{
	const fake_state *s = state;
	if (s->fail)
		return ph_fail(err, PH_EINVAL, "refused on purpose");
	int64_t n = ph_shape_numel(&s->out) * ctx->batch, in = ph_shape_numel(&s->in);
	int work = s->work;
	if (s->cold > 0) {
		((fake_state *)s)->cold--;
		work *= 100;
	}
	for (int64_t i = 0; i < n; i++) {
		float a = x[i % (in * ctx->batch)] + (params ? params[0][0] : 0);
		for (int k = 0; k < work; k++)
			a = a * 0.999f + 0.001f;
		y[i] = a;
	}
	return PH_OK;
}

static int fake_backward(void *state, const ph_ctx *ctx, float *const *params, float *const *grads,
			 const float *x, const float *y, const float *dy, float *dx, ph_err *err)
{
	const fake_state *s = state;
	int64_t n = ph_shape_numel(&s->in) * ctx->batch;
	for (int64_t i = 0; i < n; i++) {
		float a = dy ? dy[i % (ph_shape_numel(&s->out) * ctx->batch)] : (float)ctx->targets[0];
		for (int k = 0; k < s->work; k++)
			a = a * 0.999f + 0.001f;
		if (dx)
			dx[i] = a;
	}
	if (grads)
		grads[0][0] += 1;
	return PH_OK;
}

static int fake_meta(const void *state, ph_layer_meta *m, ph_err *err)
{
	return PH_OK;
}

static const ph_layer_ops busy_ops = {
	.head = PH_HEAD_NOOPT(ph_layer_ops, "busy", "spins"),
	.devices = PH_DEV_CPU,
	.meta = fake_meta,
	.forward = fake_forward,
	.backward = fake_backward,
};

static const ph_layer_ops loss_ops = {
	.head = PH_HEAD_NOOPT(ph_layer_ops, "loss", "a loss"),
	.devices = PH_DEV_CPU,
	.flags = PH_LAYER_LOSS,
	.meta = fake_meta,
	.forward = fake_forward,
	.backward = fake_backward,
};

#define NL 4
static ph_layer_cfg lcfg[NL];
static fake_state st[NL];
static ph_layer layers[NL];
static ph_model model;

/* busy0 [8] -> [8] (work 10), busy1 [8] -> [8] (work 2000, 100 params),
 * busy2 [8] -> [4] (work 10), loss [4] -> [2]. */
static void build_model(int batch)
{
	memset(lcfg, 0, sizeof lcfg);
	memset(st, 0, sizeof st);
	memset(layers, 0, sizeof layers);
	static const int work[NL] = { 10, 2000, 10, 10 };
	ph_shape in = { 1, { 8 } };
	for (int i = 0; i < NL; i++) {
		snprintf(lcfg[i].name, sizeof lcfg[i].name, i == NL - 1 ? "loss" : "busy%d", i);
		lcfg[i].ops = i == NL - 1 ? &loss_ops : &busy_ops;
		st[i].in = in;
		st[i].out = i == NL - 1 ? (ph_shape){ 1, { 2 } } : i == 2 ? (ph_shape){ 1, { 4 } } : in;
		st[i].work = work[i];
		ph_layer *l = &layers[i];
		l->cfg = &lcfg[i];
		l->ops = lcfg[i].ops;
		l->state = &st[i];
		l->in = in;
		l->meta.out = st[i].out;
		l->meta.fwd_flops = 2.0 * ph_shape_numel(&st[i].out) * work[i];
		l->meta.bwd_flops = 2 * l->meta.fwd_flops;
		l->meta.nparams = 1;
		strcpy(l->meta.params[0].name, "w");
		l->meta.params[0].shape = (ph_shape){ 1, { i == 1 ? 100 : 1 } };
		l->meta.params[0].init = PH_INIT_UNIFORM;
		l->meta.params[0].init_arg = 0.1f;
		l->meta.saved_bytes = 16;
		l->meta.scratch_bytes = i == 1 ? 1000 : 0;
		l->param_numel = ph_shape_numel(&l->meta.params[0].shape);
		if (i == NL - 1)
			l->meta.targets_per_sample = 1;
		in = st[i].out;
	}
	model = (ph_model){ .layers = layers, .n = NL, .input = { 1, { 8 } }, .max_batch = batch,
			    .targets_per_sample = 1 };
}

static char tmpdir[256];

static void setup(void)
{
	snprintf(tmpdir, sizeof tmpdir, "/tmp/ph-test-profile-XXXXXX");
	ck_assert_ptr_nonnull(mkdtemp(tmpdir));
	build_model(4);
}

static void teardown(void)
{
	char cmd[512];
	snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", tmpdir);
}

/* ------------------------------------------------------------------ */

START_TEST(test_key)
{
	char text[4096];
	uint64_t k0 = ph_profile_key(&model, 1, "cpu X", text, sizeof text);
	ck_assert_ptr_nonnull(strstr(text, "busy code ")); /* the plugin file's digest */
	ck_assert_ptr_nonnull(strstr(text, " [8] -> [8] params [100]"));
	ck_assert_ptr_nonnull(strstr(text, " [4] -> [2]"));
	ck_assert_ptr_nonnull(strstr(text, "version " PACKAGE_VERSION));
	ck_assert_ptr_nonnull(strstr(text, "micro_batch 4"));
	ck_assert_ptr_nonnull(strstr(text, "threads 1"));
	ck_assert_ptr_nonnull(strstr(text, "device cpu X"));
	ck_assert(k0 == ph_profile_key(&model, 1, "cpu X", NULL, 0));
	ck_assert(k0 != ph_profile_key(&model, 2, "cpu X", NULL, 0));
	ck_assert(k0 != ph_profile_key(&model, 1, "cpu Y", NULL, 0));
	build_model(8);
	ck_assert(k0 != ph_profile_key(&model, 1, "cpu X", NULL, 0));
	build_model(4);
	layers[1].meta.params[0].shape.d[0] = 101;
	ck_assert(k0 != ph_profile_key(&model, 1, "cpu X", NULL, 0));
	build_model(4);
	layers[2].meta.out.d[0] = 5;
	ck_assert(k0 != ph_profile_key(&model, 1, "cpu X", NULL, 0));
	build_model(4);
	layers[0].in.d[0] = 9;
	ck_assert(k0 != ph_profile_key(&model, 1, "cpu X", NULL, 0));
	build_model(4);
	layers[0].ops = &loss_ops;
	ck_assert(k0 != ph_profile_key(&model, 1, "cpu X", NULL, 0));
	/* A layer's name is not part of the key (the file checks it). */
	build_model(4);
	strcpy(lcfg[0].name, "renamed");
	ck_assert(k0 == ph_profile_key(&model, 1, "cpu X", NULL, 0));
	/* A short buffer is truncated, not overrun; the key is the same. */
	char small[16];
	memset(small, 'z', sizeof small);
	ck_assert(k0 == ph_profile_key(&model, 1, "cpu X", small, 8));
	ck_assert_uint_eq(strlen(small), 7);
	ck_assert_int_eq(small[9], 'z');
}
END_TEST

START_TEST(test_cache_path)
{
	char buf[512];
	ph_err err = { { 0 } };
	ck_assert_int_eq(ph_profile_cache_path("/x/y/", 0xabcULL, buf, sizeof buf, &err), PH_OK);
	ck_assert_str_eq(buf, "/x/y/profile-0000000000000abc.txt");
	setenv("XDG_CACHE_HOME", "/xdg", 1);
	setenv("HOME", "/home/u", 1);
	ck_assert_int_eq(ph_profile_cache_path(NULL, 1, buf, sizeof buf, &err), PH_OK);
	ck_assert_str_eq(buf, "/xdg/pipehost/profile-0000000000000001.txt");
	unsetenv("XDG_CACHE_HOME");
	ck_assert_int_eq(ph_profile_cache_path("", 1, buf, sizeof buf, &err), PH_OK);
	ck_assert_str_eq(buf, "/home/u/.cache/pipehost/profile-0000000000000001.txt");
	unsetenv("HOME");
	ck_assert_int_eq(ph_profile_cache_path(NULL, 1, buf, sizeof buf, &err), PH_EINVAL);
	ck_assert_ptr_nonnull(strstr(err.msg, "profile_cache"));
	ck_assert_int_eq(ph_profile_cache_path("/x", 1, buf, 10, &err), PH_EINVAL);
}
END_TEST

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	ck_assert_ptr_nonnull(f);
	fputs(text, f);
	fclose(f);
}

START_TEST(test_cache_roundtrip)
{
	char path[512];
	snprintf(path, sizeof path, "%s/a/b/profile.txt", tmpdir);
	double f[NL] = { 1e-3, 2.5e-2, 3e-6, 0 }, b[NL] = { 2e-3, 5e-2, 6e-6, 1e-9 };
	double f2[NL], b2[NL];
	ph_err err = { { 0 } };
	ck_assert_int_eq(ph_profile_cache_read(path, 42, &model, f2, b2, &err), 0);
	ck_assert_str_eq(err.msg, ""); /* simply absent */
	ck_assert_int_eq(ph_profile_cache_write(path, 42, &model, f, b, &err), PH_OK);
	ck_assert_int_eq(ph_profile_cache_read(path, 42, &model, f2, b2, &err), 1);
	for (int i = 0; i < NL; i++) {
		ck_assert(fabs(f2[i] - f[i]) <= 1e-9 * f[i]);
		ck_assert(fabs(b2[i] - b[i]) <= 1e-9 * b[i]);
	}
	/* Another key, another layer count: misses that say why.  A renamed
	 * layer is a hit: names do not move a layer's time. */
	ck_assert_int_eq(ph_profile_cache_read(path, 43, &model, f2, b2, &err), 0);
	ck_assert_ptr_nonnull(strstr(err.msg, "holds key 000000000000002a"));
	strcpy(lcfg[2].name, "other");
	ck_assert_int_eq(ph_profile_cache_read(path, 42, &model, f2, b2, &err), 1);
	build_model(4);
	model.n = 3;
	ck_assert_int_eq(ph_profile_cache_read(path, 42, &model, f2, b2, &err), 0);
	ck_assert_ptr_nonnull(strstr(err.msg, "layer count"));
	model.n = NL;
	/* Truncated, foreign, negative. */
	write_file(path, "pipehost-profile 1\nkey 000000000000002a\nlayers 4\nlayer 0 busy 1e-3 1e-3 busy0\n");
	ck_assert_int_eq(ph_profile_cache_read(path, 42, &model, f2, b2, &err), 0);
	ck_assert_ptr_nonnull(strstr(err.msg, "truncated after 1 of 4"));
	write_file(path, "hello\n");
	ck_assert_int_eq(ph_profile_cache_read(path, 42, &model, f2, b2, &err), 0);
	ck_assert_ptr_nonnull(strstr(err.msg, "not a version 1 profile"));
	/* Times no measurement gives: negative, NaN, infinite, and absurdly
	 * large (1e308 once was a hit, and --simulate printed "inf s"); the
	 * bound itself, PH_PROFILE_MAX_S, is a time. */
	static const char *const bad_times[] = { "-1 1e-3", "nan 1e-3", "inf 1e-3", "1e-3 -inf", "1e308 1e-3",
						 "1e-3 1.1e6" };
	for (size_t k = 0; k < sizeof bad_times / sizeof *bad_times; k++) {
		char text[300];
		snprintf(text, sizeof text, "pipehost-profile 1\nkey 2a\nlayers 4\nlayer 0 busy 1e-3 1e-3 busy0\n"
			 "layer 1 busy %s busy1\n", bad_times[k]);
		write_file(path, text);
		ck_assert_int_eq(ph_profile_cache_read(path, 42, &model, f2, b2, &err), 0);
		ck_assert_msg(strstr(err.msg, "profile.txt:5: layer 1 (busy1): ") && strstr(err.msg, " is not a measurement (0 to 1e+06 s)"),
			      "%s: %s", bad_times[k], err.msg);
	}
	write_file(path, "pipehost-profile 1\nkey 2a\nlayers 4\nlayer 0 busy 1e6 0 busy0\nlayer 1 busy 0 1e6 busy1\n"
			 "layer 2 busy 0 0 busy2\nlayer 3 loss 1e-9 1e-9 loss\n");
	ck_assert_int_eq(ph_profile_cache_read(path, 42, &model, f2, b2, &err), 1);
	ck_assert(f2[0] == 1e6 && b2[1] == 1e6);
	/* every time 0: no measurement, and nothing to balance (it once was a
	 * hit, then the run was refused for costs of 0 under cost = profile) */
	write_file(path, "pipehost-profile 1\nkey 2a\nlayers 4\nlayer 0 busy 0 0 a\nlayer 1 busy 0 0 b\n"
			 "layer 2 busy 0 0 c\nlayer 3 loss 0 0 d\n");
	ck_assert_int_eq(ph_profile_cache_read(path, 42, &model, f2, b2, &err), 0);
	ck_assert_ptr_nonnull(strstr(err.msg, "every layer's time is 0"));
	/* A directory that cannot be made. */
	write_file(path, "x");
	char bad[600];
	snprintf(bad, sizeof bad, "%s/profile.txt/sub/p.txt", path);
	ck_assert_int_ne(ph_profile_cache_write(bad, 42, &model, f, b, &err), PH_OK);
	ck_assert_ptr_nonnull(strstr(err.msg, "cannot create"));
}
END_TEST

static char *read_all(FILE *f)
{
	fflush(f);
	long n = ftell(f);
	rewind(f);
	char *s = calloc((size_t)n + 1, 1);
	ck_assert_int_eq((long)fread(s, 1, (size_t)n, f), n);
	return s;
}

START_TEST(test_profile_costs)
{
	double f[NL], b[NL], f2[NL], b2[NL];
	ph_err err = { { 0 } };
	FILE *out = tmpfile();
	ck_assert_int_eq(ph_profile_costs(&model, tmpdir, f, b, out, &err), PH_OK);
	char *s = read_all(out);
	ck_assert_msg(strstr(s, "profile: measuring 4 layers on cpu") != NULL, "%s", s);
	ck_assert_msg(strstr(s, "cached in") != NULL, "%s", s);
	ck_assert_msg(strstr(s, "busy1") != NULL && strstr(s, "fwd ms") != NULL, "%s", s);
	free(s);
	fclose(out);
	for (int i = 0; i < NL; i++)
		ck_assert(f[i] > 0 && b[i] > 0);
	/* 200 times the work per element: clearly slower. */
	ck_assert_msg(f[1] > 5 * f[0] && b[1] > 5 * b[0], "fwd %g vs %g, bwd %g vs %g", f[1], f[0], b[1], b[0]);

	out = tmpfile();
	ck_assert_int_eq(ph_profile_costs(&model, tmpdir, f2, b2, out, &err), PH_OK);
	s = read_all(out);
	ck_assert_msg(strstr(s, "cache hit") != NULL && strstr(s, "profile: measuring") == NULL, "%s", s);
	free(s);
	fclose(out);
	for (int i = 0; i < NL; i++) {
		ck_assert(fabs(f2[i] - f[i]) <= 1e-8 * f[i]);
		ck_assert(fabs(b2[i] - b[i]) <= 1e-8 * b[i]);
	}
	/* Another micro-batch size is another key: measured again, silently. */
	build_model(2);
	ck_assert_int_eq(ph_profile_costs(&model, tmpdir, f2, b2, NULL, &err), PH_OK);
	int files = 0;
	char cmd[400];
	snprintf(cmd, sizeof cmd, "ls '%s' | grep -c '^profile-[0-9a-f]\\{16\\}\\.txt$'", tmpdir);
	FILE *p = popen(cmd, "r");
	ck_assert_int_eq(fscanf(p, "%d", &files), 1);
	pclose(p);
	ck_assert_int_eq(files, 2);
}
END_TEST

START_TEST(test_profile_errors)
{
	double f[NL], b[NL];
	ph_err err = { { 0 } };
	st[2].fail = 1;
	ck_assert_int_eq(ph_profile_costs(&model, tmpdir, f, b, NULL, &err), PH_EINVAL);
	ck_assert_str_eq(err.msg, "profile: layer busy2 (busy) forward: refused on purpose");
	/* An unwritable cache is a note, not an error. */
	st[2].fail = 0;
	char file[400];
	snprintf(file, sizeof file, "%s/plain", tmpdir);
	write_file(file, "x");
	FILE *out = tmpfile();
	ck_assert_int_eq(ph_profile_costs(&model, file, f, b, out, &err), PH_OK);
	char *s = read_all(out);
	ck_assert_msg(strstr(s, "profile: not cached:") != NULL, "%s", s);
	free(s);
	fclose(out);
	model.max_batch = 0;
	ck_assert_int_eq(ph_profile_costs(&model, tmpdir, f, b, NULL, &err), PH_EINVAL);
}
END_TEST

/* cost = auto with a micro-batch of 4M samples: measuring it would take
 * minutes (the FLOPs of one sample once stood for those of the whole
 * micro-batch, and --plan measured for minutes in 10+ GB).  It plans on
 * the FLOPs and says why, at once.  And cost = profile, asked for, at a
 * micro-batch whose buffers exceed what the process may map: refused with
 * both figures before anything is allocated. */
START_TEST(test_profile_huge_batch)
{
	static ph_config c;
	memset(&c, 0, sizeof c);
	c.part.cost = PH_COST_AUTO;
	c.run.stages = 2;
	c.run.chunks = 1;
	c.run.threads = 1;
	c.run.replicas = 1;
	c.comm.size = 1;
	snprintf(c.part.profile_cache, sizeof c.part.profile_cache, "off");
	build_model(1 << 22);
	double f[NL], b[NL];
	int used = 1;
	ph_err err = { { 0 } };
	FILE *out = tmpfile();
	ck_assert_int_eq(ph_profile_costs_for_run(&model, &c, NULL, f, b, &used, out, &err), PH_OK);
	ck_assert_int_eq(used, 0);
	char *s = read_all(out);
	ck_assert_msg(strstr(s, "cost: flops ([partition] cost = auto: ") == s && !strstr(s, "profile: measuring"), "%s", s);
	free(s);
	fclose(out);
	/* under ulimit -v (this test's own process: Check forks each test) */
	const char *fork_mode = getenv("CK_FORK");
	struct rlimit rl;
	if ((fork_mode && !strcmp(fork_mode, "no")) || getenv("ASAN_OPTIONS") || getrlimit(RLIMIT_AS, &rl))
		return;
	/* 2 GiB more than this process maps already */
	long vm_kib = 0;
	char line[256];
	FILE *st = fopen("/proc/self/status", "r");
	while (st && fgets(line, sizeof line, st))
		if (sscanf(line, "VmSize: %ld kB", &vm_kib) == 1)
			break;
	if (st)
		fclose(st);
	rl.rlim_cur = ((rlim_t)vm_kib << 10) + ((rlim_t)2 << 30);
	if (rl.rlim_max != RLIM_INFINITY && rl.rlim_cur > rl.rlim_max)
		return;
	if (setrlimit(RLIMIT_AS, &rl))
		return;
	build_model(1 << 26); /* ~8 GiB a layer */
	c.part.cost = PH_COST_PROFILE;
	ck_assert_int_eq(ph_profile_costs_for_run(&model, &c, NULL, f, b, &used, NULL, &err), PH_EINVAL);
	ck_assert_msg(strstr(err.msg, "profile: measuring layer busy") == err.msg &&
		      strstr(err.msg, " at micro-batch 67108864 needs ~") && strstr(err.msg, " leaves ") &&
		      strstr(err.msg, "; lower [run] batch"),
		      "%s", err.msg);
}
END_TEST

/* The steady state: a layer whose first calls are cold (100 times the
 * work, as a first touch of its pages would be) is timed by its warm
 * calls: the warm-up absorbs two, the median drops a third.  The margin
 * (3x against 100x) keeps this about structure, not speed.  And
 * profile_cache = off neither reads nor writes a file. */
START_TEST(test_profile_steady)
{
	double warm_f[NL], warm_b[NL], f[NL], b[NL];
	ph_err err = { { 0 } };
	FILE *out = tmpfile();
	ck_assert_int_eq(ph_profile_costs(&model, "off", warm_f, warm_b, out, &err), PH_OK);
	char *s = read_all(out);
	ck_assert_msg(strstr(s, "profile: measuring") != NULL && strstr(s, "cache") == NULL, "%s", s);
	ck_assert_msg(access("off", F_OK) != 0, "profile_cache = off made a directory named off");
	free(s);
	fclose(out);
	st[1].cold = 3;
	ck_assert_int_eq(ph_profile_costs(&model, "off", f, b, NULL, &err), PH_OK);
	ck_assert_int_eq(st[1].cold, 0);
	ck_assert_msg(f[1] < 3 * warm_f[1], "cold calls reached the median: %g s against %g s warm", f[1], warm_f[1]);
	for (int i = 0; i < NL; i++)
		ck_assert(f[i] > 0 && b[i] > 0);
}
END_TEST

/* ------------------------------------------------------------------ */
/* JSON                                                                 */

static const ph_schedule_ops fake_sched = { .head = PH_HEAD_NOOPT(ph_schedule_ops, "1f1b", "") };
static const ph_partitioner_ops fake_part = { .head = PH_HEAD_NOOPT(ph_partitioner_ops, "dp", "") };

static cJSON *plan_json(const double *fs, const double *bs)
{
	static ph_config c;
	memset(&c, 0, sizeof c);
	c.schedule = &fake_sched;
	c.partitioner = &fake_part;
	c.optim.type = PH_OPTIM_ADAMW;
	c.part.cost = fs ? PH_COST_PROFILE : PH_COST_FLOPS;
	c.part.memory_gib = 2;
	snprintf(c.run.devices, sizeof c.run.devices, "cpu");
	static int first[3] = { 0, 2, 4 }, slots[2] = { 2, 1 };
	ph_plan p = { .ranks = 2, .v = 1, .nchunks = 2, .m = 4, .first = first, .slots = slots };
	FILE *f = tmpfile();
	ph_err err = { { 0 } };
	ck_assert_int_eq(ph_plan_write_json_costs(f, &p, &model, &c, fs, bs, &err), PH_OK);
	char *s = read_all(f);
	fclose(f);
	cJSON *j = cJSON_Parse(s);
	ck_assert_msg(j != NULL, "not JSON: %s", s);
	free(s);
	return j;
}

static double num(const cJSON *o, const char *k)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
	ck_assert_msg(cJSON_IsNumber(v), "%s is not a number", k);
	return v->valuedouble;
}

static const char *str(const cJSON *o, const char *k)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
	ck_assert_msg(cJSON_IsString(v), "%s is not a string", k);
	return v->valuestring;
}

START_TEST(test_json)
{
	cJSON *j = plan_json(NULL, NULL);
	ck_assert_str_eq(str(j, "format"), "pipehost-plan");
	ck_assert_int_eq((int)num(j, "version"), PH_PLAN_JSON_VERSION);
	ck_assert_str_eq(str(j, "schedule"), "1f1b");
	ck_assert_str_eq(str(j, "partitioner"), "dp");
	ck_assert_str_eq(str(j, "cost_source"), "flops");
	ck_assert_str_eq(str(j, "cuts"), "all");
	ck_assert_int_eq((int)num(j, "p"), 2);
	ck_assert_int_eq((int)num(j, "v"), 1);
	ck_assert_int_eq((int)num(j, "m"), 4);
	ck_assert_int_eq((int)num(j, "micro_batch"), 4);
	ck_assert_int_eq((int)num(j, "batch"), 16);
	ck_assert_int_eq((int)num(j, "replicas"), 1); /* documented since 2026-12-07 */
	ck_assert_int_eq((int)num(j, "batch"), (int)(num(j, "m") * num(j, "micro_batch") * num(j, "replicas")));
	ck_assert_int_eq((int)num(j, "optimizer_state_per_param"), 2);
	ck_assert(num(j, "memory_limit_bytes") == 2.0 * 1024 * 1024 * 1024);
	const cJSON *stages = cJSON_GetObjectItemCaseSensitive(j, "stages");
	ck_assert_int_eq(cJSON_GetArraySize(stages), 2);
	double share = 0, params = 0, peak = 0;
	for (int k = 0; k < 2; k++) {
		const cJSON *s = cJSON_GetArrayItem(stages, k);
		ck_assert_int_eq((int)num(s, "chunk"), k);
		ck_assert_int_eq((int)num(s, "rank"), k);
		ck_assert_str_eq(str(s, "device"), "cpu");
		ck_assert_int_eq((int)num(s, "first"), 2 * k);
		ck_assert_int_eq((int)num(s, "last"), 2 * k + 1);
		ck_assert_str_eq(str(s, "first_name"), k ? "busy2" : "busy0");
		ck_assert_str_eq(str(s, "last_name"), k ? "loss" : "busy1");
		ck_assert_int_eq((int)num(s, "in_flight"), k ? 1 : 2);
		const cJSON *ls = cJSON_GetObjectItemCaseSensitive(s, "layers");
		ck_assert_int_eq(cJSON_GetArraySize(ls), 2);
		double lp = 0, lf = 0;
		const cJSON *l;
		cJSON_ArrayForEach(l, ls)
		{
			lp += num(l, "params");
			lf += num(l, "fwd_flops") + num(l, "bwd_flops");
			str(l, "name");
			str(l, "type");
			ck_assert(cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(l, "out")));
			ck_assert(cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(l, "in")));
			ck_assert(cJSON_IsBool(cJSON_GetObjectItemCaseSensitive(l, "cut_after")));
			ck_assert_ptr_null(cJSON_GetObjectItemCaseSensitive(l, "fwd_s"));
		}
		ck_assert(lp == num(s, "params"));
		ck_assert(fabs(lf - num(s, "fwd_flops") - num(s, "bwd_flops")) < 1e-6);
		share += num(s, "cost_share");
		params += num(s, "params");
		const cJSON *mem = cJSON_GetObjectItemCaseSensitive(s, "memory");
		double p4 = 4 * num(s, "params");
		ck_assert(num(mem, "params") == p4);
		ck_assert(num(mem, "grads") == p4);
		ck_assert(num(mem, "optimizer") == 2 * p4);
		ck_assert(num(mem, "total") == num(mem, "params") + num(mem, "grads") + num(mem, "optimizer") +
						       num(mem, "activations") + num(mem, "scratch"));
		if (num(mem, "total") > peak)
			peak = num(mem, "total");
	}
	/* Stage 0: busy0 (out 8 floats + 16 saved) + busy1 (same) per sample,
	 * plus the gradient of the stage's output (8 floats) the next stage
	 * writes back, 4 samples, 2 in flight; then once, the backward's
	 * gradient buffer for busy1's input (8 floats a sample; the other
	 * buffer has no turn in a stage of two layers); scratch 1000. */
	const cJSON *m0 = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(stages, 0), "memory");
	ck_assert_msg(num(m0, "activations") == (2 * (32 + 16) + 32) * 4 * 2 + 8 * 4 * 4, "activations %.0f", num(m0, "activations"));
	ck_assert(num(m0, "scratch") == 1000);
	ck_assert(fabs(share - 1) < 1e-12);
	const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "totals");
	ck_assert(num(t, "params") == params);
	ck_assert(num(t, "params") == 103);
	ck_assert_int_eq((int)num(t, "layers"), NL);
	ck_assert(num(t, "memory_peak_bytes") == peak);
	ck_assert(num(t, "max_over_mean_cost") >= 1);
	cJSON_Delete(j);

	/* With measured costs: per layer and per chunk seconds. */
	double fs[NL] = { 1, 2, 3, 4 }, bs[NL] = { 1, 1, 1, 1 };
	j = plan_json(fs, bs);
	ck_assert_str_eq(str(j, "cost_source"), "profile");
	const cJSON *s1 = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "stages"), 1);
	ck_assert(num(s1, "fwd_s") == 7 && num(s1, "bwd_s") == 2);
	ck_assert(fabs(num(s1, "measured_share") - 9.0 / 14) < 1e-12);
	ck_assert(num(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(s1, "layers"), 1), "fwd_s") == 4);
	ck_assert(num(cJSON_GetObjectItemCaseSensitive(j, "totals"), "measured_s") == 14);
	ck_assert(fabs(num(cJSON_GetObjectItemCaseSensitive(j, "totals"), "max_over_mean_measured") - 18.0 / 14) < 1e-12);
	cJSON_Delete(j);
}
END_TEST

START_TEST(test_json_write_error)
{
	ph_config c;
	memset(&c, 0, sizeof c);
	c.schedule = &fake_sched;
	c.partitioner = &fake_part;
	int first[2] = { 0, NL }, slots[1] = { 1 };
	ph_plan p = { .ranks = 1, .v = 1, .nchunks = 1, .m = 1, .first = first, .slots = slots };
	FILE *f = fopen("/dev/full", "w");
	if (!f)
		return; /* no /dev/full here */
	ph_err err = { { 0 } };
	ck_assert_int_eq(ph_plan_write_json(f, &p, &model, &c, &err), PH_EIO);
	ck_assert_ptr_nonnull(strstr(err.msg, "cannot write the plan as JSON"));
	fclose(f);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("profile");
	TCase *tc = tcase_create("core");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_key);
	tcase_add_test(tc, test_cache_path);
	tcase_add_test(tc, test_cache_roundtrip);
	tcase_add_test(tc, test_profile_costs);
	tcase_add_test(tc, test_profile_steady);
	tcase_add_test(tc, test_profile_huge_batch);
	tcase_add_test(tc, test_profile_errors);
	tcase_add_test(tc, test_json);
	tcase_add_test(tc, test_json_write_error);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
