/* SPDX-License-Identifier: MIT */
/* Signals: what pipehost does when its output goes away (SIGPIPE, SIGXFSZ),
 * when it is asked to stop (SIGINT, SIGTERM), and when plugin code crashes
 * or calls exit() during a run, in one place. */
#ifndef PH_CORE_SIGNALS_H
#define PH_CORE_SIGNALS_H

#include "comm.h"

/* At start-up: SIGPIPE and SIGXFSZ ignored, so a closed pipe on stdout or a
 * file-size limit is a write error (EPIPE, EFBIG) the code reports, never a
 * silent death that leaves no checkpoint. */
void ph_signals_init(void);

/* Call after printing progress: once stdout fails (a reader that went away:
 * `pipehost ... | head`), say so once on stderr and send the rest of the
 * progress to /dev/null; training goes on. */
void ph_stdout_check(void);

/* Catch SIGINT/SIGTERM while training with checkpoints: the first asks for
 * a stop at the next safe point; a second one at least 2 s later stops the
 * process at once (default action).  Closer ones count as the same request
 * (mpirun forwards the terminal's ^C, which the process may get twice). */
void ph_stop_catch(void);
void ph_stop_release(void);

/* After training, while the outputs (the trace, the weights) are written:
 * a first SIGINT/SIGTERM is held back until every output is whole (a
 * signal caught during the last step stays held too); a second one, 2 s or
 * more later, stops the process at once, after removing the temporary file
 * of the output being written (ph_stop_tmp), so nothing half-written is
 * ever left.  ph_stop_release ends it. */
void ph_stop_hold(void);
/* The temporary file a stop at once removes (what and path name the output
 * in its line: "the weights", "w.st"); NULL when none is being written. */
void ph_stop_tmp(const char *tmp, const char *what, const char *path);
/* For core/outputs.c: between ph_stop_hold and ph_stop_release, note tmp
 * as ph_stop_tmp does unless a file is noted already (its caller's, in
 * better words); 1 if it was noted.  Outside a hold nothing is noted: a
 * checkpoint's files are written while stops are caught, into a directory
 * that is renamed whole or not at all. */
int ph_stop_tmp_offer(const char *tmp, const char *what, const char *path);
/* The stop signal that came (since ph_stop_catch), or 0: after the held
 * outputs are written, main exits with ph_stop_exit_status(). */
int ph_stop_signal(void);
/* A stop signal came (this process only). */
int ph_stop_requested(void);
/* Whether stops are being caught (the same on every process of a job). */
int ph_stop_catching(void);

/* Do the processes in comm (all of them: the call is collective when
 * comm->size > 1) agree to stop?  Once they do the answer stays yes, so
 * every later decision point sees the same.  Errors travel in err. */
int ph_stop_agree(const ph_comm *comm, int *stop, ph_err *err);
/* The latched result of ph_stop_agree (and of a local stop inside an
 * evaluation run by this process alone). */
int ph_stop_agreed(void);
/* This process alone decides to stop (an evaluation only it runs). */
int ph_stop_local(void);
/* The exit status of a run stopped by a signal after its checkpoint: 128 +
 * the signal (130 for SIGINT, 143 for SIGTERM), the shells' convention, so
 * a scheduler sees a preempted job as not finished. */
int ph_stop_exit_status(void);

/* Plugin code that goes wrong during a run.  Between arm and disarm (main
 * arms it around a run with -c, and disarms it before its own exits):
 *  - exit() called by plugin code (code loaded for the run) prints one
 *    line naming the .so and ends the process with status 1, where it
 *    ended with the plugin's status, 0 reading as "done" with nothing
 *    saved; an exit(0) by anything else becomes 1 the same way, and a
 *    library's exit(N > 0) is left as it was;
 *  - SIGSEGV, SIGBUS, SIGFPE, SIGILL and SIGABRT print one line naming the
 *    signal and the object of the faulting instruction (a plugin's .so),
 *    where known, then take the default action: the status stays 128 +
 *    the signal and a core is still dumped.  The loader's own guard
 *    (core/loader.c) takes over while a plugin is opened.
 * Before, both ended the run without a word on stderr. */
void ph_plugin_guard_arm(void);
void ph_plugin_guard_disarm(void);

#endif
