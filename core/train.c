/* Training loop.  The batch order is a pure function of (seed, epoch), the
 * learning rate a pure function of the step: nothing here depends on the
 * schedule or the partition, which is what keeps runs comparable, and the
 * step alone is the position a checkpoint needs to resume exactly. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "checkpoint.h"
#include "data_source.h"
#include "train.h"

/* SIGINT/SIGTERM: the first asks the loop to stop after the step under way
 * (and write a checkpoint); a second one takes the default action at once. */
static volatile sig_atomic_t stop_signal;

static void on_stop_signal(int sig)
{
	if (stop_signal) {
		signal(sig, SIG_DFL);
		raise(sig);
		return;
	}
	stop_signal = sig;
	static const char msg[] = "\npipehost: interrupted: finishing this step, then writing a checkpoint "
				  "(interrupt again to stop at once)\n";
	ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
	(void)w;
}

typedef struct {
	int installed;
	struct sigaction old_int, old_term;
} sig_guard;

static void catch_stop_signals(sig_guard *g)
{
	memset(g, 0, sizeof *g);
	stop_signal = 0;
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_stop_signal;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESTART;
	sigaction(SIGTERM, &sa, &g->old_term);
	/* An ignored SIGINT (a background job of a script) stays ignored. */
	sigaction(SIGINT, NULL, &g->old_int);
	if (g->old_int.sa_handler != SIG_IGN)
		sigaction(SIGINT, &sa, NULL);
	g->installed = 1;
}

static void restore_stop_signals(sig_guard *g)
{
	if (!g->installed)
		return;
	sigaction(SIGTERM, &g->old_term, NULL);
	sigaction(SIGINT, &g->old_int, NULL);
	g->installed = 0;
}

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
	if (c->data_source && c->data_source->per_byte)
		/* byte-level: the loss is nats per byte; bits per byte = nats / ln 2 */
		printf("epoch %lld: validation loss %.4f nats/byte (%.4f bits/byte), next-byte accuracy %.2f%% "
		       "(%lld sequences)\n", (long long)epoch, res->test_loss, res->test_loss / 0.6931471805599453,
		       100.0 * res->test_accuracy, (long long)count);
	else
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

int ph_train_ck(const ph_config *c, ph_engine *e, const ph_dataset *train, const ph_dataset *test,
		const ph_train_ckpt *ck, ph_train_result *res, ph_err *err)
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
	const char *ckdir = ck && ck->dir && ck->dir[0] ? ck->dir : NULL;
	const char *resume = ck && ck->resume && ck->resume[0] ? ck->resume : NULL;
	int64_t every = ck && ck->every > 0 ? ck->every : 0;
	int keep = ck && ck->keep > 0 ? (ck->keep > 1000000 ? 1000000 : (int)ck->keep) : 0;
	int tty = isatty(STDOUT_FILENO);
	ph_ckpt_id id;
	memset(&id, 0, sizeof id);
	sig_guard sig;
	memset(&sig, 0, sizeof sig);
	int64_t start = 0, saved_at = -1;
	char ckdir_buf[4096];
	int tps = train->targets_per_sample;
	int64_t numel = ph_shape_numel(&train->shape);
	float *x = NULL;
	int32_t *y = NULL;
	int64_t *perm = NULL;
	FILE *metrics = NULL;
	int rc = PH_OK;
	/* under mpirun only process 0 writes checkpoints and metrics; the
	 * others hold the same weights (core/engine-replicas.c) */
	int writer = ph_comm_writer(&c->comm);
	if (ckdir && writer && (rc = ph_checkpoint_prepare(ckdir, err)))
		goto out;
	if ((ckdir || resume) && (rc = ph_checkpoint_identity(c, e, n, total, &id, err)))
		goto out;
	if (resume) {
		if ((rc = ph_checkpoint_load(resume, e, &id, &start, res->checkpoint, sizeof res->checkpoint, err)))
			goto out;
		if (start > total) {
			rc = ph_fail(err, PH_EINVAL, "checkpoint %s is at step %lld, past this run's %lld steps; raise [run] "
				     "steps or resume from an earlier step", res->checkpoint, (long long)start,
				     (long long)total);
			goto out;
		}
		saved_at = start;
		res->steps = start;
		/* --resume without [checkpoint] dir keeps saving beside the
		 * checkpoint it resumed from. */
		if (!ckdir) {
			snprintf(ckdir_buf, sizeof ckdir_buf, "%s", res->checkpoint);
			char *slash = strrchr(ckdir_buf, '/');
			if (slash && slash != ckdir_buf)
				*slash = 0;
			else
				snprintf(ckdir_buf, sizeof ckdir_buf, "%s", slash ? "/" : ".");
			ckdir = ckdir_buf;
		}
		printf("resumed from %s at step %lld of %lld\n", res->checkpoint, (long long)start, (long long)total);
		fflush(stdout);
	}
	x = malloc((size_t)(B * numel) * sizeof *x);
	y = malloc((size_t)(B * tps) * sizeof *y);
	perm = malloc((size_t)n * sizeof *perm);
	if (!x || !y || !perm) {
		rc = ph_fail(err, PH_ENOMEM, "out of memory for the batch");
		goto out;
	}
	/* A resumed run continues its metrics file. */
	if (c->run.metrics[0] && writer && !(metrics = fopen(c->run.metrics, start > 0 ? "a" : "w"))) {
		rc = ph_fail(err, PH_EIO, "cannot write metrics file %s; check [run] metrics", c->run.metrics);
		goto out;
	}
	stop_signal = 0;
	if (ckdir)
		catch_stop_signals(&sig);
	double t0 = now_s(), last_print = 0;
	int64_t epochs = (total + spe - 1) / spe;
	for (int64_t s = start; s < total; s++) {
		int64_t epoch = s / spe, pos = s % spe;
		if (pos == 0 || s == start) {
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
		int64_t here = s + 1 - start; /* steps done by this process */
		double sps = (double)here * B / (t > 0 ? t : 1e-9);
		/* sequence data (text): T tokens a sample, each a target */
		double tokps = c->data_source && c->data_source->per_byte ? sps * train->targets_per_sample : 0;
		char tok_tty[40] = "", tok_log[40] = "", tok_json[40] = "";
		if (tokps > 0) {
			snprintf(tok_tty, sizeof tok_tty, "  %.0f tokens/s", tokps);
			snprintf(tok_log, sizeof tok_log, " tokens/s %.0f", tokps);
			snprintf(tok_json, sizeof tok_json, ",\"tokens_per_s\":%.1f", tokps);
		}
		char eta[32];
		fmt_eta(t / here * (total - s - 1), eta, sizeof eta);
		int last = s + 1 == total;
		if (tty && (t - last_print > 0.25 || last)) {
			printf("\repoch %lld/%lld  step %lld/%lld  loss %.4f  %.0f samples/s%s  ETA %s   ", (long long)epoch + 1,
			       (long long)epochs, (long long)s + 1, (long long)total, loss, sps, tok_tty, eta);
			fflush(stdout);
			last_print = t;
		} else if (!tty && ((s + 1) % c->run.log_every == 0 || last)) {
			printf("epoch %lld/%lld step %lld/%lld loss %.4f lr %.3g samples/s %.0f%s ETA %s\n", (long long)epoch + 1,
			       (long long)epochs, (long long)s + 1, (long long)total, loss, lr, sps, tok_log, eta);
			fflush(stdout);
		}
		if (metrics && ((s + 1) % c->run.log_every == 0 || last || s == start)) {
			fprintf(metrics, "{\"step\":%lld,\"epoch\":%lld,\"loss\":%.6f,\"lr\":%.6g,\"samples_per_s\":%.1f%s,"
				"\"elapsed_s\":%.3f}\n", (long long)s + 1, (long long)epoch + 1, loss, lr, sps, tok_json, t);
			fflush(metrics);
		}
		/* under mpirun only process 0 reports, so only it evaluates,
		 * unless its pipeline is split over processes, which then all
		 * take part */
		if (c->run.eval && test && (pos == spe - 1 || last) && (writer || ph_config_split(c) > 1)) {
			if (tty)
				printf("\n");
			if ((rc = evaluate(c, e, test, epoch + 1, s + 1, metrics, res, err)))
				goto out;
		}
		/* a signal stops every process at the same step (mpirun sends
		 * it to all, but they may see it a step apart) */
		int signalled = stop_signal;
		if (ckdir && c->comm.size > 1 && (rc = c->comm.ops->max_int(&signalled, err)))
			goto out;
		int stop = ckdir && signalled && !last;
		if (ckdir && ((every && (s + 1) % every == 0) || last || stop)) {
			/* every process: a pipeline split over processes brings
			 * its weights together first */
			if ((rc = ph_engine_gather(e, err)) ||
			    (writer && (rc = ph_checkpoint_save(ckdir, s + 1, e, &id, c->run.seed, total, keep,
								res->checkpoint, sizeof res->checkpoint, err))))
				goto out;
			saved_at = s + 1;
			if (!stop) {
				printf("%scheckpoint: step %lld written to %s\n", tty ? "\n" : "", (long long)s + 1,
				       res->checkpoint);
				fflush(stdout);
			}
		}
		/* A signal during that save: this step is saved already. */
		if (c->comm.size == 1)
			signalled = stop_signal; /* one that came during the save */
		if (ckdir && signalled && !last) {
			if (saved_at != s + 1 &&
			    ((rc = ph_engine_gather(e, err)) ||
			     (writer && (rc = ph_checkpoint_save(ckdir, s + 1, e, &id, c->run.seed, total, keep,
								 res->checkpoint, sizeof res->checkpoint, err)))))
				goto out;
			printf("%sinterrupted at step %lld: checkpoint written to %s; resume with --resume %s\n",
			       tty ? "\n" : "", (long long)s + 1, res->checkpoint, ckdir);
			fflush(stdout);
			res->interrupted = 1;
			break;
		}
	}
	if (start == total && resume) {
		printf("the run of %lld steps was already complete at %s\n", (long long)total, res->checkpoint);
	} else if (tty && !c->run.eval && !res->interrupted)
		printf("\n");
	res->seconds = now_s() - t0;
out:
	restore_stop_signals(&sig);
	ph_checkpoint_id_free(&id);
	if (metrics)
		fclose(metrics);
	free(x);
	free(y);
	free(perm);
	return rc;
}

int ph_train(const ph_config *c, ph_engine *e, const ph_dataset *train, const ph_dataset *test,
	     ph_train_result *res, ph_err *err)
{
	return ph_train_ck(c, e, train, test, NULL, res, err);
}
