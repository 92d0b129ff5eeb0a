/* The training loop: batches in seeded order, optimizer steps through the
 * engine, progress, metrics, evaluation. */
#ifndef PH_CORE_TRAIN_H
#define PH_CORE_TRAIN_H

#include "engine.h"

typedef struct {
	int64_t steps;            /* steps completed, counting those before a resume */
	int interrupted;          /* SIGINT/SIGTERM: stopped early, checkpoint written */
	char checkpoint[4096];    /* the last checkpoint written or resumed from, or "" */
	double final_loss;        /* mean loss of the last step */
	double test_loss;         /* -1 when not evaluated */
	double test_accuracy;
	int64_t test_samples;
	double seconds;
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
 * signal, 2 s or more after the first, stops the process at once.  A resume without
 * ck->dir keeps saving in the directory of the checkpoint it resumed from.
 * ck may be NULL. */
int ph_train_ck(const ph_config *c, ph_engine *e, const ph_dataset *train, const ph_dataset *test,
		const ph_train_ckpt *ck, ph_train_result *res, ph_err *err);

/* ph_train_ck without checkpoints. */
int ph_train(const ph_config *c, ph_engine *e, const ph_dataset *train, const ph_dataset *test,
	     ph_train_result *res, ph_err *err);

#endif
