/* SPDX-License-Identifier: MIT */
/* Plugin loading: a .so on the plugin path is opened only when it passes
 * the trust check and, on the search path, only when it may hold a plugin
 * the run names; it is checked against the ABI and registered by name.  A
 * bad file stops the run with a message naming the file and the fix;
 * nothing half-loaded is used. */
#ifndef PH_CORE_LOADER_H
#define PH_CORE_LOADER_H

#include <limits.h>

#include <pipehost/plugin.h>

#include "inifile.h"

typedef enum { PH_KIND_LAYER = 0, PH_KIND_PARTITIONER, PH_KIND_SCHEDULE, PH_KIND_COUNT } ph_plugin_kind;

typedef struct {
	ph_plugin_kind kind;
	const ph_ops_head *head;   /* first member of the ops struct */
	const void *ops;
	int file;                  /* index into files */
} ph_registry_entry;

typedef struct {
	char (*files)[PATH_MAX];   /* a plugin directory's path may be long (1,024 once cut it) */
	void **handles;
	int nfiles, files_cap;
	ph_registry_entry *entries;
	int nentries, entries_cap;
	int allow_writable;        /* --allow-writable-plugins: skip the trust check */
	char searched[2048];       /* the directories ph_registry_load_path searched, for messages */
	char search[8192];         /* directories searched by name (ph_registry_load_name) */
	int search_all;            /* every .so of search is loaded already */
} ph_registry;

/* Limits on what a descriptor may declare: more is a broken plugin. */
#define PH_MAX_PLUGIN_ENTRIES 1024  /* ops in one kind's list */
#define PH_MAX_PLUGIN_OPTIONS 1024  /* options in one table */
#define PH_MAX_PLUGIN_NAME 64       /* bytes of a name, NUL included */
#define PH_MAX_OPS_SIZE 65536       /* bytes of an ops struct */

/* Load every *.so in each directory of a colon-separated list (sorted by
 * name, so the order never depends on the file system). */
int ph_registry_load_path(ph_registry *r, const char *path_list, ph_err *err);
int ph_registry_load_file(ph_registry *r, const char *file, ph_err *err);

/* Directories to search by name: nothing is loaded until
 * ph_registry_load_name asks for a plugin.  Then every .so whose bytes
 * mention the name is loaded (from every directory, so a name two files
 * provide is still refused); when none provides it, all the rest are. */
void ph_registry_search_path(ph_registry *r, const char *path_list);
/* Does file hold "name" as the end of a C string (its code not run)?
 * unreadable: the answer where it cannot be read. */
int ph_file_mentions(const char *file, const char *name, int unreadable);
int ph_registry_load_name(ph_registry *r, ph_plugin_kind kind, const char *name, ph_err *err);

/* The plugins an INI names ([layer] type, [schedule] type, [partition]
 * type, their defaults included), each loaded by ph_registry_load_name. */
int ph_registry_load_for_ini(ph_registry *r, const ph_ini *ini, ph_err *err);

/* Refuse a plugin file or directory that others could change: its real path
 * and every directory above it owned by root or us, none writable by group
 * or others (a root-owned sticky directory such as /tmp excepted). */
int ph_plugin_trust(const char *path, int is_dir, ph_err *err);

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
