/* SPDX-License-Identifier: MIT */
/*
 * core/layer_call.c, the host's one way into a layer's compute hooks, on
 * fake layers that count their calls:
 *  - the one check of the micro-batch: a batch outside [0, max_batch] is
 *    refused with PH_EINTERNAL and a message naming both, for every hook,
 *    before the layer runs; 0 and max_batch themselves pass;
 *  - the device: a CPU call runs the layer's own hooks, a CUDA call its
 *    CUDA hooks (ph_layer_device_ops); a CUDA call to a layer without any
 *    is refused (PH_EUNSUPPORTED) before it runs;
 *  - a plugin of ABI 1.3 (a shorter ph_layer_ops) that looks at
 *    ctx->device itself gets its own hooks on CUDA, and whatever lies past
 *    its struct is never read as a `cuda` pointer;
 *  - ph_layer_destroy runs the twin's release(), then destroy();
 *  - ph_group_report_at (ABI 1.8) calls the group's report_device with
 *    the layer's arguments, and says 0 without calling anything for a
 *    host of ABI 1.7 (a shorter ph_group, garbage past it), a NULL hook
 *    or no group.
 */
#include <check.h>
#include <stddef.h>
#include <string.h>

#include "layer_call.h"

/* Which hook ran last, and how often any ran. */
static const char *last;
static int calls;

#define HOOKS(pre)                                                                                             \
	static int pre##_fwd(void *s, const ph_ctx *c, float *const *p, const float *x, float *y, ph_err *e)   \
	{                                                                                                      \
		last = #pre "_fwd", calls++;                                                                   \
		return PH_OK;                                                                                  \
	}                                                                                                      \
	static int pre##_bwd(void *s, const ph_ctx *c, float *const *p, float *const *g, const float *x,       \
			     const float *y, const float *dy, float *dx, ph_err *e)                            \
	{                                                                                                      \
		last = #pre "_bwd", calls++;                                                                   \
		return PH_OK;                                                                                  \
	}                                                                                                      \
	static int pre##_bin(void *s, const ph_ctx *c, float *const *p, const float *x, const float *y,        \
			     const float *dy, float *dx, ph_err *e)                                            \
	{                                                                                                      \
		last = #pre "_bin", calls++;                                                                   \
		return PH_OK;                                                                                  \
	}                                                                                                      \
	static int pre##_bw(void *s, const ph_ctx *c, float *const *p, float *const *g, const float *x,        \
			    const float *y, const float *dy, ph_err *e)                                        \
	{                                                                                                      \
		last = #pre "_bw", calls++;                                                                    \
		return PH_OK;                                                                                  \
	}
HOOKS(cpu)
HOOKS(gpu)

static char order[64];
static void cpu_destroy(void *s)
{
	strcat(order, "destroy;");
}
static void gpu_release(void *s)
{
	strcat(order, "release;");
}

static const ph_layer_device_ops twin = { .struct_size = sizeof(ph_layer_device_ops),
					  .forward = gpu_fwd,
					  .backward = gpu_bwd,
					  .backward_input = gpu_bin,
					  .backward_weight = gpu_bw,
					  .release = gpu_release };

static ph_layer_ops layer(const ph_layer_device_ops *cuda, uint32_t devices)
{
	ph_layer_ops o = { .head = PH_HEAD_NOOPT(ph_layer_ops, "fake", "counts its calls"),
			   .devices = devices,
			   .destroy = cpu_destroy,
			   .forward = cpu_fwd,
			   .backward = cpu_bwd,
			   .backward_input = cpu_bin,
			   .backward_weight = cpu_bw,
			   .cuda = cuda };
	return o;
}

/* Every hook through the wrapper: the first status that is not PH_OK, or PH_OK. */
static int call_all(const ph_layer_ops *o, int max_batch, const ph_ctx *c, ph_err *e)
{
	int rc;
	if ((rc = ph_layer_forward(o, NULL, max_batch, c, NULL, NULL, NULL, e)) ||
	    (rc = ph_layer_backward(o, NULL, max_batch, c, NULL, NULL, NULL, NULL, NULL, NULL, e)) ||
	    (rc = ph_layer_backward_input(o, NULL, max_batch, c, NULL, NULL, NULL, NULL, NULL, e)))
		return rc;
	return ph_layer_backward_weight(o, NULL, max_batch, c, NULL, NULL, NULL, NULL, NULL, e);
}

START_TEST(test_batch_checked_once_by_the_host)
{
	const ph_layer_ops o = layer(&twin, PH_DEV_CPU);
	for (int dev = PH_DEV_CPU; dev <= PH_DEV_CUDA; dev <<= 1) {
		const int bad[] = { -1, 5, 1 << 30 };
		for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
			ph_ctx c = { .batch = bad[i], .device = dev };
			ph_err e = { { 0 } };
			calls = 0;
			ck_assert_int_eq(ph_layer_forward(&o, NULL, 4, &c, NULL, NULL, NULL, &e), PH_EINTERNAL);
			char want[96];
			snprintf(want, sizeof want, "batch %d outside [0, 4], the micro-batch size fake was created for",
				 bad[i]);
			ck_assert_msg(strstr(e.msg, want), "message: %s", e.msg);
			ck_assert_int_eq(ph_layer_backward(&o, NULL, 4, &c, NULL, NULL, NULL, NULL, NULL, NULL, &e),
					 PH_EINTERNAL);
			ck_assert_int_eq(ph_layer_backward_input(&o, NULL, 4, &c, NULL, NULL, NULL, NULL, NULL, &e),
					 PH_EINTERNAL);
			ck_assert_int_eq(ph_layer_backward_weight(&o, NULL, 4, &c, NULL, NULL, NULL, NULL, NULL, &e),
					 PH_EINTERNAL);
			ck_assert_int_eq(calls, 0); /* refused before the layer ran */
		}
		for (int b = 0; b <= 4; b += 4) {
			ph_ctx c = { .batch = b, .device = dev };
			ph_err e = { { 0 } };
			calls = 0;
			ck_assert_int_eq(call_all(&o, 4, &c, &e), PH_OK);
			ck_assert_int_eq(calls, 4);
		}
	}
}
END_TEST

START_TEST(test_device_picks_the_hooks)
{
	const ph_layer_ops o = layer(&twin, PH_DEV_CPU);
	ph_err e = { { 0 } };
	ph_ctx cpu = { .batch = 2, .device = PH_DEV_CPU }, cuda = { .batch = 2, .device = PH_DEV_CUDA };
	ck_assert_int_eq(ph_layer_devices(&o), PH_DEV_CPU | PH_DEV_CUDA);
	ck_assert_int_eq(ph_layer_forward(&o, NULL, 2, &cpu, NULL, NULL, NULL, &e), PH_OK);
	ck_assert_str_eq(last, "cpu_fwd");
	ck_assert_int_eq(ph_layer_forward(&o, NULL, 2, &cuda, NULL, NULL, NULL, &e), PH_OK);
	ck_assert_str_eq(last, "gpu_fwd");
	ck_assert_int_eq(ph_layer_backward(&o, NULL, 2, &cuda, NULL, NULL, NULL, NULL, NULL, NULL, &e), PH_OK);
	ck_assert_str_eq(last, "gpu_bwd");
	ck_assert_int_eq(ph_layer_backward_input(&o, NULL, 2, &cuda, NULL, NULL, NULL, NULL, NULL, &e), PH_OK);
	ck_assert_str_eq(last, "gpu_bin");
	ck_assert_int_eq(ph_layer_backward_weight(&o, NULL, 2, &cuda, NULL, NULL, NULL, NULL, NULL, &e), PH_OK);
	ck_assert_str_eq(last, "gpu_bw");
	ck_assert_int_eq(ph_layer_backward_weight(&o, NULL, 2, &cpu, NULL, NULL, NULL, NULL, NULL, &e), PH_OK);
	ck_assert_str_eq(last, "cpu_bw");

	/* a build without its twin: CPU only, and said so on CUDA */
	const ph_layer_ops cpu_only = layer(NULL, PH_DEV_CPU);
	ck_assert_int_eq(ph_layer_devices(&cpu_only), PH_DEV_CPU);
	calls = 0;
	ck_assert_int_eq(call_all(&cpu_only, 2, &cuda, &e), PH_EUNSUPPORTED);
	ck_assert_msg(strstr(e.msg, "fake has no CUDA hooks"), "message: %s", e.msg);
	ck_assert_int_eq(calls, 0);
}
END_TEST

/* An ABI 1.3 layer: its ops struct ends before `cuda`, and what follows it
 * in memory is not a pointer to hooks. */
START_TEST(test_abi_1_3_layer_dispatches_itself)
{
	struct {
		ph_layer_ops o;
	} mem;
	mem.o = layer(NULL, PH_DEV_CPU | PH_DEV_CUDA);
	mem.o.head.abi_minor = 3;
	mem.o.head.struct_size = (uint32_t)offsetof(ph_layer_ops, cuda);
	memset(&mem.o.cuda, 0xa5, sizeof mem.o.cuda); /* garbage past the old struct */
	ck_assert_ptr_null(ph_layer_cuda_ops(&mem.o));
	ck_assert_int_eq(ph_layer_devices(&mem.o), PH_DEV_CPU | PH_DEV_CUDA);
	ph_ctx cuda = { .batch = 1, .device = PH_DEV_CUDA };
	ph_err e = { { 0 } };
	ck_assert_int_eq(ph_layer_forward(&mem.o, NULL, 1, &cuda, NULL, NULL, NULL, &e), PH_OK);
	ck_assert_str_eq(last, "cpu_fwd"); /* its own hook, which looks at ctx->device */
	ck_assert_int_eq(ph_layer_backward_weight(&mem.o, NULL, 1, &cuda, NULL, NULL, NULL, NULL, NULL, &e), PH_OK);
	ck_assert_str_eq(last, "cpu_bw");
	order[0] = 0;
	ph_layer_destroy(&mem.o, &mem); /* no twin to release */
	ck_assert_str_eq(order, "destroy;");
}
END_TEST

START_TEST(test_destroy_releases_the_twin_first)
{
	const ph_layer_ops o = layer(&twin, PH_DEV_CPU);
	int state;
	order[0] = 0;
	ph_layer_destroy(&o, &state);
	ck_assert_str_eq(order, "release;destroy;");
	order[0] = 0;
	ph_layer_destroy(&o, NULL); /* nothing was created: nothing to release */
	ck_assert_str_eq(order, "destroy;");
	/* a twin built before release() existed */
	ph_layer_device_ops old = twin;
	old.struct_size = (uint32_t)offsetof(ph_layer_device_ops, release);
	const ph_layer_ops o2 = layer(&old, PH_DEV_CPU);
	order[0] = 0;
	ph_layer_destroy(&o2, &state);
	ck_assert_str_eq(order, "destroy;");
}
END_TEST

/* What report_device got. */
static const ph_group *rd_g;
static const ph_ctx *rd_ctx;
static const char *rd_key;
static const float *rd_value;
static int rd_calls;

static void rec_report_device(const ph_group *g, const ph_ctx *ctx, const char *key, const float *value)
{
	rd_g = g, rd_ctx = ctx, rd_key = key, rd_value = value, rd_calls++;
}

START_TEST(test_report_at_only_where_the_host_has_it)
{
	ph_group g = { .struct_size = sizeof(ph_group), .size = 1, .report_device = rec_report_device };
	ph_ctx ctx = { .batch = 1, .training = 1, .group = &g };
	float v = 0.25f;
	rd_calls = 0;
	ck_assert_int_eq(ph_group_report_at(&ctx, "drop_frac", &v), 1);
	ck_assert_int_eq(rd_calls, 1);
	ck_assert_ptr_eq(rd_g, &g);
	ck_assert_ptr_eq(rd_ctx, &ctx);
	ck_assert_str_eq(rd_key, "drop_frac");
	ck_assert_ptr_eq(rd_value, &v);
	/* a 1.7 host's group ends at `host`: what follows is not a hook */
	g.struct_size = (uint32_t)offsetof(ph_group, report_device);
	memset(&g.report_device, 0xa5, sizeof g.report_device);
	ck_assert_int_eq(ph_group_report_at(&ctx, "drop_frac", &v), 0);
	g.struct_size = sizeof(ph_group);
	g.report_device = NULL;
	ck_assert_int_eq(ph_group_report_at(&ctx, "drop_frac", &v), 0);
	ctx.group = NULL;
	ck_assert_int_eq(ph_group_report_at(&ctx, "drop_frac", &v), 0);
	ck_assert_int_eq(ph_group_report_at(NULL, "drop_frac", &v), 0);
	ck_assert_int_eq(rd_calls, 1);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("layer-call");
	TCase *tc = tcase_create("dispatch");
	tcase_add_test(tc, test_batch_checked_once_by_the_host);
	tcase_add_test(tc, test_device_picks_the_hooks);
	tcase_add_test(tc, test_abi_1_3_layer_dispatches_itself);
	tcase_add_test(tc, test_destroy_releases_the_twin_first);
	tcase_add_test(tc, test_report_at_only_where_the_host_has_it);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? 1 : 0;
}
