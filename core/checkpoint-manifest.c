/* SPDX-License-Identifier: MIT */
/* Checkpoints: manifest.txt, which binds the files of a step together:
 * the run, the step, each file's size and XXH3-64, and a last line that
 * checks the lines before it.  Written last in a step; on load every byte
 * of every file is checked against it. */
#define _GNU_SOURCE /* memrchr */
#include "checkpoint-impl.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

static void hex64(uint64_t v, char out[17])
{
	snprintf(out, 17, "%016llx", (unsigned long long)v);
}

/* The manifest: every file of the step with its size and XXH3-64, the step
 * and the run, and a last line with the checksum of the lines before it. */
int ph_ck_write_manifest(const char *sdir, const char *run, int64_t step, const char *const *names,
			  const uint64_t *sizes, const uint64_t *hashes, int n, ph_err *err)
{
	char text[4096];
	size_t len = 0;
	len += (size_t)snprintf(text + len, sizeof text - len, MANIFEST_MAGIC "\nrun %s\nstep %lld\n", run,
				(long long)step);
	for (int i = 0; i < n && len < sizeof text; i++) {
		char h[17];
		hex64(hashes[i], h);
		len += (size_t)snprintf(text + len, sizeof text - len, "file %s %llu xxh3 %s\n", names[i],
					(unsigned long long)sizes[i], h);
	}
	if (len + 40 >= sizeof text)
		return ph_fail(err, PH_EINTERNAL, "%s: manifest too long", sdir);
	char h[17];
	hex64(XXH3_64bits(text, len), h);
	len += (size_t)snprintf(text + len, sizeof text - len, "end xxh3 %s\n", h);
	char p[PATH_MAX];
	if ((size_t)snprintf(p, sizeof p, "%s/" MANIFEST_FILE, sdir) >= sizeof p)
		return ph_fail(err, PH_EINVAL, "checkpoint path %s too long", sdir);
	return ph_ck_write_file_atomic(p, text, len, err);
}

/* Read and check sdir/manifest.txt.  *missing is set (and PH_EIO returned)
 * when there is none at all. */
int ph_ck_read_manifest(const char *sdir, ph_ck_manifest *m, int *missing, ph_err *err)
{
	memset(m, 0, sizeof *m);
	*missing = 0;
	char p[PATH_MAX];
	if ((size_t)snprintf(p, sizeof p, "%s/" MANIFEST_FILE, sdir) >= sizeof p)
		return ph_fail(err, PH_EINVAL, "checkpoint path %s too long", sdir);
	int fd;
	struct stat sb;
	int rc = ph_ck_open_read(p, &fd, &sb, missing, err);
	if (rc)
		return rc;
	char buf[MANIFEST_MAX + 1];
	size_t len = 0;
	for (;;) {
		ssize_t r = read(fd, buf + len, sizeof buf - 1 - len);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) { /* the system's failure, not a manifest cut short */
			int e = errno;
			close(fd);
			return ph_fail(err, PH_EIO, "%s: read error: %s", p, strerror(e));
		}
		if (r == 0)
			break;
		len += (size_t)r;
		if (len == sizeof buf - 1)
			break;
	}
	close(fd);
	buf[len] = 0;
	/* the last line checks every byte before it */
	char *end = len >= 2 ? memrchr(buf, '\n', len - 1) : NULL;
	size_t body = end ? (size_t)(end - buf) + 1 : 0;
	char want[17], got[17];
	if (!end || len == MANIFEST_MAX || sscanf(end + 1, "end xxh3 %16[0-9a-f]", want) != 1 ||
	    strlen(end + 1) != 26 || buf[len - 1] != '\n' || memchr(buf, 0, len))
		return ph_fail(err, PH_EINVAL, "%s: no valid last line \"end xxh3 HEX\": damaged checkpoint", p);
	hex64(XXH3_64bits(buf, body), got);
	if (strcmp(want, got))
		return ph_fail(err, PH_EINVAL, "%s: its checksum does not match its contents: damaged checkpoint", p);
	char *line = buf, *save = NULL;
	int lineno = 0;
	*end = 0;
	for (char *l = strtok_r(line, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
		lineno++;
		long long step;
		unsigned long long size;
		char name[64], hash[17], tail;
		if (lineno == 1) {
			if (strcmp(l, MANIFEST_MAGIC))
				return ph_fail(err, PH_EINVAL, "%s: first line is not \"" MANIFEST_MAGIC "\"", p);
		} else if (sscanf(l, "run %32[0-9a-f]%c", m->run, &tail) == 1 && strlen(m->run) == 32) {
		} else if (sscanf(l, "step %lld%c", &step, &tail) == 1 && step >= 0) {
			m->step = step;
		} else if (sscanf(l, "file %63s %llu xxh3 %16[0-9a-f]%c", name, &size, hash, &tail) == 3 &&
			   strlen(hash) == 16 && m->n < 8 && !strchr(name, '/')) {
			snprintf(m->f[m->n].name, sizeof m->f[m->n].name, "%s", name);
			m->f[m->n].size = size;
			m->f[m->n].hash = strtoull(hash, NULL, 16);
			m->n++;
		} else {
			return ph_fail(err, PH_EINVAL, "%s:%d: not a manifest line: damaged checkpoint", p, lineno);
		}
	}
	if (!m->run[0] || m->n == 0)
		return ph_fail(err, PH_EINVAL, "%s: no run or no files listed: damaged checkpoint", p);
	return PH_OK;
}

/* Each file's size and checksum against the manifest. */
int ph_ck_verify_files(const char *sdir, const ph_ck_manifest *m, ph_err *err)
{
	char *buf = malloc(1 << 20);
	XXH3_state_t *h = XXH3_createState();
	int rc = PH_OK;
	if (!buf || !h) {
		rc = ph_fail(err, PH_ENOMEM, "out of memory verifying %s", sdir);
		goto out;
	}
	for (int i = 0; i < m->n && !rc; i++) {
		char p[PATH_MAX];
		if ((size_t)snprintf(p, sizeof p, "%s/%s", sdir, m->f[i].name) >= sizeof p) {
			rc = ph_fail(err, PH_EINVAL, "checkpoint path %s too long", sdir);
			break;
		}
		int fd;
		struct stat sb;
		if ((rc = ph_ck_open_read(p, &fd, &sb, NULL, err)))
			break;
		if ((uint64_t)sb.st_size != m->f[i].size) {
			rc = ph_fail(err, PH_EINVAL, "%s: %lld bytes, its manifest says %llu: damaged checkpoint", p,
				     (long long)sb.st_size, (unsigned long long)m->f[i].size);
			close(fd);
			break;
		}
		XXH3_64bits_reset(h);
		ssize_t r;
		uint64_t got = 0;
		while ((r = read(fd, buf, 1 << 20)) != 0) {
			if (r < 0 && errno == EINTR)
				continue;
			if (r < 0) {
				rc = ph_fail(err, PH_EIO, "%s: read error: %s", p, strerror(errno));
				break;
			}
			XXH3_64bits_update(h, buf, (size_t)r);
			got += (uint64_t)r;
		}
		close(fd);
		if (!rc && (got != m->f[i].size || XXH3_64bits_digest(h) != m->f[i].hash))
			rc = ph_fail(err, PH_EINVAL, "%s: its checksum does not match the manifest's: damaged checkpoint "
				     "(changed after it was written)", p);
	}
out:
	XXH3_freeState(h);
	free(buf);
	return rc;
}

int ph_ck_open_step(const char *sdir, const char *const *need, ph_ckpt_state *st, ph_ck_manifest *m,
		    int *missing, int *mrc, ph_err *merr, ph_err *err)
{
	char p[PATH_MAX];
	if ((size_t)snprintf(p, sizeof p, "%s/" STATE_FILE, sdir) >= sizeof p)
		return ph_fail(err, PH_EINVAL, "checkpoint path %s too long", sdir);
	int rc = ph_ck_read_state_file(p, st, err);
	if (rc)
		return rc;
	/* a step directory's name and its state agree */
	const char *base = strrchr(sdir, '/');
	base = base ? base + 1 : sdir;
	int64_t named = ph_ck_parse_step_name(base);
	if (named >= 0 && named != st->step) {
		rc = ph_fail(err, PH_EINVAL, "%s says step %lld but the directory is %s: corrupt checkpoint", p,
			     (long long)st->step, base);
		ph_ckpt_state_free(st);
		return rc;
	}
	/* only the files the caller reads: each must be listed, and is
	 * verified; the others may be damaged without harm */
	*mrc = ph_ck_read_manifest(sdir, m, missing, merr);
	ph_ck_manifest all = *m;
	m->n = 0;
	for (const char *const *want = need; !*mrc && *want; want++) {
		int at = 0;
		while (at < all.n && strcmp(all.f[at].name, *want))
			at++;
		if (at == all.n)
			*mrc = ph_fail(merr, PH_EINVAL, "%s/" MANIFEST_FILE " lists no %s: damaged checkpoint", sdir,
				       *want);
		else
			m->f[m->n++] = all.f[at];
	}
	if (!*mrc) {
		if ((*mrc = ph_ck_verify_files(sdir, m, merr)) == PH_OK && m->step != st->step)
			*mrc = ph_fail(merr, PH_EINVAL, "%s/" MANIFEST_FILE " says step %lld, " STATE_FILE " step %lld: "
				       "damaged checkpoint", sdir, (long long)m->step, (long long)st->step);
	}
	return PH_OK;
}

int ph_checkpoint_run_of(const char *sdir, char run[33])
{
	ph_ck_manifest m;
	int missing;
	ph_err e2;
	run[0] = 0;
	if (ph_ck_read_manifest(sdir, &m, &missing, &e2))
		return 0;
	memcpy(run, m.run, 33);
	return 1;
}
