/* SPDX-License-Identifier: MIT */
/* What every layer-plugin test binary needs: a seeded test RNG, loading a
 * layer plugin from $PH_LAYER_DIR (or the compile-time PH_LAYER_DIR),
 * configuring it through the host's own option parser (core/options.c),
 * and an instance of it on the CPU with its buffers (inst: the host's
 * core/layer_inst.h, which pipehost --check-plugin drives too).
 * Shared by test-layers.c, test-transformer.c and test-cuda-layers.c; each
 * includes it once, after <check.h>. */
#ifndef PH_TESTS_LAYER_HARNESS_H
#define PH_TESTS_LAYER_HARNESS_H

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pipehost/plugin.h>
#include "layer_inst.h"
#include "options.h"

#ifndef PH_LAYER_DIR
#define PH_LAYER_DIR "plugins/layers/.libs"
#endif

/* ------------------------------------------------------------------ */
/* Test randomness: core/layer_inst.h's splitmix64, fixed seed per test. */

static ph_rng64 test_rng;

static inline void rng_seed(uint64_t s)
{
	test_rng.state = s;
}

static inline uint64_t rng_next(void)
{
	return ph_rng64_next(&test_rng);
}

/* Uniform in [lo, hi). */
static inline float urand(float lo, float hi)
{
	return ph_rng64_uniform(&test_rng, lo, hi);
}

static inline void fill_uniform(float *p, int64_t n, float lo, float hi)
{
	ph_rng64_fill(&test_rng, p, n, lo, hi);
}

/* ------------------------------------------------------------------ */
/* Loading and configuring plugins.                                    */

static inline const ph_layer_ops *load_layer(const char *name)
{
	const char *dir = getenv("PH_LAYER_DIR");
	if (!dir || !*dir)
		dir = PH_LAYER_DIR;
	char path[4096];
	snprintf(path, sizeof path, "%s/%s.so", dir, name);
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	ck_assert_msg(h, "dlopen %s: %s (set PH_LAYER_DIR to the built plugins)", path, dlerror());
	ph_plugin_fn fn = (ph_plugin_fn)dlsym(h, PH_PLUGIN_SYMBOL);
	ck_assert_msg(fn, "%s: no %s symbol", path, PH_PLUGIN_SYMBOL);
	const ph_plugin *pl = fn();
	ck_assert_int_eq(pl->abi_major, PH_ABI_MAJOR);
	ck_assert_int_le(pl->abi_minor, PH_ABI_MINOR);
	ck_assert_ptr_nonnull(pl->layers);
	for (const ph_layer_ops *const *l = pl->layers; *l; l++)
		if (strcmp((*l)->head.name, name) == 0)
			return *l; /* the handle stays open for the test's life */
	ck_abort_msg("%s provides no layer named %s", path, name);
	return NULL;
}

/* Defaults, then key/value pairs (NULL-terminated list), as the host does. */
static inline void *make_config(const ph_layer_ops *ops, const char *const *kv)
{
	void *cfg = calloc(1, ops->head.config_size + 1);
	ph_err e = { { 0 } };
	int rc = ph_options_defaults(ops->head.options, cfg, &e);
	ck_assert_msg(rc == PH_OK, "%s defaults: %s", ops->head.name, e.msg);
	for (; kv && kv[0]; kv += 2) {
		rc = ph_options_set(ops->head.options, cfg, kv[0], kv[1], &e);
		ck_assert_msg(rc == PH_OK, "%s %s = %s: %s", ops->head.name, kv[0], kv[1], e.msg);
	}
	return cfg;
}

/* ------------------------------------------------------------------ */
/* A layer instance on the CPU with every buffer the host would hand it */
/* (core/layer_inst.h): the finite-difference harness's (fd-harness.h) */
/* and test-cuda-layers' CPU reference.                                */

typedef ph_layer_inst inst;

/* Create `type` configured with kv, max_batch = batch, ctx the context to
 * run with (core/layer_inst.h says what it allocates); the test fails if
 * the layer will not.  The contents are the caller's: x first, then
 * inst_draw(). */
static inline void inst_create(inst *L, const char *type, const char *const *kv, ph_shape in, int batch,
			       ph_ctx ctx)
{
	const ph_layer_ops *ops = load_layer(type);
	ck_assert_int_eq(ops->head.struct_size, sizeof(ph_layer_ops));
	ck_assert(ops->devices & PH_DEV_CPU);
	ph_err e = { { 0 } };
	int rc = ph_layer_inst_create(L, ops, make_config(ops, kv), in, batch, ctx, &e);
	ck_assert_msg(rc == PH_OK, "%s", e.msg);
}

/* After the caller's x: r U(-1, 1), parameters U(-1, 1) * pscale, targets
 * uniform in [0, classes), from the test's random numbers. */
static inline void inst_draw(inst *L, float pscale, int64_t classes)
{
	ph_layer_inst_draw(L, &test_rng, pscale, classes);
}

static inline void inst_close(inst *L)
{
	void *cfg = L->cfg;
	ph_layer_inst_close(L);
	free(cfg);
}

#define KV(...) ((const char *const[]){ __VA_ARGS__, NULL })
#define SHAPE(...) ((ph_shape){ sizeof((int64_t[]){ __VA_ARGS__ }) / sizeof(int64_t), \
				{ __VA_ARGS__ } })

#endif
