# Test plugins: each one broken in one way the loader must refuse.
check_LTLIBRARIES += tests/plugins/bad_abi.la tests/plugins/missing_hook.la tests/plugins/not_a_plugin.la
TEST_PLUGIN_LDFLAGS = -module -avoid-version -shared -rpath /nowhere $(SAN_CFLAGS)
tests_plugins_bad_abi_la_SOURCES = tests/plugins/bad_abi.c
tests_plugins_bad_abi_la_LDFLAGS = $(TEST_PLUGIN_LDFLAGS)
tests_plugins_missing_hook_la_SOURCES = tests/plugins/missing_hook.c
tests_plugins_missing_hook_la_LDFLAGS = $(TEST_PLUGIN_LDFLAGS)
tests_plugins_not_a_plugin_la_SOURCES = tests/plugins/not_a_plugin.c
tests_plugins_not_a_plugin_la_LDFLAGS = $(TEST_PLUGIN_LDFLAGS)

# Shell tests of the command line: errors, reproducibility, out-of-tree plugins.
TEST_EXTENSIONS = .sh
SH_LOG_COMPILER = $(SHELL)
TESTS += tests/test-errors.sh tests/test-reproducible.sh tests/test-out-of-tree.sh tests/test-train.sh tests/test-lm.sh
EXTRA_DIST += tests/test-errors.sh tests/test-reproducible.sh tests/test-out-of-tree.sh tests/test-train.sh tests/test-lm.sh \
	tests/lib.sh tests/fixtures tests/example-plugin

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
# [data] source through the registry of data sources.
TESTS += tests/test-data-sources.sh
EXTRA_DIST += tests/test-data-sources.sh
# Training from .npy files and token files; GPT-2's BPE on the fortunes.
TESTS += tests/test-data-files.sh tests/test-bpe.sh
EXTRA_DIST += tests/test-data-files.sh tests/test-bpe.sh
