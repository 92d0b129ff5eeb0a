/* SPDX-License-Identifier: MIT */
/* Reading an INI file into entries that remember their line numbers.
 * The system inih (Debian: 200-character lines, no new-section callback)
 * does the parsing; our reader counts lines and sees section headers, so
 * every later error can say file:line. */
#ifndef PH_CORE_INI_H
#define PH_CORE_INI_H

#include <pipehost/plugin.h>

/* The system inih keeps 49 characters of a section's name (its
 * MAX_SECTION, 50, fixed when it was built): a longer [name] is refused
 * at its line, not cut short.  A layer's name, after "layer ", has 43. */
#define PH_INI_SECTION_MAX 49
#define PH_LAYER_NAME_MAX (PH_INI_SECTION_MAX - 6)

typedef struct {
	char section[128];
	char key[64];
	char value[PH_STR_MAX];
	int line;        /* 0: came from --set */
	int used;        /* consumed by the config resolver */
	int next;        /* the next entry of the same section, -1: none */
} ph_ini_entry;

typedef struct {
	char name[128];
	int line;
	int first, last; /* its entries: a list through ph_ini_entry.next, -1: none */
} ph_ini_section;

typedef struct {
	char path[PH_STR_MAX];
	ph_ini_section *sections;   /* in file order */
	int nsections;
	ph_ini_entry *entries;      /* in file order, then --set additions */
	int nentries;
	int sections_cap, entries_cap;
	/* sections by name (open addressing, index + 1, 0 free): a model of
	 * 20,000 layers took 9.6 s to read when every lookup scanned */
	int *by_name;
	int by_name_cap;
} ph_ini;

int ph_ini_load(const char *path, ph_ini *ini, ph_err *err);

/* Apply "section.key=value" (a layer section as "layer NAME.key=value" or
 * "layer.NAME.key=value").  Replaces an existing entry or appends one. */
int ph_ini_override(ph_ini *ini, const char *assignment, ph_err *err);

/* The entry for (section, key), or NULL (a --set replaces the file's). */
ph_ini_entry *ph_ini_find(ph_ini *ini, const char *section, const char *key);

/* The entries of [section] in order (the file's, then --set's): the first
 * where prev is NULL, then each after prev; NULL past the last. */
ph_ini_entry *ph_ini_next_in(ph_ini *ini, const char *section, const ph_ini_entry *prev);

/* "file:line" or "--set" for messages. */
void ph_ini_where(const ph_ini *ini, int line, char *buf, size_t len);

/* Where [section] key was given, for errors found after the config is
 * read (the plan, the partitioner): the key's "file:line" (or "--set"),
 * else its section header's "file:line", else the INI's path, for a
 * value that is a default. */
void ph_ini_where_key(const ph_ini *ini, const char *section, const char *key, char *buf, size_t len);

void ph_ini_free(ph_ini *ini);

#endif
