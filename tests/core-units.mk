# SPDX-License-Identifier: MIT
# Unit tests of the core modules that need no plugin: data, optimizer, weights,
# the dispatch of layer hooks.
# Included from the top Makefile.am (non-recursive: paths are from the top).
if HAVE_CHECK
check_PROGRAMS += tests/test-data tests/test-optim tests/test-weights tests/test-layer-call tests/test-errline \
	tests/test-manifest
TESTS += tests/test-data tests/test-optim tests/test-weights tests/test-layer-call tests/test-errline \
	tests/test-manifest

tests_test_errline_SOURCES = tests/test-errline.c core/errline.c core/errline.h
tests_test_errline_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_test_errline_LDADD = $(CHECK_LIBS)

tests_test_data_SOURCES = tests/test-data.c tests/unit-harness.h \
	core/data.c core/data.h core/data_source.h core/data_sources.c \
	core/data_fashion_mnist.c core/data_synthetic.c core/data_text.c core/readfile.c core/readfile.h \
	core/data_npy.c core/data_tokens.c core/bpe.c core/bpe.h core/bpe_unicode.h core/json.c core/json.h
tests_test_data_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS) $(ZLIB_CFLAGS) $(CJSON_CFLAGS)
tests_test_data_LDADD = $(CHECK_LIBS) $(ZLIB_LIBS) $(CJSON_LIBS) -lm

tests_test_manifest_SOURCES = tests/test-manifest.c core/checkpoint-manifest.c core/checkpoint-state.c core/checkpoint-sbuf.c \
	core/json.c core/json.h \
	core/checkpoint-files.c core/checkpoint-impl.h core/checkpoint.h core/outputs.c core/outputs.h \
	core/signals.c core/signals.h core/readfile.c core/readfile.h
tests_test_manifest_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS) $(CJSON_CFLAGS) $(XXHASH_CFLAGS)
tests_test_manifest_LDADD = $(CHECK_LIBS) $(CJSON_LIBS) $(XXHASH_LIBS)

tests_test_optim_SOURCES = tests/test-optim.c tests/unit-harness.h core/optim.c core/optim.h
tests_test_optim_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_test_optim_LDADD = $(CHECK_LIBS) -lm

tests_test_weights_SOURCES = tests/test-weights.c tests/unit-harness.h \
	core/weights.c core/weights.h core/json.c core/json.h core/outputs.c core/outputs.h \
	core/signals.c core/signals.h core/readfile.c core/readfile.h
tests_test_weights_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS) $(CJSON_CFLAGS) $(XXHASH_CFLAGS)
tests_test_weights_LDADD = $(CHECK_LIBS) $(CJSON_LIBS) $(XXHASH_LIBS) -lm

tests_test_layer_call_SOURCES = tests/test-layer-call.c core/layer_call.c core/layer_call.h core/layer_times.c core/layer_times.h \
	core/blas_gate.c core/blas_gate.h
tests_test_layer_call_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS)
tests_test_layer_call_LDADD = $(CHECK_LIBS) $(BLAS_LIBS) $(PTHREAD_LIBS)
endif

# The BPE tool of tests/test-bpe.sh: trains a vocabulary, encodes, round-trips.
check_PROGRAMS += tests/bpe-tool
tests_bpe_tool_SOURCES = tests/bpe-tool.c core/bpe.c core/bpe.h core/bpe_unicode.h core/json.c core/json.h
tests_bpe_tool_CFLAGS = $(AM_CFLAGS) $(CJSON_CFLAGS)
tests_bpe_tool_LDADD = $(CJSON_LIBS)
