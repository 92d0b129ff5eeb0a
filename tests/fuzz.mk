# SPDX-License-Identifier: MIT
# libFuzzer harnesses (tests/fuzz/fuzz-*.c) for every parser of untrusted
# bytes: the INI config (reader and resolver), safetensors, checkpoint
# state.json, Fashion-MNIST IDX files, GPT-2's tokenizer files (vocab.json,
# merges.txt, and any text through them), the npy data source's .npy, the
# tokens data source's .bin (nanoGPT's, llm.c's) and a schedule table's CSV
# (through the table plugin and the host's checks of any schedule).
#
#   make fuzz [FUZZ_SECONDS=60] [FUZZ_TARGETS="config idx"]
#
# builds each harness with clang -fsanitize=fuzzer,address,undefined from the
# core sources it needs and runs it FUZZ_SECONDS seconds from the seed corpus
# tests/fuzz/corpus-NAME (read only; new inputs go to tests/fuzz/build/work-NAME).
# A crash stops make with the reproducer in tests/fuzz/build/crash-NAME-*;
# replay it with tests/fuzz/build/fuzz-NAME FILE.  Without clang or its
# fuzzer runtime (Debian: apt-get install clang libclang-rt-14-dev on
# bookworm's clang 14 if -fsanitize=fuzzer fails to link) the target says so
# and succeeds.  The config harness loads the plugins of this build to fuzz
# the resolver too; in a --enable-sanitizers build (gcc's ASan runtime in
# every plugin, which cannot share a process with clang's) it fuzzes only
# the INI reader.

FUZZ_SECONDS = 60
FUZZ_TARGETS = config safetensors state idx bpe npy tokens table
FUZZ_CC = clang
FUZZ_FLAGS = -g -O1 -std=gnu11 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
	-fno-omit-frame-pointer
FUZZ_CPPFLAGS = -I$(top_builddir) -I$(top_srcdir)/include -I$(top_srcdir)/core -I$(top_srcdir)/tests/fuzz \
	$(CJSON_CFLAGS) $(XXHASH_CFLAGS) $(INIH_CFLAGS) $(ZLIB_CFLAGS)
FUZZ_LIBS = $(CJSON_LIBS) $(XXHASH_LIBS) $(INIH_LIBS) $(ZLIB_LIBS) -ldl -lm
FUZZ_RUN_FLAGS = -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
FUZZ_DIR = tests/fuzz/build

FUZZ_DATA_SRC = core/data.c core/data_sources.c core/data_fashion_mnist.c core/data_synthetic.c core/data_text.c \
	core/readfile.c core/data_npy.c core/data_tokens.c core/bpe.c core/json.c
FUZZ_CONFIG_SRC = tests/fuzz/fuzz-config.c core/config.c core/inifile.c core/options.c core/loader.c core/device.c \
	core/loader-trust.c $(FUZZ_DATA_SRC)
FUZZ_SAFETENSORS_SRC = tests/fuzz/fuzz-safetensors.c core/weights.c core/json.c core/outputs.c core/signals.c core/readfile.c
FUZZ_STATE_SRC = tests/fuzz/fuzz-state.c core/checkpoint.c core/checkpoint-id.c core/config_agree.c core/checkpoint-state.c \
	core/checkpoint-manifest.c core/checkpoint-files.c core/checkpoint-sbuf.c core/weights.c core/outputs.c core/signals.c core/runlock.c core/config.c \
	core/inifile.c core/options.c core/loader.c core/device.c core/loader-trust.c $(FUZZ_DATA_SRC)
FUZZ_IDX_SRC = tests/fuzz/fuzz-idx.c $(FUZZ_DATA_SRC)
FUZZ_BPE_SRC = tests/fuzz/fuzz-bpe.c core/bpe.c core/json.c
FUZZ_NPY_SRC = tests/fuzz/fuzz-npy.c $(FUZZ_DATA_SRC)
FUZZ_TOKENS_SRC = tests/fuzz/fuzz-tokens.c $(FUZZ_DATA_SRC)
# plan.c's memory estimates reach engine-layout.c; the harness stands in
# for the engine's allocator, which the checks it fuzzes never call.
FUZZ_TABLE_SRC = tests/fuzz/fuzz-table.c plugins/schedules/table.c core/plan.c core/plan-memory.c core/engine-layout.c \
	core/optim.c core/inifile.c core/options.c core/device.c core/readfile.c
FUZZ_HDRS = $(top_srcdir)/tests/fuzz/fuzz-util.h $(top_srcdir)/core/*.h $(top_srcdir)/include/pipehost/*.h

EXTRA_DIST += tests/fuzz/fuzz-util.h tests/fuzz/fuzz-config.c tests/fuzz/fuzz-safetensors.c \
	tests/fuzz/fuzz-state.c tests/fuzz/fuzz-idx.c tests/fuzz/fuzz-bpe.c tests/fuzz/fuzz-npy.c \
	tests/fuzz/fuzz-tokens.c tests/fuzz/fuzz-table.c \
	tests/fuzz/config.dict tests/fuzz/safetensors.dict tests/fuzz/state.dict tests/fuzz/bpe.dict \
	tests/fuzz/npy.dict tests/fuzz/tokens.dict tests/fuzz/table.dict \
	tests/fuzz/corpus-config tests/fuzz/corpus-safetensors tests/fuzz/corpus-state \
	tests/fuzz/corpus-idx tests/fuzz/corpus-bpe tests/fuzz/corpus-npy tests/fuzz/corpus-tokens \
	tests/fuzz/corpus-table

$(FUZZ_DIR)/fuzz-config: $(FUZZ_CONFIG_SRC:%=$(top_srcdir)/%) $(FUZZ_HDRS)
	@$(MKDIR_P) $(FUZZ_DIR)
	$(FUZZ_CC) $(FUZZ_FLAGS) $(FUZZ_CPPFLAGS) -o $@ $(FUZZ_CONFIG_SRC:%=$(top_srcdir)/%) $(FUZZ_LIBS)
$(FUZZ_DIR)/fuzz-safetensors: $(FUZZ_SAFETENSORS_SRC:%=$(top_srcdir)/%) $(FUZZ_HDRS)
	@$(MKDIR_P) $(FUZZ_DIR)
	$(FUZZ_CC) $(FUZZ_FLAGS) $(FUZZ_CPPFLAGS) -o $@ $(FUZZ_SAFETENSORS_SRC:%=$(top_srcdir)/%) $(FUZZ_LIBS)
$(FUZZ_DIR)/fuzz-state: $(FUZZ_STATE_SRC:%=$(top_srcdir)/%) $(FUZZ_HDRS)
	@$(MKDIR_P) $(FUZZ_DIR)
	$(FUZZ_CC) $(FUZZ_FLAGS) $(FUZZ_CPPFLAGS) -o $@ $(FUZZ_STATE_SRC:%=$(top_srcdir)/%) $(FUZZ_LIBS)
$(FUZZ_DIR)/fuzz-idx: $(FUZZ_IDX_SRC:%=$(top_srcdir)/%) $(FUZZ_HDRS)
	@$(MKDIR_P) $(FUZZ_DIR)
	$(FUZZ_CC) $(FUZZ_FLAGS) $(FUZZ_CPPFLAGS) -o $@ $(FUZZ_IDX_SRC:%=$(top_srcdir)/%) $(FUZZ_LIBS)
$(FUZZ_DIR)/fuzz-bpe: $(FUZZ_BPE_SRC:%=$(top_srcdir)/%) $(FUZZ_HDRS)
	@$(MKDIR_P) $(FUZZ_DIR)
	$(FUZZ_CC) $(FUZZ_FLAGS) $(FUZZ_CPPFLAGS) -o $@ $(FUZZ_BPE_SRC:%=$(top_srcdir)/%) $(FUZZ_LIBS)
$(FUZZ_DIR)/fuzz-npy: $(FUZZ_NPY_SRC:%=$(top_srcdir)/%) $(FUZZ_HDRS)
	@$(MKDIR_P) $(FUZZ_DIR)
	$(FUZZ_CC) $(FUZZ_FLAGS) $(FUZZ_CPPFLAGS) -o $@ $(FUZZ_NPY_SRC:%=$(top_srcdir)/%) $(FUZZ_LIBS)
$(FUZZ_DIR)/fuzz-tokens: $(FUZZ_TOKENS_SRC:%=$(top_srcdir)/%) $(FUZZ_HDRS)
	@$(MKDIR_P) $(FUZZ_DIR)
	$(FUZZ_CC) $(FUZZ_FLAGS) $(FUZZ_CPPFLAGS) -o $@ $(FUZZ_TOKENS_SRC:%=$(top_srcdir)/%) $(FUZZ_LIBS)
$(FUZZ_DIR)/fuzz-table: $(FUZZ_TABLE_SRC:%=$(top_srcdir)/%) $(FUZZ_HDRS)
	@$(MKDIR_P) $(FUZZ_DIR)
	$(FUZZ_CC) $(FUZZ_FLAGS) $(FUZZ_CPPFLAGS) -o $@ $(FUZZ_TABLE_SRC:%=$(top_srcdir)/%) $(FUZZ_LIBS)

# First check this clang can link a fuzzer at all (FUZZ_DIR/probe).
fuzz-build: all
	@$(MKDIR_P) $(FUZZ_DIR); rm -f $(FUZZ_DIR)/probe; \
	printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { return 0; }\n' \
		>$(FUZZ_DIR)/probe.c; \
	if ! $(FUZZ_CC) $(FUZZ_FLAGS) -o $(FUZZ_DIR)/probe $(FUZZ_DIR)/probe.c >$(FUZZ_DIR)/probe.log 2>&1; then \
		echo "make fuzz: skipped: '$(FUZZ_CC) -fsanitize=fuzzer' does not work here ($(FUZZ_DIR)/probe.log);"; \
		echo "  install clang and its fuzzer runtime (Debian: apt-get install clang libclang-rt-14-dev)"; \
		exit 0; \
	fi; \
	$(MAKE) $(AM_MAKEFLAGS) $(FUZZ_TARGETS:%=$(FUZZ_DIR)/fuzz-%)

fuzz: fuzz-build
	@test -x $(FUZZ_DIR)/probe || exit 0; \
	plugins=$(abs_top_builddir)/plugins/layers/.libs:$(abs_top_builddir)/plugins/schedules/.libs:$(abs_top_builddir)/plugins/partitioners/.libs; \
	if test -n "$(SAN_CFLAGS)"; then plugins=; fi; \
	for t in $(FUZZ_TARGETS); do \
		dict=; test -f $(top_srcdir)/tests/fuzz/$$t.dict && dict=-dict=$(top_srcdir)/tests/fuzz/$$t.dict; \
		$(MKDIR_P) $(FUZZ_DIR)/work-$$t || exit 1; \
		echo "fuzz-$$t: $(FUZZ_SECONDS) s from tests/fuzz/corpus-$$t"; \
		PH_FUZZ_PLUGIN_PATH=$$plugins $(FUZZ_DIR)/fuzz-$$t $(FUZZ_RUN_FLAGS) $$dict \
			-max_total_time=$(FUZZ_SECONDS) -artifact_prefix=$(FUZZ_DIR)/crash-$$t- \
			$(FUZZ_DIR)/work-$$t $(top_srcdir)/tests/fuzz/corpus-$$t >$(FUZZ_DIR)/fuzz-$$t.log 2>&1; \
		rc=$$?; \
		grep -E '^stat::number_of_executed_units|^stat::peak_rss_mb' $(FUZZ_DIR)/fuzz-$$t.log | tr '\n' ' '; echo; \
		if test $$rc -ne 0; then \
			tail -40 $(FUZZ_DIR)/fuzz-$$t.log; \
			echo "fuzz-$$t FAILED (exit $$rc): log $(FUZZ_DIR)/fuzz-$$t.log, reproducer $(FUZZ_DIR)/crash-$$t-*"; \
			exit 1; \
		fi; \
	done

fuzz-clean:
	rm -rf $(FUZZ_DIR)
clean-local: fuzz-clean

.PHONY: fuzz fuzz-build fuzz-clean
