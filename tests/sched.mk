# SPDX-License-Identifier: MIT
# Check suites for the schedule and partitioner plugins.  They dlopen the
# built modules from $PH_SCHEDULE_DIR and $PH_PARTITIONER_DIR (default:
# plugins/schedules/.libs and plugins/partitioners/.libs under the build
# directory, where libtool leaves them).
if HAVE_CHECK
check_PROGRAMS += tests/test-schedules tests/test-partitioners
TESTS += tests/test-schedules tests/test-partitioners

tests_test_schedules_SOURCES = tests/test-schedules.c tests/plugin-harness.h tests/unit-harness.h \
	core/options.c
tests_test_schedules_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_test_schedules_LDADD = $(CHECK_LIBS) -ldl -lm

tests_test_partitioners_SOURCES = tests/test-partitioners.c tests/plugin-harness.h tests/unit-harness.h \
	core/options.c
tests_test_partitioners_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_test_partitioners_LDADD = $(CHECK_LIBS) -ldl -lm
endif

# schedule = 2bw and pipedream: the delayed update, the stash, its checkpoints and its simulation;
# and against NumPy's delayed update (skips without NumPy)
TESTS += tests/test-twobw.sh tests/test-twobw-reference.sh tests/test-pipedream.sh
EXTRA_DIST += tests/test-twobw.sh tests/test-pipedream.sh tests/test-twobw-reference.sh tests/reference/twobw_reference.py
