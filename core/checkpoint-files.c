/* SPDX-License-Identifier: MIT */
/* Checkpoints: the files and directories.  Small files written
 * crash-safely, the checkpoint dir made and probed, its step-* entries
 * listed, pruned ([checkpoint] keep), set aside when damaged, and the
 * leftovers of interrupted saves removed.  See checkpoint.h for the layout. */
#define _GNU_SOURCE /* renameat2, RENAME_NOREPLACE */
#include "checkpoint-impl.h"
#include "outputs.h"
#include "readfile.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static int write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;
	while (len > 0) {
		ssize_t w = write(fd, p, len);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		p += w;
		len -= (size_t)w;
	}
	return 0;
}

/* Write a small file crash-safely: temp name, fsync, rename. */
int ph_ck_write_file_atomic(const char *path, const char *data, size_t len, ph_err *err)
{
	if (len > 0 && !data)
		return ph_fail(err, PH_EINVAL, "%s: nothing to write", path);
	char tmp[PATH_MAX];
	if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= sizeof tmp)
		return ph_fail(err, PH_EINVAL, "%s: path too long", path);
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return ph_fail(err, PH_EIO, "cannot create %s: %s", tmp, strerror(errno));
	const char *stage = "writing";
	int bad = write_all(fd, data, len);
	if (!bad && (stage = "syncing", fsync(fd)))
		bad = 1;
	int saved = errno;
	if (close(fd) && !bad)
		bad = 1, stage = "closing", saved = errno;
	if (!bad && (stage = "renaming", rename(tmp, path)))
		bad = 1, saved = errno;
	if (bad) {
		unlink(tmp);
		return ph_fail(err, PH_EIO, "%s: %s failed: %s (check free space and permissions)", path, stage,
			       strerror(saved));
	}
	return PH_OK;
}

int ph_ck_open_read(const char *path, int *fd_out, struct stat *st, int *missing, ph_err *err)
{
	*fd_out = -1;
	if (missing)
		*missing = 0;
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0) {
		int e = errno;
		if (missing)
			*missing = e == ENOENT;
		/* a socket answers ENXIO: say what it is rather than that */
		if (e != ENOENT && stat(path, st) == 0 && !S_ISREG(st->st_mode))
			goto not_regular;
		/* a file of the step missing is damage; another errno (EACCES,
		 * EIO) is this machine's, and no reason to pass the step over */
		return ph_fail(err, e == ENOENT ? PH_EINVAL : PH_EIO, "%s: cannot open: %s", path, strerror(e));
	}
	if (fstat(fd, st)) {
		int e = errno;
		close(fd);
		return ph_fail(err, PH_EIO, "%s: cannot stat: %s", path, strerror(e));
	}
	if (!S_ISREG(st->st_mode)) {
		close(fd);
not_regular:
		return ph_fail(err, PH_EINVAL, "%s is %s, not a regular file: damaged checkpoint; resume from another "
			       "step, or put the step's own file back", path, ph_file_kind(st->st_mode));
	}
	int fl = fcntl(fd, F_GETFL);
	if (fl >= 0)
		fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
	*fd_out = fd;
	return PH_OK;
}

int ph_ck_check_entries(const char *dir, ph_err *err)
{
	DIR *d = opendir(dir);
	if (!d)
		return ph_fail(err, PH_EIO, "cannot read checkpoint dir %s: %s", dir, strerror(errno));
	struct dirent *de;
	int rc = PH_OK;
	while (!rc && (de = readdir(d))) {
		if (ph_ck_parse_step_name(de->d_name) < 0)
			continue;
		char p[PATH_MAX];
		struct stat st;
		/* stat, not open: a FIFO is named, never opened */
		if ((size_t)snprintf(p, sizeof p, "%s/%s", dir, de->d_name) >= sizeof p || stat(p, &st) ||
		    S_ISDIR(st.st_mode))
			continue;
		rc = ph_fail(err, PH_EINVAL, "checkpoint dir %s: %s is %s, not a step directory; remove it, or set another "
			     "[checkpoint] dir", dir, de->d_name, ph_file_kind(st.st_mode));
	}
	closedir(d);
	return rc;
}

/* mkdir -p */
int ph_ck_make_dirs(const char *dir, ph_err *err)
{
	char p[PATH_MAX];
	if ((size_t)snprintf(p, sizeof p, "%s", dir) >= sizeof p)
		return ph_fail(err, PH_EINVAL, "checkpoint dir %s: path too long", dir);
	size_t n = strlen(p);
	while (n > 1 && p[n - 1] == '/')
		p[--n] = 0;
	for (char *s = p + 1; ; s++) {
		int end = *s == 0;
		if (*s == '/' || end) {
			*s = 0;
			if (mkdir(p, 0755) && errno != EEXIST)
				return ph_fail(err, PH_EIO, "cannot create checkpoint dir %s: %s; check [checkpoint] dir",
					       p, strerror(errno));
			if (end)
				break;
			*s = '/';
		}
	}
	struct stat st;
	if (stat(p, &st) || !S_ISDIR(st.st_mode))
		return ph_fail(err, PH_EIO, "checkpoint dir %s is not a directory; check [checkpoint] dir", p);
	return PH_OK;
}

int ph_checkpoint_prepare(const char *dir, ph_err *err)
{
	if (!dir || !*dir)
		return ph_fail(err, PH_EINVAL, "no checkpoint dir given; set [checkpoint] dir");
	int rc = ph_ck_make_dirs(dir, err);
	if (rc)
		return rc;
	if (access(dir, W_OK | X_OK))
		return ph_fail(err, PH_EIO, "checkpoint dir %s is not writable: %s; check [checkpoint] dir", dir,
			       strerror(errno));
	/* access() passes a read-only mount for root: create a file to know */
	char probe[PATH_MAX];
	if ((size_t)snprintf(probe, sizeof probe, "%s/" TMP_PREFIX "probe.%ld", dir, (long)getpid()) >= sizeof probe)
		return ph_fail(err, PH_EINVAL, "checkpoint dir %s: path too long", dir);
	int fd = open(probe, O_WRONLY | O_CREAT | O_TRUNC | O_NONBLOCK | O_CLOEXEC, 0600);
	if (fd < 0)
		return ph_fail(err, PH_EIO, "checkpoint dir %s is not writable: %s; check [checkpoint] dir", dir,
			       strerror(errno));
	close(fd);
	unlink(probe);
	return PH_OK;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)ftw;
	return (flag == FTW_DP ? rmdir(path) : unlink(path)) ? -1 : 0;
}

/* rm -rf of a directory of ours (no symlinks followed). */
int ph_ck_remove_tree(const char *path)
{
	return nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* "step-00000120" -> 120; -1 if the name is not exactly step-DIGITS. */
int64_t ph_ck_parse_step_name(const char *name)
{
	if (strncmp(name, STEP_PREFIX, strlen(STEP_PREFIX)))
		return -1;
	const char *p = name + strlen(STEP_PREFIX);
	if (!*p)
		return -1;
	int64_t v = 0;
	for (; *p; p++) {
		if (*p < '0' || *p > '9' || v > (INT64_MAX - 9) / 10)
			return -1;
		v = v * 10 + (*p - '0');
	}
	return v;
}

/* Whatever state.json is, if it is there: a FIFO or a directory in its
 * place makes a damaged step, refused with its own line when loaded (never
 * opened here), not an incomplete one passed over without a word. */
int ph_checkpoint_is_step(const char *dir)
{
	char p[PATH_MAX];
	struct stat st;
	if ((size_t)snprintf(p, sizeof p, "%s/" STATE_FILE, dir) >= sizeof p)
		return 0;
	return stat(p, &st) == 0;
}

static int by_step_desc(const void *a, const void *b)
{
	const ph_ck_step *x = a, *y = b;
	return x->step < y->step ? 1 : x->step > y->step ? -1 : 0;
}

/* Complete step directories of dir, highest first.  *out malloc'd. */
int ph_ck_list_steps(const char *dir, ph_ck_step **out, int *n, ph_err *err)
{
	*out = NULL;
	*n = 0;
	DIR *d = opendir(dir);
	if (!d)
		return ph_fail(err, PH_EIO, "cannot read checkpoint dir %s: %s", dir, strerror(errno));
	ph_ck_step *v = NULL;
	int cnt = 0, cap = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		int64_t s = ph_ck_parse_step_name(de->d_name);
		if (s < 0 || strlen(de->d_name) >= sizeof v->name)
			continue;
		char p[PATH_MAX];
		if ((size_t)snprintf(p, sizeof p, "%s/%s", dir, de->d_name) >= sizeof p || !ph_checkpoint_is_step(p))
			continue;
		if (cnt == cap) {
			int nc = cap ? cap * 2 : 16;
			ph_ck_step *nv = realloc(v, (size_t)nc * sizeof *nv);
			if (!nv) {
				free(v);
				closedir(d);
				return ph_fail(err, PH_ENOMEM, "out of memory listing %s", dir);
			}
			v = nv;
			cap = nc;
		}
		v[cnt].step = s;
		snprintf(v[cnt].name, sizeof v[cnt].name, "%s", de->d_name);
		cnt++;
	}
	closedir(d);
	if (cnt)
		qsort(v, (size_t)cnt, sizeof *v, by_step_desc);
	*out = v;
	*n = cnt;
	return PH_OK;
}

int ph_checkpoint_latest(const char *dir, char *path, size_t len, int64_t *step, ph_err *err)
{
	ph_ck_step *v;
	int n;
	int rc = ph_ck_list_steps(dir, &v, &n, err);
	if (rc)
		return -rc;
	int found = 0;
	if (n > 0) {
		found = 1;
		if (path && (size_t)snprintf(path, len, "%s/%s", dir, v[0].name) >= len) {
			free(v);
			return -ph_fail(err, PH_EINVAL, "checkpoint path %s/%s too long", dir, v[0].name);
		}
		if (step)
			*step = v[0].step;
	}
	free(v);
	return found;
}

/* Remove leftovers of interrupted saves and deletions. */
void ph_ck_remove_stale(const char *dir)
{
	DIR *d = opendir(dir);
	if (!d)
		return;
	struct dirent *de;
	while ((de = readdir(d))) {
		/* only names this file makes: .tmp-step-N and .tmp-del-step-N */
		if (strncmp(de->d_name, TMP_PREFIX STEP_PREFIX, strlen(TMP_PREFIX STEP_PREFIX)) &&
		    strncmp(de->d_name, TMP_PREFIX "del-" STEP_PREFIX, strlen(TMP_PREFIX "del-" STEP_PREFIX)))
			continue;
		char p[PATH_MAX];
		if ((size_t)snprintf(p, sizeof p, "%s/%s", dir, de->d_name) < sizeof p)
			ph_ck_remove_tree(p);
	}
	closedir(d);
}

/* Keep the `keep` highest steps and `just`; remove the rest, each first
 * renamed out of view so a crash mid-delete never leaves a partial step-*. */
void ph_ck_apply_keep(const char *dir, int keep, int64_t just)
{
	ph_ck_step *v;
	int n;
	ph_err e2;
	if (keep <= 0)
		return;
	if (ph_ck_list_steps(dir, &v, &n, &e2)) { /* nothing lost (old steps stay), but said */
		fprintf(stderr, "pipehost: warning: old checkpoints in %s not pruned ([checkpoint] keep = %d): %s\n", dir,
			keep, e2.msg);
		return;
	}
	int others = keep - 1; /* `just` takes one place */
	for (int i = 0; i < n; i++) {
		/* steps past `just` are an earlier continuation of a run resumed
		 * from an older step: each is replaced as the run reaches it, and
		 * none may crowd out the steps this run wrote (keep = 2 deleted
		 * the step just written and kept a stale later one) */
		if (v[i].step >= just)
			continue;
		if (others > 0) {
			others--;
			continue;
		}
		char from[PATH_MAX], to[PATH_MAX];
		if ((size_t)snprintf(from, sizeof from, "%s/%s", dir, v[i].name) >= sizeof from ||
		    (size_t)snprintf(to, sizeof to, "%s/" TMP_PREFIX "del-%s", dir, v[i].name) >= sizeof to)
			continue;
		/* a failure here loses nothing (an extra old step stays), but
		 * it is said */
		if (rename(from, to))
			fprintf(stderr, "pipehost: warning: cannot remove old checkpoint %s ([checkpoint] keep = %d): "
				"%s\n", from, keep, strerror(errno));
		else if (ph_ck_remove_tree(to))
			fprintf(stderr, "pipehost: warning: cannot remove %s: %s\n", to, strerror(errno));
	}
	free(v);
	if (ph_sync_dir(dir))
		fprintf(stderr, "pipehost: warning: syncing checkpoint dir %s: %s\n", dir, strerror(errno));
}

int64_t ph_checkpoint_newest_step(const char *dir)
{
	ph_ck_step *v;
	int n;
	ph_err e2;
	if (ph_ck_list_steps(dir, &v, &n, &e2))
		return -1;
	int64_t newest = n > 0 ? v[0].step : -1;
	free(v);
	return newest;
}

/* Move a damaged step out of view (never deleted: it may be all there is). */
void ph_ck_set_aside(const char *dir, const char *name, char *to, size_t len)
{
	char from[PATH_MAX];
	to[0] = 0;
	if ((size_t)snprintf(from, sizeof from, "%s/%s", dir, name) >= sizeof from)
		return;
	for (int i = 0; i < 100; i++) {
		if (i == 0)
			snprintf(to, len, "%s/" DAMAGED_PREFIX "%s", dir, name);
		else
			snprintf(to, len, "%s/" DAMAGED_PREFIX "%s.%d", dir, name, i);
		if (renameat2(AT_FDCWD, from, AT_FDCWD, to, RENAME_NOREPLACE) == 0)
			return;
		if (errno != EEXIST)
			break;
	}
	to[0] = 0;
}

void ph_checkpoint_new_run(char run[33])
{
	unsigned char b[16];
	size_t got = 0;
	while (got < sizeof b) {
		ssize_t r = getrandom(b + got, sizeof b - got, 0);
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	if (got < sizeof b) {
		/* no entropy source: time and pid still tell runs apart */
		uint64_t x = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
		for (size_t i = got; i < sizeof b; i++, x = x * 6364136223846793005ull + 1442695040888963407ull)
			b[i] = (unsigned char)(x >> 56);
	}
	for (int i = 0; i < 16; i++)
		snprintf(run + 2 * i, 3, "%02x", b[i]);
}
