/* SPDX-License-Identifier: MIT */
/* Signal handling (signals.h).  Handlers only set flags and write(2) a
 * fixed line: everything else happens at the loop's decision points. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "signals.h"

static volatile sig_atomic_t stop_signal;   /* the first stop signal, or 0 */
static volatile sig_atomic_t stop_at_s;     /* CLOCK_MONOTONIC seconds of it */
static int catching, holding, installed, stdout_dead;
static int agreed; /* the signal every process agreed to stop on, or 0 */
static struct sigaction old_int, old_term;
static char stop_msg[512];
/* The output being written (ph_stop_tmp): its temporary file, removed by a
 * stop at once, and the line said then.  tmp_set is written last and
 * cleared first, so a handler (on any thread) sees whole strings. */
static int tmp_set;
static char tmp_path[4096], tmp_msg[8192];

void ph_signals_init(void)
{
	signal(SIGPIPE, SIG_IGN);
	signal(SIGXFSZ, SIG_IGN);
}

void ph_stdout_check(void)
{
	if (stdout_dead || !ferror(stdout))
		return;
	stdout_dead = 1;
	fprintf(stderr, "pipehost: standard output can no longer be written (its reader went away?); "
			"progress is no longer printed, training goes on\n");
	if (!freopen("/dev/null", "w", stdout))
		clearerr(stdout);
}

static long now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts); /* async-signal-safe */
	return (long)ts.tv_sec;
}

static void on_stop_signal(int sig)
{
	if (stop_signal) {
		/* the same ^C delivered twice (terminal and mpirun) is one request */
		if (now_s() - stop_at_s < 2)
			return;
		if (__atomic_load_n(&tmp_set, __ATOMIC_SEQ_CST)) {
			/* unlink and write are async-signal-safe */
			unlink(tmp_path);
			ssize_t w = write(STDERR_FILENO, tmp_msg, strlen(tmp_msg));
			(void)w;
		}
		signal(sig, SIG_DFL);
		raise(sig);
		return;
	}
	stop_signal = sig;
	stop_at_s = (sig_atomic_t)now_s();
	ssize_t w = write(STDERR_FILENO, stop_msg, strlen(stop_msg));
	(void)w;
}

/* The line the first stop signal prints.  Under Open MPI's mpirun a signal
 * to mpirun is forwarded as SIGTERM and followed by SIGKILL after
 * odls_base_sigkill_timeout seconds (1 by default): too soon for a step and
 * a checkpoint, so the line says how to give them time. */
static void prepare_stop_msg(const char *base)
{
	const char *t = getenv("OMPI_MCA_odls_base_sigkill_timeout");
	if (getenv("OMPI_COMM_WORLD_SIZE") && (!t || atoi(t) < 30))
		snprintf(stop_msg, sizeof stop_msg, "%s; mpirun kills the processes %s s after it forwards a "
			 "signal: start it with --mca odls_base_sigkill_timeout 600, or signal the pipehost "
			 "processes themselves\n", base, t ? t : "1");
	else
		snprintf(stop_msg, sizeof stop_msg, "%s\n", base);
}

static void install(void)
{
	if (installed)
		return;
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_stop_signal;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESTART;
	sigaction(SIGTERM, &sa, &old_term);
	/* An ignored SIGINT (a background job of a script) stays ignored. */
	sigaction(SIGINT, NULL, &old_int);
	if (old_int.sa_handler != SIG_IGN)
		sigaction(SIGINT, &sa, NULL);
	installed = 1;
}

void ph_stop_catch(void)
{
	prepare_stop_msg("\npipehost: interrupted: finishing this step, then writing a checkpoint "
			 "(interrupt again to stop at once)");
	stop_signal = 0;
	agreed = 0;
	install();
	catching = 1;
}

void ph_stop_hold(void)
{
	prepare_stop_msg("\npipehost: interrupted: finishing the output files being written, then stopping "
			 "(interrupt again to stop at once: the unfinished file is removed)");
	install();
	holding = 1;
}

void ph_stop_release(void)
{
	ph_stop_tmp(NULL, NULL, NULL);
	catching = 0;
	holding = 0;
	if (!installed)
		return;
	sigaction(SIGTERM, &old_term, NULL);
	sigaction(SIGINT, &old_int, NULL);
	installed = 0;
}

void ph_stop_tmp(const char *tmp, const char *what, const char *path)
{
	__atomic_store_n(&tmp_set, 0, __ATOMIC_SEQ_CST);
	if (!tmp || !tmp[0] || (size_t)snprintf(tmp_path, sizeof tmp_path, "%s", tmp) >= sizeof tmp_path)
		return;
	snprintf(tmp_msg, sizeof tmp_msg, "pipehost: stopped at once while writing %s %s: its temporary file %s "
		 "is removed: nothing half-written is left\n", what, path, tmp);
	__atomic_store_n(&tmp_set, 1, __ATOMIC_SEQ_CST);
}

int ph_stop_tmp_offer(const char *tmp, const char *what, const char *path)
{
	if (!holding || __atomic_load_n(&tmp_set, __ATOMIC_SEQ_CST))
		return 0;
	ph_stop_tmp(tmp, what, path);
	return __atomic_load_n(&tmp_set, __ATOMIC_SEQ_CST);
}

int ph_stop_signal(void)
{
	return stop_signal;
}

int ph_stop_requested(void)
{
	return catching && stop_signal;
}

int ph_stop_catching(void)
{
	return catching;
}

int ph_stop_agree(const ph_comm *comm, int *stop, ph_err *err)
{
	/* the signal number travels, so every process exits with the same
	 * status (SIGTERM, the larger, wins over SIGINT) */
	int v = agreed ? agreed : ph_stop_requested() ? (int)stop_signal : 0;
	if (catching && comm && comm->size > 1 && comm->ops) {
		int rc = comm->ops->max_int(&v, err);
		if (rc)
			return rc;
	}
	if (v)
		agreed = v;
	*stop = v != 0;
	return PH_OK;
}

int ph_stop_agreed(void)
{
	return agreed != 0;
}

int ph_stop_local(void)
{
	if (ph_stop_requested() && !agreed)
		agreed = (int)stop_signal;
	return agreed != 0;
}

int ph_stop_exit_status(void)
{
	int sig = agreed ? agreed : (int)stop_signal;
	return 128 + (sig ? sig : SIGTERM);
}
