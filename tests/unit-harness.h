/* SPDX-License-Identifier: MIT */
/* What the Check unit-test binaries do the same way, so that each keeps
 * only its tests: main() runs the binary's suite and turns its verdict into
 * the exit status (run_suite), and a test that writes files gets a fresh
 * scratch directory of its own, removed after it (scratch_setup,
 * scratch_teardown, in_dir).
 *
 * Included once, after <check.h>.  The scratch directory is there only where
 * the binary names it: define SCRATCH_DIR_PREFIX (its name's start, e.g.
 * "ph-test-data") and, before the first #include, _GNU_SOURCE (nftw). */
#ifndef PH_TESTS_UNIT_HARNESS_H
#define PH_TESTS_UNIT_HARNESS_H

#include <stdlib.h>

/* Every test of s (each in its own process, Check's default), the outcome
 * of each printed; EXIT_FAILURE when any failed: main()'s return. */
static inline int run_suite(Suite *s)
{
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

#ifdef SCRATCH_DIR_PREFIX
#include <ftw.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

/* $TMPDIR/SCRATCH_DIR_PREFIX.XXXXXX of the running test. */
static char scratch_dir[4096];

/* The checked fixture's setup (tcase_add_checked_fixture): a new directory
 * for every test, so that no test sees another's files. */
static inline void scratch_setup(void)
{
	const char *base = getenv("TMPDIR");
	snprintf(scratch_dir, sizeof scratch_dir, "%s/" SCRATCH_DIR_PREFIX ".XXXXXX",
		 base && *base ? base : "/tmp");
	ck_assert_ptr_nonnull(mkdtemp(scratch_dir));
}

static inline int scratch_remove_one(const char *p, const struct stat *s, int flag, struct FTW *f)
{
	(void)s, (void)flag, (void)f;
	chmod(p, 0700); /* a test may leave a directory read-only */
	return remove(p);
}

/* ... and its teardown: the directory and everything in it. */
static inline void scratch_teardown(void)
{
	chmod(scratch_dir, 0700);
	nftw(scratch_dir, scratch_remove_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* scratch_dir/name.  The result lives until the fourth call after this one,
 * so a call may take up to four of them as arguments. */
static inline const char *in_dir(const char *name)
{
	static char buf[4][4200];
	static int k;
	k = (k + 1) % 4;
	snprintf(buf[k], sizeof buf[k], "%s/%s", scratch_dir, name);
	return buf[k];
}
#endif /* SCRATCH_DIR_PREFIX */

#endif
