/* SPDX-License-Identifier: MIT */
/* What every layer-plugin test binary needs: a seeded test RNG, loading a
 * layer plugin from $PH_LAYER_DIR (or the compile-time PH_LAYER_DIR),
 * configuring it through the host's own option parser (core/options.c),
 * the checks every layer's head and option table get alike, and an instance
 * of it on the CPU with its buffers (inst: the host's core/layer_inst.h,
 * which pipehost --check-plugin drives too).
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

/* n distinct values 0.05 apart in random order: no ties, so a max-pool's
 * choice is clear, and a finite difference of eps = 0.01 cannot change it. */
static inline void fill_distinct(float *x, int64_t n)
{
	int64_t *perm = malloc((size_t)n * sizeof *perm);
	for (int64_t i = 0; i < n; i++)
		perm[i] = i;
	for (int64_t i = n - 1; i > 0; i--) {
		int64_t j = (int64_t)(rng_next() % (uint64_t)(i + 1)), t = perm[i];
		perm[i] = perm[j], perm[j] = t;
	}
	for (int64_t i = 0; i < n; i++)
		x[i] = (float)(perm[i] - n / 2) * 0.05f;
	free(perm);
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

/* What every layer plugin's head must be, whatever the layer: this ABI, its
 * own name, a help line, the CPU among its devices, every hook the host
 * always calls, both split-backward hooks or neither, each option documented
 * and inside the config, and defaults that parse.  `flags` is exactly the
 * PH_LAYER_* set this layer must declare.  Returns the ops for the caller's
 * own checks. */
static inline const ph_layer_ops *check_layer_head(const char *name, uint32_t flags)
{
	const ph_layer_ops *ops = load_layer(name);
	ck_assert_int_eq(ops->head.abi_major, PH_ABI_MAJOR);
	ck_assert_int_eq(ops->head.abi_minor, PH_ABI_MINOR);
	ck_assert_int_eq(ops->head.struct_size, sizeof(ph_layer_ops));
	ck_assert_str_eq(ops->head.name, name);
	ck_assert(ops->head.help && *ops->head.help);
	ck_assert(ops->devices & PH_DEV_CPU); /* and PH_DEV_CUDA in a CUDA build */
	ck_assert(ops->create && ops->destroy && ops->meta && ops->forward && ops->backward);
	ck_assert_int_eq(ops->flags, flags);
	ck_assert_int_eq(ops->backward_input != NULL, ops->backward_weight != NULL);
	if (!ops->head.options)
		ck_assert_int_eq(ops->head.config_size, 0);
	for (const ph_option *o = ops->head.options; o && o->name; o++)
		ck_assert(o->help && *o->help && o->offset < ops->head.config_size);
	free(make_config(ops, NULL)); /* every default parses */
	return ops;
}

/* ph_options_set()'s status for key = value on a fresh default config of
 * layer `name`: how a test shows that the option table itself, before
 * create() sees the value, refuses (PH_EINVAL) or takes (PH_OK) it. */
static inline int option_set_status(const char *name, const char *key, const char *value)
{
	const ph_layer_ops *ops = load_layer(name);
	void *cfg = make_config(ops, NULL);
	ph_err e = { { 0 } };
	int rc = ph_options_set(ops->head.options, cfg, key, value, &e);
	free(cfg);
	return rc;
}

/* The default of layer `name`'s float option `key` (which must exist). */
static inline double option_default_float(const char *name, const char *key)
{
	const ph_layer_ops *ops = load_layer(name);
	const ph_option *o = ph_options_find(ops->head.options, key);
	ck_assert_msg(o, "%s has no option %s", name, key);
	ck_assert_int_eq(o->type, PH_OPT_FLOAT);
	void *cfg = make_config(ops, NULL);
	double value = *(double *)((char *)cfg + o->offset);
	free(cfg);
	return value;
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
