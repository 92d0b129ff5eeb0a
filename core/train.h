/* SPDX-License-Identifier: MIT */
/* The training loop: batches in seeded order, optimizer steps through the
 * engine, progress, metrics, evaluation. */
#ifndef PH_CORE_TRAIN_H
#define PH_CORE_TRAIN_H

#include "engine.h"
#include "outputs.h"

typedef struct {
	int64_t steps;            /* steps completed, counting those before a resume */
	int interrupted;          /* SIGINT/SIGTERM: stopped early, checkpoint written */
	char checkpoint[4096];    /* the last checkpoint written or resumed from, or "" */
	double final_loss;        /* mean loss of the last step */
	double test_loss;         /* -1 when not evaluated */
	int eval_pending;         /* the last step's evaluation was cut short by a stop: its
				   * checkpoint says so and a resume runs it */
	double test_accuracy;
	int64_t test_samples;
	double seconds;
	int64_t steps_run;        /* steps this process trained (0: the run was already complete) */
	/* outputs that failed without stopping the run (the metrics file, the
	 * final checkpoint): each a line, the exit status non-zero */
	int nfailed;
	char failed[4][PH_ERR_MAX];
	int said[4];              /* printed already (during training) */
	int codes[4];             /* their status codes (PH_EIO, PH_ENOMEM, ...) */
} ph_train_result;

/* Checkpointing and resume ([checkpoint] dir/every/keep, --resume). */
typedef struct {
	const char *dir;          /* checkpoint directory; NULL or "" = none */
	int64_t every;            /* save after every N steps; 0 = only when interrupted and at the end */
	int64_t keep;             /* keep the newest K step directories; 0 = all */
	const char *resume;       /* a checkpoint dir (its latest step) or a step dir; NULL = fresh start */
} ph_train_ckpt;

/* Train from step 0, or from the checkpoint ck->resume names (validated
 * against this config: see ph_checkpoint_identity).  With ck->dir set, save
 * every ck->every steps and at the end, and catch SIGINT/SIGTERM: the step
 * under way finishes, a checkpoint is written, a line says where and how to
 * resume, and ph_train_ck returns PH_OK with res->interrupted = 1.  An
 * evaluation under way stops between rounds (core/signals.h).  A second
 * signal, 2 s or more after the first, stops the process at once.  The checkpoint
 * directory is locked and claimed for this run before step 1
 * (checkpoint.h).  A loss that is NaN or infinite stops the run with an
 * error; a metrics file that cannot be written is reported once and
 * training goes on (res->failed); so does a final checkpoint that fails.  A resume without
 * ck->dir keeps saving in the directory of the checkpoint it resumed from.
 * ck may be NULL. */
int ph_train_ck(const ph_config *c, ph_engine *e, const ph_dataset *train, const ph_dataset *test,
		const ph_train_ckpt *ck, ph_train_result *res, ph_err *err);

/* The training set holds at least one batch (after [data] limit): run
 * right after the data load, before anything is measured or written, and
 * again by ph_train_ck. */
int ph_train_check_data(const ph_config *c, const ph_dataset *train, ph_err *err);

/* Before anything is measured, loaded or trained: every file this run
 * writes (outs: the weights, the metrics file, the trace, the plan's JSON,
 * the simulated timeline, the logits) can be written, is none of the files
 * it reads (the INI, the data and tokenizer files, the initial weights,
 * the checkpoint resumed from, weights_in: the weights --generate reads)
 * and is not shared (core/outputs.h).  The checkpoint dir is checked by
 * ph_train_ck before step 1.  Only process 0 checks: it alone writes. */
int ph_run_check_outputs(const ph_config *c, const char *config_path, const char *resume, const char *weights_in,
			 const ph_output *outs, int nouts, ph_err *err);

/* After training: the trace (trace_path) and the weights (weights_path),
 * each attempted even when an earlier output failed (res->failed too).
 * Weights holding a NaN or an infinity are not written.  One failure is
 * err's line; several are each printed on stderr and err sums them up. */
int ph_train_write_outputs(const ph_config *c, ph_engine *e, const ph_train_result *res, const char *trace_path,
			   const char *weights_path, ph_err *err);

/* ph_train_ck without checkpoints. */
int ph_train(const ph_config *c, ph_engine *e, const ph_dataset *train, const ph_dataset *test,
	     ph_train_result *res, ph_err *err);

#endif
