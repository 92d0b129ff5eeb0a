# SPDX-License-Identifier: MIT
# transformer_ops.h's exp/gelu/softmax loops are written to vectorise:
# `omp simd` without OpenMP itself, and no trapping-math so gcc may.  The
# plain loops beside them (residual adds, bias column sums, embedding rows)
# vectorise too with -O3's cost model and loop unswitching; explicit -f
# flags, so a user's CFLAGS=-O2 (which comes last) does not undo them.
# Element-wise vectorisation and unswitching never change a float result;
# -ffp-contract=off because the avx512f clones (transformer_ops.h TF_HOT)
# get FMA, and a contracted a*b + c would round differently from the other
# clones: results stay bitwise the same on every x86-64.  -fno-tree-pre:
# partial redundancy elimination sees that tf_expf's clamp makes exp a
# constant on one path and hoists x / (1 + exp(88)) out of gelu, which the
# AVX2 vector loop then computes for every element and blends away: a
# denormal per element, 3x slower gelu (gcc 12; avx512f's masked code is
# not hit).  The flag changes no result.
TF_VEC_CFLAGS = -fopenmp-simd -fno-trapping-math -fvect-cost-model=dynamic -funswitch-loops \
	-ffp-contract=off -fno-tree-pre
# The CNN layers' elementwise, pooling and copy loops: gcc -O2's "very
# cheap" vectoriser gives up on loops that need a remainder or an alias
# check; the dynamic cost model takes them.  -f flags, not -O3, because the
# user's CFLAGS (-O2) come after these and would undo an -O level.  Neither
# changes a result: no reassociation, no contraction beyond gcc's default.
CNN_VEC_CFLAGS = -ftree-vectorize -fvect-cost-model=dynamic -fno-trapping-math

# CPU layer plugins: one libtool module per layer, named after it (type = NAME).
# Included from the top Makefile.am; paths are relative to the top directory.

pkglib_LTLIBRARIES += plugins/layers/linear.la
plugins_layers_linear_la_SOURCES = plugins/layers/linear.c plugins/layers/linear_state.h
plugins_layers_linear_la_LDFLAGS = $(PLUGIN_LDFLAGS)
plugins_layers_linear_la_LIBADD = $(BLAS_LIBS) -lm
plugins_layers_linear_la_CFLAGS = $(AM_CFLAGS) $(BLAS_CFLAGS) $(CNN_VEC_CFLAGS)

pkglib_LTLIBRARIES += plugins/layers/relu.la
plugins_layers_relu_la_SOURCES = plugins/layers/relu.c plugins/layers/relu_state.h
plugins_layers_relu_la_LDFLAGS = $(PLUGIN_LDFLAGS)
plugins_layers_relu_la_CFLAGS = $(AM_CFLAGS) $(CNN_VEC_CFLAGS)

pkglib_LTLIBRARIES += plugins/layers/conv2d.la
plugins_layers_conv2d_la_SOURCES = plugins/layers/conv2d.c plugins/layers/conv2d_state.h
plugins_layers_conv2d_la_LDFLAGS = $(PLUGIN_LDFLAGS)
plugins_layers_conv2d_la_LIBADD = $(BLAS_LIBS) -lm
plugins_layers_conv2d_la_CFLAGS = $(AM_CFLAGS) $(BLAS_CFLAGS) $(CNN_VEC_CFLAGS)

pkglib_LTLIBRARIES += plugins/layers/maxpool2d.la
plugins_layers_maxpool2d_la_SOURCES = plugins/layers/maxpool2d.c plugins/layers/maxpool2d_state.h
plugins_layers_maxpool2d_la_LDFLAGS = $(PLUGIN_LDFLAGS)
plugins_layers_maxpool2d_la_CFLAGS = $(AM_CFLAGS) $(CNN_VEC_CFLAGS)

pkglib_LTLIBRARIES += plugins/layers/flatten.la
plugins_layers_flatten_la_SOURCES = plugins/layers/flatten.c plugins/layers/flatten_state.h
plugins_layers_flatten_la_LDFLAGS = $(PLUGIN_LDFLAGS)

pkglib_LTLIBRARIES += plugins/layers/dropout.la
plugins_layers_dropout_la_SOURCES = plugins/layers/dropout.c plugins/layers/dropout_state.h
plugins_layers_dropout_la_LDFLAGS = $(PLUGIN_LDFLAGS)
plugins_layers_dropout_la_CFLAGS = $(AM_CFLAGS) $(CNN_VEC_CFLAGS)

pkglib_LTLIBRARIES += plugins/layers/softmax_xent.la
plugins_layers_softmax_xent_la_SOURCES = plugins/layers/softmax_xent.c plugins/layers/softmax_xent_state.h
plugins_layers_softmax_xent_la_LDFLAGS = $(PLUGIN_LDFLAGS)
plugins_layers_softmax_xent_la_LIBADD = -lm

# Transformer layers (issue #5).  transformer_ops.h holds the shared kernels,
# header-only, so every module stays self-contained.
pkglib_LTLIBRARIES += plugins/layers/embedding.la
plugins_layers_embedding_la_SOURCES = plugins/layers/embedding.c plugins/layers/embedding_state.h
plugins_layers_embedding_la_LDFLAGS = $(PLUGIN_LDFLAGS)
plugins_layers_embedding_la_LIBADD = -lm
plugins_layers_embedding_la_CFLAGS = $(AM_CFLAGS) $(TF_VEC_CFLAGS)

pkglib_LTLIBRARIES += plugins/layers/layernorm.la
plugins_layers_layernorm_la_SOURCES = plugins/layers/layernorm.c plugins/layers/layernorm_state.h plugins/layers/transformer_ops.h
plugins_layers_layernorm_la_LDFLAGS = $(PLUGIN_LDFLAGS)
plugins_layers_layernorm_la_LIBADD = -lm
plugins_layers_layernorm_la_CFLAGS = $(AM_CFLAGS) $(TF_VEC_CFLAGS)

pkglib_LTLIBRARIES += plugins/layers/gelu.la
plugins_layers_gelu_la_SOURCES = plugins/layers/gelu.c plugins/layers/gelu_state.h plugins/layers/transformer_ops.h
plugins_layers_gelu_la_LDFLAGS = $(PLUGIN_LDFLAGS)
plugins_layers_gelu_la_LIBADD = -lm
plugins_layers_gelu_la_CFLAGS = $(AM_CFLAGS) $(TF_VEC_CFLAGS)

pkglib_LTLIBRARIES += plugins/layers/seq_xent.la
plugins_layers_seq_xent_la_SOURCES = plugins/layers/seq_xent.c plugins/layers/seq_xent_state.h plugins/layers/transformer_ops.h
plugins_layers_seq_xent_la_LDFLAGS = $(PLUGIN_LDFLAGS)
plugins_layers_seq_xent_la_LIBADD = -lm
plugins_layers_seq_xent_la_CFLAGS = $(AM_CFLAGS) $(TF_VEC_CFLAGS)

pkglib_LTLIBRARIES += plugins/layers/attention.la
plugins_layers_attention_la_SOURCES = plugins/layers/attention.c plugins/layers/attention_state.h plugins/layers/attn_geom.h plugins/layers/transformer_ops.h
plugins_layers_attention_la_LDFLAGS = $(PLUGIN_LDFLAGS)
plugins_layers_attention_la_LIBADD = $(BLAS_LIBS) -lm
plugins_layers_attention_la_CFLAGS = $(AM_CFLAGS) $(BLAS_CFLAGS) $(TF_VEC_CFLAGS)

# The mixture-of-experts MLP (issue #27), in the moe layer and gpt_block.
MOE_SOURCES = plugins/layers/moe_core.h plugins/layers/moe_gate.c plugins/layers/moe_dispatch.c \
	plugins/layers/moe_experts.c plugins/layers/moe_mlp.c
pkglib_LTLIBRARIES += plugins/layers/gpt_block.la
plugins_layers_gpt_block_la_SOURCES = plugins/layers/gpt_block.c plugins/layers/gpt_block_state.h plugins/layers/attn_geom.h plugins/layers/transformer_ops.h \
	$(MOE_SOURCES)
plugins_layers_gpt_block_la_LDFLAGS = $(PLUGIN_LDFLAGS)
plugins_layers_gpt_block_la_LIBADD = $(BLAS_LIBS) -lm
plugins_layers_gpt_block_la_CFLAGS = $(AM_CFLAGS) $(BLAS_CFLAGS) $(TF_VEC_CFLAGS)

# Mixture of experts (issue #27): the MLP in moe_*.c, shared with gpt_block's
# `mlp = moe`; docs/moe.md.  Its CUDA twin is moe_cuda.cu over moe_cuda.cuh,
# which gpt_block_cuda.cu includes too.
pkglib_LTLIBRARIES += plugins/layers/moe.la
plugins_layers_moe_la_SOURCES = plugins/layers/moe.c plugins/layers/moe_state.h $(MOE_SOURCES) plugins/layers/transformer_ops.h
plugins_layers_moe_la_LDFLAGS = $(PLUGIN_LDFLAGS)
plugins_layers_moe_la_LIBADD = $(BLAS_LIBS) -lm
plugins_layers_moe_la_CFLAGS = $(AM_CFLAGS) $(BLAS_CFLAGS) $(TF_VEC_CFLAGS)

# CUDA twins (NAME_cuda.cu beside NAME.c), linked into the same module when
# configure found nvcc, cuBLAS and cuDNN.  The host passes them its GEMM
# service (include/pipehost/device.h), so only conv2d links a CUDA library
# beyond the runtime (cuDNN).
# Each twin includes its layer's state header (NAME_state.h, in the module's
# SOURCES); a change to one rebuilds every twin, which is rare.
CUDA_TWIN_DEPS = $(top_srcdir)/plugins/layers/cuda_common.cuh $(top_srcdir)/plugins/layers/cuda_ops.cuh \
	$(top_srcdir)/plugins/layers/attention_ops.cuh $(top_srcdir)/plugins/layers/flash_attention.cuh \
	$(top_srcdir)/plugins/layers/flash_mma.cuh $(top_srcdir)/plugins/layers/moe_cuda.cuh \
	$(top_srcdir)/plugins/layers/moe_core.h $(top_srcdir)/plugins/layers/moe_state.h \
	$(top_srcdir)/plugins/layers/attn_geom.h $(top_srcdir)/plugins/layers/attention_state.h \
	$(top_srcdir)/plugins/layers/conv2d_state.h $(top_srcdir)/plugins/layers/dropout_state.h \
	$(top_srcdir)/plugins/layers/embedding_state.h $(top_srcdir)/plugins/layers/flatten_state.h \
	$(top_srcdir)/plugins/layers/gelu_state.h $(top_srcdir)/plugins/layers/gpt_block_state.h \
	$(top_srcdir)/plugins/layers/layernorm_state.h $(top_srcdir)/plugins/layers/linear_state.h \
	$(top_srcdir)/plugins/layers/maxpool2d_state.h $(top_srcdir)/plugins/layers/relu_state.h \
	$(top_srcdir)/plugins/layers/seq_xent_state.h $(top_srcdir)/plugins/layers/softmax_xent_state.h \
	$(top_srcdir)/include/pipehost/plugin.h $(top_srcdir)/include/pipehost/device.h $(top_srcdir)/include/pipehost/rng.h \
	$(top_srcdir)/include/pipehost/cuda.h
EXTRA_DIST += plugins/layers/cuda_common.cuh plugins/layers/cuda_ops.cuh plugins/layers/attention_ops.cuh \
	plugins/layers/flash_attention.cuh plugins/layers/flash_mma.cuh plugins/layers/moe_cuda.cuh \
	plugins/layers/linear_cuda.cu \
	plugins/layers/relu_cuda.cu \
	plugins/layers/conv2d_cuda.cu \
	plugins/layers/maxpool2d_cuda.cu \
	plugins/layers/flatten_cuda.cu \
	plugins/layers/dropout_cuda.cu \
	plugins/layers/softmax_xent_cuda.cu \
	plugins/layers/embedding_cuda.cu \
	plugins/layers/layernorm_cuda.cu \
	plugins/layers/gelu_cuda.cu \
	plugins/layers/seq_xent_cuda.cu \
	plugins/layers/attention_cuda.cu \
	plugins/layers/gpt_block_cuda.cu \
	plugins/layers/moe_cuda.cu \
	plugins/layers/cudnn_sdpa.h plugins/layers/cudnn_sdpa.cu plugins/layers/cudnn_sdpa_graph.cpp plugins/layers/sdpa_place.h
if PH_CUDA
plugins_layers_linear_la_LIBADD += plugins/layers/linear_cuda.lo $(CUDA_LAYER_LIBS)
plugins/layers/linear_cuda.lo: plugins/layers/linear_cuda.cu $(CUDA_TWIN_DEPS)
plugins_layers_relu_la_LIBADD = plugins/layers/relu_cuda.lo $(CUDA_LAYER_LIBS)
plugins/layers/relu_cuda.lo: plugins/layers/relu_cuda.cu $(CUDA_TWIN_DEPS)
plugins_layers_conv2d_la_LIBADD += plugins/layers/conv2d_cuda.lo $(CUDA_LAYER_LIBS) $(CUDNN_LIBS)
plugins/layers/conv2d_cuda.lo: plugins/layers/conv2d_cuda.cu $(CUDA_TWIN_DEPS)
plugins_layers_maxpool2d_la_LIBADD = plugins/layers/maxpool2d_cuda.lo $(CUDA_LAYER_LIBS)
plugins/layers/maxpool2d_cuda.lo: plugins/layers/maxpool2d_cuda.cu $(CUDA_TWIN_DEPS)
plugins_layers_flatten_la_LIBADD = plugins/layers/flatten_cuda.lo $(CUDA_LAYER_LIBS)
plugins/layers/flatten_cuda.lo: plugins/layers/flatten_cuda.cu $(CUDA_TWIN_DEPS)
plugins_layers_dropout_la_LIBADD = plugins/layers/dropout_cuda.lo $(CUDA_LAYER_LIBS)
plugins/layers/dropout_cuda.lo: plugins/layers/dropout_cuda.cu $(CUDA_TWIN_DEPS)
plugins_layers_softmax_xent_la_LIBADD += plugins/layers/softmax_xent_cuda.lo $(CUDA_LAYER_LIBS)
plugins/layers/softmax_xent_cuda.lo: plugins/layers/softmax_xent_cuda.cu $(CUDA_TWIN_DEPS)
plugins_layers_embedding_la_LIBADD += plugins/layers/embedding_cuda.lo $(CUDA_LAYER_LIBS)
plugins/layers/embedding_cuda.lo: plugins/layers/embedding_cuda.cu $(CUDA_TWIN_DEPS)
plugins_layers_layernorm_la_LIBADD += plugins/layers/layernorm_cuda.lo $(CUDA_LAYER_LIBS)
plugins/layers/layernorm_cuda.lo: plugins/layers/layernorm_cuda.cu $(CUDA_TWIN_DEPS)
plugins_layers_gelu_la_LIBADD += plugins/layers/gelu_cuda.lo $(CUDA_LAYER_LIBS)
plugins/layers/gelu_cuda.lo: plugins/layers/gelu_cuda.cu $(CUDA_TWIN_DEPS)
plugins_layers_seq_xent_la_LIBADD += plugins/layers/seq_xent_cuda.lo $(CUDA_LAYER_LIBS)
plugins/layers/seq_xent_cuda.lo: plugins/layers/seq_xent_cuda.cu $(CUDA_TWIN_DEPS)
plugins_layers_attention_la_LIBADD += plugins/layers/attention_cuda.lo $(CUDA_LAYER_LIBS)
plugins/layers/attention_cuda.lo: plugins/layers/attention_cuda.cu $(CUDA_TWIN_DEPS)
plugins_layers_moe_la_LIBADD += plugins/layers/moe_cuda.lo $(CUDA_LAYER_LIBS)
plugins/layers/moe_cuda.lo: plugins/layers/moe_cuda.cu $(CUDA_TWIN_DEPS)
# gpt_block's attention core may also run through cuDNN's fused attention
# (cudnn_sdpa.h): the bf16 passes in cudnn_sdpa.cu, the graphs in plain C++
# (cudnn_sdpa_graph.cpp, cudnn-frontend's headers; a stub without them),
# which nvcc hands to the host compiler.
plugins_layers_gpt_block_la_LIBADD += plugins/layers/gpt_block_cuda.lo plugins/layers/cudnn_sdpa.lo \
	plugins/layers/cudnn_sdpa_graph.lo $(CUDA_LAYER_LIBS) $(CUDNN_LIBS) $(CUDNN_FE_LIBS)
plugins/layers/gpt_block_cuda.lo: plugins/layers/gpt_block_cuda.cu plugins/layers/cudnn_sdpa.h plugins/layers/sdpa_place.h $(CUDA_TWIN_DEPS)
plugins/layers/cudnn_sdpa.lo: plugins/layers/cudnn_sdpa.cu plugins/layers/cudnn_sdpa.h plugins/layers/sdpa_place.h $(CUDA_TWIN_DEPS)
plugins/layers/cudnn_sdpa_graph.lo: plugins/layers/cudnn_sdpa_graph.cpp plugins/layers/cudnn_sdpa.h plugins/layers/sdpa_place.h build-config.h
	$(AM_V_GEN)$(SHELL) $(top_srcdir)/scripts/nvcc-lt.sh $@ $(NVCC) $(NVCC_ALL_FLAGS) -c $(top_srcdir)/plugins/layers/cudnn_sdpa_graph.cpp
endif
