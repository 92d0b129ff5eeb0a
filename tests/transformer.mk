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
	tests/fd-harness.h core/options.c core/layer_inst.c core/fd_check.c
tests_test_transformer_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS) \
	-DPH_LAYER_DIR='"$(abs_top_builddir)/plugins/layers/.libs"'
tests_test_transformer_LDADD = $(CHECK_LIBS) -ldl -lm
endif
