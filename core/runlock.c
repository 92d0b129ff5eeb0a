/* SPDX-License-Identifier: MIT */
/* The checkpoint directory's lock (see runlock.h). */
#include "runlock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

int ph_runlock_acquire(const char *dir, int *fd, ph_err *err)
{
	*fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (*fd < 0)
		return ph_fail(err, PH_EIO, "cannot open checkpoint dir %s to lock it: %s", dir, strerror(errno));
	while (flock(*fd, LOCK_EX | LOCK_NB)) {
		int e = errno;
		if (e == EINTR)
			continue;
		close(*fd);
		*fd = -1;
		if (e == EWOULDBLOCK)
			return ph_fail(err, PH_EIO, "checkpoint dir %s is in use by another pipehost process (it holds "
				       "the lock); wait for that run to end or set another [checkpoint] dir", dir);
		/* NFS without lockd and the like: say so, and go on */
		fprintf(stderr, "pipehost: warning: cannot lock checkpoint dir %s (%s): two runs writing it would not "
			"be kept apart\n", dir, strerror(e));
		return PH_OK;
	}
	return PH_OK;
}

void ph_runlock_release(int *fd)
{
	if (*fd >= 0)
		close(*fd); /* closing drops the flock */
	*fd = -1;
}
