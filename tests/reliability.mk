# Reliability (issue #7): checkpoints and resume, SIGINT, SIGKILL at random
# moments, corrupted checkpoints.  Fuzzing lives in fuzz.mk (make fuzz).
TESTS += tests/test-checkpoint.sh tests/test-crash.sh tests/test-corrupt.sh
EXTRA_DIST += tests/test-checkpoint.sh tests/test-crash.sh tests/test-corrupt.sh tests/fuzz.mk .ci/sanitize.sh \
	docs/corrupted-inputs.md

include $(srcdir)/tests/fuzz.mk
