/* SPDX-License-Identifier: MIT */
/* Training loop.  The batch order is a pure function of (seed, epoch), the
 * learning rate a pure function of the step: nothing here depends on the
 * schedule or the partition, which is what keeps runs comparable, and the
 * step alone is the position a checkpoint needs to resume exactly. */
#include "build-config.h"
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "checkpoint.h"
#include "config_agree.h"
#include "errline.h"
#include "data_source.h"
#include "outputs.h"
#include "runlock.h"
#include "signals.h"
#include "train.h"

/* An output failed but training goes on: remember it (say it now when
 * training goes on for a while), and fail at the end. */
static void output_failed(ph_train_result *res, int code, const char *msg, int say_now)
{
	if (say_now)
		ph_err_line(stderr, "pipehost: ", msg);
	if (res->nfailed < 4) {
		snprintf(res->failed[res->nfailed], sizeof res->failed[0], "%s", msg);
		res->said[res->nfailed] = say_now;
		res->codes[res->nfailed] = code;
	}
	res->nfailed++;
}

/* A figure as the metrics file gives it: rounded as printf's FMT would
 * ("%.6f": 6 decimals, "%.6g": 6 digits), so lines stay short; NaN and
 * infinities stay what they are, and cJSON writes them as null. */
static double rounded(const char *fmt, double v)
{
	char buf[64];
	if (!isfinite(v))
		return v;
	snprintf(buf, sizeof buf, fmt, v);
	return strtod(buf, NULL);
}

/* After each metrics line: a write error (a full disk, EIO) is reported
 * once; the file is closed and training goes on without it. */
static void metrics_check(FILE **m, const char *path, ph_train_result *res)
{
	if (!*m || (!ferror(*m) && fflush(*m) == 0))
		return;
	char msg[PH_ERR_MAX];
	int e = errno;
	snprintf(msg, sizeof msg, "metrics file %s: write failed: %s; training goes on without metrics, the exit "
		 "status will be 1", path, e ? strerror(e) : "I/O error");
	fclose(*m);
	*m = NULL;
	output_failed(res, PH_EIO, msg, 1);
}

/* One metrics line: OBJ (freed here) as one line of JSON any parser reads:
 * cJSON writes a non-finite number as null, where printf wrote nan.  The
 * fields are listed in docs/conventions.md. */
static void metrics_write(FILE **m, const char *path, ph_train_result *res, cJSON *obj)
{
	char *line = obj ? cJSON_PrintUnformatted(obj) : NULL;
	cJSON_Delete(obj);
	if (!line) {
		char msg[PH_ERR_MAX];
		snprintf(msg, sizeof msg, "metrics file %s: out of memory for a line; training goes on without metrics, "
			 "the exit status will be 1", path);
		fclose(*m);
		*m = NULL;
		output_failed(res, PH_ENOMEM, msg, 1);
		return;
	}
	errno = 0;
	fprintf(*m, "%s\n", line);
	free(line);
	metrics_check(m, path, res);
}

/* The line of a training step: step, epoch, loss, lr, samples_per_s, elapsed_s. */
static void metrics_step(FILE **m, const char *path, ph_train_result *res, int64_t step, int64_t epoch, double loss,
			 double lr, double sps, double tokps, double elapsed, const ph_report *rp, int nrp)
{
	cJSON *o = cJSON_CreateObject();
	if (o && (!cJSON_AddNumberToObject(o, "step", (double)step) || !cJSON_AddNumberToObject(o, "epoch", (double)epoch) ||
		  !cJSON_AddNumberToObject(o, "loss", rounded("%.6f", loss)) ||
		  !cJSON_AddNumberToObject(o, "lr", rounded("%.6g", lr)) ||
		  !cJSON_AddNumberToObject(o, "samples_per_s", rounded("%.1f", sps)) ||
		  /* sequence data only: T tokens a sample */
		  (tokps > 0 && !cJSON_AddNumberToObject(o, "tokens_per_s", rounded("%.1f", tokps))) ||
		  !cJSON_AddNumberToObject(o, "elapsed_s", rounded("%.3f", elapsed)))) {
		cJSON_Delete(o);
		o = NULL;
	}
	/* the layers' figures (ph_group.report): LAYER.KEY, the step's mean */
	for (int i = 0; o && i < nrp; i++)
		if (!cJSON_AddNumberToObject(o, rp[i].name, rounded("%.6g", rp[i].sum / rp[i].count))) {
			cJSON_Delete(o);
			o = NULL;
		}
	metrics_write(m, path, res, o);
}

/* The line of an evaluation: eval (true), epoch, step, test_loss, test_accuracy, samples. */
static void metrics_eval(FILE **m, const char *path, ph_train_result *res, int64_t epoch, int64_t step, double loss,
			 double accuracy, int64_t samples)
{
	cJSON *o = cJSON_CreateObject();
	if (o && (!cJSON_AddTrueToObject(o, "eval") || !cJSON_AddNumberToObject(o, "epoch", (double)epoch) ||
		  !cJSON_AddNumberToObject(o, "step", (double)step) ||
		  !cJSON_AddNumberToObject(o, "test_loss", rounded("%.6f", loss)) ||
		  !cJSON_AddNumberToObject(o, "test_accuracy", rounded("%.6f", accuracy)) ||
		  !cJSON_AddNumberToObject(o, "samples", (double)samples))) {
		cJSON_Delete(o);
		o = NULL;
	}
	metrics_write(m, path, res, o);
}

/* The directory --resume PATH reads: PATH's parent for a step, or PATH. */
static void resume_dir(const char *resume, char *buf, size_t len)
{
	snprintf(buf, len, "%s", resume);
	if (!ph_checkpoint_is_step(resume))
		return;
	size_t k = strlen(buf);
	while (k > 1 && buf[k - 1] == '/')
		buf[--k] = 0;
	char *slash = strrchr(buf, '/');
	if (slash && slash != buf)
		*slash = 0;
	else
		snprintf(buf, len, "%s", slash ? "/" : ".");
}

static int same_dir(const char *a, const char *resume)
{
	char b[4096];
	struct stat x, y;
	resume_dir(resume, b, sizeof b);
	return !stat(a, &x) && !stat(b, &y) && x.st_dev == y.st_dev && x.st_ino == y.st_ino;
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

/* --progress=auto: the redrawn line only on a terminal of this process's
 * own.  Under mpirun stdout is a pseudo-terminal of mpirun's even when
 * mpirun writes to a log file, so there it is lines. */
static int progress_mode(int asked)
{
	if (asked != PH_PROGRESS_AUTO)
		return asked;
	if (!isatty(STDOUT_FILENO) || getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE"))
		return PH_PROGRESS_LINES;
	return PH_PROGRESS_TTY;
}

/* The terminal's width: the terminal's own (TIOCGWINSZ), else $COLUMNS,
 * else 80. */
static int terminal_width(void)
{
	struct winsize ws;
	if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
		return ws.ws_col;
	const char *c = getenv("COLUMNS");
	int w = c ? atoi(c) : 0;
	return w > 0 ? w : 80;
}

/* The tokens/s (when tokps > 0) and the layers' figures of a progress
 * line, as the redrawn line ("  21050 tokens/s  moe0.aux 1.02") or a
 * logged one (" tokens/s 21050 moe0.aux 1.02") shows them; malloc'd, NULL
 * when out of memory. */
static char *figures_text(double tokps, const ph_report *rp, int n, int tty)
{
	const char *sep = tty ? "  " : " ";
	size_t cap = 64;
	for (int i = 0; i < n; i++)
		cap += strlen(rp[i].name) + 40;
	char *t = malloc(cap);
	if (!t)
		return NULL;
	size_t len = 0;
	t[0] = 0;
	if (tokps > 0)
		len += (size_t)snprintf(t, cap, tty ? "  %.0f tokens/s" : " tokens/s %.0f", tokps);
	for (int i = 0; i < n && len < cap; i++)
		len += (size_t)snprintf(t + len, cap - len, "%s%s %.4g", sep, rp[i].name, rp[i].sum / rp[i].count);
	return t;
}

/* The redrawn line: the longest of its forms that fits the width less one
 * column (a line that filled it would wrap on some terminals, and every
 * redraw would then start a new line), cut if even the shortest does not;
 * then clear the rest of the old line. */
static void progress_redraw(int64_t epoch, int64_t epochs, int64_t step, int64_t total, double loss, double lr,
			    double sps, const char *tok, const char *eta)
{
	char full[1024], mid[256], small[256];
	int nfull = snprintf(full, sizeof full,
			     "epoch %lld/%lld  step %lld/%lld  loss %.4f  lr %.3g  %.0f samples/s%s  ETA %s",
			     (long long)epoch, (long long)epochs, (long long)step, (long long)total, loss, lr, sps, tok,
			     eta);
	snprintf(mid, sizeof mid, "step %lld/%lld loss %.4f lr %.3g %.0f/s ETA %s", (long long)step, (long long)total,
		 loss, lr, sps, eta);
	snprintf(small, sizeof small, "%lld/%lld loss %.4f lr %.3g", (long long)step, (long long)total, loss, lr);
	int room = terminal_width() - 1;
	const char *line = nfull < (int)sizeof full && nfull <= room ? full : (int)strlen(mid) <= room ? mid : small;
	printf("\r%.*s\033[K", room > 0 ? room : 0, line);
}

/* *cut (may be NULL): 1 when a stop (SIGINT/SIGTERM) cut it short, with
 * no figures; the step's checkpoint then says so (eval_pending) and a
 * resume runs it first. */
static int evaluate(const ph_config *c, ph_engine *e, const ph_dataset *test, int64_t epoch, int64_t step,
		    FILE **metrics, ph_train_result *res, int *cut, ph_err *err)
{
	if (cut)
		*cut = 0;
	int64_t count = c->data.test_limit ? c->data.test_limit : test->n;
	if (count > test->n)
		count = test->n;
	ph_stats st;
	int rc = ph_engine_eval(e, test, count, &st, err);
	if (rc)
		return rc;
	if (ph_stop_agreed()) { /* SIGINT/SIGTERM cut it short: no figures */
		res->test_loss = -1;
		if (cut)
			*cut = 1;
		return PH_OK;
	}
	res->test_loss = st.targets ? st.loss_sum / st.targets : 0;
	res->test_accuracy = st.targets ? st.correct / st.targets : 0;
	res->test_samples = count;
	if (ph_data_per_byte(c))
		/* byte-level: the loss is nats per byte; bits per byte = nats / ln 2 */
		printf("epoch %lld: validation loss %.4f nats/byte (%.4f bits/byte), next-byte accuracy %.2f%% "
		       "(%lld sequences)\n", (long long)epoch, res->test_loss, res->test_loss / 0.6931471805599453,
		       100.0 * res->test_accuracy, (long long)count);
	else
		printf("epoch %lld: test loss %.4f, accuracy %.2f%% (%lld samples)\n", (long long)epoch, res->test_loss,
		       100.0 * res->test_accuracy, (long long)count);
	fflush(stdout);
	if (*metrics)
		metrics_eval(metrics, c->run.metrics, res, epoch, step, res->test_loss, res->test_accuracy, count);
	return PH_OK;
}

/* A delayed update (2bw) under AdamW with a short warm-up trains on
 * without a word and ends far behind 1f1b: on etc/gpt-fortunes.ini 2.69
 * against 1.86 nats/byte (docs/delayed-update.md); a warm-up of a third
 * of the steps halved that, and etc/gpt-fortunes-2bw.ini (Lion, half the
 * batch) ends within 0.05 of 1f1b.  Say so once, before step 1.  The
 * threshold, a quarter of the steps, lies between the warm-ups measured
 * there: 200 of 1194 steps gained 0.10 nats/byte, 400 gained 0.43. */
static void note_delayed_warmup(const ph_config *c, int64_t total)
{
	if (!c->schedule || !(ph_schedule_flags(c->schedule) & PH_SCHED_DELAYED_UPDATE) ||
	    c->optim.type != PH_OPTIM_ADAMW || c->optim.warmup * 4 >= total)
		return;
	printf("note: schedule %s applies each update one step late; under adamw with warmup = %lld of %lld steps it may "
	       "end well behind 1f1b (etc/gpt-fortunes.ini: 2.69 against 1.86 nats/byte); etc/gpt-fortunes-2bw.ini "
	       "(optimizer.type = lion, half the batch) ends within 0.05 of 1f1b (docs/delayed-update.md)\n",
	       c->sched.type, (long long)c->optim.warmup, (long long)total);
}

/* Samples a run trains on: the training set, cut to [data] limit. */
static int64_t train_samples(const ph_config *c, const ph_dataset *train)
{
	int64_t n = train->n;
	return c->data.limit && c->data.limit < n ? c->data.limit : n;
}

int ph_train_check_data(const ph_config *c, const ph_dataset *train, ph_err *err)
{
	int64_t n = train_samples(c, train), B = c->run.batch;
	if (n < B && n < train->n) /* [data] limit cut the set below one batch */
		return ph_fail(err, PH_EINVAL, "the training set has %lld samples, %lld after [data] limit = %lld, fewer "
			       "than one batch of %lld; raise limit or lower [run] batch", (long long)train->n,
			       (long long)n, (long long)c->data.limit, (long long)B);
	if (n < B)
		return ph_fail(err, PH_EINVAL, "the training set has %lld samples, fewer than one batch of %lld; lower [run] batch",
			       (long long)n, (long long)B);
	return PH_OK;
}

/* What the processes compare after a resume (ph_start_agree): the step,
 * the run and the XXH3-64 of the step's manifest.txt, which holds the
 * size and hash of every file of the step.  NULL: out of memory. */
static char *resume_text(const char *stepdir, int64_t step, const char *run)
{
	char path[4200];
	unsigned long long h = 0;
	snprintf(path, sizeof path, "%s/manifest.txt", stepdir);
	FILE *f = fopen(path, "rb");
	if (f) {
		XXH3_state_t *st = XXH3_createState();
		char buf[4096];
		size_t r;
		if (st && XXH3_64bits_reset(st) == XXH_OK) {
			while ((r = fread(buf, 1, sizeof buf, f)) > 0)
				XXH3_64bits_update(st, buf, r);
			h = XXH3_64bits_digest(st);
		}
		XXH3_freeState(st);
		fclose(f);
	}
	char *t = malloc(256);
	if (t)
		snprintf(t, 256, "resumed at step=%lld\ncheckpoint run=%s\ncheckpoint manifest (XXH3-64)=%016llx\n",
			 (long long)step, run, h);
	return t;
}

int ph_train_ck(const ph_config *c, ph_engine *e, const ph_dataset *train, const ph_dataset *test,
		const ph_train_ckpt *ck, ph_train_result *res, ph_err *err)
{
	memset(res, 0, sizeof *res);
	res->test_loss = -1;
	int rc = ph_train_check_data(c, train, err);
	if (rc)
		return rc;
	int64_t B = c->run.batch, n = train_samples(c, train);
	int64_t spe = n / B;
	int64_t total = c->run.steps ? c->run.steps : c->run.epochs * spe;
	ph_optim_config oc = c->optim;
	oc.total_steps = total;
	const char *ckdir = ck && ck->dir && ck->dir[0] ? ck->dir : NULL;
	const char *resume = ck && ck->resume && ck->resume[0] ? ck->resume : NULL;
	int64_t every = ck && ck->every > 0 ? ck->every : 0;
	int keep = ck && ck->keep > 0 ? (ck->keep > 1000000 ? 1000000 : (int)ck->keep) : 0;
	int progress = progress_mode(c->progress);
	int tty = progress == PH_PROGRESS_TTY; /* a line is being redrawn: end it before another */
	ph_ckpt_id id;
	memset(&id, 0, sizeof id);
	int64_t start = 0, saved_at = -1;
	int eval_pending = 0; /* the resumed step's evaluation was cut short: run it first */
	char ckdir_buf[4096];
	int lockfd = -1;
	int tps = train->targets_per_sample;
	int64_t numel = ph_shape_numel(&train->shape);
	float *x = NULL;
	int32_t *y = NULL;
	int64_t *perm = NULL;
	ph_stats *wst = NULL; /* the window's steps' figures and rates */
	double *wlr = NULL;
	int64_t win_start = 0, win_end = 0;
	FILE *metrics = NULL;
	rc = PH_OK;
	/* under mpirun only process 0 writes checkpoints and metrics; the
	 * others hold the same weights (core/engine-replicas.c) */
	int writer = ph_comm_writer(&c->comm);
	if (writer)
		note_delayed_warmup(c, total);
	/* --resume without [checkpoint] dir keeps saving beside the
	 * checkpoint it resumes from: the directory of a step, or DIR. */
	int derived = 0;
	if (resume && !ckdir) {
		resume_dir(resume, ckdir_buf, sizeof ckdir_buf);
		ckdir = ckdir_buf;
		derived = 1;
	}
	/* a no-flush schedule's steps run in windows of up to W steps, its
	 * pipeline drained only at a window's end (ph_engine_train_steps);
	 * windows end where the loop needs the weights of that step: at an
	 * evaluation (the epoch's end), a checkpoint and the run's end, and a
	 * signal waits for the window's end */
	const int W = ph_engine_window(e);
	/* Before step 1: the directory exists, can be written, and is this
	 * run's alone (locked while it runs; claimed below). */
	struct stat dsb;
	if (ckdir && writer && (!derived || (!stat(ckdir, &dsb) && S_ISDIR(dsb.st_mode))) &&
	    !(rc = ph_checkpoint_prepare(ckdir, err)))
		rc = ph_runlock_acquire(ckdir, &lockfd, err);
	/* process 0 alone checks the directory: its failure is the job's
	 * line, and the others end quietly (core/config_agree.h), not in
	 * the abort's SIGTERM read as a stop */
	if ((rc = ph_setup_agree(&c->comm, rc, err)))
		goto out;
	if ((ckdir || resume) && (rc = ph_checkpoint_identity(c, e, n, total, &id, err)))
		goto out;
	if (resume) {
		/* a damaged step is moved aside only in the directory this
		 * process writes and has locked */
		int aside = writer && lockfd >= 0 && (derived || same_dir(ckdir, resume));
		if ((rc = ph_checkpoint_load(resume, e, &id, aside, &start, &eval_pending, id.run, res->checkpoint,
					     sizeof res->checkpoint, err)))
			goto out;
		/* every process resumed from the same checkpoint: a node's
		 * stale copy of the directory would train other weights, or
		 * hang the job */
		if ((rc = ph_start_agree(&c->comm, resume_text(res->checkpoint, start, id.run), "checkpoint differs",
					 "give every process the same checkpoint (only process 0 writes them: copy its "
					 "directory to the other nodes)", err)))
			goto out;
		if (start > total) {
			rc = ph_fail(err, PH_EINVAL, "checkpoint %s is at step %lld, past this run's %lld steps; raise [run] "
				     "steps or resume from an earlier step", res->checkpoint, (long long)start,
				     (long long)total);
			goto out;
		}
		saved_at = start;
		res->steps = start;
		printf("resumed from %s at step %lld of %lld\n", res->checkpoint, (long long)start, (long long)total);
		/* resumed from an older step into the same directory: its later
		 * steps are the abandoned continuation's, replaced as this run
		 * reaches them; until then --resume DIR would take them */
		int64_t newest = ckdir && writer ? ph_checkpoint_newest_step(ckdir) : -1;
		if (newest > start)
			printf("note: %s holds steps up to %lld from an earlier continuation; this run replaces each as it "
			       "reaches it, and until then --resume %s takes them: resume this run from its own step "
			       "directory\n", ckdir, (long long)newest, ckdir);
		fflush(stdout);
	}
	if (ckdir && writer && (rc = ph_checkpoint_claim(ckdir, id.run, !resume, c->checkpoint.overwrite, err)))
		goto setup_end;
	x = malloc((size_t)(B * numel) * W * sizeof *x);
	y = malloc((size_t)(B * tps) * W * sizeof *y);
	perm = malloc((size_t)n * sizeof *perm);
	wst = calloc((size_t)W, sizeof *wst);
	wlr = calloc((size_t)W, sizeof *wlr);
	if (!x || !y || !perm || !wst || !wlr) {
		rc = ph_fail(err, PH_ENOMEM, "out of memory for the batch");
		goto setup_end;
	}
	/* A resumed run continues its metrics file. */
	if (c->run.metrics[0] && writer && !(metrics = fopen(c->run.metrics, start > 0 ? "a" : "w"))) {
		rc = ph_fail(err, PH_EIO, "cannot write metrics file %s; check [run] metrics", c->run.metrics);
		goto setup_end;
	}
setup_end:
	/* the claim and the metrics file are process 0's too */
	if ((rc = ph_setup_agree(&c->comm, rc, err)))
		goto out;
	if (ckdir)
		ph_stop_catch();
	double t0 = now_s(), last_print = 0;
	int64_t epochs = (total + spe - 1) / spe;
	win_start = win_end = start;
	/* the evaluation a stop cut short at the checkpoint's step: run it
	 * before training on (or at all, when that step was the last), so a
	 * preempted run still reports it */
	int eval_cut = 0, skip = 0;
	const int evaluates = c->run.eval && test && (writer || ph_config_split(c) > 1 || ph_engine_eval_together(e));
	if (eval_pending && start > 0 && c->run.eval && test) {
		if (evaluates && (rc = evaluate(c, e, test, (start - 1) / spe + 1, start, &metrics, res, &eval_cut, err)))
			goto out;
		/* every process learns of a stop during it (ph_stop_agreed) */
		if (eval_cut) {
			printf("interrupted at step %lld again, during its evaluation: checkpoint %s unchanged; resume with "
			       "--resume %s\n", (long long)start, res->checkpoint, res->checkpoint);
			fflush(stdout);
			res->interrupted = 1;
			skip = 1;
		}
	}
	for (int64_t s = start; s < total && !skip; s++) {
		int64_t epoch = s / spe, pos = s % spe;
		if (pos == 0 || s == start) {
			if (c->data.shuffle)
				ph_data_permutation((uint64_t)c->run.seed, (uint64_t)epoch, n, perm);
			else
				for (int64_t i = 0; i < n; i++)
					perm[i] = i;
		}
		if (s == win_end) {
			int64_t k = W;
			if (k > total - s)
				k = total - s;
			if (k > spe - pos)
				k = spe - pos; /* the epoch's end: evaluation, a new order */
			if (every && k > every - s % every)
				k = every - s % every;
			for (int64_t i = 0; i < k; i++) {
				ph_data_gather(train, perm + (pos + i) * B, (int)B, x + i * B * numel, y + i * B * tps);
				wlr[i] = ph_lr_at(&oc, s + i);
			}
			if ((rc = ph_engine_train_steps(e, s, (int)k, x, y, wlr, wst, err)))
				goto out;
			win_start = s;
			win_end = s + k;
		}
		double lr = wlr[s - win_start];
		ph_stats st = wst[s - win_start];
		int at_end = s + 1 == win_end; /* the engine's weights are this step's */
		double loss = st.loss_sum / (double)st.targets;
		if (!isfinite(loss)) {
			/* the weights that gave it are not finite either (or will
			 * not be after this update): nothing is saved from here on */
			rc = ph_fail(err, PH_EINVAL, "step %lld: the loss is %s: training diverged and stopped; %s%s%s; lower "
				     "[optimizer] lr or check beta2/eps", (long long)s + 1, isnan(loss) ? "NaN" : "infinite",
				     saved_at > 0 ? "the last checkpoint, " : "no checkpoint or weights written",
				     saved_at > 0 ? res->checkpoint : "", saved_at > 0 ? ", is finite and kept" : "");
			goto out;
		}
		res->final_loss = loss;
		res->steps_run++;
		res->steps = s + 1;
		double t = now_s() - t0;
		/* steps this process has done by now: under a window of steps
		 * run as one job, all of the window's (its lines come after it;
		 * counting only up to this step once showed a window's first
		 * step at 1/16 of the speed) */
		int64_t here = win_end - start;
		double sps = (double)here * B / (t > 0 ? t : 1e-9);
		/* sequence data (text, tokens): T tokens a sample, each a target */
		double tokps = train->targets_per_sample > 1 ? sps * train->targets_per_sample : 0;
		/* figures the layers reported this step (every process takes part) */
		ph_report *rp = NULL;
		int nrp = 0;
		if (at_end && (rc = ph_engine_reports(e, &rp, &nrp, err)))
			goto out;
		/* every figure, however many layers report: the line is as long
		 * as it needs (a fixed buffer once cut a MoE model's tail) */
		char *tok_tty = figures_text(tokps, rp, nrp, 1), *tok_log = figures_text(tokps, rp, nrp, 0);
		if (!tok_tty || !tok_log) {
			free(tok_tty);
			free(tok_log);
			free(rp);
			rc = ph_fail(err, PH_ENOMEM, "out of memory for the progress line");
			goto out;
		}
		char eta[32];
		fmt_eta(t / here * (total - win_end), eta, sizeof eta);
		int last = s + 1 == total;
		if (tty && (t - last_print > 0.25 || last)) {
			progress_redraw(epoch + 1, epochs, s + 1, total, loss, lr, sps, tok_tty, eta);
			fflush(stdout);
			last_print = t;
		} else if (progress == PH_PROGRESS_LINES && ((s + 1) % c->run.log_every == 0 || last)) {
			printf("epoch %lld/%lld step %lld/%lld loss %.4f lr %.3g samples/s %.0f%s ETA %s\n", (long long)epoch + 1,
			       (long long)epochs, (long long)s + 1, (long long)total, loss, lr, sps, tok_log, eta);
			fflush(stdout);
		}
		free(tok_tty);
		free(tok_log);
		ph_stdout_check();
		if (metrics && ((s + 1) % c->run.log_every == 0 || last || s == start))
			metrics_step(&metrics, c->run.metrics, res, s + 1, epoch + 1, loss, lr, sps, tokps, t, rp, nrp);
		free(rp);
		/* under mpirun only process 0 reports, so only it evaluates,
		 * unless its pipeline is split over processes, which then all
		 * take part, or its experts are in other processes too */
		eval_cut = 0;
		if (evaluates && (pos == spe - 1 || last)) {
			if (tty)
				printf("\n");
			if ((rc = evaluate(c, e, test, epoch + 1, s + 1, &metrics, res, &eval_cut, err)))
				goto out;
		}
		/* a signal stops every process at the same step (mpirun sends
		 * it to all, but they may see it a step apart) */
		int signalled = 0;
		if (!at_end)
			continue;
		if (ckdir && (rc = ph_stop_agree(&c->comm, &signalled, err)))
			goto out;
		int stop = ckdir && signalled && !last;
		if (ckdir && ((every && (s + 1) % every == 0) || last || stop)) {
			/* every process: a pipeline split over processes brings
			 * its weights together first */
			if ((rc = ph_engine_gather(e, err)))
				goto out;
			if (writer && (rc = ph_checkpoint_save(ckdir, s + 1, e, &id, c->run.seed, total, keep, eval_cut,
							       res->checkpoint, sizeof res->checkpoint, err))) {
				/* the final one: the other outputs are still written
				 * (ph_train_write_outputs), and the exit is 1 */
				if (!last || stop)
					goto out;
				output_failed(res, rc, err->msg, 0);
				rc = PH_OK;
			} else {
				saved_at = s + 1;
			}
			res->eval_pending = saved_at == s + 1 && eval_cut;
			if (!stop && saved_at == s + 1) {
				printf("%scheckpoint: step %lld written to %s\n", tty ? "\n" : "", (long long)s + 1,
				       res->checkpoint);
				fflush(stdout);
			}
		}
		/* A signal during that save: this step is saved already. */
		if (c->comm.size == 1)
			signalled = ph_stop_requested(); /* one that came during the save */
		if (ckdir && signalled && !last) {
			if (saved_at != s + 1 &&
			    ((rc = ph_engine_gather(e, err)) ||
			     (writer && (rc = ph_checkpoint_save(ckdir, s + 1, e, &id, c->run.seed, total, keep, eval_cut,
								 res->checkpoint, sizeof res->checkpoint, err)))))
				goto out;
			/* DIR may still hold a resumed run's abandoned later steps,
			 * which --resume DIR would take: then name this step */
			printf("%sinterrupted at step %lld: checkpoint written to %s; resume with --resume %s%s\n",
			       tty ? "\n" : "", (long long)s + 1, res->checkpoint,
			       ph_checkpoint_newest_step(ckdir) > s + 1 ? res->checkpoint : ckdir,
			       eval_cut ? " (its evaluation was cut short: the resumed run evaluates first)" : "");
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
	ph_stop_release();
	ph_runlock_release(&lockfd);
	ph_checkpoint_id_free(&id);
	if (metrics && fclose(metrics) && !rc) {
		char msg[PH_ERR_MAX];
		snprintf(msg, sizeof msg, "metrics file %.150s: closing failed: %s", c->run.metrics, strerror(errno));
		output_failed(res, PH_EIO, msg, 0);
	}
	free(x);
	free(y);
	free(perm);
	free(wst);
	free(wlr);
	return rc;
}

int ph_run_check_outputs(const ph_config *c, const char *config_path, const char *resume, const char *weights_in,
			 const ph_output *outs, int nouts, ph_err *err)
{
	if (!ph_comm_writer(&c->comm))
		return PH_OK; /* only process 0 writes files */
	/* --resume DIR reads its newest step alone: that step is the input,
	 * not every file in DIR (a --save-weights DIR/final.st worked once,
	 * then was refused as "an input of this run") */
	char latest[4096] = "";
	if (resume && resume[0] && !ph_checkpoint_is_step(resume)) {
		struct stat sb;
		ph_err why;
		int found = ph_checkpoint_latest(resume, latest, sizeof latest, NULL, &why);
		if (found == -PH_ENOMEM) { /* the newest step unknown: no check rather than one without it */
			*err = why;
			return PH_ENOMEM;
		}
		if (found != 1)
			latest[0] = 0;
		if (!stat(resume, &sb) && S_ISDIR(sb.st_mode))
			resume = NULL;
	}
	const ph_data_cfg *d = &c->data;
	const char *const inputs[] = { config_path,     c->run.init,     resume,          latest,
				       weights_in,      d->path,         d->vocab,        d->merges,
				       d->train_images, d->train_labels, d->test_images,  d->test_labels,
				       d->tokens,       d->test_tokens };
	return ph_outputs_check(outs, nouts, inputs, (int)(sizeof inputs / sizeof *inputs), err);
}

static int write_weights(ph_engine *e, const char *path, ph_err *err)
{
	ph_tensor_ref *t;
	int n;
	int rc = ph_engine_tensors(e, &t, &n, err);
	if (rc)
		return rc;
	int64_t at = 0;
	const int bad = ph_tensors_first_nonfinite(t, n, &at);
	if (bad >= 0) {
		rc = ph_fail(err, PH_EINVAL, "--save-weights %s: not written: %s holds %s (training diverged)", path,
			     t[bad].name, isnan(t[bad].data[at]) ? "NaN" : "an infinity");
		free(t);
		return rc;
	}
	static const char *const meta[] = { "format", "pt", "producer", "pipehost " PACKAGE_VERSION, NULL };
	rc = ph_safetensors_write(path, t, n, meta, err);
	/* the file's own count: a tied copy is a name in its metadata */
	const int tied = rc ? 0 : ph_safetensors_tied_out(t, n);
	free(t);
	if (!rc && tied)
		printf("weights written to %s (%d tensors, and %d tied cop%s named in its metadata)\n", path, n - tied, tied,
		       tied == 1 ? "y" : "ies");
	else if (!rc)
		printf("weights written to %s (%d tensors)\n", path, n);
	return rc;
}

/* The temporary file path is written through, for a stop at once to
 * remove; registered before the writer runs, so that none is missed. */
static void note_tmp(const char *what, const char *path)
{
	char tmp[4096];
	if (!ph_outfile_tmp_name(path, tmp, sizeof tmp))
		ph_stop_tmp(tmp, what, path);
}

int ph_train_write_outputs(const ph_config *c, ph_engine *e, const ph_train_result *res, const char *trace_path,
			   const char *weights_path, ph_err *err)
{
	int writer = ph_comm_writer(&c->comm);
	/* SIGINT/SIGTERM from here on (or one caught in the last step) waits
	 * for the outputs to be whole; a second one stops at once and leaves
	 * no temporary file (core/signals.h) */
	ph_stop_hold();
	/* every failure, and whether it was printed during training */
	char msg[6][PH_ERR_MAX];
	int said[6], code[6], n = 0, rc;
	for (int i = 0; i < res->nfailed && i < 4; i++, n++) {
		snprintf(msg[n], sizeof msg[n], "%s", res->failed[i]);
		said[n] = res->said[i];
		code[n] = res->codes[i];
	}
	/* each output whatever became of the others */
	ph_err one;
	if (trace_path && trace_path[0]) {
		/* every process sends its events; process 0 writes */
		if (writer)
			note_tmp("the trace", trace_path);
		rc = ph_engine_write_trace(e, trace_path, &one);
		ph_stop_tmp(NULL, NULL, NULL);
		if (rc) {
			snprintf(msg[n], sizeof msg[n], "%s", one.msg);
			code[n] = rc;
			said[n++] = 0;
		} else if (writer) {
			printf("trace written to %s\n", trace_path);
			fflush(stdout); /* said, even if a second signal ends the process */
		}
	}
	if (weights_path && weights_path[0]) {
		/* every process takes part in the gather; process 0 writes */
		if (writer)
			note_tmp("the weights", weights_path);
		if ((rc = ph_engine_gather(e, &one)) || (writer && (rc = write_weights(e, weights_path, &one)))) {
			snprintf(msg[n], sizeof msg[n], "%s", one.msg);
			code[n] = rc;
			said[n++] = 0;
		}
		ph_stop_tmp(NULL, NULL, NULL);
	}
	fflush(stdout);
	ph_stop_release();
	int failed = res->nfailed > 4 ? n + res->nfailed - 4 : n;
	int sig = ph_stop_signal();
	if (!failed && sig) {
		/* main then exits 128 + the signal, as after a checkpointed stop
		 * (a failure above is exit 1) */
		printf("interrupted by %s as the run ended: every output was written in full first%s%s%s; stopping with "
		       "exit status %d\n", sig == SIGINT ? "SIGINT" : "SIGTERM",
		       res->eval_pending ? ", but the final evaluation was cut short (--resume " : "",
		       res->eval_pending ? res->checkpoint : "", res->eval_pending ? " evaluates it)" : "",
		       ph_stop_exit_status());
		fflush(stdout);
	}
	if (!failed)
		return PH_OK;
	if (failed == 1 && !said[0])
		return ph_fail(err, code[0] ? code[0] : PH_EIO, "%s", msg[0]); /* one failure: its line alone, its code */
	int oom = 0; /* main's advice for memory, if any output lacked it */
	for (int i = 0; i < n; i++) {
		oom |= code[i] == PH_ENOMEM;
		if (!said[i])
			ph_err_line(stderr, "pipehost: ", msg[i]);
	}
	return ph_fail(err, oom ? PH_ENOMEM : PH_EIO, "the run trained, but %d of its outputs failed: each is named above",
		       failed);
}

int ph_train(const ph_config *c, ph_engine *e, const ph_dataset *train, const ph_dataset *test,
	     ph_train_result *res, ph_err *err)
{
	return ph_train_ck(c, e, train, test, NULL, res, err);
}
