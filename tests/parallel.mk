# Data parallelism: replicas in one process, and across processes under
# mpirun (test-mpi.sh skips, 77, without Open MPI or the MPI module).
TESTS += tests/test-replicas.sh tests/test-mpi.sh
EXTRA_DIST += tests/test-replicas.sh tests/test-mpi.sh tests/parallel.mk
