# SPDX-License-Identifier: MIT
# Data parallelism: replicas in one process, and across processes under
# mpirun (test-mpi.sh skips, 77, without Open MPI or the MPI module); the
# plan's memory estimate against the engine's, in one process and split
# over two (test-plan-memory.sh).
TESTS += tests/test-replicas.sh tests/test-mpi.sh tests/test-plan-memory.sh
EXTRA_DIST += tests/test-replicas.sh tests/test-mpi.sh tests/test-plan-memory.sh tests/parallel.mk
