/* SPDX-License-Identifier: MIT */
/* Under mpirun every process must run one job: the processes' resolved
 * configs compared with process 0's before any work (core/main.c run(),
 * right after ph_config_resolve).
 *
 * Each process reads its own INI and --set options, so nothing made them
 * agree: a node with its own copy of the INI, or a per-host wrapper that
 * adds --set, gave a job that hung for ever (run.steps differing), trained
 * replicas that silently differed (run.micro_batches, optimizer.lr) or
 * failed deep in a collective (MPI_ERR_TRUNCATE for a layer's width).
 *
 * The check compares a canonical text of the config, one "key=value" line
 * a key, which config_agree.c builds: every key of every section (the
 * core's and the plugins'), every layer's, and the command line's part in
 * the job, except the keys that may differ between processes (listed, with
 * why, in config_agree.c and docs/reference.md). */
#ifndef PH_CORE_CONFIG_AGREE_H
#define PH_CORE_CONFIG_AGREE_H

#include <stddef.h>

#include "config.h"
#include "data.h"

/* What the command line adds to the job that ph_config does not hold, and
 * that every process must share: each of these makes collective calls
 * in every process, or none. */
typedef struct {
	const char *mode;  /* "training", "--plan", "--simulate", "--generate" */
	int trace;         /* --trace FILE: every process records, process 0 gathers */
	int resume;        /* --resume: every process reads the checkpoint */
	int save_weights;  /* --save-weights or [run] save_weights: every process takes part in the gather */
} ph_agree_cli;

/* The canonical text (malloc'd; NULL when out of memory): "key=value"
 * lines in a fixed order.  c must be resolved. */
char *ph_config_agree_text(const ph_config *c, const ph_agree_cli *cli);

/* The first line where `here` differs from `p0` (process 0's text), for a
 * message: "KEY = VALUE here, VALUE in process 0" (values cut and escaped
 * like PH_ECHO), or "here: LINE; in process 0: LINE" when the keys differ
 * too, or "only here: LINE" / "only in process 0: LINE"; "" if the texts
 * are the same. */
void ph_config_agree_diff(const char *here, const char *p0, char *buf, size_t len);

/* Under mpirun (c->comm.size > 1): process 0 broadcasts its text, each
 * process compares its own, and the processes learn the first one that
 * differs.  That one fails with the line "its config differs from process
 * 0's: run.steps = 4 here, 2 in process 0; give every process the same
 * config and --set options"; the others wait for the abort it makes
 * (main()), so that its line is the job's (should it not come within
 * PH_AGREE_WAIT_S, they fail too, saying which process differs).  Every
 * process makes the same collective calls in the same order whatever it
 * finds; one that fails alone before them (out of memory) returns at
 * once, and main()'s abort ends the others waiting in them.  A single
 * process: PH_OK at once. */
int ph_config_agree(const ph_config *c, const ph_agree_cli *cli, ph_err *err);

#define PH_AGREE_WAIT_S 20

/* The same for the data, once every process has loaded them (a training
 * run's, core/main.c): the data's paths may differ from node to node (each
 * its own copy), their contents may not, or replicas would train apart and
 * a split pipeline's stages on other samples.  Compared: each split's
 * sample count and the XXH3-64 of its inputs and of its targets, as loaded
 * (after the source's parsing and scaling), so "its data differ from
 * process 0's: training data: inputs (XXH3-64) = 0123... here, 4567... in
 * process 0; give every process the same data files". */
char *ph_data_agree_text(const ph_dataset *train, const ph_dataset *test, const ph_shape *in);
int ph_data_agree(const ph_comm *cm, const ph_dataset *train, const ph_dataset *test, const ph_shape *in,
		  ph_err *err);

/* The same for what the processes read to start from: mine is this
 * process's text (malloc'd; taken), e.g. "[run] init weights (XXH3-64) =
 * ..." or the resumed checkpoint's step and manifest.  A node with a stale
 * copy of a checkpoint directory (only process 0 writes them) would
 * otherwise train from other weights, and could hang the job. */
int ph_start_agree(const ph_comm *cm, char *mine, const char *subject, const char *advice, ph_err *err);

/* Setup that fails in some processes only (process 0's checkpoint
 * directory checks): every process calls it with its own rc.  The first
 * failing process returns its rc (its line is the job's); the others wait
 * for the abort main() then makes, without a line of their own (a stop
 * line from the abort's SIGTERM read as if someone had interrupted the
 * run).  All succeeded: PH_OK. */
int ph_setup_agree(const ph_comm *cm, int rc, ph_err *err);

/* An option's value in cfg as an INI file would say it, the canonical
 * form the checkpoint identity (checkpoint-id.c) and this check share: an
 * integer in decimal, a float in the fewest of 15..17 significant digits
 * that read back exactly, yes/no, a choice by its name, a list with
 * commas.  buf of PH_OPTION_TEXT_MAX holds any value whole. */
#define PH_OPTION_TEXT_MAX (PH_INTLIST_MAX * 21 + PH_STR_MAX + 8)
void ph_option_value_text(const ph_option *o, const void *cfg, char *buf, size_t len);

#endif
