# SPDX-License-Identifier: MIT
# Data parallelism: replicas in one process, and across processes under
# mpirun (test-mpi.sh skips, 77, without Open MPI or the MPI module); the
# plan's memory estimate against the engine's, in one process and split
# over two (test-plan-memory.sh).
TESTS += tests/test-replicas.sh tests/test-mpi.sh tests/test-mpi-start.sh tests/test-plan-memory.sh
EXTRA_DIST += tests/test-replicas.sh tests/test-mpi.sh tests/test-mpi-start.sh tests/test-plan-memory.sh tests/parallel.mk

# Expert parallelism (plugin ABI 1.5 replica groups, sharded parameters):
# ep_linear, a test layer with its experts split over the replicas.
check_LTLIBRARIES += tests/plugins/ep-linear.la
tests_plugins_ep_linear_la_SOURCES = tests/plugins/ep-linear.c
tests_plugins_ep_linear_la_LDFLAGS = $(TEST_PLUGIN_LDFLAGS)
EXTRA_DIST += tests/plugins/ep-linear_state.h tests/plugins/ep-linear_cuda.cu
if PH_CUDA
# its CUDA twin: the exchanges between GPUs (tests/test-expert-parallel.sh
# runs it where cuda:0 and cuda:1 are, the emulator's included)
tests_plugins_ep_linear_la_LIBADD = tests/plugins/ep-linear_cuda.lo $(CUDA_LAYER_LIBS)
tests/plugins/ep-linear_cuda.lo: tests/plugins/ep-linear_cuda.cu $(top_srcdir)/tests/plugins/ep-linear_state.h \
	$(top_srcdir)/include/pipehost/plugin.h $(top_srcdir)/include/pipehost/cuda.h
endif
TESTS += tests/test-expert-parallel.sh tests/test-expert-parallel-gpu.sh tests/test-moe-ep.sh tests/test-moe-gpu.sh
EXTRA_DIST += tests/test-expert-parallel.sh tests/test-expert-parallel-gpu.sh tests/fixtures/ep.ini tests/st-diff.py \
	tests/test-moe-ep.sh tests/test-moe-gpu.sh tests/fixtures/moe-lm.ini tests/ep-lib.sh

# More rank threads than the process's OpenBLAS was built for take turns
# (core/blas_gate.h); the shim tests/blasshim.c plays a small build and
# counts the threads inside sgemm at once.
TESTS += tests/test-blas-gate.sh
EXTRA_DIST += tests/test-blas-gate.sh
check_LTLIBRARIES += tests/blasshim.la
tests_blasshim_la_SOURCES = tests/blasshim.c
tests_blasshim_la_LDFLAGS = $(TEST_PLUGIN_LDFLAGS)
tests_blasshim_la_LIBADD = -ldl
