# SPDX-License-Identifier: MIT
# Reliability (issue #7): checkpoints and resume, SIGINT, SIGKILL at random
# moments, corrupted checkpoints; outputs checked before step 1, never
# replacing what they must not (test-outputs.sh); a failure injected at every
# write, fsync and rename of a checkpoint (test-faults.sh, through the
# LD_PRELOAD shim tests/faultfs.c); any flipped byte of a checkpoint found on
# load (test-bitflip.sh); a tied weight stored once (test-tied-weights.sh).
# Fuzzing lives in fuzz.mk (make fuzz).
TESTS += tests/test-checkpoint.sh tests/test-crash.sh tests/test-corrupt.sh tests/test-outputs.sh \
	tests/test-faults.sh tests/test-bitflip.sh tests/test-tied-weights.sh
EXTRA_DIST += tests/test-checkpoint.sh tests/test-crash.sh tests/test-corrupt.sh tests/fuzz.mk .ci/sanitize.sh \
	docs/corrupted-inputs.md tests/test-outputs.sh tests/test-faults.sh tests/test-bitflip.sh \
	docs/reliability-outputs.md tests/test-tied-weights.sh
# A plugin that calls exit() or crashes during a run: one line, never exit 0
# (test-plugin-exit.sh, with tests/plugins/misbehave.c).
TESTS += tests/test-plugin-exit.sh
EXTRA_DIST += tests/test-plugin-exit.sh

check_LTLIBRARIES += tests/faultfs.la
tests_faultfs_la_SOURCES = tests/faultfs.c
tests_faultfs_la_LDFLAGS = $(TEST_PLUGIN_LDFLAGS)
tests_faultfs_la_LIBADD = -ldl

# Out of memory at every allocation in turn (test-oom.sh, through the
# LD_PRELOAD shim tests/oomshim.c): one line and exit 1, or the same run.
TESTS += tests/test-oom.sh
EXTRA_DIST += tests/test-oom.sh
check_LTLIBRARIES += tests/oomshim.la
tests_oomshim_la_SOURCES = tests/oomshim.c
tests_oomshim_la_LDFLAGS = $(TEST_PLUGIN_LDFLAGS)
tests_oomshim_la_LIBADD = -ldl

include $(srcdir)/tests/fuzz.mk
