/* SPDX-License-Identifier: MIT */
/* Which plugins an INI needs, loaded by name before the config is resolved
 * (loader.h: ph_registry_load_for_ini), so that a run opens only the .so
 * files that may hold them. */
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "loader.h"
#include "options.h"

static int by_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* [section] type, or the default of its option table. */
static const char *type_of(const ph_ini *ini, const char *section, const ph_option *table)
{
	for (int i = ini->nentries - 1; i >= 0; i--)
		if (!strcmp(ini->entries[i].section, section) && !strcmp(ini->entries[i].key, "type"))
			return ini->entries[i].value;
	const ph_option *o = ph_options_find(table, "type");
	return o && o->def ? o->def : "";
}

int ph_registry_load_for_ini(ph_registry *r, const ph_ini *ini, ph_err *err)
{
	int rc = ph_registry_load_name(r, PH_KIND_SCHEDULE, type_of(ini, "schedule", ph_schedule_options), err);
	if (!rc)
		rc = ph_registry_load_name(r, PH_KIND_PARTITIONER, type_of(ini, "partition", ph_partition_options), err);
	/* each layer type searched once: a model of 10,000 layers of 4 types
	 * once searched every plugin file 10,000 times (13 s before planning) */
	const char **seen = rc ? NULL : malloc(((size_t)ini->nentries + 1) * sizeof *seen);
	const char **typed = rc ? NULL : malloc(((size_t)ini->nentries + 1) * sizeof *typed);
	int nseen = 0, ntyped = 0;
	if (!rc && (!seen || !typed)) {
		free(seen);
		free(typed);
		return ph_fail(err, PH_ENOMEM, "out of memory");
	}
	for (int i = 0; !rc && i < ini->nentries; i++) {
		const ph_ini_entry *e = &ini->entries[i];
		if (strncmp(e->section, "layer", 5) || strcmp(e->key, "type"))
			continue;
		typed[ntyped++] = e->section;
		int k = 0;
		while (k < nseen && strcmp(seen[k], e->value))
			k++;
		if (k < nseen)
			continue;
		seen[nseen++] = e->value;
		rc = ph_registry_load_name(r, PH_KIND_LAYER, e->value, err);
	}
	free(seen);
	/* a [layer] without a type: every layer plugin, for the error's list
	 * (the typed sections counted once each, sorted: a --set may give a
	 * section's type a second entry) */
	int layer_sections = 0, distinct = 0;
	for (int i = 0; i < ini->nsections; i++)
		layer_sections += !strncmp(ini->sections[i].name, "layer", 5);
	if (!rc && ntyped)
		qsort(typed, (size_t)ntyped, sizeof *typed, by_str);
	for (int i = 0; !rc && i < ntyped; i++)
		distinct += !i || strcmp(typed[i], typed[i - 1]);
	free(typed);
	if (!rc && layer_sections > distinct)
		rc = ph_registry_load_name(r, PH_KIND_LAYER, "", err);
	return rc;
}
