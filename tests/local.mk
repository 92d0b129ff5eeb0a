# SPDX-License-Identifier: MIT
# Tests: Check suites (one binary per area) and shell tests of the CLI.
TESTS_ENVIRONMENT_DIRS = \
	PH_LAYER_DIR=$(abs_top_builddir)/plugins/layers/.libs \
	PH_SCHEDULE_DIR=$(abs_top_builddir)/plugins/schedules/.libs \
	PH_PARTITIONER_DIR=$(abs_top_builddir)/plugins/partitioners/.libs \
	PIPEHOST_PLUGIN_PATH=$(abs_top_builddir)/plugins/layers/.libs:$(abs_top_builddir)/plugins/schedules/.libs:$(abs_top_builddir)/plugins/partitioners/.libs \
	PIPEHOST=$(abs_top_builddir)/core/pipehost \
	PIPEHOST_CUDA_BACKEND=$(abs_top_builddir)/core/cuda/.libs/pipehost-cuda.so \
	PIPEHOST_MPI_MODULE=$(abs_top_builddir)/core/mpi/.libs/pipehost-mpi.so \
	TEST_PLUGIN_DIR=$(abs_top_builddir)/tests/plugins/.libs \
	XDG_CACHE_HOME=$(abs_top_builddir)/tests/cache \
	top_srcdir=$(abs_top_srcdir) top_builddir=$(abs_top_builddir) $(CUEMU_TESTS_ENV)
AM_TESTS_ENVIRONMENT = export $(TESTS_ENVIRONMENT_DIRS);

include $(srcdir)/tests/layers.mk
include $(srcdir)/tests/transformer.mk
include $(srcdir)/tests/sched.mk
include $(srcdir)/tests/core-units.mk
include $(srcdir)/tests/core.mk
include $(srcdir)/tests/partition.mk
include $(srcdir)/tests/simulate.mk
include $(srcdir)/tests/reliability.mk
include $(srcdir)/tests/guards.mk
include $(srcdir)/tests/cuda.mk
include $(srcdir)/tests/cuemu/local.mk
include $(srcdir)/tests/parallel.mk
include $(srcdir)/tests/adopt.mk
include $(srcdir)/tests/gpt2.mk
# helpers for tests that run under mpirun (ph_mpirun, ph_have_mpi)
EXTRA_DIST += tests/mpi-lib.sh

# The tests' profile cache (XDG_CACHE_HOME above): `make clean` removes it,
# so that distcheck's distcleancheck finds the build tree clean.
test-cache-clean:
	rm -rf tests/cache
clean-local: test-cache-clean
.PHONY: test-cache-clean
