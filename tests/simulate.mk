# SPDX-License-Identifier: MIT
# The simulator, trace and SVG writers, and the table schedule: a Check suite
# (plans built from the real schedule plugins in $PH_SCHEDULE_DIR) and a
# shell test of bad schedule tables through the command line; one of the
# files --simulate writes (none unless asked); --trace slices that never
# overlap, one pid per process under mpirun; --svg's size limit; a table
# read once for a plan.
if HAVE_CHECK
check_PROGRAMS += tests/test-simulate
TESTS += tests/test-simulate

tests_test_simulate_SOURCES = tests/test-simulate.c tests/plugin-harness.h
tests_test_simulate_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS) $(CJSON_CFLAGS)
tests_test_simulate_LDADD = core/libphcore.la $(CHECK_LIBS) $(CJSON_LIBS) -ldl -lm
endif

TESTS += tests/test-bad-schedules.sh tests/test-simulate-cli.sh tests/test-trace.sh
EXTRA_DIST += tests/test-bad-schedules.sh tests/test-simulate-cli.sh tests/test-trace.sh

# --svg's limit of 200000 boxes; a table read once for a plan (its reads
# counted through tests/faultfs.c)
TESTS += tests/test-svg-limit.sh tests/test-table-reads.sh
EXTRA_DIST += tests/test-svg-limit.sh tests/test-table-reads.sh
