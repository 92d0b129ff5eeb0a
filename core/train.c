/* Training loop.  The batch order is a pure function of (seed, epoch), the
 * learning rate a pure function of the step: nothing here depends on the
 * schedule or the partition, which is what keeps runs comparable. */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "train.h"

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void fmt_eta(double s, char *buf, size_t len)
{
	if (s < 0 || s > 1e7)
		snprintf(buf, len, "?");
	else if (s >= 3600)
		snprintf(buf, len, "%dh%02dm", (int)(s / 3600), (int)(s / 60) % 60);
	else
		snprintf(buf, len, "%dm%02ds", (int)(s / 60), (int)s % 60);
}

static int evaluate(const ph_config *c, ph_engine *e, const ph_dataset *test, int64_t epoch, int64_t step,
		    FILE *metrics, ph_train_result *res, ph_err *err)
{
	int64_t count = c->data.test_limit ? c->data.test_limit : test->n;
	if (count > test->n)
		count = test->n;
	ph_stats st;
	int rc = ph_engine_eval(e, test, count, &st, err);
	if (rc)
		return rc;
	res->test_loss = st.targets ? st.loss_sum / st.targets : 0;
	res->test_accuracy = st.targets ? st.correct / st.targets : 0;
	res->test_samples = count;
	printf("epoch %lld: test loss %.4f, accuracy %.2f%% (%lld samples)\n", (long long)epoch, res->test_loss,
	       100.0 * res->test_accuracy, (long long)count);
	fflush(stdout);
	if (metrics) {
		fprintf(metrics, "{\"eval\":true,\"epoch\":%lld,\"step\":%lld,\"test_loss\":%.6f,\"test_accuracy\":%.6f,"
			"\"samples\":%lld}\n", (long long)epoch, (long long)step, res->test_loss, res->test_accuracy,
			(long long)count);
		fflush(metrics);
	}
	return PH_OK;
}

int ph_train(const ph_config *c, ph_engine *e, const ph_dataset *train, const ph_dataset *test,
	     ph_train_result *res, ph_err *err)
{
	memset(res, 0, sizeof *res);
	res->test_loss = -1;
	int64_t B = c->run.batch, n = train->n;
	if (c->data.limit && c->data.limit < n)
		n = c->data.limit;
	int64_t spe = n / B;
	if (spe < 1)
		return ph_fail(err, PH_EINVAL, "the training set has %lld samples, fewer than one batch of %lld; lower [run] batch",
			       (long long)n, (long long)B);
	int64_t total = c->run.steps ? c->run.steps : c->run.epochs * spe;
	ph_optim_config oc = c->optim;
	oc.total_steps = total;
	int tps = train->targets_per_sample;
	int64_t numel = ph_shape_numel(&train->shape);
	float *x = malloc((size_t)(B * numel) * sizeof *x);
	int32_t *y = malloc((size_t)(B * tps) * sizeof *y);
	int64_t *perm = malloc((size_t)n * sizeof *perm);
	FILE *metrics = NULL;
	int rc = PH_OK;
	if (!x || !y || !perm) {
		rc = ph_fail(err, PH_ENOMEM, "out of memory for the batch");
		goto out;
	}
	if (c->run.metrics[0] && !(metrics = fopen(c->run.metrics, "w"))) {
		rc = ph_fail(err, PH_EIO, "cannot write metrics file %s; check [run] metrics", c->run.metrics);
		goto out;
	}
	int tty = isatty(STDOUT_FILENO);
	double t0 = now_s(), last_print = 0;
	int64_t epochs = (total + spe - 1) / spe;
	for (int64_t s = 0; s < total; s++) {
		int64_t epoch = s / spe, pos = s % spe;
		if (pos == 0) {
			if (c->data.shuffle)
				ph_data_permutation((uint64_t)c->run.seed, (uint64_t)epoch, n, perm);
			else
				for (int64_t i = 0; i < n; i++)
					perm[i] = i;
		}
		ph_data_gather(train, perm + pos * B, (int)B, x, y);
		double lr = ph_lr_at(&oc, s);
		ph_stats st;
		if ((rc = ph_engine_train_step(e, s, x, y, lr, &st, err)))
			goto out;
		double loss = st.loss_sum / (double)st.targets;
		res->final_loss = loss;
		res->steps = s + 1;
		double t = now_s() - t0;
		double sps = (double)(s + 1) * B / (t > 0 ? t : 1e-9);
		char eta[32];
		fmt_eta(t / (s + 1) * (total - s - 1), eta, sizeof eta);
		int last = s + 1 == total;
		if (tty && (t - last_print > 0.25 || last)) {
			printf("\repoch %lld/%lld  step %lld/%lld  loss %.4f  %.0f samples/s  ETA %s   ", (long long)epoch + 1,
			       (long long)epochs, (long long)s + 1, (long long)total, loss, sps, eta);
			fflush(stdout);
			last_print = t;
		} else if (!tty && ((s + 1) % c->run.log_every == 0 || last)) {
			printf("epoch %lld/%lld step %lld/%lld loss %.4f lr %.3g samples/s %.0f ETA %s\n", (long long)epoch + 1,
			       (long long)epochs, (long long)s + 1, (long long)total, loss, lr, sps, eta);
			fflush(stdout);
		}
		if (metrics && ((s + 1) % c->run.log_every == 0 || last || s == 0)) {
			fprintf(metrics, "{\"step\":%lld,\"epoch\":%lld,\"loss\":%.6f,\"lr\":%.6g,\"samples_per_s\":%.1f,"
				"\"elapsed_s\":%.3f}\n", (long long)s + 1, (long long)epoch + 1, loss, lr, sps, t);
			fflush(metrics);
		}
		if (c->run.eval && test && (pos == spe - 1 || last)) {
			if (tty)
				printf("\n");
			if ((rc = evaluate(c, e, test, epoch + 1, s + 1, metrics, res, err)))
				goto out;
		}
	}
	if (tty && !c->run.eval)
		printf("\n");
	res->seconds = now_s() - t0;
out:
	if (metrics)
		fclose(metrics);
	free(x);
	free(y);
	free(perm);
	return rc;
}
