/* SPDX-License-Identifier: MIT */
/* One run per checkpoint directory: an advisory lock (flock) on the
 * directory itself, held while the run trains.  A second pipehost writing
 * the same directory is refused at once instead of interleaving its saves
 * and deletions with the first one's.  The lock is on the directory's own
 * file descriptor, so it adds no file to the directory, and the kernel drops
 * it when the process ends, however it ends. */
#ifndef PH_CORE_RUNLOCK_H
#define PH_CORE_RUNLOCK_H

#include <pipehost/plugin.h>

/* Lock dir; *fd gets the descriptor holding the lock (-1 where the file
 * system has no locks: then a warning line says two runs are not kept
 * apart there). */
int ph_runlock_acquire(const char *dir, int *fd, ph_err *err);
void ph_runlock_release(int *fd);

#endif
