# SPDX-License-Identifier: MIT
# The CUDA emulator (tests/cuemu/README.md): only in a build configured with
# --enable-cuda-emulator, where it stands in for the CUDA runtime, cuBLAS,
# cuDNN and NCCL (between processes: unix-domain sockets) so that the GPU
# tests (test-cuda-layers, test-gpu.sh, test-nccl.sh) run on a CPU.
# libcuemu.so is preloaded into every test (CUEMU_TESTS_ENV), which is how
# the CUDA backend and the layers' CUDA twins find it.  A plain make rule,
# not libtool: it is a test tool, never installed, and the only C++ library.
CUEMU_SRCS = tests/cuemu/cuemu.cc tests/cuemu/cublas.cc tests/cuemu/cublaslt.cc tests/cuemu/cudnn.cc tests/cuemu/nccl.cc
CUEMU_HDRS = tests/cuemu/cuemu-internal.h tests/cuemu/include/cuda_runtime.h tests/cuemu/include/cublas_v2.h tests/cuemu/include/cublasLt.h tests/cuemu/include/cudnn.h \
	tests/cuemu/include/cuda_bf16.h tests/cuemu/include/mma.h tests/cuemu/include/nccl.h
EXTRA_DIST += $(CUEMU_SRCS) $(CUEMU_HDRS) tests/cuemu/cuemu-cc.sh tests/cuemu/README.md \
	tests/cuemu/selftest.cu tests/test-cuemu.sh tests/cuda-sums.cu tests/test-cuda-sums.sh
TESTS += tests/test-cuemu.sh tests/test-cuda-sums.sh

if PH_CUDA_EMU
tests/cuemu/libcuemu.so: $(CUEMU_SRCS:%=$(top_srcdir)/%) $(CUEMU_HDRS:%=$(top_srcdir)/%)
	@mkdir -p tests/cuemu
	$(AM_V_GEN)$(CUEMU_CXX) -std=c++17 -O2 -g -fPIC -shared -fvisibility=hidden -Wall -Wextra \
		-I$(top_srcdir)/tests/cuemu/include -Wl,-soname,libcuemu.so -o $@ $(CUEMU_SRCS:%=$(top_srcdir)/%) -lpthread
# The self-test's kernels, compiled the way the layers' are (cuemu-cc.sh);
# it finds libcuemu.so preloaded, as the modules do (its NCCL checks run
# threads of their own: -lpthread).
tests/cuemu/selftest: $(top_srcdir)/tests/cuemu/selftest.cu $(CUEMU_HDRS:%=$(top_srcdir)/%) tests/cuemu/libcuemu.so
	$(AM_V_GEN)$(SHELL) $(top_srcdir)/tests/cuemu/cuemu-cc.sh $(CUEMU_CXX) -O2 -c $(top_srcdir)/tests/cuemu/selftest.cu \
		-o tests/cuemu/selftest.o && $(CUEMU_CXX) -o $@ tests/cuemu/selftest.o -Ltests/cuemu -lcuemu -lpthread
# The layers' split column sums (plugins/layers/cuda_ops.cuh) against a
# host replay of their order: that header's launches are rewritten too.
CUDA_SUMS_HDRS = plugins/layers/cuda_ops.cuh plugins/layers/cuda_common.cuh
tests/cuda-sums: $(top_srcdir)/tests/cuda-sums.cu $(CUDA_SUMS_HDRS:%=$(top_srcdir)/%) $(CUEMU_HDRS:%=$(top_srcdir)/%) \
		tests/cuemu/libcuemu.so
	$(AM_V_GEN)$(SHELL) $(top_srcdir)/tests/cuemu/cuemu-cc.sh $(CUEMU_CXX) -O2 \
		--cuh-dir=$(top_srcdir)/plugins/layers -I$(top_srcdir)/include -c $(top_srcdir)/tests/cuda-sums.cu \
		-o tests/cuda-sums.o && $(CUEMU_CXX) -o $@ tests/cuda-sums.o -Ltests/cuemu -lcuemu -lpthread
all-local: tests/cuemu/libcuemu.so
# Every CUDA object is compiled against the emulator's headers: rebuild them
# when those change (the launch is inlined from cuda_runtime.h).
CUEMU_CUDA_OBJS = core/cuda/backend.lo core/cuda/gemm.lo $(patsubst %.cu,%.lo,$(filter plugins/layers/%_cuda.cu,$(EXTRA_DIST)))
$(CUEMU_CUDA_OBJS): $(CUEMU_HDRS:%=$(top_srcdir)/%) $(top_srcdir)/tests/cuemu/cuemu-cc.sh
check_SCRIPTS = tests/cuemu/selftest tests/cuda-sums
CLEANFILES += tests/cuemu/libcuemu.so tests/cuemu/selftest tests/cuemu/selftest.o tests/cuda-sums tests/cuda-sums.o
endif
