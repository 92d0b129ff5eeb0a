# SPDX-License-Identifier: MIT
# The CUDA backend's tests.  Include from tests/local.mk after the other
# includes (it appends to TESTS and EXTRA_DIST, and test-gpu.sh and
# test-nccl.sh need core.mk's .sh log compiler).  Everything here is built
# and run in every configuration: without CUDA, or without a GPU, each test
# prints one line saying why and exits 77, which the test driver reports as
# SKIP.  The environment (PH_LAYER_DIR, PIPEHOST, PIPEHOST_CUDA_BACKEND,
# PIPEHOST_PLUGIN_PATH) is tests/local.mk's.
#
# tests/test-cuda-layers: every layer with a CUDA twin run on the CPU and on
# cuda:0 through the host's backend (core/device.h), compared in fp32 and
# bf16 (tolerance table at the top of the file).  It calls ph_cuda_backend()
# from libphcore (core/device.c) and dlopen()s the layer plugins from
# $PH_LAYER_DIR, with the -D below as the fallback when run by hand.
if HAVE_CHECK
check_PROGRAMS += tests/test-cuda-layers
TESTS += tests/test-cuda-layers
tests_test_cuda_layers_SOURCES = tests/test-cuda-layers.c tests/layer-harness.h
tests_test_cuda_layers_CFLAGS = $(AM_CFLAGS) $(CHECK_CFLAGS) \
	-DPH_LAYER_DIR='"$(abs_top_builddir)/plugins/layers/.libs"'
tests_test_cuda_layers_LDADD = core/libphcore.la $(CHECK_LIBS) -ldl -lm
endif

# Whole jobs on the GPU: tiny.ini on 1 and 4 ranks of cuda:0 (bitwise), CPU
# against GPU (loss), bf16; and across two GPUs (and mpirun) when there are.
TESTS += tests/test-gpu.sh tests/test-nccl.sh
EXTRA_DIST += tests/test-gpu.sh tests/test-nccl.sh tests/gpu-lib.sh tests/cuda.mk
