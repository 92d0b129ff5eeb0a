/* SPDX-License-Identifier: MIT */
/* pipehost --check-plugin FILE.so: what the project's own tests check of
 * its plugins, run on anyone's.  One line per check on `out`, PASS, FAIL or
 * SKIP, then the verdict.  docs/plugin-templates.md says what each check
 * does and how the checker picks options, input shapes and batches. */
#ifndef PH_CORE_CHECK_PLUGIN_H
#define PH_CORE_CHECK_PLUGIN_H

#include <stdio.h>

#include <pipehost/plugin.h>

typedef struct {
	const char *file;                /* the plugin, a path to a .so */
	const char *shape;               /* --shape "4x8": the layers' per-sample input; NULL = try the defaults */
	int batch;                       /* --batch: the largest batch checked (also 1); 0 = 4 */
	const char *const *sets;         /* --set NAME.KEY=VALUE: a plugin's option (NAME: its name) */
	int nsets;
	int allow_writable;              /* --allow-writable-plugins */
	const char *plugin_dirs;         /* --plugin-dir DIR:DIR: searched first for another provider of a name */
	int timeout_s;                   /* per plugin entry; 0 = 600 */
} ph_check_opts;

/* Run every check.  PH_OK: all passed.  PH_EINVAL with "N of M checks
 * failed" in err: some failed (their lines say which).  Another error: the
 * request itself is wrong (a --set for no such plugin, a bad --shape), and
 * nothing was checked. */
int ph_check_plugin(const ph_check_opts *o, FILE *out, ph_err *err);

/* --shape's text alone ("4x8": 1 to 4 sizes joined by x), so the command
 * line is refused before anything loads. */
int ph_check_shape_text(const char *text, ph_err *err);

#endif
