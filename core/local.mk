# SPDX-License-Identifier: MIT
# The host: a convenience library (so tests link the same code) and the CLI.
noinst_LTLIBRARIES += core/libphcore.la
core_libphcore_la_SOURCES = \
	core/options.c core/options.h \
	core/inifile.c core/inifile.h \
	core/loader.c core/loader.h core/loader-trust.c core/loader-needs.c \
	core/config.c core/config.h core/config_agree.c core/config_agree.h core/gpu_switches.c core/gpu_switches.h \
	core/model.c core/model.h \
	core/layer_call.c core/layer_call.h core/layer_times.c core/layer_times.h core/blas_gate.c core/blas_gate.h \
	core/plan.c core/plan.h core/plan-memory.c core/plan-memory.h core/memcheck.c core/memcheck.h \
	core/profile.c core/profile.h core/planjson.c core/planjson.h \
	core/engine.c core/engine.h core/engine-impl.h core/engine-layout.c core/engine-layout.h \
	core/engine-workers.c core/engine-ops.c core/engine-links.c core/engine-links-nccl.c \
	core/engine-gpu-keys.c \
	core/engine-update.c core/engine-split.c \
	core/engine-replicas.c core/engine-group.c core/engine-shard.c core/engine-eval.c core/engine-trace.c \
	core/engine-versions.c core/engine-stream.c \
	core/optim.c core/optim.h \
	core/data.c core/data.h core/data_source.h core/data_sources.c core/readfile.c core/readfile.h \
	core/data_fashion_mnist.c core/data_synthetic.c core/data_text.c core/data_npy.c core/data_tokens.c \
	core/bpe.c core/bpe.h core/bpe_unicode.h core/json.c core/json.h \
	core/weights.c core/weights.h \
	core/train.c core/train.h core/signals.c core/signals.h \
	core/checkpoint.c core/checkpoint.h core/checkpoint-impl.h core/checkpoint-id.c core/checkpoint-state.c \
	core/checkpoint-manifest.c core/checkpoint-files.c core/checkpoint-sbuf.c \
	core/outputs.c core/outputs.h core/errline.c core/errline.h core/runlock.c core/runlock.h \
	core/trace.c core/trace.h \
	core/simulate.c core/simulate.h \
	core/device.c core/device.h core/device_cpu.c \
	core/comm.c core/comm.h \
	core/layer_inst.c core/layer_inst.h core/fd_check.c core/fd_check.h \
	core/check_plugin.c core/check_plugin.h core/check_impl.h core/check_layer.c core/check_sched.c \
	core/check_twin.c core/check_twin.h
core_libphcore_la_CFLAGS = $(AM_CFLAGS) $(INIH_CFLAGS) $(CJSON_CFLAGS) $(ZLIB_CFLAGS) $(BLAS_CFLAGS) $(XXHASH_CFLAGS)
core_libphcore_la_LIBADD = $(INIH_LIBS) $(CJSON_LIBS) $(XXHASH_LIBS) $(ZLIB_LIBS) $(BLAS_LIBS) $(PTHREAD_LIBS) -lm
# pipehost --generate, Hugging Face GPT-2 weights (docs/gpt2.md)
core_libphcore_la_SOURCES += core/generate.c core/generate.h core/hf_gpt2.c core/hf_gpt2.h core/tokenizer_bpe.c

bin_PROGRAMS += core/pipehost
core_pipehost_SOURCES = core/main.c core/cli.c core/cli.h
core_pipehost_CFLAGS = $(AM_CFLAGS)
core_pipehost_LDADD = core/libphcore.la

# The CUDA backend: a module the host dlopens when a rank runs on a GPU, so
# that CPU runs never load the CUDA libraries (core/device.h).
EXTRA_DIST += core/cuda/backend.cu core/cuda/kernels.cuh core/cuda/gemm.cu core/cuda/gemm.h \
	core/cuda/bf16_operands.cu core/cuda/bf16_operands.h core/cuda/optimizer.cu core/cuda/optimizer.h core/cuda/cuda_try.h
if PH_CUDA
backenddir = $(pkglibdir)/backends
backend_LTLIBRARIES = core/cuda/pipehost-cuda.la
core_cuda_pipehost_cuda_la_SOURCES = core/device.h
core_cuda_pipehost_cuda_la_LDFLAGS = -module -avoid-version -shared -export-symbols-regex '^ph_cuda_backend_ops$$'
core_cuda_pipehost_cuda_la_LIBADD = core/cuda/backend.lo core/cuda/gemm.lo core/cuda/bf16_operands.lo core/cuda/optimizer.lo $(CUDA_LIBS) $(CUBLAS_LIBS) $(CUDNN_LIBS) $(NCCL_LIBS) -lstdc++ -lm
# Its own recipe, not .cu.lo: only the backend calls NCCL (PH_NCCL_DEFS, NCCL_LIBS; configure).
core/cuda/backend.lo: $(top_srcdir)/core/cuda/backend.cu $(top_srcdir)/core/cuda/kernels.cuh $(top_srcdir)/core/cuda/gemm.h \
	$(top_srcdir)/core/cuda/bf16_operands.h $(top_srcdir)/core/cuda/optimizer.h $(top_srcdir)/core/cuda/cuda_try.h \
	$(top_srcdir)/core/device.h \
	$(top_srcdir)/include/pipehost/device.h $(top_srcdir)/include/pipehost/plugin.h
	$(AM_V_GEN)$(SHELL) $(top_srcdir)/scripts/nvcc-lt.sh $@ $(NVCC) $(NVCC_ALL_FLAGS) $(PH_NCCL_DEFS) -c $(top_srcdir)/core/cuda/backend.cu
core/cuda/gemm.lo: $(top_srcdir)/core/cuda/gemm.cu $(top_srcdir)/core/cuda/gemm.h $(top_srcdir)/core/cuda/bf16_operands.h \
	$(top_srcdir)/include/pipehost/device.h \
	$(top_srcdir)/include/pipehost/plugin.h
	$(AM_V_GEN)$(SHELL) $(top_srcdir)/scripts/nvcc-lt.sh $@ $(NVCC) $(NVCC_ALL_FLAGS) -c $(top_srcdir)/core/cuda/gemm.cu
core/cuda/bf16_operands.lo: $(top_srcdir)/core/cuda/bf16_operands.cu $(top_srcdir)/core/cuda/bf16_operands.h \
	$(top_srcdir)/include/pipehost/plugin.h
	$(AM_V_GEN)$(SHELL) $(top_srcdir)/scripts/nvcc-lt.sh $@ $(NVCC) $(NVCC_ALL_FLAGS) -c $(top_srcdir)/core/cuda/bf16_operands.cu
core/cuda/optimizer.lo: $(top_srcdir)/core/cuda/optimizer.cu $(top_srcdir)/core/cuda/optimizer.h \
	$(top_srcdir)/core/cuda/cuda_try.h $(top_srcdir)/core/cuda/kernels.cuh $(top_srcdir)/core/optim.h $(top_srcdir)/include/pipehost/plugin.h
	$(AM_V_GEN)$(SHELL) $(top_srcdir)/scripts/nvcc-lt.sh $@ $(NVCC) $(NVCC_ALL_FLAGS) -c $(top_srcdir)/core/cuda/optimizer.cu
CLEANFILES += core/cuda/backend.lo core/cuda/.libs/backend.o core/cuda/gemm.lo core/cuda/.libs/gemm.o \
	core/cuda/bf16_operands.lo core/cuda/.libs/bf16_operands.o core/cuda/optimizer.lo core/cuda/.libs/optimizer.o
endif

# The MPI module: dlopened by core/comm.c only under mpirun, so neither
# libphcore nor the pipehost binary links MPI (core/comm.h).  Installed
# beside the CUDA backend; its own dir variable so it builds without CUDA.
EXTRA_DIST += core/mpi/comm_mpi.c
if PH_MPI
mpimoduledir = $(pkglibdir)/backends
mpimodule_LTLIBRARIES = core/mpi/pipehost-mpi.la
core_mpi_pipehost_mpi_la_SOURCES = core/mpi/comm_mpi.c core/comm.h
core_mpi_pipehost_mpi_la_CFLAGS = $(AM_CFLAGS) $(MPI_CFLAGS)
core_mpi_pipehost_mpi_la_LDFLAGS = -module -avoid-version -shared -export-symbols-regex '^ph_mpi_comm_ops$$' $(AM_LDFLAGS)
core_mpi_pipehost_mpi_la_LIBADD = $(MPI_LIBS)
endif
