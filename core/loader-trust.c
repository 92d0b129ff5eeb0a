/* SPDX-License-Identifier: MIT */
/* May pipehost run this plugin's code?  As OpenSSH checks its key files:
 * the real path (symbolic links followed) and every directory above it
 * must be owned by root or by us, and not writable by group or others,
 * except a directory owned by root with the sticky bit (/tmp), where
 * others cannot replace what we own.  A plugin is code: whoever can swap
 * the file or a directory on its way can run anything as us. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "loader.h"

/* Why st (of path) is not trusted, or NULL. */
static const char *untrusted(const struct stat *st, int last, int is_dir)
{
	uid_t me = geteuid();
	if (st->st_uid != 0 && st->st_uid != me)
		return "is owned by another user";
	if (!(st->st_mode & (S_IWOTH | S_IWGRP)))
		return NULL;
	/* a sticky directory owned by root: others may not replace our entries */
	if (!last && S_ISDIR(st->st_mode) && (st->st_mode & S_ISVTX) && st->st_uid == 0)
		return NULL;
	(void)is_dir;
	return st->st_mode & S_IWOTH ? "is writable by other users" : "is writable by its group";
}

int ph_plugin_trust(const char *path, int is_dir, ph_err *err)
{
	const char *what = is_dir ? "directory" : "file";
	char real[PATH_MAX];
	if (!realpath(path, real))
		return PH_OK; /* it does not exist: opening it reports that */
	char cur[PATH_MAX];
	snprintf(cur, sizeof cur, "%s", real);
	for (int last = 1;; last = 0) {
		struct stat st;
		if (stat(cur, &st) != 0)
			return ph_fail(err, PH_EIO, "plugin %s %s: cannot check %s; fix its permissions", what, path, cur);
		const char *why = untrusted(&st, last, is_dir);
		if (why) {
			char fix[PATH_MAX + 64];
			if (strstr(why, "owned"))
				snprintf(fix, sizeof fix, "give it to yourself or root (chown)");
			else
				snprintf(fix, sizeof fix, "fix it with chmod go-w %s", cur);
			if (last && !strcmp(cur, path))
				return ph_fail(err, PH_EINVAL,
					       "plugin %s %s %s; %s, or pass --allow-writable-plugins if you trust every "
					       "user who can write it", what, path, why, fix);
			return ph_fail(err, PH_EINVAL,
				       "plugin %s %s: %s%s %s; %s, or pass --allow-writable-plugins if you trust every "
				       "user who can write it", what, path, last ? "its real path " : "the directory ", cur,
				       why, fix);
		}
		if (!strcmp(cur, "/"))
			return PH_OK;
		char *slash = strrchr(cur, '/');
		if (slash == cur)
			cur[1] = 0;
		else
			*slash = 0;
	}
}
