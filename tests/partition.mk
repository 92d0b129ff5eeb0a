# SPDX-License-Identifier: MIT
# Partitioning and the plan (issue #3): the GPT-2 shape stand-in plugin, unit
# tests of the profiler's cache and of the plan's JSON, and shell tests of the
# [partition] section through the CLI.  Included from tests/local.mk after
# core.mk (which defines TEST_PLUGIN_LDFLAGS, TEST_EXTENSIONS and the .sh
# log compiler).

# GPT-2 small as shapes and costs only (forward/backward compute zeros).
check_LTLIBRARIES += tests/plugins/gpt2_shape.la
tests_plugins_gpt2_shape_la_SOURCES = tests/plugins/gpt2_shape.c
tests_plugins_gpt2_shape_la_LDFLAGS = $(TEST_PLUGIN_LDFLAGS)

if HAVE_CHECK
check_PROGRAMS += tests/test-profile
TESTS += tests/test-profile
tests_test_profile_SOURCES = tests/test-profile.c
tests_test_profile_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS) $(CJSON_CFLAGS)
tests_test_profile_LDADD = core/libphcore.la $(CHECK_LIBS) $(CJSON_LIBS) -lm
endif

TESTS += tests/test-partition-cli.sh tests/test-defaults.sh
EXTRA_DIST += tests/test-partition-cli.sh tests/test-defaults.sh
# bench/ (partition-gpt2.sh, gpt2-shape.ini) ships through EXTRA_DIST += bench.
