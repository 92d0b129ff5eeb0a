/* SPDX-License-Identifier: MIT */
/* Signal handling (signals.h).  Handlers only set flags, write(2) a line
 * prepared beforehand (or put together from static strings, with no
 * library call) and re-raise: everything else happens at the loop's
 * decision points. */
#define _GNU_SOURCE /* REG_RIP, _dl_find_object, dl_iterate_phdr, on_exit */
#include <errno.h>
#include <link.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>
#ifdef __GLIBC__
#include <execinfo.h>
#endif

#include "signals.h"

static volatile sig_atomic_t stop_signal;   /* the first stop signal, or 0 */
static volatile sig_atomic_t stop_at_s;     /* CLOCK_MONOTONIC seconds of it */
static int catching, holding, installed, stdout_dead;
static int agreed; /* the signal every process agreed to stop on, or 0 */
static struct sigaction old_int, old_term;
/* The line of the first stop signal; under mpirun another one for the
 * signal mpirun forwards (sent by the parent: mpirun, or its orted), which
 * says SIGKILL is on its way (prepare_stop_msg). */
static char stop_msg[512], stop_msg_mpirun[1024];
static pid_t parent_pid;
/* The output being written (ph_stop_tmp): its temporary file, removed by a
 * stop at once, and the line said then.  Two slots: ph_stop_tmp writes the
 * one no handler was given, then publishes it in tmp_set (slot + 1; 0:
 * none), so a handler (on any thread, while the main thread names the next
 * file) reads whole strings. */
static int tmp_set;
static char tmp_path[2][4096], tmp_msg[2][8192];

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

/* The handler may run on any thread (OpenBLAS's threads do not block the
 * signals), twice at once (a terminal's ^C and mpirun's SIGTERM): the
 * first signal is claimed atomically, its time stored before the claim,
 * so a second one never reads a claim without its time. */
static void on_stop_signal(int sig, siginfo_t *si, void *uc)
{
	(void)uc;
	const int saved_errno = errno;
	const sig_atomic_t now = (sig_atomic_t)now_s();
	int none = 0;
	if (!__atomic_load_n(&stop_signal, __ATOMIC_SEQ_CST))
		__atomic_store_n(&stop_at_s, now, __ATOMIC_SEQ_CST);
	if (__atomic_compare_exchange_n(&stop_signal, &none, sig, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
		const char *m = stop_msg_mpirun[0] && si && si->si_code == SI_USER && si->si_pid == parent_pid
					? stop_msg_mpirun
					: stop_msg;
		ssize_t w = write(STDERR_FILENO, m, strlen(m));
		(void)w;
		errno = saved_errno;
		return;
	}
	/* the same ^C delivered twice (terminal and mpirun) is one request */
	if (now - __atomic_load_n(&stop_at_s, __ATOMIC_SEQ_CST) < 2) {
		errno = saved_errno;
		return;
	}
	int slot = __atomic_load_n(&tmp_set, __ATOMIC_SEQ_CST);
	if (slot) {
		/* unlink and write are async-signal-safe */
		unlink(tmp_path[slot - 1]);
		ssize_t w = write(STDERR_FILENO, tmp_msg[slot - 1], strlen(tmp_msg[slot - 1]));
		(void)w;
	}
	signal(sig, SIG_DFL);
	raise(sig);
	errno = saved_errno;
}

/* The lines the first stop signal prints.  Open MPI's mpirun (4.1) does
 * not pass ^C on at once: it waits odls_base_sigkill_timeout seconds T (1
 * by default), sends SIGTERM, and SIGKILL T s later, so the processes have
 * T s for the step and the checkpoint, and a large T only delays the
 * stop.  A signal sent to the processes themselves is taken at once, and
 * mpirun then exits with their status (measured: docs/reference.md).  So
 * when the signal comes from mpirun, the line says how to stop next time. */
static void prepare_stop_msg(const char *base)
{
	const char *t = getenv("OMPI_MCA_odls_base_sigkill_timeout");
	snprintf(stop_msg, sizeof stop_msg, "%s\n", base);
	stop_msg_mpirun[0] = 0;
	parent_pid = getppid();
	if (getenv("OMPI_COMM_WORLD_SIZE") && (!t || atoi(t) < 30))
		snprintf(stop_msg_mpirun, sizeof stop_msg_mpirun, "%s; mpirun sends SIGKILL %s s after this SIGTERM, "
			 "too soon for a long step or checkpoint: next time interrupt the processes, not mpirun "
			 "(here: pkill -INT -P %ld, mpirun's children; on other nodes, the orted's), or start mpirun "
			 "with --mca odls_base_sigkill_timeout T (it then passes ^C on T s late, and kills T s after "
			 "that)\n", base, t && *t ? t : "1", (long)parent_pid);
}

static void install(void)
{
	if (installed)
		return;
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_sigaction = on_stop_signal;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESTART | SA_SIGINFO; /* the sender: mpirun or not */
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
	__atomic_store_n(&stop_signal, 0, __ATOMIC_SEQ_CST);
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
	/* the slot no handler was given: the other one than the last */
	static int last = 1;
	const int s = 1 - last;
	__atomic_store_n(&tmp_set, 0, __ATOMIC_SEQ_CST);
	if (!tmp || !tmp[0] || (size_t)snprintf(tmp_path[s], sizeof tmp_path[s], "%s", tmp) >= sizeof tmp_path[s])
		return;
	snprintf(tmp_msg[s], sizeof tmp_msg[s], "pipehost: stopped at once while writing %s %s: its temporary file "
		 "%s is removed: nothing half-written is left\n", what, path, tmp);
	last = s;
	__atomic_store_n(&tmp_set, s + 1, __ATOMIC_SEQ_CST);
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

/* ---- Plugin code gone wrong during a run (ph_plugin_guard_arm) ---- */

static int guard_armed, guard_registered;
static pid_t guard_pid;
/* The load addresses of the objects loaded before the run (pipehost, its
 * libraries, MPI's): any other one was loaded for the run, a plugin or a
 * library one pulled in. */
static uintptr_t guard_before[512];
static int guard_nbefore;
static const int guard_sigs[] = { SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT };
#define NGUARD ((int)(sizeof guard_sigs / sizeof guard_sigs[0]))
static struct sigaction guard_old[NGUARD];
static int crash_said;
static char crash_line[4352];

static int note_object(struct dl_phdr_info *info, size_t size, void *data)
{
	(void)size, (void)data;
	if (guard_nbefore < (int)(sizeof guard_before / sizeof guard_before[0]))
		guard_before[guard_nbefore++] = (uintptr_t)info->dlpi_addr;
	return 0;
}

/* The file of the loaded object that holds address pc ("" for pipehost
 * itself), or NULL where that is not known; *during: it was loaded for the
 * run.  Async-signal-safe: glibc's _dl_find_object (2.35) is, for the
 * unwinders that call it. */
static const char *object_of(const void *pc, int *during)
{
	*during = 0;
#if defined(__GLIBC__) && __GLIBC_PREREQ(2, 35)
	struct dl_find_object r;
	if (!pc || _dl_find_object((void *)pc, &r) || !r.dlfo_link_map)
		return NULL;
	*during = 1;
	for (int i = 0; i < guard_nbefore; i++)
		if (guard_before[i] == (uintptr_t)r.dlfo_link_map->l_addr)
			*during = 0;
	return r.dlfo_link_map->l_name ? r.dlfo_link_map->l_name : "";
#else
	(void)pc;
	return NULL;
#endif
}

/* The instruction that faulted, or NULL on a machine this does not know. */
static const void *fault_pc(const void *ucv)
{
	const ucontext_t *uc = ucv;
	if (!uc)
		return NULL;
#if defined(__x86_64__)
	return (const void *)uc->uc_mcontext.gregs[REG_RIP];
#elif defined(__aarch64__)
	return (const void *)uc->uc_mcontext.pc;
#else
	return NULL;
#endif
}

/* Append s to buf (cap bytes) at `at`; plain code, so a handler may. */
static size_t add(char *buf, size_t at, size_t cap, const char *s)
{
	while (*s && at + 1 < cap)
		buf[at++] = *s++;
	buf[at] = 0;
	return at;
}

/* A crash while plugin code may run: one line, then the signal's default
 * action (the status stays 128 + the signal, a core is still dumped).  The
 * faulting instruction names the object; an abort() (sent, si_code <= 0)
 * is in libc whoever called it, so it names none. */
static void on_crash(int sig, siginfo_t *si, void *uc)
{
	if (!__atomic_exchange_n(&crash_said, 1, __ATOMIC_SEQ_CST)) {
		const char *what = sig == SIGSEGV ? "SIGSEGV (a bad memory access)"
				   : sig == SIGBUS ? "SIGBUS (a bad access to a mapped file or unaligned memory)"
				   : sig == SIGFPE ? "SIGFPE (an arithmetic fault, such as an integer division by zero)"
				   : sig == SIGILL ? "SIGILL (an illegal instruction: a trap, or code built for another CPU)"
						   : "SIGABRT (abort() was called: a failed assertion, or a corrupted heap)";
		int during;
		const char *obj = si && si->si_code > 0 ? object_of(fault_pc(uc), &during) : NULL;
		const size_t cap = sizeof crash_line;
		size_t n = add(crash_line, 0, cap, "pipehost: crashed during the run: ");
		n = add(crash_line, n, cap, what);
		if (obj && !*obj) {
			n = add(crash_line, n, cap, " in pipehost itself (a bug: please report it)");
		} else if (obj) {
			n = add(crash_line, n, cap, during ? " in plugin code, " : " in ");
			n = add(crash_line, n, cap, obj);
		}
		n = add(crash_line, n, cap, "; nothing more is saved (checkpoints already written stay: continue from "
					    "the last with --resume once the cause is fixed)\n");
		ssize_t w = write(STDERR_FILENO, crash_line, n);
		(void)w;
	}
	struct sigaction dfl;
	memset(&dfl, 0, sizeof dfl);
	dfl.sa_handler = SIG_DFL;
	sigemptyset(&dfl.sa_mask);
	sigaction(sig, &dfl, NULL);
	raise(sig);
}

#ifdef __GLIBC__ /* on_exit and backtrace */
/* exit() while armed: not pipehost's own (main disarms first), so a run
 * that did not finish.  Called by plugin code it ends with status 1 and
 * one line; a library's exit(N > 0) (its own failure, said by it) goes on
 * as it was; an exit(0) from anywhere becomes 1, since it would read as
 * "done". */
static void on_exit_while_armed(int status, void *arg)
{
	(void)arg;
	if (!guard_armed || getpid() != guard_pid) /* (a plugin's forked child is its own) */
		return;
	/* plugin code on the stack: the first frame in an object loaded for
	 * the run.  (Not "the frame past libc's": a sanitizer's runtime wraps
	 * the handler, and libc's frames then come first.) */
	void *fr[64];
	int n = backtrace(fr, 64);
	const char *who = NULL;
	for (int i = 1; i < n && !who; i++) {
		int during;
		const char *o = object_of((char *)fr[i] - 1, &during);
		if (o && during)
			who = o;
	}
	if (!who && status != 0)
		return;
	fflush(NULL); /* what exit() would have flushed: stdout, the metrics' lines */
	if (who)
		fprintf(stderr, "pipehost: a plugin called exit(%d) during the run (code in %s), so the run did not finish: "
			"no weights or other final outputs were written (checkpoints already written stay); a plugin must "
			"return an error (ph_fail) instead: fix it\n", status, who);
	else
		fprintf(stderr, "pipehost: exit(0) was called during the run, not from plugin code, so the run did not "
			"finish: no weights or other final outputs were written (checkpoints already written stay); "
			"please report it\n");
	_exit(1);
}
#endif

void ph_plugin_guard_arm(void)
{
	guard_nbefore = 0;
	dl_iterate_phdr(note_object, NULL);
	guard_pid = getpid();
#ifdef __GLIBC__
	if (!guard_registered) /* on_exit, not atexit: the handler gets the status */
		guard_registered = !on_exit(on_exit_while_armed, NULL);
	void *warm[1];
	backtrace(warm, 1); /* loads libgcc's unwinder now, not inside exit() */
#endif
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_sigaction = on_crash;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_SIGINFO;
	for (int i = 0; i < NGUARD; i++)
		sigaction(guard_sigs[i], &sa, &guard_old[i]);
	crash_said = 0;
	guard_armed = 1;
}

void ph_plugin_guard_disarm(void)
{
	if (!guard_armed)
		return;
	guard_armed = 0;
	for (int i = 0; i < NGUARD; i++)
		sigaction(guard_sigs[i], &guard_old[i], NULL);
}
