/* SPDX-License-Identifier: MIT */
/* A checkpoint step's opening checks (ph_ck_open_step), shared by --resume
 * and --generate: the state's step against the directory's name, every
 * file a reader needs listed in the manifest and verified, and the files it
 * does not read left unchecked.  The shell suites (test-checkpoint.sh,
 * test-generate.sh) damage real checkpoints; these cases need manifests
 * with a valid checksum that no pipehost writes. */
#define _GNU_SOURCE
#include <check.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "checkpoint-impl.h"

static char dir[4096], sdir[4200];

static int rm_one(const char *p, const struct stat *s, int flag, struct FTW *f)
{
	(void)s, (void)flag, (void)f;
	return remove(p);
}

static void put(const char *name, const char *text)
{
	char p[4400];
	snprintf(p, sizeof p, "%s/%s", sdir, name);
	FILE *f = fopen(p, "w");
	ck_assert_ptr_nonnull(f);
	fputs(text, f);
	ck_assert_int_eq(fclose(f), 0);
}

/* A step directory step-00000007 with a state of step `step`, a weights
 * and an optimizer file, and a manifest of the first nlisted of them. */
static void make_step(int64_t step, int nlisted)
{
	const char *base = getenv("TMPDIR");
	snprintf(dir, sizeof dir, "%s/ph-test-manifest.XXXXXX", base && *base ? base : "/tmp");
	ck_assert_ptr_nonnull(mkdtemp(dir));
	snprintf(sdir, sizeof sdir, "%s/" STEP_PREFIX "00000007", dir);
	ck_assert_int_eq(mkdir(sdir, 0755), 0);
	ph_ckpt_id id = { .digest = "0123456789abcdef", .text = (char *)"layer fc1 dense\n",
			  .run = "00112233445566778899aabbccddeeff" };
	char *json = ph_ck_state_json(step, &id, 1, 40, "adamw", 0);
	ck_assert_ptr_nonnull(json);
	const char *names[] = { STATE_FILE, WEIGHTS_FILE, OPTIM_FILE };
	const char *texts[] = { json, "weights", "optimizer" };
	uint64_t sizes[3], hashes[3];
	for (int i = 0; i < 3; i++) {
		put(names[i], texts[i]);
		sizes[i] = strlen(texts[i]);
		hashes[i] = XXH3_64bits(texts[i], sizes[i]);
	}
	free(json);
	ph_err err;
	ck_assert_msg(!ph_ck_write_manifest(sdir, id.run, step, names, sizes, hashes, nlisted, &err), "%s", err.msg);
}

static void teardown(void)
{
	nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static const char *const resume_needs[] = { STATE_FILE, WEIGHTS_FILE, OPTIM_FILE, NULL };
static const char *const generate_needs[] = { STATE_FILE, WEIGHTS_FILE, NULL };

/* rc of ph_ck_open_step; *mrc and merr its manifest verdict */
static int open_step(const char *const *need, int *mrc, int *missing, ph_err *merr, ph_err *err)
{
	ph_ckpt_state st;
	ph_ck_manifest m;
	int rc = ph_ck_open_step(sdir, need, &st, &m, missing, mrc, merr, err);
	if (!rc)
		ph_ckpt_state_free(&st);
	return rc;
}

START_TEST(intact_step_opens)
{
	make_step(7, 3);
	int mrc, missing;
	ph_err merr, err;
	ck_assert_msg(!open_step(resume_needs, &mrc, &missing, &merr, &err), "%s", err.msg);
	ck_assert_msg(mrc == PH_OK, "%s", merr.msg);
	ck_assert_int_eq(missing, 0);
}
END_TEST

/* A manifest that checks out but leaves the optimizer's file out: --resume
 * would read that file unverified, so the step is damaged for it; for
 * --generate, which reads only the weights, it is not. */
START_TEST(unlisted_file_refused_only_where_read)
{
	make_step(7, 2);
	int mrc, missing;
	ph_err merr, err;
	ck_assert_msg(!open_step(resume_needs, &mrc, &missing, &merr, &err), "%s", err.msg);
	ck_assert_int_eq(mrc, PH_EINVAL);
	ck_assert_int_eq(missing, 0);
	ck_assert_msg(strstr(merr.msg, "/" MANIFEST_FILE " lists no " OPTIM_FILE ": damaged checkpoint"), "%s",
		      merr.msg);
	ck_assert_msg(!open_step(generate_needs, &mrc, &missing, &merr, &err), "%s", err.msg);
	ck_assert_msg(mrc == PH_OK, "%s", merr.msg);
}
END_TEST

/* A damaged file the reader does not read is no reason to pass the step
 * over; one it reads is. */
START_TEST(damage_counts_only_where_read)
{
	make_step(7, 3);
	put(OPTIM_FILE, "optimizeR");
	int mrc, missing;
	ph_err merr, err;
	ck_assert_msg(!open_step(generate_needs, &mrc, &missing, &merr, &err), "%s", err.msg);
	ck_assert_msg(mrc == PH_OK, "%s", merr.msg);
	ck_assert_msg(!open_step(resume_needs, &mrc, &missing, &merr, &err), "%s", err.msg);
	ck_assert_msg(strstr(merr.msg, "/" OPTIM_FILE ": its checksum does not match the manifest's: damaged checkpoint"),
		      "%s", merr.msg);
}
END_TEST

START_TEST(state_of_another_step_refused)
{
	make_step(8, 3);
	int mrc, missing;
	ph_err merr, err;
	ck_assert_int_eq(open_step(generate_needs, &mrc, &missing, &merr, &err), PH_EINVAL);
	ck_assert_msg(strstr(err.msg, "/" STATE_FILE " says step 8 but the directory is " STEP_PREFIX
			     "00000007: corrupt checkpoint"), "%s", err.msg);
}
END_TEST

START_TEST(no_manifest_is_said_not_failed)
{
	make_step(7, 3);
	char p[4400];
	snprintf(p, sizeof p, "%s/" MANIFEST_FILE, sdir);
	ck_assert_int_eq(unlink(p), 0);
	int mrc, missing;
	ph_err merr, err;
	ck_assert_msg(!open_step(resume_needs, &mrc, &missing, &merr, &err), "%s", err.msg);
	ck_assert_int_eq(missing, 1);
	ck_assert_int_eq(mrc, PH_EINVAL); /* a file of the step missing: damage, were it not tolerated */
}
END_TEST

int main(void)
{
	Suite *s = suite_create("manifest");
	TCase *tc = tcase_create("open_step");
	tcase_add_test(tc, intact_step_opens);
	tcase_add_test(tc, unlisted_file_refused_only_where_read);
	tcase_add_test(tc, damage_counts_only_where_read);
	tcase_add_test(tc, state_of_another_step_refused);
	tcase_add_test(tc, no_manifest_is_said_not_failed);
	tcase_add_checked_fixture(tc, NULL, teardown);
	suite_add_tcase(s, tc);
	SRunner *r = srunner_create(s);
	srunner_run_all(r, CK_NORMAL);
	int failed = srunner_ntests_failed(r);
	srunner_free(r);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
