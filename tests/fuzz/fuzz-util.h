/* SPDX-License-Identifier: MIT */
/* Shared by the libFuzzer harnesses: a private temp directory and a way to
 * put the fuzzer's bytes into a file there (the loaders under test read
 * paths, not buffers). */
#ifndef PH_FUZZ_UTIL_H
#define PH_FUZZ_UTIL_H

#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char fuzz_dir[PATH_MAX];

static void fuzz_cleanup(void)
{
	char cmd[PATH_MAX + 16];
	if (fuzz_dir[0] && snprintf(cmd, sizeof cmd, "rm -rf '%s'", fuzz_dir) < (int)sizeof cmd) {
		int rc = system(cmd);
		(void)rc;
	}
}

/* Create the temp directory once per process. */
static const char *fuzz_tmpdir(void)
{
	if (!fuzz_dir[0]) {
		const char *t = getenv("TMPDIR");
		snprintf(fuzz_dir, sizeof fuzz_dir, "%s/ph-fuzz.XXXXXX", t && *t ? t : "/tmp");
		if (!mkdtemp(fuzz_dir)) {
			perror("mkdtemp");
			abort();
		}
		atexit(fuzz_cleanup);
	}
	return fuzz_dir;
}

/* Write data to DIR/name; returns the path (static buffer per slot). */
static const char *fuzz_file(int slot, const char *name, const uint8_t *data, size_t size)
{
	static char paths[4][PATH_MAX];
	snprintf(paths[slot], sizeof paths[slot], "%s/%s", fuzz_tmpdir(), name);
	int fd = open(paths[slot], O_WRONLY | O_CREAT | O_TRUNC, 0600);
	if (fd < 0) {
		perror(paths[slot]);
		abort();
	}
	size_t off = 0;
	while (off < size) {
		ssize_t w = write(fd, data + off, size - off);
		if (w <= 0) {
			perror("write");
			abort();
		}
		off += (size_t)w;
	}
	close(fd);
	return paths[slot];
}

#endif
