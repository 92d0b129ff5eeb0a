# SPDX-License-Identifier: MIT
# Guards (issue "nothing lost, nothing silent"): memory limits, FIFOs, closed
# stdout and file-size limits, plugin trust and sizes, stops during
# evaluation; docs/reliability-guards.md lists every case and its message.
TESTS += tests/test-guards.sh tests/test-guards-mpi.sh
EXTRA_DIST += tests/test-guards.sh tests/test-guards-mpi.sh docs/reliability-guards.md
