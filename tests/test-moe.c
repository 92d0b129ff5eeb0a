/* SPDX-License-Identifier: MIT */
/*
 * tests/test-moe: the `moe` layer (plugins/layers/moe.c, moe_*.c).
 *  - finite-difference gradients of the gate and every expert through the
 *    host's check (fd-harness.h), for top-1, top-2, a capacity that drops
 *    tokens, capacity_factor = 0 (dropless), the random second expert and
 *    residual = no; the harness's objective is sum(y r), so these run with
 *    aux_coef = 0;
 *  - the auxiliary loss's gradient by finite differences of the objective
 *    sum(y r) + ts coef N aux (aux as the layer reports it; ts = 1 / the
 *    step's tokens, from objective_samples, whatever the loss's targets);
 *  - drops: a dropped token's output is x (residual) or 0, and the reported
 *    drop fraction counts them;
 *  - meta: sharded expert tensors, FLOPs at capacity;
 *  - bad configurations fail in create() with one line.
 */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fd-harness.h"

/* ------------------------------------------------------------------ */
/* A one-replica group that records what the layer reports.             */

static double rep_aux, rep_load, rep_drop;
static int rep_calls;

static void rec_report(const ph_group *g, const ph_ctx *ctx, const char *key, double v)
{
	(void)g, (void)ctx;
	rep_calls++;
	if (!strcmp(key, "aux_loss"))
		rep_aux = v;
	else if (!strcmp(key, "load_max_over_mean"))
		rep_load = v;
	else if (!strcmp(key, "drop_frac"))
		rep_drop = v;
}

static const ph_group one_group = { .struct_size = sizeof(ph_group), .size = 1, .rank = 0,
				    .report = rec_report };

static void open_moe(inst *L, const char *const *kv, ph_shape in, int batch, int group)
{
	inst_create(L, "moe", kv, in, batch,
		    (ph_ctx){ .batch = batch, .training = 1, .seed = 1234, .step = 7,
			      .microbatch = 3, .layer = 2, .device = PH_DEV_CPU, .loss_scale = 1.0f,
			      .group = group ? &one_group : NULL });
	fill_uniform(L->x, L->nx, -1, 1);
	inst_draw(L, 1.0f, 1);
}

static void run_fd(const char *const *kv, ph_shape in, int batch, uint64_t seed)
{
	rng_seed(seed);
	inst L;
	open_moe(&L, kv, in, batch, 0);
	gradcheck_with(&L, &(fd_check){ .eps = 1e-3f, .tol = 1e-2, .kinks = 1, .tensor_floor = 0.02 });
	inst_close(&L);
}

START_TEST(test_moe_grad_top2_always)
{
	run_fd(KV("experts", "4", "hidden", "6", "second_expert", "always", "aux_coef", "0",
		  "capacity_factor", "2"),
	       SHAPE(6, 5), 2, 2701);
}
END_TEST

START_TEST(test_moe_grad_top1)
{
	run_fd(KV("experts", "4", "top_k", "1", "hidden", "6", "aux_coef", "0"), SHAPE(6, 5), 2,
	       2702);
}
END_TEST

START_TEST(test_moe_grad_drops)
{
	/* C = ceil(0.5 * 2 * 6 / 4) = 2 slots for 12 choices per group: drops */
	run_fd(KV("experts", "4", "hidden", "6", "second_expert", "always", "aux_coef", "0",
		  "capacity_factor", "0.5", "group_size", "6"),
	       SHAPE(6, 5), 2, 2703);
}
END_TEST

START_TEST(test_moe_grad_dropless_random_noresidual)
{
	run_fd(KV("experts", "3", "hidden", "4", "aux_coef", "0", "capacity_factor", "0",
		  "group_size", "3", "residual", "no"),
	       SHAPE(6, 4), 2, 2704);
}
END_TEST

/* The objective with the auxiliary loss: sum(y r) + ts coef N aux, ts =
 * d(objective)/d(a loss per token). */
static double objective(inst *L, double coef, double ts)
{
	rep_aux = NAN;
	fwd(L);
	double s = 0;
	for (int64_t i = 0; i < L->ny; i++)
		s += (double)L->y[i] * L->r[i];
	const int64_t N = L->nx / L->in.d[L->in.ndim - 1];
	return s + ts * coef * (double)N * rep_aux;
}

/* The auxiliary loss's gradient against finite differences of the
 * objective, with the host's scales: loss_scale (per target of the loss;
 * dy carries it) and objective_samples (0: a caller that gives none, and
 * the layer takes loss_scale per token). */
static void aux_fd(float loss_scale, int64_t objective_samples, double token_scale)
{
	rng_seed(2705);
	inst L;
	open_moe(&L, KV("experts", "4", "hidden", "3", "aux_coef", "0.7", "group_size", "3",
			"second_expert", "always", "capacity_factor", "1"),
		 SHAPE(6, 4), 2, 1);
	L.ctx.loss_scale = loss_scale;
	L.ctx.objective_samples = objective_samples;
	/* dL/dr weights the outputs by loss_scale as the host's dy would */
	for (int64_t i = 0; i < L.ny; i++)
		L.r[i] *= loss_scale;
	fwd(&L);
	for (int p = 0; p < L.meta.nparams; p++)
		memset(L.grads[p], 0, (size_t)L.pn[p] * sizeof(float));
	bwd(&L, L.dx);
	const float eps = 1e-3f;
	double worst = 0;
	/* the gate, and x: where the auxiliary loss's gradient goes */
	float *vs[2] = { L.params[0], L.x };
	const float *an[2] = { L.grads[0], L.dx };
	const int64_t ns[2] = { L.pn[0], L.nx };
	for (int t = 0; t < 2; t++)
		for (int64_t i = 0; i < ns[t]; i++) {
			const float v = vs[t][i];
			vs[t][i] = v + eps;
			const double lp = objective(&L, 0.7, token_scale);
			vs[t][i] = v - eps;
			const double lm = objective(&L, 0.7, token_scale);
			vs[t][i] = v;
			const double num = (lp - lm) / (2.0 * eps), a = an[t][i];
			const double err = fabs(a - num) / fmax(fmax(fabs(a), fabs(num)), 1e-3);
			worst = fmax(worst, err);
			ck_assert_msg(err < 1e-2, "%s[%lld]: analytic %g, numeric %g (loss_scale %g, samples %lld)",
				      t ? "x" : "gate_weight", (long long)i, a, num, (double)loss_scale,
				      (long long)objective_samples);
		}
	ck_assert(isfinite(rep_aux) && rep_aux > 0);
	if (getenv("PH_TEST_VERBOSE"))
		fprintf(stderr, "moe aux: worst gradient error %.3g, aux %g\n", worst, rep_aux);
	inst_close(&L);
}

START_TEST(test_moe_grad_aux)
{
	/* a language model's loss: a target per token, 2 samples of 6 tokens
	 * in a step of 2 micro-batches (24 tokens): loss_scale 1/24 is per token */
	aux_fd(1.0f / 24, 4, 1.0 / 24);
	/* a harness that sets no objective_samples: loss_scale per token */
	aux_fd(0.25f, 0, 0.25);
	/* a classifier's loss after the mixture: a target per sample, 4 samples
	 * in the step, so loss_scale 1/4; the auxiliary loss is still a mean
	 * over the step's 24 tokens (it once took 1/4 per token: 6x too heavy) */
	aux_fd(0.25f, 4, 1.0 / 24);
}
END_TEST

/* Capacity 1 per expert and group, one expert: every token past the first
 * of its group is dropped and comes out as x (residual) or 0. */
START_TEST(test_moe_drops_residual)
{
	for (int res = 0; res < 2; res++) {
		rng_seed(2706);
		inst L;
		open_moe(&L, KV("experts", "1", "top_k", "1", "hidden", "3", "capacity_factor",
				"0.25", "group_size", "4", "residual", res ? "yes" : "no"),
			 SHAPE(8, 3), 2, 1);
		rep_calls = 0;
		fwd(&L);
		ck_assert_int_eq(rep_calls, 3);
		ck_assert_double_eq_tol(rep_drop, 0.75, 1e-12);
		ck_assert_double_eq_tol(rep_load, 1.0, 1e-12);
		/* one expert: probs are 1, aux = E * 1 * 1 */
		ck_assert_double_eq_tol(rep_aux, 1.0, 1e-6);
		for (int n = 0; n < 16; n++) {
			if (n % 4 == 0)
				continue; /* the group's first token: routed */
			for (int c = 0; c < 3; c++)
				ck_assert_float_eq(L.y[n * 3 + c], res ? L.x[n * 3 + c] : 0.0f);
		}
		inst_close(&L);
	}
}
END_TEST

START_TEST(test_moe_meta)
{
	rng_seed(2707);
	inst L;
	/* T 8, d 4, E 4, k 2, cf 1, S 8: C = 4; h 16 */
	open_moe(&L, KV("experts", "4", "hidden", "16", "capacity_factor", "1"), SHAPE(8, 4), 1,
		 0);
	ck_assert_int_eq(L.meta.nparams, 4);
	ck_assert_uint_eq(L.meta.sharded_params, 6u);
	ck_assert_int_eq(L.meta.params[1].shape.ndim, 3);
	ck_assert_int_eq(L.meta.params[1].shape.d[0], 4);
	ck_assert_int_eq(L.meta.params[3].no_decay, 1);
	/* 16 slots x 4 d h = 4096 expert FLOPs dominate; the gate 2 d E per token */
	const double slots = 4.0 * 4, experts = slots * (4.0 * 4 * 16);
	ck_assert(L.meta.fwd_flops >= experts + 8 * 2 * 4 * 4);
	ck_assert(L.meta.fwd_flops < 2.0 * (experts + 8 * 2 * 4 * 4)); /* gelu, biases at d = 4 */
	inst_close(&L);
}
END_TEST

/* gpt_block's mlp = moe: the whole block, split backward included. */
START_TEST(test_gpt_block_moe_grad)
{
	rng_seed(2708);
	inst L;
	inst_create(&L, "gpt_block",
		    KV("heads", "2", "mlp", "moe", "moe_experts", "4", "moe_capacity_factor", "1",
		       "moe_group_size", "2", "moe_aux_coef", "0"),
		    SHAPE(4, 8), 2,
		    (ph_ctx){ .batch = 2, .training = 1, .seed = 1234, .step = 7, .microbatch = 3,
			      .layer = 2, .device = PH_DEV_CPU, .loss_scale = 1.0f });
	fill_uniform(L.x, L.nx, -1, 1);
	inst_draw(&L, 0.5f, 1);
	ck_assert_int_eq(L.meta.nparams, 8);
	ck_assert_uint_eq(L.meta.sharded_params, (1u << 5) | (1u << 7));
	ck_assert_int_eq(L.meta.params[5].shape.d[1], 16); /* mlp_ratio 4 x 8 / top_k 2 */
	gradcheck_with(&L, &(fd_check){ .eps = 3e-3f, .tol = 1e-2, .richardson = 1, .kinks = 1,
					.split = 1, .tensor_floor = 0.02 });
	inst_close(&L);
}
END_TEST

START_TEST(test_moe_bad_config)
{
	ph_err e;
	ck_assert_int_eq(try_create("moe", KV("group_size", "3"), SHAPE(8, 4), &e), PH_EINVAL);
	ck_assert_msg(strstr(e.msg, "group_size = 3"), "%s", e.msg);
	ck_assert_int_eq(try_create("moe", KV("experts", "1"), SHAPE(8, 4), &e), PH_EINVAL);
	ck_assert_msg(strstr(e.msg, "top_k"), "%s", e.msg);
	ck_assert_int_eq(try_create("moe", NULL, SHAPE(2, 2, 2), &e), PH_EINVAL);
	ck_assert_msg(strstr(e.msg, "dimensions"), "%s", e.msg);
	ck_assert_int_eq(try_create("moe", NULL, SHAPE(8, 4), &e), PH_OK);
	ck_assert_int_eq(try_create("gpt_block", KV("heads", "2", "mlp", "moe", "moe_group_size", "3"),
				    SHAPE(8, 4), &e),
			 PH_EINVAL);
	ck_assert_msg(strstr(e.msg, "moe_group_size = 3"), "%s", e.msg);
}
END_TEST

static Suite *moe_suite(void)
{
	Suite *s = suite_create("moe");
	TCase *tc = tcase_create("moe");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_moe_grad_top2_always);
	tcase_add_test(tc, test_moe_grad_top1);
	tcase_add_test(tc, test_moe_grad_drops);
	tcase_add_test(tc, test_moe_grad_dropless_random_noresidual);
	tcase_add_test(tc, test_moe_grad_aux);
	tcase_add_test(tc, test_moe_drops_residual);
	tcase_add_test(tc, test_moe_meta);
	tcase_add_test(tc, test_gpt_block_moe_grad);
	tcase_add_test(tc, test_moe_bad_config);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(moe_suite());
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
