/* SPDX-License-Identifier: MIT */
/* What the schedule and partitioner test binaries need to load plugins as
 * the host does: dlopen every .so in a directory ($ENV, or a build-tree
 * default) and collect the ops of one kind, then find them by name.
 * Shared by test-schedules.c, test-partitioners.c and test-simulate.c; each
 * includes it once, after <check.h>, and loads one kind. */
#ifndef PH_TESTS_PLUGIN_HARNESS_H
#define PH_TESTS_PLUGIN_HARNESS_H

#include <dirent.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pipehost/plugin.h>

/* ck_assert_msg() reports its location to the runner on every call, passing
 * or not (a write to a pipe); in the hot loops, only a failure does. */
#define REQUIRE(cond, ...)                         \
	do {                                       \
		if (!(cond))                       \
			ck_abort_msg(__VA_ARGS__); \
	} while (0)

#define MAX_OPS 32

/* The kinds of ops a ph_plugin lists. */
typedef enum { PLUGIN_LAYERS, PLUGIN_PARTITIONERS, PLUGIN_SCHEDULES } plugin_kind;

/* The loaded ops, by their head (the first member of every ops struct). */
static const ph_ops_head *loaded[MAX_OPS];
static int nloaded;
static char load_log[4096]; /* why the directory or a module did not load */

/* The i-th entry of pl's list of `kind`, or NULL past its end (or with no list). */
static inline const ph_ops_head *plugin_entry(const ph_plugin *pl, plugin_kind kind, int i)
{
	switch (kind) {
	case PLUGIN_LAYERS:
		return pl->layers && pl->layers[i] ? &pl->layers[i]->head : NULL;
	case PLUGIN_PARTITIONERS:
		return pl->partitioners && pl->partitioners[i] ? &pl->partitioners[i]->head : NULL;
	case PLUGIN_SCHEDULES:
		return pl->schedules && pl->schedules[i] ? &pl->schedules[i]->head : NULL;
	}
	return NULL;
}

/* dlopen every .so in $env (default: fallback) and collect its ops of `kind`;
 * a module that will not open is noted in load_log, one of another ABI major
 * or without such ops is skipped. */
static inline void load_plugins_from(const char *env, const char *fallback, plugin_kind kind)
{
	const char *dir = getenv(env);
	if (!dir || !*dir)
		dir = fallback;
	DIR *d = opendir(dir);
	if (!d) {
		snprintf(load_log, sizeof load_log, "cannot open %s (set %s)", dir, env);
		return;
	}
	struct dirent *e;
	while ((e = readdir(d))) {
		size_t len = strlen(e->d_name);
		if (len < 4 || strcmp(e->d_name + len - 3, ".so"))
			continue;
		char path[4096];
		snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
		void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
		if (!h) {
			size_t l = strlen(load_log);
			snprintf(load_log + l, sizeof load_log - l, "%s; ", dlerror());
			continue;
		}
		ph_plugin_fn fn = (ph_plugin_fn)dlsym(h, PH_PLUGIN_SYMBOL);
		const ph_plugin *pl = fn ? fn() : NULL;
		if (!pl || pl->abi_major != PH_ABI_MAJOR)
			continue;
		const ph_ops_head *o;
		for (int i = 0; (o = plugin_entry(pl, kind, i)) && nloaded < MAX_OPS; i++)
			loaded[nloaded++] = o;
	}
	closedir(d);
}

/* The loaded ops named `name`, or the test fails naming the `what` it wanted
 * ("schedule").  Every ops struct begins with its head, so the caller casts
 * the result back to its own ops type. */
static inline const ph_ops_head *find_head(const char *what, const char *name)
{
	for (int i = 0; i < nloaded; i++)
		if (strcmp(loaded[i]->name, name) == 0)
			return loaded[i];
	ck_abort_msg("%s %s not found among %d loaded (%s)", what, name, nloaded, load_log);
	return NULL;
}

/* What every plugin's ops must say of themselves, whatever their kind: this
 * ABI major, the size of the ops struct the caller expects (ops_size), a
 * help line. */
static inline void check_ops_head(const ph_ops_head *h, size_t ops_size)
{
	ck_assert_int_eq(h->abi_major, PH_ABI_MAJOR);
	ck_assert_uint_eq(h->struct_size, ops_size);
	ck_assert_ptr_nonnull(h->help);
}

#endif
