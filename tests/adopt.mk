# SPDX-License-Identifier: MIT
# Tests of what a user adopting pipehost meets: the install (man page,
# examples, templates, completion), pipehost --check-plugin, the plugin
# path's messages, the license tags (scripts/spdx.sh).
# Test plugins, each broken in one way --check-plugin must name.
check_LTLIBRARIES += tests/plugins/check-bad-backward.la tests/plugins/check-bad-meta.la \
	tests/plugins/check-deadlock.la tests/plugins/check-crash.la tests/plugins/check-bad-in-place.la \
	tests/plugins/check-ctor-exit.la
tests_plugins_check_bad_backward_la_SOURCES = tests/plugins/check-bad-backward.c
tests_plugins_check_bad_backward_la_LDFLAGS = $(TEST_PLUGIN_LDFLAGS)
tests_plugins_check_bad_meta_la_SOURCES = tests/plugins/check-bad-meta.c
tests_plugins_check_bad_meta_la_LDFLAGS = $(TEST_PLUGIN_LDFLAGS)
tests_plugins_check_deadlock_la_SOURCES = tests/plugins/check-deadlock.c
tests_plugins_check_deadlock_la_LDFLAGS = $(TEST_PLUGIN_LDFLAGS)
tests_plugins_check_crash_la_SOURCES = tests/plugins/check-crash.c
tests_plugins_check_crash_la_LDFLAGS = $(TEST_PLUGIN_LDFLAGS)
tests_plugins_check_bad_in_place_la_SOURCES = tests/plugins/check-bad-in-place.c
tests_plugins_check_bad_in_place_la_LDFLAGS = $(TEST_PLUGIN_LDFLAGS)
tests_plugins_check_bad_in_place_la_LIBADD = -lm
tests_plugins_check_ctor_exit_la_SOURCES = tests/plugins/check-ctor-exit.c
tests_plugins_check_ctor_exit_la_LDFLAGS = $(TEST_PLUGIN_LDFLAGS)
# a partitioner writing past first[stages], one refusing silently; a backward
# writing through dx = NULL; a constructor that complains on stderr, then crashes
check_LTLIBRARIES += tests/plugins/check-bad-partition.la tests/plugins/check-dx-null.la \
	tests/plugins/check-ctor-stderr.la
tests_plugins_check_bad_partition_la_SOURCES = tests/plugins/check-bad-partition.c
tests_plugins_check_bad_partition_la_LDFLAGS = $(TEST_PLUGIN_LDFLAGS)
tests_plugins_check_dx_null_la_SOURCES = tests/plugins/check-dx-null.c
tests_plugins_check_dx_null_la_LDFLAGS = $(TEST_PLUGIN_LDFLAGS)
tests_plugins_check_ctor_stderr_la_SOURCES = tests/plugins/check-ctor-stderr.c
tests_plugins_check_ctor_stderr_la_LDFLAGS = $(TEST_PLUGIN_LDFLAGS)
# a layer with a CUDA twin that $PH_TEST_BAD_TWIN breaks (the twin check)
check_LTLIBRARIES += tests/plugins/check-twin.la
tests_plugins_check_twin_la_SOURCES = tests/plugins/check-twin.c tests/plugins/check-twin_state.h
tests_plugins_check_twin_la_LDFLAGS = $(TEST_PLUGIN_LDFLAGS)
EXTRA_DIST += tests/plugins/check-twin_cuda.cu
if PH_CUDA
tests_plugins_check_twin_la_LIBADD = tests/plugins/check-twin_cuda.lo $(CUDA_LAYER_LIBS)
tests/plugins/check-twin_cuda.lo: tests/plugins/check-twin_cuda.cu $(top_srcdir)/tests/plugins/check-twin_state.h \
	$(top_srcdir)/include/pipehost/plugin.h $(top_srcdir)/include/pipehost/cuda.h
endif

TESTS += tests/test-check-plugin.sh tests/test-install.sh tests/test-plugin-path.sh tests/test-spdx.sh \
	tests/test-completion.sh
EXTRA_DIST += tests/test-check-plugin.sh tests/test-install.sh tests/test-plugin-path.sh tests/test-spdx.sh \
	tests/test-completion.sh tests/adopt.mk

# Conventions (exit statuses, metrics, progress, INI paths, launchers).
TESTS += tests/test-conventions.sh
EXTRA_DIST += tests/test-conventions.sh docs/conventions.md

# The plugin loader and --check-plugin against a third audit's plugins
# (tests/test-plugin-loader.sh): one source each, broken one way per -DAUDIT,
# in a directory of their own so that no run searching tests/plugins/.libs
# meets them (one is named relu).  Automake writes each library's rules from
# its own variables, read before make runs, so no make loop can stand for them.
check_LTLIBRARIES += tests/plugins/loader-audit/flops_neg.la tests/plugins/loader-audit/flops_nan.la \
	tests/plugins/loader-audit/meta_zero.la tests/plugins/loader-audit/opt_dup.la \
	tests/plugins/loader-audit/opt_type.la tests/plugins/loader-audit/name_relu.la \
	tests/plugins/loader-audit/sched_delayed.la tests/plugins/loader-audit/sched_silent.la \
	tests/plugins/loader-audit/sched_nochunks.la tests/plugins/loader-audit/sched_chunk77.la \
	tests/plugins/loader-audit/sched_permb.la tests/plugins/loader-audit/sched_permb_split.la \
	tests/plugins/loader-audit/name_space.la
tests_plugins_loader_audit_flops_neg_la_SOURCES = tests/plugins/loader-audit/audit-layer.c
tests_plugins_loader_audit_flops_neg_la_CFLAGS = $(AM_CFLAGS) -DAUDIT=1
tests_plugins_loader_audit_flops_neg_la_LDFLAGS = $(TEST_PLUGIN_LDFLAGS)
tests_plugins_loader_audit_flops_nan_la_SOURCES = tests/plugins/loader-audit/audit-layer.c
tests_plugins_loader_audit_flops_nan_la_CFLAGS = $(AM_CFLAGS) -DAUDIT=2
tests_plugins_loader_audit_flops_nan_la_LDFLAGS = $(TEST_PLUGIN_LDFLAGS)
tests_plugins_loader_audit_meta_zero_la_SOURCES = tests/plugins/loader-audit/audit-layer.c
tests_plugins_loader_audit_meta_zero_la_CFLAGS = $(AM_CFLAGS) -DAUDIT=3
tests_plugins_loader_audit_meta_zero_la_LDFLAGS = $(TEST_PLUGIN_LDFLAGS)
tests_plugins_loader_audit_opt_dup_la_SOURCES = tests/plugins/loader-audit/audit-layer.c
tests_plugins_loader_audit_opt_dup_la_CFLAGS = $(AM_CFLAGS) -DAUDIT=4
tests_plugins_loader_audit_opt_dup_la_LDFLAGS = $(TEST_PLUGIN_LDFLAGS)
tests_plugins_loader_audit_opt_type_la_SOURCES = tests/plugins/loader-audit/audit-layer.c
tests_plugins_loader_audit_opt_type_la_CFLAGS = $(AM_CFLAGS) -DAUDIT=5
tests_plugins_loader_audit_opt_type_la_LDFLAGS = $(TEST_PLUGIN_LDFLAGS)
tests_plugins_loader_audit_name_relu_la_SOURCES = tests/plugins/loader-audit/audit-layer.c
tests_plugins_loader_audit_name_relu_la_CFLAGS = $(AM_CFLAGS) -DAUDIT=6
tests_plugins_loader_audit_name_relu_la_LDFLAGS = $(TEST_PLUGIN_LDFLAGS)
tests_plugins_loader_audit_sched_delayed_la_SOURCES = tests/plugins/loader-audit/audit-sched.c
tests_plugins_loader_audit_sched_delayed_la_CFLAGS = $(AM_CFLAGS) -DAUDIT=1
tests_plugins_loader_audit_sched_delayed_la_LDFLAGS = $(TEST_PLUGIN_LDFLAGS)
tests_plugins_loader_audit_sched_silent_la_SOURCES = tests/plugins/loader-audit/audit-sched.c
tests_plugins_loader_audit_sched_silent_la_CFLAGS = $(AM_CFLAGS) -DAUDIT=2
tests_plugins_loader_audit_sched_silent_la_LDFLAGS = $(TEST_PLUGIN_LDFLAGS)
tests_plugins_loader_audit_sched_chunk77_la_SOURCES = tests/plugins/loader-audit/audit-sched.c
tests_plugins_loader_audit_sched_chunk77_la_CFLAGS = $(AM_CFLAGS) -DAUDIT=4
tests_plugins_loader_audit_sched_chunk77_la_LDFLAGS = $(TEST_PLUGIN_LDFLAGS)
tests_plugins_loader_audit_sched_nochunks_la_SOURCES = tests/plugins/loader-audit/audit-sched.c
tests_plugins_loader_audit_sched_nochunks_la_CFLAGS = $(AM_CFLAGS) -DAUDIT=3
tests_plugins_loader_audit_sched_nochunks_la_LDFLAGS = $(TEST_PLUGIN_LDFLAGS)
tests_plugins_loader_audit_name_space_la_SOURCES = tests/plugins/loader-audit/audit-layer.c
tests_plugins_loader_audit_name_space_la_CFLAGS = $(AM_CFLAGS) -DAUDIT=7
tests_plugins_loader_audit_name_space_la_LDFLAGS = $(TEST_PLUGIN_LDFLAGS)
tests_plugins_loader_audit_sched_permb_la_SOURCES = tests/plugins/loader-audit/audit-sched.c
tests_plugins_loader_audit_sched_permb_la_CFLAGS = $(AM_CFLAGS) -DAUDIT=5
tests_plugins_loader_audit_sched_permb_la_LDFLAGS = $(TEST_PLUGIN_LDFLAGS)
tests_plugins_loader_audit_sched_permb_split_la_SOURCES = tests/plugins/loader-audit/audit-sched.c
tests_plugins_loader_audit_sched_permb_split_la_CFLAGS = $(AM_CFLAGS) -DAUDIT=6
tests_plugins_loader_audit_sched_permb_split_la_LDFLAGS = $(TEST_PLUGIN_LDFLAGS)
TESTS += tests/test-plugin-loader.sh
EXTRA_DIST += tests/test-plugin-loader.sh
