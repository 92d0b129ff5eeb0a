/* The training loop: batches in seeded order, optimizer steps through the
 * engine, progress, metrics, evaluation. */
#ifndef PH_CORE_TRAIN_H
#define PH_CORE_TRAIN_H

#include "engine.h"

typedef struct {
	int64_t steps;
	double final_loss;        /* mean loss of the last step */
	double test_loss;         /* -1 when not evaluated */
	double test_accuracy;
	int64_t test_samples;
	double seconds;
} ph_train_result;

int ph_train(const ph_config *c, ph_engine *e, const ph_dataset *train, const ph_dataset *test,
	     ph_train_result *res, ph_err *err);

#endif
