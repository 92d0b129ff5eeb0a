/* SPDX-License-Identifier: MIT */
/*
 * tests/moe-dump: run the `moe` layer once, forward and backward, and write
 * everything a reference implementation needs to redo it (x, the
 * parameters, dy, the second expert's random draws) and what it must match
 * (y, dx, the parameter gradients), for tests/reference/moe_reference.py.
 *
 *   moe-dump OUT B T d [KEY=VALUE ...]      (the layer's options)
 *
 * OUT: for each array a line "NAME COUNT\n" then COUNT float32 values.
 * Inputs are U(-1, 1) (parameters times 0.5) from a fixed seed; training
 * context seed 1234, step 7, micro-batch 3, layer 2, loss_scale 0.25.
 * The draws are computed here from docs/moe.md's key, not taken from the
 * layer, so a layer drawing otherwise shows as a mismatch.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layer-harness.h"

#define MOE_SITE_ROUTE 0x6d6f652d726f7574ull /* "moe-rout", as docs/moe.md */

static void put(FILE *f, const char *name, const float *v, int64_t n)
{
	fprintf(f, "%s %lld\n", name, (long long)n);
	fwrite(v, sizeof *v, (size_t)n, f);
}

static int g_argc, g_rc;
static char **g_argv;

static int dump(int argc, char **argv)
{
	if (argc < 5) {
		fprintf(stderr, "usage: moe-dump OUT B T d [KEY=VALUE ...]\n");
		return 2;
	}
	const int B = atoi(argv[2]), T = atoi(argv[3]), d = atoi(argv[4]);
	const char *kv[64] = { 0 };
	char buf[64][128];
	int nkv = 0;
	for (int i = 5; i < argc && nkv < 62; i++) {
		snprintf(buf[i - 5], sizeof buf[0], "%s", argv[i]);
		char *eq = strchr(buf[i - 5], '=');
		if (!eq)
			return 2;
		*eq = 0;
		kv[nkv++] = buf[i - 5];
		kv[nkv++] = eq + 1;
	}
	rng_seed(27);
	inst L;
	const ph_ctx ctx = { .batch = B, .training = 1, .seed = 1234, .step = 7, .microbatch = 3,
			     .layer = 2, .device = PH_DEV_CPU, .loss_scale = 0.25f };
	inst_create(&L, "moe", kv, (ph_shape){ 2, { T, d } }, B, ctx);
	fill_uniform(L.x, L.nx, -1, 1);
	inst_draw(&L, 0.5f, 1);
	ph_err e = { { 0 } };
	if (ph_layer_inst_forward(&L, &e) || ph_layer_inst_backward(&L, L.dx, &e)) {
		fprintf(stderr, "moe-dump: %s\n", e.msg);
		return 1;
	}
	/* the layer's grads started at zero (calloc): they are the gradients */
	const int64_t N = (int64_t)B * T;
	float *u = malloc((size_t)N * sizeof *u);
	const uint64_t key = ph_mix64(ph_rng_key(1234, 7, 3, 2) ^ MOE_SITE_ROUTE);
	for (int64_t n = 0; n < N; n++)
		u[n] = ph_rng_uniform(key, (uint64_t)n);
	FILE *f = fopen(argv[1], "wb");
	if (!f)
		return 1;
	put(f, "x", L.x, L.nx);
	put(f, "dy", L.r, L.ny);
	put(f, "u", u, N);
	for (int p = 0; p < L.meta.nparams; p++)
		put(f, L.meta.params[p].name, L.params[p], L.pn[p]);
	put(f, "y", L.y, L.ny);
	put(f, "dx", L.dx, L.nx);
	for (int p = 0; p < L.meta.nparams; p++) {
		char name[48];
		snprintf(name, sizeof name, "d_%s", L.meta.params[p].name);
		put(f, name, L.grads[p], L.pn[p]);
	}
	free(u);
	inst_close(&L);
	return fclose(f) ? 1 : 0;
}

/* The harness's checks need a running Check test. */
START_TEST(run_dump)
{
	g_rc = dump(g_argc, g_argv);
}
END_TEST

int main(int argc, char **argv)
{
	g_argc = argc, g_argv = argv;
	Suite *s = suite_create("moe-dump");
	TCase *tc = tcase_create("dump");
	tcase_add_test(tc, run_dump);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_set_fork_status(sr, CK_NOFORK);
	srunner_run_all(sr, CK_SILENT);
	const int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : g_rc;
}
