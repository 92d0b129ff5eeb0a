# SPDX-License-Identifier: MIT
# tests/test-layers: finite-difference gradient checks of the CPU layer plugins.
# It dlopen()s the plugins from $PH_LAYER_DIR; the -D below is the fallback
# when the variable is unset (running the binary by hand from the build tree).
if HAVE_CHECK
check_PROGRAMS += tests/test-layers
TESTS += tests/test-layers
tests_test_layers_SOURCES = tests/test-layers.c tests/layer-harness.h tests/fd-harness.h \
	tests/unit-harness.h core/options.c core/layer_inst.c core/fd_check.c
tests_test_layers_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS) \
	-DPH_LAYER_DIR='"$(abs_top_builddir)/plugins/layers/.libs"'
tests_test_layers_LDADD = $(CHECK_LIBS) -ldl -lm
endif

# tests/test-moe: the mixture-of-experts layer (issue #27).
if HAVE_CHECK
check_PROGRAMS += tests/test-moe
TESTS += tests/test-moe
tests_test_moe_SOURCES = tests/test-moe.c tests/layer-harness.h tests/fd-harness.h \
	core/options.c core/layer_inst.c core/fd_check.c
tests_test_moe_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS) \
	-DPH_LAYER_DIR='"$(abs_top_builddir)/plugins/layers/.libs"'
tests_test_moe_LDADD = $(CHECK_LIBS) -ldl -lm
endif

# tests/moe-dump: one forward and backward of `moe` for the reference check
# (tests/test-moe-reference.sh, tests/reference/moe_reference.py).
if HAVE_CHECK
check_PROGRAMS += tests/moe-dump
tests_moe_dump_SOURCES = tests/moe-dump.c tests/layer-harness.h core/options.c core/layer_inst.c
tests_moe_dump_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS) \
	-DPH_LAYER_DIR='"$(abs_top_builddir)/plugins/layers/.libs"'
tests_moe_dump_LDADD = $(CHECK_LIBS) -ldl -lm
endif
TESTS += tests/test-moe-reference.sh
EXTRA_DIST += tests/test-moe-reference.sh tests/reference/moe_reference.py

# tests/test-cnn-kernels: the CNN layers' fast kernels against their plain
# references, bitwise (issue 24).
if HAVE_CHECK
check_PROGRAMS += tests/test-cnn-kernels
TESTS += tests/test-cnn-kernels
tests_test_cnn_kernels_SOURCES = tests/test-cnn-kernels.c tests/layer-harness.h \
	core/options.c core/layer_inst.c
tests_test_cnn_kernels_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS) $(BLAS_CFLAGS) \
	-I$(top_srcdir)/plugins/layers -DPH_LAYER_DIR='"$(abs_top_builddir)/plugins/layers/.libs"'
tests_test_cnn_kernels_LDADD = $(CHECK_LIBS) $(BLAS_LIBS) -ldl -lm
endif
