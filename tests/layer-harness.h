/* What every layer-plugin test binary needs: a seeded test RNG, loading a
 * layer plugin from $PH_LAYER_DIR (or the compile-time PH_LAYER_DIR), and
 * configuring it through the host's own option parser (core/options.c).
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
#include "options.h"

#ifndef PH_LAYER_DIR
#define PH_LAYER_DIR "plugins/layers/.libs"
#endif

/* ------------------------------------------------------------------ */
/* Test randomness: splitmix64, fixed seed per test.                   */

static uint64_t rng_state;

static inline void rng_seed(uint64_t s)
{
	rng_state = s;
}

static inline uint64_t rng_next(void)
{
	uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

/* Uniform in [lo, hi). */
static inline float urand(float lo, float hi)
{
	return lo + (hi - lo) * (float)((rng_next() >> 40) * (1.0 / 16777216.0));
}

static inline void fill_uniform(float *p, int64_t n, float lo, float hi)
{
	for (int64_t i = 0; i < n; i++)
		p[i] = urand(lo, hi);
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

#define KV(...) ((const char *const[]){ __VA_ARGS__, NULL })
#define SHAPE(...) ((ph_shape){ sizeof((int64_t[]){ __VA_ARGS__ }) / sizeof(int64_t), \
				{ __VA_ARGS__ } })

#endif
