/* SPDX-License-Identifier: MIT */
/*
 * Option tables: one table per plugin (and per core section) drives INI
 * parsing, defaults, range checks, "did you mean" and --list-plugins.
 * The host parses every value, defaults included, with the same parser and
 * stores it at `offset` in the plugin's config struct:
 *
 *     type             C field
 *     PH_OPT_INT       int64_t
 *     PH_OPT_FLOAT     double
 *     PH_OPT_BOOL      int        (yes/no, true/false, on/off, 1/0)
 *     PH_OPT_STRING    char[PH_STR_MAX]
 *     PH_OPT_CHOICE    int        (index into "a|b|c")
 *     PH_OPT_INTLIST   ph_intlist (comma-separated)
 */
#ifndef PIPEHOST_OPTION_H
#define PIPEHOST_OPTION_H

#include <stddef.h>
#include <stdint.h>

#define PH_STR_MAX 256
#define PH_INTLIST_MAX 64

typedef enum {
	PH_OPT_INT = 0,
	PH_OPT_FLOAT,
	PH_OPT_BOOL,
	PH_OPT_STRING,
	PH_OPT_CHOICE,
	PH_OPT_INTLIST
} ph_opt_type;

typedef struct {
	int n;
	int64_t v[PH_INTLIST_MAX];
} ph_intlist;

typedef struct {
	const char *name;     /* INI key; NULL ends the table */
	ph_opt_type type;
	size_t offset;        /* into the config struct */
	const char *def;      /* default as INI text; NULL = the key is required */
	double min, max;      /* inclusive range for INT, FLOAT and INTLIST items */
	const char *choices;  /* CHOICE: "a|b|c" */
	const char *help;     /* one line */
} ph_option;

#define PH_NO_MIN (-1e300)
#define PH_NO_MAX (1e300)

#define PH_OPT_INT_(st, f, key, def, lo, hi, help) \
	{ key, PH_OPT_INT, offsetof(st, f), def, lo, hi, NULL, help }
#define PH_OPT_FLOAT_(st, f, key, def, lo, hi, help) \
	{ key, PH_OPT_FLOAT, offsetof(st, f), def, lo, hi, NULL, help }
#define PH_OPT_BOOL_(st, f, key, def, help) \
	{ key, PH_OPT_BOOL, offsetof(st, f), def, 0, 1, NULL, help }
#define PH_OPT_STRING_(st, f, key, def, help) \
	{ key, PH_OPT_STRING, offsetof(st, f), def, PH_NO_MIN, PH_NO_MAX, NULL, help }
#define PH_OPT_CHOICE_(st, f, key, def, choices, help) \
	{ key, PH_OPT_CHOICE, offsetof(st, f), def, PH_NO_MIN, PH_NO_MAX, choices, help }
#define PH_OPT_INTLIST_(st, f, key, def, lo, hi, help) \
	{ key, PH_OPT_INTLIST, offsetof(st, f), def, lo, hi, NULL, help }
#define PH_OPT_END { NULL, PH_OPT_INT, 0, NULL, 0, 0, NULL, NULL }

#endif /* PIPEHOST_OPTION_H */
