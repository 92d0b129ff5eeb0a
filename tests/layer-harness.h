/* What every layer-plugin test binary needs: a seeded test RNG, loading a
 * layer plugin from $PH_LAYER_DIR (or the compile-time PH_LAYER_DIR),
 * configuring it through the host's own option parser (core/options.c),
 * and an instance of it on the CPU with its buffers (inst).
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

/* ------------------------------------------------------------------ */
/* A layer instance on the CPU with every buffer the host would hand it: */
/* the finite-difference harness's (fd-harness.h) and test-cuda-layers' */
/* CPU reference.                                                      */

typedef struct {
	const ph_layer_ops *ops;
	void *cfg, *state;
	ph_layer_meta meta;
	ph_shape in;
	int batch;
	int loss;                       /* a PH_LAYER_LOSS layer */
	int64_t nx, ny;                 /* whole micro-batch */
	float *x, *y, *r, *dx;          /* r: dL/dy for the objective */
	int64_t pn[PH_MAX_PARAMS];
	float *params[PH_MAX_PARAMS], *grads[PH_MAX_PARAMS];
	int32_t *targets;               /* NULL unless the layer takes targets */
	int64_t nt;                     /* batch * meta.targets_per_sample */
	ph_ctx ctx;
} inst;

/*
 * Create `type` with max_batch = batch and allocate, zeroed:
 *   x, dx [batch * numel(in)], y, r [batch * numel(out)],
 *   params[p], grads[p] [numel of param p], targets [nt];
 * ctx is the context to run with, given its scratch and saved at meta's
 * sizes (uninitialised, as the host's) and the targets.  The contents are
 * the caller's: x first, then inst_draw().
 */
static inline void inst_create(inst *L, const char *type, const char *const *kv, ph_shape in, int batch,
			       ph_ctx ctx)
{
	memset(L, 0, sizeof *L);
	L->ops = load_layer(type);
	ck_assert_int_eq(L->ops->head.struct_size, sizeof(ph_layer_ops));
	ck_assert(L->ops->devices & PH_DEV_CPU);
	L->cfg = make_config(L->ops, kv);
	L->in = in;
	L->batch = batch;
	L->loss = (L->ops->flags & PH_LAYER_LOSS) != 0;
	ph_err e = { { 0 } };
	int rc = L->ops->create(L->cfg, &in, batch, &L->state, &e);
	ck_assert_msg(rc == PH_OK, "%s create: %s", type, e.msg);
	rc = L->ops->meta(L->state, &L->meta, &e);
	ck_assert_msg(rc == PH_OK, "%s meta: %s", type, e.msg);

	L->nx = batch * ph_shape_numel(&in);
	L->ny = batch * ph_shape_numel(&L->meta.out);
	L->x = calloc(L->nx, sizeof(float));
	L->dx = calloc(L->nx, sizeof(float));
	L->y = calloc(L->ny, sizeof(float));
	L->r = calloc(L->ny, sizeof(float));
	for (int p = 0; p < L->meta.nparams; p++) {
		L->pn[p] = ph_shape_numel(&L->meta.params[p].shape);
		L->params[p] = calloc(L->pn[p], sizeof(float));
		L->grads[p] = calloc(L->pn[p], sizeof(float));
	}
	L->ctx = ctx;
	if (L->meta.scratch_bytes)
		L->ctx.scratch = malloc(L->meta.scratch_bytes);
	if (L->meta.saved_bytes)
		L->ctx.saved = malloc(L->meta.saved_bytes * batch);
	if (L->meta.targets_per_sample) {
		L->nt = (int64_t)batch * L->meta.targets_per_sample;
		L->targets = calloc(L->nt, sizeof(int32_t));
		L->ctx.targets = L->targets;
	}
}

/* After the caller's x: r U(-1, 1), parameters U(-1, 1) * pscale, targets
 * uniform in [0, classes), drawn in this order (a test's seed names its
 * numbers only while the order stays). */
static inline void inst_draw(inst *L, float pscale, int64_t classes)
{
	fill_uniform(L->r, L->ny, -1, 1);
	for (int p = 0; p < L->meta.nparams; p++)
		for (int64_t i = 0; i < L->pn[p]; i++)
			L->params[p][i] = urand(-1, 1) * pscale;
	for (int64_t i = 0; i < L->nt; i++)
		L->targets[i] = (int32_t)(rng_next() % (uint64_t)classes);
}

static inline void inst_close(inst *L)
{
	L->ops->destroy(L->state);
	for (int p = 0; p < L->meta.nparams; p++)
		free(L->params[p]), free(L->grads[p]);
	free(L->x), free(L->y), free(L->r), free(L->dx), free(L->targets), free(L->cfg);
	free(L->ctx.scratch), free(L->ctx.saved);
}

#define KV(...) ((const char *const[]){ __VA_ARGS__, NULL })
#define SHAPE(...) ((ph_shape){ sizeof((int64_t[]){ __VA_ARGS__ }) / sizeof(int64_t), \
				{ __VA_ARGS__ } })

#endif
