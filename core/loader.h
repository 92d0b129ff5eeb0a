/* Plugin loading: every .so on the plugin path is opened, checked against
 * the ABI and registered by name.  A bad file stops the run with a message
 * naming the file and the fix; nothing half-loaded is used. */
#ifndef PH_CORE_LOADER_H
#define PH_CORE_LOADER_H

#include <pipehost/plugin.h>

typedef enum { PH_KIND_LAYER = 0, PH_KIND_PARTITIONER, PH_KIND_SCHEDULE, PH_KIND_COUNT } ph_plugin_kind;

typedef struct {
	ph_plugin_kind kind;
	const ph_ops_head *head;   /* first member of the ops struct */
	const void *ops;
	int file;                  /* index into files */
} ph_registry_entry;

typedef struct {
	char (*files)[1024];
	void **handles;
	int nfiles, files_cap;
	ph_registry_entry *entries;
	int nentries, entries_cap;
	int allow_writable;        /* --allow-writable-plugins: skip the permission check */
	char searched[2048];       /* the directories ph_registry_load_path searched, for messages */
} ph_registry;

/* Load every *.so in each directory of a colon-separated list (sorted by
 * name, so the order never depends on the file system). */
int ph_registry_load_path(ph_registry *r, const char *path_list, ph_err *err);
int ph_registry_load_file(ph_registry *r, const char *file, ph_err *err);

const void *ph_registry_find(const ph_registry *r, ph_plugin_kind kind, const char *name);
const char *ph_registry_file_of(const ph_registry *r, const void *ops);

/* "did you mean" among the names of one kind, or NULL. */
const char *ph_registry_suggest(const ph_registry *r, ph_plugin_kind kind, const char *name);
/* Comma-separated list of the names of one kind, for messages. */
void ph_registry_names(const ph_registry *r, ph_plugin_kind kind, char *buf, size_t len);

void ph_registry_print(FILE *f, const ph_registry *r);
const char *ph_kind_name(ph_plugin_kind k);
void ph_registry_free(ph_registry *r);

#endif
