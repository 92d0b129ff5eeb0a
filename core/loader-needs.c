/* SPDX-License-Identifier: MIT */
/* Which plugins an INI needs, loaded by name before the config is resolved
 * (loader.h: ph_registry_load_for_ini), so that a run opens only the .so
 * files that may hold them. */
#include <string.h>

#include "config.h"
#include "loader.h"
#include "options.h"

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
	for (int i = 0; !rc && i < ini->nentries; i++) {
		const ph_ini_entry *e = &ini->entries[i];
		if (!strncmp(e->section, "layer", 5) && !strcmp(e->key, "type"))
			rc = ph_registry_load_name(r, PH_KIND_LAYER, e->value, err);
	}
	/* a [layer] without a type: every layer plugin, for the error's list */
	for (int i = 0; !rc && i < ini->nsections; i++) {
		const char *sec = ini->sections[i].name;
		int typed = 0;
		for (int j = 0; j < ini->nentries && !typed; j++)
			typed = !strcmp(ini->entries[j].section, sec) && !strcmp(ini->entries[j].key, "type");
		if (!strncmp(sec, "layer", 5) && !typed)
			rc = ph_registry_load_name(r, PH_KIND_LAYER, "", err);
	}
	return rc;
}
