/* SPDX-License-Identifier: MIT */
/* Refusing non-regular input files before reading them (see readfile.h).
 * open(2) of a FIFO with nobody writing blocks until a writer comes, so the
 * file is opened with O_NONBLOCK (which regular files ignore) and its type
 * checked on the descriptor, which also closes the stat-then-open race. */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "readfile.h"

const char *ph_file_kind(mode_t mode)
{
	if (S_ISFIFO(mode)) return "a named pipe";
	if (S_ISDIR(mode)) return "a directory";
	if (S_ISCHR(mode)) return "a character device";
	if (S_ISBLK(mode)) return "a block device";
	if (S_ISSOCK(mode)) return "a socket";
	if (S_ISREG(mode)) return "a regular file";
	return "not a regular file";
}

int ph_open_regular(const char *path, const char *what, const char *fix, int *fd_out, ph_err *err)
{
	*fd_out = -1;
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return ph_fail(err, PH_EIO, "%s %s: cannot open: %s; %s", what, path, strerror(errno), fix);
	struct stat st;
	if (fstat(fd, &st) != 0) {
		int e = errno;
		close(fd);
		return ph_fail(err, PH_EIO, "%s %s: cannot stat: %s; %s", what, path, strerror(e), fix);
	}
	if (!S_ISREG(st.st_mode)) {
		close(fd);
		return ph_fail(err, PH_EIO, "%s %s is %s, not a regular file; %s", what, path, ph_file_kind(st.st_mode),
			       fix);
	}
	int fl = fcntl(fd, F_GETFL);
	if (fl >= 0)
		fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
	*fd_out = fd;
	return PH_OK;
}

int ph_fopen_regular(const char *path, const char *what, const char *fix, FILE **f, ph_err *err)
{
	int fd;
	*f = NULL;
	int rc = ph_open_regular(path, what, fix, &fd, err);
	if (rc)
		return rc;
	if (!(*f = fdopen(fd, "rb"))) {
		close(fd);
		return ph_fail(err, PH_ENOMEM, "%s %s: out of memory opening it", what, path);
	}
	return PH_OK;
}
