/* SPDX-License-Identifier: MIT */
/* Output files: checked before step 1 (kind, writability, not an input, not
 * shared) and written without replacing what must not be replaced.  See
 * outputs.h for the rules. */
#define _GNU_SOURCE /* realpath's PATH_MAX buffer, O_CLOEXEC, fopencookie */
#include "outputs.h"
#include "signals.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Where path leads: target gets the file that would be written (a symlink
 * resolved), st its stat and *exists whether it exists. */
static int resolve(const char *what, const char *path, char *target, size_t len, struct stat *st, int *exists,
		   ph_err *err)
{
	struct stat l;
	*exists = 0;
	if (lstat(path, &l) == 0) {
		if (S_ISLNK(l.st_mode)) {
			char *r = realpath(path, NULL);
			if (!r)
				return ph_fail(err, PH_EIO, "%s %s is a symlink to nothing (%s); point it at a file or "
					       "give another name", what, path, strerror(errno));
			int too_long = (size_t)snprintf(target, len, "%s", r) >= len;
			free(r);
			if (too_long)
				return ph_fail(err, PH_EINVAL, "%s %s: path too long", what, path);
			if (stat(target, st))
				return ph_fail(err, PH_EIO, "%s %s: %s", what, target, strerror(errno));
		} else {
			if ((size_t)snprintf(target, len, "%s", path) >= len)
				return ph_fail(err, PH_EINVAL, "%s %s: path too long", what, path);
			*st = l;
		}
		*exists = 1;
		return PH_OK;
	}
	if (errno != ENOENT)
		return ph_fail(err, PH_EIO, "%s %s: %s; check the path", what, path, strerror(errno));
	if ((size_t)snprintf(target, len, "%s", path) >= len)
		return ph_fail(err, PH_EINVAL, "%s %s: path too long", what, path);
	return PH_OK;
}

static void dir_of(const char *path, char *dir, size_t len)
{
	const char *slash = strrchr(path, '/');
	if (!slash)
		snprintf(dir, len, ".");
	else if (slash == path)
		snprintf(dir, len, "/");
	else
		snprintf(dir, len, "%.*s", (int)(slash - path), path);
}

static int is_direct(mode_t m)
{
	return S_ISCHR(m) || S_ISBLK(m) || S_ISFIFO(m);
}

/* The identity of one output for the "two outputs, one file" check: the
 * real directory and the base name (the file may not exist yet). */
static void output_key(const char *target, char *key, size_t len)
{
	char dir[PATH_MAX], real[PATH_MAX];
	dir_of(target, dir, sizeof dir);
	const char *base = strrchr(target, '/');
	base = base ? base + 1 : target;
	if (!realpath(dir, real))
		snprintf(real, sizeof real, "%s", dir);
	if ((size_t)snprintf(key, len, "%s/%s", real, base) >= len)
		snprintf(key, len, "%s", target); /* too long to compare better */
}

/* Does the file (dev, ino) appear among the inputs?  which gets the input. */
static int is_input(const struct stat *st, const char *const *inputs, int ninputs, char *which, size_t len)
{
	for (int i = 0; i < ninputs; i++) {
		struct stat in;
		if (!inputs[i] || !inputs[i][0] || stat(inputs[i], &in))
			continue;
		if (in.st_dev == st->st_dev && in.st_ino == st->st_ino) {
			snprintf(which, len, "%s", inputs[i]);
			return 1;
		}
		if (!S_ISDIR(in.st_mode))
			continue;
		/* a data directory: each file in it is read */
		DIR *d = opendir(inputs[i]);
		struct dirent *de;
		while (d && (de = readdir(d))) {
			char p[PATH_MAX];
			struct stat f;
			if ((size_t)snprintf(p, sizeof p, "%s/%s", inputs[i], de->d_name) >= sizeof p || stat(p, &f) ||
			    !S_ISREG(f.st_mode))
				continue;
			if (f.st_dev == st->st_dev && f.st_ino == st->st_ino) {
				snprintf(which, len, "%s", p);
				closedir(d);
				return 1;
			}
		}
		if (d)
			closedir(d);
	}
	return 0;
}

/* Create and remove a file in dir: proves the rename into it will work. */
static int probe_dir(const char *what, const char *path, const char *dir, ph_err *err)
{
	char p[PATH_MAX];
	static int seq;
	if ((size_t)snprintf(p, sizeof p, "%s/.pipehost-probe.%ld.%d", dir, (long)getpid(), seq++) >= sizeof p)
		return ph_fail(err, PH_EINVAL, "%s %s: path too long", what, path);
	int fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0)
		return ph_fail(err, PH_EIO, "%s %s: cannot create files in %s: %s; fix it and run again (nothing has run yet)",
			       what, path, dir, strerror(errno));
	close(fd);
	unlink(p);
	return PH_OK;
}

int ph_outputs_check(const ph_output *outs, int nouts, const char *const *inputs, int ninputs, ph_err *err)
{
	char keys[16][PATH_MAX];
	struct stat sts[16];
	int exist[16], used = 0;
	for (int i = 0; i < nouts; i++) {
		const char *what = outs[i].what, *path = outs[i].path;
		if (!path || !path[0])
			continue;
		/* "-" is standard output for --plan-json alone (main.c): a file
		 * of that name is a surprise, and a binary or the progress lines
		 * in the same stream would be useless */
		if (!strcmp(path, "-"))
			return ph_fail(err, PH_EINVAL, "%s -: only --plan-json writes to standard output; give a file name "
				       "(./- for a file named -)", what);
		char target[PATH_MAX], dir[PATH_MAX], which[PATH_MAX];
		struct stat st;
		int exists, rc = resolve(what, path, target, sizeof target, &st, &exists, err);
		if (rc)
			return rc;
		if (exists) {
			if (S_ISDIR(st.st_mode))
				return ph_fail(err, PH_EINVAL, "%s %s is a directory; give a file name", what, path);
			if (!S_ISREG(st.st_mode) && !is_direct(st.st_mode))
				return ph_fail(err, PH_EINVAL, "%s %s is not a file, a device or a FIFO; give a file name",
					       what, path);
			if (access(target, W_OK))
				return ph_fail(err, PH_EIO, "%s %s is not writable: %s; fix it and run again (nothing has run yet)",
					       what, path, strerror(errno));
			if (is_input(&st, inputs, ninputs, which, sizeof which))
				return ph_fail(err, PH_EINVAL, "%s %s is %s, an input of this run; write to another file",
					       what, path, which);
		}
		if (!exists || S_ISREG(st.st_mode)) {
			dir_of(target, dir, sizeof dir);
			if ((rc = probe_dir(what, path, dir, err)))
				return rc;
		}
		if (exists && is_direct(st.st_mode))
			continue; /* /dev/null may take several outputs */
		if (used == 16)
			continue;
		output_key(target, keys[used], sizeof keys[used]);
		sts[used] = st;
		exist[used] = exists;
		for (int j = 0; j < used; j++)
			if (!strcmp(keys[j], keys[used]) || (exists && exist[j] && sts[j].st_dev == st.st_dev &&
							      sts[j].st_ino == st.st_ino))
				return ph_fail(err, PH_EINVAL, "%s %s is also another output of this run; give each its "
					       "own file", what, path);
		used++;
	}
	return PH_OK;
}

int ph_outputs_check_not_dir(const ph_output *outs, int nouts, const char *what, const char *dir, ph_err *err)
{
	if (!dir || !dir[0])
		return PH_OK;
	char d[PATH_MAX], dkey[PATH_MAX], okey[PATH_MAX];
	struct stat dst, ost;
	size_t len = (size_t)snprintf(d, sizeof d, "%s", dir);
	while (len > 1 && len < sizeof d && d[len - 1] == '/') /* "ck/" is "ck" */
		d[--len] = 0;
	const int dir_exists = stat(d, &dst) == 0;
	output_key(d, dkey, sizeof dkey);
	for (int i = 0; i < nouts; i++) {
		const char *path = outs[i].path;
		if (!path || !path[0])
			continue;
		output_key(path, okey, sizeof okey);
		if (!strcmp(okey, dkey) ||
		    (dir_exists && stat(path, &ost) == 0 && ost.st_dev == dst.st_dev && ost.st_ino == dst.st_ino))
			return ph_fail(err, PH_EINVAL, "%s %s is also %s, where this run writes its checkpoints; give the "
				       "%s a file name of its own", outs[i].what, path, what, outs[i].what);
	}
	return PH_OK;
}

/* ------------------------------------------------------------------ */
/* Writing.                                                             */

int ph_outfile_tmp_name(const char *path, char *tmp, size_t len)
{
	char target[PATH_MAX];
	struct stat st;
	int exists;
	ph_err ignored;
	if (resolve("output", path, target, sizeof target, &st, &exists, &ignored) || (exists && is_direct(st.st_mode)))
		return -1;
	return (size_t)snprintf(tmp, len, "%s.tmp.%ld", target, (long)getpid()) < len ? 0 : -1;
}

int ph_outfile_open(ph_outfile *o, const char *path, const char *what, ph_err *err)
{
	memset(o, 0, sizeof *o);
	o->fd = -1;
	o->mode = 0644;
	struct stat st;
	int exists, rc = resolve(what, path, o->target, sizeof o->target, &st, &exists, err);
	if (rc)
		return rc;
	if (exists && S_ISDIR(st.st_mode))
		return ph_fail(err, PH_EINVAL, "%s %s is a directory; give a file name", what, path);
	if (exists && is_direct(st.st_mode)) {
		o->direct = 1;
		o->fd = open(o->target, O_WRONLY | O_CLOEXEC);
		if (o->fd < 0)
			return ph_fail(err, PH_EIO, "%s %s: cannot open: %s", what, path, strerror(errno));
		return PH_OK;
	}
	if (exists && !S_ISREG(st.st_mode))
		return ph_fail(err, PH_EINVAL, "%s %s is not a file, a device or a FIFO; give a file name", what, path);
	if (exists)
		o->mode = st.st_mode & 07777;
	if ((size_t)snprintf(o->tmp, sizeof o->tmp, "%s.tmp.%ld", o->target, (long)getpid()) >= sizeof o->tmp)
		return ph_fail(err, PH_EINVAL, "%s %s: path too long", what, path);
	o->fd = open(o->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (o->fd < 0) {
		rc = ph_fail(err, PH_EIO, "%s: cannot create %s: %s; check the directory exists and is writable", path,
			     o->tmp, strerror(errno));
		o->tmp[0] = 0;
		return rc;
	}
	if (exists)
		(void)fchmod(o->fd, o->mode); /* the replaced file's permissions; best effort */
	/* a second SIGINT/SIGTERM while outputs are held (signals.h) removes
	 * it: nothing half-written is left */
	o->noted = ph_stop_tmp_offer(o->tmp, what, path);
	return PH_OK;
}

int ph_outfile_write(ph_outfile *o, const void *buf, size_t len)
{
	const char *p = buf;
	while (len > 0) {
		ssize_t w = write(o->fd, p, len > (1u << 30) ? (1u << 30) : len);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		if (w == 0) {
			errno = EIO;
			return -1;
		}
		p += w;
		len -= (size_t)w;
	}
	return 0;
}

int ph_sync_dir(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	int rc = fsync(fd);
	if (rc && (errno == EINVAL || errno == EROFS))
		rc = 0;
	int saved = errno;
	close(fd);
	errno = saved;
	return rc;
}

/* fsync the directory that holds path. */
static int sync_dir_of(const char *path)
{
	char dir[PATH_MAX];
	dir_of(path, dir, sizeof dir);
	return ph_sync_dir(dir);
}

/* The temporary file is no longer this output's to remove on a stop: it
 * is renamed or removed next. */
static void unnote(ph_outfile *o)
{
	if (o->noted)
		ph_stop_tmp(NULL, NULL, NULL);
	o->noted = 0;
}

int ph_outfile_commit(ph_outfile *o, const char *what, ph_err *err)
{
	(void)what;
	int bad = 0, saved = 0;
	const char *stage = "syncing";
	if (fsync(o->fd)) {
		/* pipes and character devices cannot be synced */
		if (!(o->direct && (errno == EINVAL || errno == EROFS || errno == ENOTSUP)))
			bad = 1, saved = errno;
	}
	if (close(o->fd) && !bad)
		bad = 1, stage = "closing", saved = errno;
	o->fd = -1;
	/* noted until renamed or removed: a stop at once in between unlinks
	 * a name that no longer exists, which is harmless */
	if (o->direct) {
		unnote(o);
		if (bad)
			return ph_fail(err, PH_EIO, "%s: %s failed: %s", o->target, stage, strerror(saved));
		return PH_OK;
	}
	if (!bad && (stage = "renaming", rename(o->tmp, o->target)))
		bad = 1, saved = errno;
	if (bad) {
		/* The old file at the target, if any, was never touched. */
		unlink(o->tmp);
		unnote(o);
		return ph_fail(err, PH_EIO, "%s: %s %s failed: %s; the previous file is unchanged (check free space "
			       "and permissions)", o->target, stage, o->tmp, strerror(saved));
	}
	unnote(o);
	o->tmp[0] = 0;
	if (sync_dir_of(o->target))
		return ph_fail(err, PH_EIO, "%s: written, but syncing its directory failed: %s; it may not survive a "
			       "crash", o->target, strerror(errno));
	return PH_OK;
}

void ph_outfile_abort(ph_outfile *o)
{
	if (o->fd >= 0)
		close(o->fd);
	o->fd = -1;
	if (o->tmp[0])
		unlink(o->tmp);
	unnote(o);
	o->tmp[0] = 0;
}

void ph_outfile_test_signal(const char *path)
{
	const char *p = getenv("PH_TEST_SIGNAL_WRITING");
	if (!p || strcmp(p, path))
		return;
	raise(SIGTERM);
	const char *again = getenv("PH_TEST_SIGNAL_AGAIN");
	if (!again || strcmp(again, "1"))
		return;
	struct timespec ts = { 2, 100000000 };
	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
	raise(SIGTERM);
}

/* ------------------------------------------------------------------ */
/* Through stdio.                                                       */

/* stdio's buffered writes go through ph_outfile_write, which keeps the
 * errno of the first failure: by the time fflush or fclose reports it,
 * stdio may have dropped that errno (a full device used to say "I/O
 * error" instead of "No space left on device"). */
static ssize_t stream_write(void *cookie, const char *buf, size_t len)
{
	ph_outfile *o = cookie;
	if (ph_outfile_write(o, buf, len)) {
		if (!o->write_errno)
			o->write_errno = errno ? errno : EIO;
		return 0; /* fopencookie: 0 is a write error */
	}
	if (!o->tested++)
		ph_outfile_test_signal(o->target);
	return (ssize_t)len;
}

int ph_outstream_open(ph_outfile *o, FILE **f, const char *path, const char *what, ph_err *err)
{
	*f = NULL;
	int rc = ph_outfile_open(o, path, what, err);
	if (rc)
		return rc;
	/* no close function: ph_outfile_commit fsyncs and closes o->fd */
	cookie_io_functions_t io = { .write = stream_write };
	*f = fopencookie(o, "w", io);
	if (!*f) {
		rc = ph_fail(err, PH_EIO, "%s %s: cannot write: %s", what, path, strerror(errno));
		ph_outfile_abort(o);
	}
	return rc;
}

int ph_outstream_commit(ph_outfile *o, FILE *f, const char *what, ph_err *err)
{
	errno = 0;
	int bad = ferror(f) || fflush(f) != 0;
	int e = o->write_errno ? o->write_errno : errno;
	if (fclose(f) != 0 && !bad)
		bad = 1, e = o->write_errno ? o->write_errno : errno;
	if (bad) {
		ph_outfile_abort(o);
		return ph_fail(err, PH_EIO, "%s %s: writing failed: %s%s", what, o->target, e ? strerror(e) : "I/O error",
			       o->direct ? "" : "; the previous file is unchanged");
	}
	return ph_outfile_commit(o, what, err);
}

void ph_outstream_abort(ph_outfile *o, FILE *f)
{
	if (f)
		fclose(f);
	ph_outfile_abort(o);
}
