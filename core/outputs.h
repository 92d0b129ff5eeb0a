/* SPDX-License-Identifier: MIT */
/* Output files: proved writable before step 1, and written so that nothing
 * is replaced that must not be.
 *
 * What a path may name, and what happens to it:
 *   - nothing yet, or a regular file: written to a temporary file beside it,
 *     fsynced and renamed over it (atomic: the old file or the new one, never
 *     half of either); an existing file keeps its permission bits;
 *   - a symlink: followed; its target is replaced as above and the link
 *     stays a link (a link to nothing is refused);
 *   - a character or block device, or a FIFO: written through, never
 *     replaced (--save-weights /dev/null works and /dev/null stays a device);
 *   - a directory, a socket: refused.
 * An output that is one of the run's inputs (same st_dev and st_ino: the
 * INI, data files, initial weights) is refused before step 1, and so is a
 * path two outputs share. */
#ifndef PH_CORE_OUTPUTS_H
#define PH_CORE_OUTPUTS_H

#include <pipehost/plugin.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>

/* One output of a run, for ph_outputs_check.  what names it for people
 * ("--save-weights", "[run] metrics"); path "" or NULL = not asked for. */
typedef struct {
	const char *what;
	const char *path;
} ph_output;

/* Check every output: its kind (above), that it can be written (a probe
 * file is created and removed in its directory; a read-only file, a
 * read-only file system or a missing directory fails here), that it is none
 * of inputs[] (files; a directory among them stands for every file in it)
 * and that no two outputs name the same file.  One line naming the output
 * on the first fault. */
int ph_outputs_check(const ph_output *outs, int nouts, const char *const *inputs, int ninputs, ph_err *err);

/* No output is the directory dir (what names it: "[checkpoint] dir"),
 * which this run writes too, whether it exists yet or not.  dir "" or
 * NULL: nothing to check. */
int ph_outputs_check_not_dir(const ph_output *outs, int nouts, const char *what, const char *dir, ph_err *err);

/* A file being written (see the top of this file). */
typedef struct {
	int fd;
	int direct;             /* a device or FIFO: written in place */
	mode_t mode;            /* permission bits of the file replaced, or 0644 */
	char target[4096];      /* the file finally written (symlinks resolved) */
	char tmp[4096];         /* the temporary file, "" when direct */
	int write_errno;        /* the first failed write's errno (the stdio stream's), or 0 */
	int noted;              /* tmp is the file a stop at once removes (ph_stop_tmp) */
	int tested;             /* the stream wrote once (ph_outfile_test_signal) */
} ph_outfile;

/* The temporary file ph_outfile_open writes path through
 * (TARGET.tmp.PID, TARGET the path with a symlink resolved): for a stop
 * at once to remove (core/signals.h, ph_stop_tmp).  0, or -1 where path
 * is written in place (a device, a FIFO) or the name does not fit. */
int ph_outfile_tmp_name(const char *path, char *tmp, size_t len);

/* Open path for writing; what names it in messages. */
int ph_outfile_open(ph_outfile *o, const char *path, const char *what, ph_err *err);
/* Write len bytes (short writes and EINTR retried); -1 with errno set. */
int ph_outfile_write(ph_outfile *o, const void *buf, size_t len);
/* fsync, close, rename over the target and fsync its directory.  On failure
 * the temporary file is removed and the target is as it was. */
int ph_outfile_commit(ph_outfile *o, const char *what, ph_err *err);
/* Give up: close and remove the temporary file. */
void ph_outfile_abort(ph_outfile *o);

/* The same through stdio, for writers that fprintf: *f is a stream on the
 * output, opened by ph_outfile_open's rules.  ph_outstream_commit flushes
 * and closes *f and commits (or, on a write error, aborts: the previous
 * file is unchanged); ph_outstream_abort gives up.  what names the output
 * in messages ("--svg", "--plan-json", "--trace"). */
int ph_outstream_open(ph_outfile *o, FILE **f, const char *path, const char *what, ph_err *err);
int ph_outstream_commit(ph_outfile *o, FILE *f, const char *what, ph_err *err);
void ph_outstream_abort(ph_outfile *o, FILE *f);

/* For tests/test-crash.sh: PH_TEST_SIGNAL_WRITING=PATH makes the writer
 * of PATH, once part of it is out (the temporary file half-written), send
 * its own thread SIGTERM, and with PH_TEST_SIGNAL_AGAIN=1 a second one
 * 2.1 s later (a stop at once): a signal at that moment, every time.  The
 * streams call it after their first write, the weights after the header. */
void ph_outfile_test_signal(const char *path);

/* fsync a directory, so that a rename or a new file in it survives a
 * crash; file systems that cannot (EINVAL, EROFS) are not our failure.
 * 0 or -1 with errno set. */
int ph_sync_dir(const char *dir);

#endif
