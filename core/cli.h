/* SPDX-License-Identifier: MIT */
/* The command line: what each option asks for (ph_cli), its parsing with
 * every check that needs nothing but the line itself, --help and --version
 * (cli.c).  main.c acts on it; a refusal here is a usage error, exit 2. */
#ifndef PH_CORE_CLI_H
#define PH_CORE_CLI_H

#include <stdio.h>

#include <pipehost/plugin.h>

#include "generate.h"

typedef struct {
	const char *config;
	const char *overrides[256];
	int noverrides;
	char plugin_dirs[4096];
	int plan_only, list_plugins, list_options;
	const char *save_weights;
	const char *resume;     /* --resume DIR */
	int allow_writable;     /* --allow-writable-plugins */
	const char *plan_json; /* --plan=json: "-"; --plan-json FILE */
	int plan_as_json;      /* --plan=json given */
	int plan_json_file;    /* --plan-json given */
	const char *trace;
	int simulate;
	const char *svg;
	const char *check_plugin; /* --check-plugin FILE */
	const char *shape;        /* --shape, for --check-plugin */
	int batch;                /* --batch, for --check-plugin */
	ph_gen_opts gen;          /* --generate and its flags; gen.prompt NULL: not generating */
	int gen_flags;            /* a generation flag was given */
	int gen_seed_set;         /* --seed given */
	int progress;             /* --progress: PH_PROGRESS_* */
	int help, version;        /* -h, -V: main prints and stops (after the whole line parsed) */
} ph_cli;

/* Parse argv into *cli (zeroed first by the caller); a bad line: one
 * message in err and non-zero. */
int ph_cli_parse(int argc, char **argv, ph_cli *cli, ph_err *err);
/* --help's text */
void ph_cli_usage(FILE *f);
/* --version's line: the version, the plugin ABI and the backends this
 * build has (tests and scripts read it) */
void ph_cli_print_version(void);

#endif
