/* SPDX-License-Identifier: MIT */
/* core/errline.c: an error's one line, its control characters escaped,
 * reaching the stream in one write (stderr is unbuffered: written byte by
 * byte, two processes' lines under mpirun could land inside each other). */
#define _GNU_SOURCE /* fopencookie */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <pipehost/plugin.h>

#include "errline.h"

/* A stream that records what reaches it and in how many writes. */
typedef struct {
	char *text;
	size_t len;
	int writes;
} sink;

static ssize_t sink_write(void *cookie, const char *buf, size_t n)
{
	sink *s = cookie;
	s->text = realloc(s->text, s->len + n + 1);
	memcpy(s->text + s->len, buf, n);
	s->len += n;
	s->text[s->len] = 0;
	s->writes++;
	return (ssize_t)n;
}

/* msg through ph_err_line on an unbuffered stream, as stderr is. */
static sink line_of(const char *prefix, const char *msg)
{
	sink s = { NULL, 0, 0 };
	cookie_io_functions_t io = { .write = sink_write };
	FILE *f = fopencookie(&s, "w", io);
	ck_assert_ptr_nonnull(f);
	setvbuf(f, NULL, _IONBF, 0);
	ph_err_line(f, prefix, msg);
	fclose(f);
	return s;
}

START_TEST(test_escapes_in_one_write)
{
	sink s = line_of("pipehost: ", "cannot open no\nsuch\x1b[31m\t.ini");
	ck_assert_str_eq(s.text, "pipehost: cannot open no\\nsuch\\x1b[31m\\t.ini\n");
	ck_assert_int_eq(s.writes, 1);
	free(s.text);
}
END_TEST

START_TEST(test_long_line_in_one_write)
{
	/* past the stack buffer: 3000 bytes that escape to 4 each */
	char msg[3001];
	memset(msg, '\x01', 3000);
	msg[3000] = 0;
	sink s = line_of("pipehost: process 1 of 2: ", msg);
	ck_assert_int_eq(s.writes, 1);
	ck_assert_uint_eq(s.len, strlen("pipehost: process 1 of 2: ") + 4 * 3000 + 1);
	ck_assert_int_eq(memcmp(s.text + s.len - 5, "\\x01\n", 5), 0);
	free(s.text);
}
END_TEST

/* ph_fail: a line that fits is kept whole; one that does not is cut to
 * PH_ERR_MAX - 1 bytes ending in "...", so a reader knows there was more. */
START_TEST(test_fail_marks_a_cut_line)
{
	char text[PH_ERR_MAX + 50];
	ph_err e;
	for (size_t len = PH_ERR_MAX - 2; len <= PH_ERR_MAX + 40; len++) {
		memset(text, 'a', len);
		text[len] = 0;
		ck_assert_int_eq(ph_fail(&e, PH_EINVAL, "%s", text), PH_EINVAL);
		if (len < PH_ERR_MAX) {
			ck_assert_str_eq(e.msg, text);
			continue;
		}
		ck_assert_uint_eq(strlen(e.msg), PH_ERR_MAX - 1);
		ck_assert_int_eq(memcmp(e.msg, text, PH_ERR_MAX - 4), 0);
		ck_assert_str_eq(e.msg + PH_ERR_MAX - 4, "...");
	}
	ck_assert_int_eq(ph_fail(NULL, PH_EIO, "no buffer"), PH_EIO);
}
END_TEST

int main(void)
{
	Suite *su = suite_create("errline");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, test_escapes_in_one_write);
	tcase_add_test(tc, test_long_line_in_one_write);
	tcase_add_test(tc, test_fail_marks_a_cut_line);
	suite_add_tcase(su, tc);
	SRunner *sr = srunner_create(su);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
