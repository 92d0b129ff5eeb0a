# SPDX-License-Identifier: MIT
# tests/test-transformer: gradient checks and behaviour tests of the
# transformer layer plugins (embedding, layernorm, gelu, attention, seq_xent,
# gpt_block).
# Like test-layers, it dlopen()s the plugins from $PH_LAYER_DIR, with the -D
# below as the fallback when run by hand from the build tree.
if HAVE_CHECK
check_PROGRAMS += tests/test-transformer
TESTS += tests/test-transformer
tests_test_transformer_SOURCES = tests/test-transformer.c tests/layer-harness.h \
	tests/fd-harness.h tests/unit-harness.h core/options.c core/layer_inst.c core/fd_check.c \
	plugins/layers/sdpa_place.h
tests_test_transformer_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS) -I$(top_srcdir)/plugins/layers \
	-DPH_LAYER_DIR='"$(abs_top_builddir)/plugins/layers/.libs"'
tests_test_transformer_LDADD = $(CHECK_LIBS) -ldl -lm
endif

# tests/test-tf-kernels: transformer_ops.h's fast kernels against their plain
# references (compiled in directly, with the plugins' flags).
if HAVE_CHECK
check_PROGRAMS += tests/test-tf-kernels
TESTS += tests/test-tf-kernels
tests_test_tf_kernels_SOURCES = tests/test-tf-kernels.c plugins/layers/transformer_ops.h
tests_test_tf_kernels_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS) $(BLAS_CFLAGS) $(TF_VEC_CFLAGS) \
	-I$(top_srcdir)/plugins/layers
tests_test_tf_kernels_LDADD = $(CHECK_LIBS) $(BLAS_LIBS) -lm
endif

# tests/tf-kernels-bench: the same kernels timed against their references
# (a benchmark program that bench/tf-kernels.sh runs: built by make check,
# never run by it, never installed).
check_PROGRAMS += tests/tf-kernels-bench
tests_tf_kernels_bench_SOURCES = tests/tf-kernels-bench.c plugins/layers/transformer_ops.h
tests_tf_kernels_bench_CFLAGS = $(AM_CFLAGS) $(BLAS_CFLAGS) $(TF_VEC_CFLAGS) \
	-I$(top_srcdir)/plugins/layers
tests_tf_kernels_bench_LDADD = $(BLAS_LIBS) -lm
