# SPDX-License-Identifier: MIT
# Test plugins: each one broken in one way the loader must refuse.
check_LTLIBRARIES += tests/plugins/bad_abi.la tests/plugins/missing_hook.la tests/plugins/not_a_plugin.la
TEST_PLUGIN_LDFLAGS = -module -avoid-version -shared -rpath /nowhere $(SAN_CFLAGS)
tests_plugins_bad_abi_la_SOURCES = tests/plugins/bad_abi.c
tests_plugins_bad_abi_la_LDFLAGS = $(TEST_PLUGIN_LDFLAGS)
tests_plugins_missing_hook_la_SOURCES = tests/plugins/missing_hook.c
tests_plugins_missing_hook_la_LDFLAGS = $(TEST_PLUGIN_LDFLAGS)
tests_plugins_not_a_plugin_la_SOURCES = tests/plugins/not_a_plugin.c
tests_plugins_not_a_plugin_la_LDFLAGS = $(TEST_PLUGIN_LDFLAGS)
# ... and the ones tests/test-guards.sh needs (bad sizes, broken descriptors, a
# constructor that shows whether a plugin was loaded at all)
check_LTLIBRARIES += tests/plugins/bad_meta.la tests/plugins/wild_descriptor.la tests/plugins/endless_list.la \
	tests/plugins/ctor_marker.la
tests_plugins_bad_meta_la_SOURCES = tests/plugins/bad_meta.c
tests_plugins_bad_meta_la_LDFLAGS = $(TEST_PLUGIN_LDFLAGS)
tests_plugins_wild_descriptor_la_SOURCES = tests/plugins/wild_descriptor.c
tests_plugins_wild_descriptor_la_LDFLAGS = $(TEST_PLUGIN_LDFLAGS)
tests_plugins_endless_list_la_SOURCES = tests/plugins/endless_list.c
tests_plugins_endless_list_la_LDFLAGS = $(TEST_PLUGIN_LDFLAGS)
tests_plugins_ctor_marker_la_SOURCES = tests/plugins/ctor_marker.c
tests_plugins_ctor_marker_la_LDFLAGS = $(TEST_PLUGIN_LDFLAGS)
# a layer as ABI 1.3 built it: the host must still load and run it
check_LTLIBRARIES += tests/plugins/abi13_relu.la
tests_plugins_abi13_relu_la_SOURCES = tests/plugins/abi13_relu.c
tests_plugins_abi13_relu_la_LDFLAGS = $(TEST_PLUGIN_LDFLAGS)
# a layer that fails at run time on purpose (test-mpi.sh: one process fails)
check_LTLIBRARIES += tests/plugins/fail_forward.la
tests_plugins_fail_forward_la_SOURCES = tests/plugins/fail_forward.c
tests_plugins_fail_forward_la_LDFLAGS = $(TEST_PLUGIN_LDFLAGS)
# a layer that calls exit() or crashes at run time (test-plugin-exit.sh)
check_LTLIBRARIES += tests/plugins/misbehave.la
tests_plugins_misbehave_la_SOURCES = tests/plugins/misbehave.c
tests_plugins_misbehave_la_LDFLAGS = $(TEST_PLUGIN_LDFLAGS)
# what these two and tests/adopt.mk's identity and y = w * x test layers share
EXTRA_DIST += tests/plugins/test-layer-common.h
# bad_twin.c three times: CUDA hooks (ABI 1.4) too short, without backward, split unlike the layer
check_LTLIBRARIES += tests/plugins/bad_twin_size.la tests/plugins/bad_twin_hook.la tests/plugins/bad_twin_split.la
tests_plugins_bad_twin_size_la_SOURCES = tests/plugins/bad_twin.c
tests_plugins_bad_twin_size_la_CFLAGS = $(AM_CFLAGS) -DBAD_TWIN=1
tests_plugins_bad_twin_size_la_LDFLAGS = $(TEST_PLUGIN_LDFLAGS)
tests_plugins_bad_twin_hook_la_SOURCES = tests/plugins/bad_twin.c
tests_plugins_bad_twin_hook_la_CFLAGS = $(AM_CFLAGS) -DBAD_TWIN=2
tests_plugins_bad_twin_hook_la_LDFLAGS = $(TEST_PLUGIN_LDFLAGS)
tests_plugins_bad_twin_split_la_SOURCES = tests/plugins/bad_twin.c
tests_plugins_bad_twin_split_la_CFLAGS = $(AM_CFLAGS) -DBAD_TWIN=3
tests_plugins_bad_twin_split_la_LDFLAGS = $(TEST_PLUGIN_LDFLAGS)

# Shell tests of the command line: errors, reproducibility, out-of-tree plugins.
TEST_EXTENSIONS = .sh
SH_LOG_COMPILER = $(SHELL)
TESTS += tests/test-errors.sh tests/test-reproducible.sh tests/test-out-of-tree.sh tests/test-train.sh tests/test-lm.sh
EXTRA_DIST += tests/test-errors.sh tests/test-reproducible.sh tests/test-out-of-tree.sh tests/test-train.sh tests/test-lm.sh \
	tests/lib.sh tests/fixtures tests/example-plugin
# Both run `make install` in this build tree (into staging directories of
# their own); under make -j, distcheck's included, never at the same time.
tests/test-out-of-tree.log: tests/test-install.log

# The core sections' one table and the [gpu] keys (test-sections.sh), with
# a plugin that reports the environment it is loaded in.
check_LTLIBRARIES += tests/plugins/probe/env_probe.la
tests_plugins_probe_env_probe_la_SOURCES = tests/plugins/probe/env_probe.c
tests_plugins_probe_env_probe_la_LDFLAGS = $(TEST_PLUGIN_LDFLAGS)
TESTS += tests/test-sections.sh
EXTRA_DIST += tests/test-sections.sh
# ... and that they reach the CUDA code (in the emulator build; skips elsewhere).
TESTS += tests/test-gpu-switches.sh
EXTRA_DIST += tests/test-gpu-switches.sh
# bench/gpt2-124m.sh's rows and logs, with stand-ins for nvidia-smi and pipehost.
TESTS += tests/test-bench-gpt2-script.sh
EXTRA_DIST += tests/test-bench-gpt2-script.sh
# The benchmarks' environment checked before anything runs (bench/args-lib.sh).
TESTS += tests/test-bench-args.sh
EXTRA_DIST += tests/test-bench-args.sh
# [data] source through the registry of data sources.
TESTS += tests/test-data-sources.sh
EXTRA_DIST += tests/test-data-sources.sh
# Training from .npy files and token files; GPT-2's BPE on the fortunes,
# and with GPT-2's own vocabulary against tiktoken (skipped without it).
TESTS += tests/test-data-files.sh tests/test-bpe.sh tests/test-bpe-tiktoken.sh
EXTRA_DIST += tests/test-data-files.sh tests/test-bpe.sh tests/test-bpe-tiktoken.sh
