/* SPDX-License-Identifier: MIT */
/* LD_PRELOAD shim for tests/test-faults.sh: counts the write, fsync and
 * rename calls that touch a file under $FAULTFS_DIR and makes the Nth one
 * fail, to prove that a checkpoint save failing at any of them loses
 * nothing.
 *
 *   FAULTFS_DIR=path    only calls on files whose path starts with it count
 *   FAULTFS_N=N         the Nth counted call fails (0 or unset: none)
 *   FAULTFS_MODE=eio | enospc | short | readeio
 *                       eio/enospc: the call returns -1 with that errno;
 *                       short: a write writes half its bytes (at least 1)
 *                       and says so, as the kernel may; fsync and rename
 *                       are then not failed; readeio: read and pread are
 *                       counted instead (writes, fsyncs and renames pass),
 *                       and the Nth returns -1 with EIO; readeof: the same,
 *                       but the Nth returns half its bytes and every later
 *                       one 0, as for a file cut while being read.  A stream
 *                       fopen'ed or fdopen'ed on such a file reads through
 *                       these too (stdio's own reads do not pass the PLT)
 *   FAULTFS_COUNT=file  at exit, the number of counted calls is written there
 *   FAULTFS_NOSYNC=1    fsync does nothing (and succeeds): the test checks
 *                       what a failure leaves, not durability (test-crash.sh
 *                       does), and a hundred runs' fsyncs take a minute
 *
 * Calls made by libc itself (stdio's buffers) do not pass through here:
 * pipehost writes its checkpoints with write(2) directly. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static long counted;

static int under_dir(const char *path)
{
	const char *dir = getenv("FAULTFS_DIR");
	return dir && dir[0] && path && !strncmp(path, dir, strlen(dir));
}

static int fd_under_dir(int fd)
{
	char link[64], path[PATH_MAX];
	snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
	ssize_t n = readlink(link, path, sizeof path - 1);
	if (n < 0)
		return 0;
	path[n] = 0;
	return under_dir(path);
}

/* FAULTFS_MODE=readeio: reads are counted and failed, nothing else */
static int reading(void)
{
	const char *m = getenv("FAULTFS_MODE");
	return m && (!strcmp(m, "readeio") || !strcmp(m, "readeof"));
}

/* readeof: past the Nth read, every read is at the end */
static int cut_off;

/* Count one call; 1 if this one must fail. */
static int hit(void)
{
	counted++;
	const char *n = getenv("FAULTFS_N");
	return n && atol(n) == counted;
}

/* The errno of a failing call, or 0 for a short write. */
static int fault_errno(void)
{
	const char *m = getenv("FAULTFS_MODE");
	if (m && !strcmp(m, "short"))
		return 0;
	return m && !strcmp(m, "enospc") ? ENOSPC : EIO;
}

/* Absolute path of a relative one (the test passes absolute dirs). */
static int path_hit(const char *a, const char *b)
{
	char abs[PATH_MAX], cwd[PATH_MAX];
	int in = 0;
	const char *p[2] = { a, b };
	for (int i = 0; i < 2 && !in; i++) {
		if (!p[i])
			continue;
		if (p[i][0] == '/' || !getcwd(cwd, sizeof cwd))
			in = under_dir(p[i]);
		else if ((size_t)snprintf(abs, sizeof abs, "%s/%s", cwd, p[i]) < sizeof abs)
			in = under_dir(abs);
	}
	return in && !reading() && hit();
}

ssize_t read(int fd, void *buf, size_t len)
{
	static ssize_t (*real)(int, void *, size_t);
	if (!real)
		real = (ssize_t(*)(int, void *, size_t))dlsym(RTLD_NEXT, "read");
	if (reading() && fd > 2 && fd_under_dir(fd) && (cut_off || hit())) {
		if (!strcmp(getenv("FAULTFS_MODE"), "readeof")) {
			if (cut_off)
				return 0;
			cut_off = 1;
			ssize_t r = real(fd, buf, len);
			return r > 1 ? r / 2 : r;
		}
		errno = EIO;
		return -1;
	}
	return real(fd, buf, len);
}

static ssize_t cookie_read(void *c, char *buf, size_t len)
{
	return read((int)(intptr_t)c, buf, len);
}

static int cookie_close(void *c)
{
	return close((int)(intptr_t)c);
}

FILE *fdopen(int fd, const char *mode)
{
	static FILE *(*real)(int, const char *);
	if (!real)
		real = (FILE * (*)(int, const char *)) dlsym(RTLD_NEXT, "fdopen");
	if (reading() && mode[0] == 'r' && fd > 2 && fd_under_dir(fd)) {
		cookie_io_functions_t io = { cookie_read, NULL, NULL, cookie_close };
		return fopencookie((void *)(intptr_t)fd, mode, io);
	}
	return real(fd, mode);
}

FILE *fopen(const char *path, const char *mode)
{
	static FILE *(*real)(const char *, const char *);
	if (!real)
		real = (FILE * (*)(const char *, const char *)) dlsym(RTLD_NEXT, "fopen");
	if (reading() && mode[0] == 'r' && !strchr(mode, '+') && under_dir(path)) {
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			return NULL;
		FILE *f = fdopen(fd, mode);
		if (!f)
			close(fd);
		return f;
	}
	return real(path, mode);
}

ssize_t pread(int fd, void *buf, size_t len, off_t off)
{
	static ssize_t (*real)(int, void *, size_t, off_t);
	if (!real)
		real = (ssize_t(*)(int, void *, size_t, off_t))dlsym(RTLD_NEXT, "pread");
	if (reading() && fd > 2 && fd_under_dir(fd) && (cut_off || hit())) {
		if (!strcmp(getenv("FAULTFS_MODE"), "readeof")) {
			if (cut_off)
				return 0;
			cut_off = 1;
			ssize_t r = real(fd, buf, len, off);
			return r > 1 ? r / 2 : r;
		}
		errno = EIO;
		return -1;
	}
	return real(fd, buf, len, off);
}

ssize_t pread64(int fd, void *buf, size_t len, off_t off)
{
	return pread(fd, buf, len, off);
}

ssize_t write(int fd, const void *buf, size_t len)
{
	static ssize_t (*real)(int, const void *, size_t);
	if (!real)
		real = (ssize_t(*)(int, const void *, size_t))dlsym(RTLD_NEXT, "write");
	if (!reading() && fd > 2 && fd_under_dir(fd) && hit()) {
		int e = fault_errno();
		if (!e && len > 0)
			return real(fd, buf, len > 1 ? len / 2 : 1);
		if (e) {
			errno = e;
			return -1;
		}
	}
	return real(fd, buf, len);
}

int fsync(int fd)
{
	static int (*real)(int);
	if (!real)
		real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
	if (!reading() && fd_under_dir(fd) && hit() && fault_errno()) {
		errno = fault_errno();
		return -1;
	}
	const char *nosync = getenv("FAULTFS_NOSYNC");
	if (nosync && !strcmp(nosync, "1"))
		return 0;
	return real(fd);
}

int rename(const char *from, const char *to)
{
	static int (*real)(const char *, const char *);
	if (!real)
		real = (int (*)(const char *, const char *))dlsym(RTLD_NEXT, "rename");
	if (path_hit(from, to) && fault_errno()) {
		errno = fault_errno();
		return -1;
	}
	return real(from, to);
}

int renameat2(int olddirfd, const char *from, int newdirfd, const char *to, unsigned int flags)
{
	static int (*real)(int, const char *, int, const char *, unsigned int);
	if (!real)
		real = (int (*)(int, const char *, int, const char *, unsigned int))dlsym(RTLD_NEXT, "renameat2");
	if (path_hit(from, to) && fault_errno()) {
		errno = fault_errno();
		return -1;
	}
	return real(olddirfd, from, newdirfd, to, flags);
}

__attribute__((destructor)) static void report(void)
{
	const char *f = getenv("FAULTFS_COUNT");
	if (!f || !f[0])
		return;
	FILE *o = fopen(f, "w");
	if (o) {
		fprintf(o, "%ld\n", counted);
		fclose(o);
	}
}
