# transformer_ops.h's exp/gelu/softmax loops are written to vectorise:
# `omp simd` without OpenMP itself, and no trapping-math so gcc may.
TF_VEC_CFLAGS = -fopenmp-simd -fno-trapping-math

# CPU layer plugins: one libtool module per layer, named after it (type = NAME).
# Included from the top Makefile.am; paths are relative to the top directory.

pkglib_LTLIBRARIES += plugins/layers/linear.la
plugins_layers_linear_la_SOURCES = plugins/layers/linear.c
plugins_layers_linear_la_LDFLAGS = $(PLUGIN_LDFLAGS)
plugins_layers_linear_la_LIBADD = $(BLAS_LIBS) -lm
plugins_layers_linear_la_CFLAGS = $(AM_CFLAGS) $(BLAS_CFLAGS)

pkglib_LTLIBRARIES += plugins/layers/relu.la
plugins_layers_relu_la_SOURCES = plugins/layers/relu.c
plugins_layers_relu_la_LDFLAGS = $(PLUGIN_LDFLAGS)

pkglib_LTLIBRARIES += plugins/layers/conv2d.la
plugins_layers_conv2d_la_SOURCES = plugins/layers/conv2d.c
plugins_layers_conv2d_la_LDFLAGS = $(PLUGIN_LDFLAGS)
plugins_layers_conv2d_la_LIBADD = $(BLAS_LIBS) -lm
plugins_layers_conv2d_la_CFLAGS = $(AM_CFLAGS) $(BLAS_CFLAGS)

pkglib_LTLIBRARIES += plugins/layers/maxpool2d.la
plugins_layers_maxpool2d_la_SOURCES = plugins/layers/maxpool2d.c
plugins_layers_maxpool2d_la_LDFLAGS = $(PLUGIN_LDFLAGS)

pkglib_LTLIBRARIES += plugins/layers/flatten.la
plugins_layers_flatten_la_SOURCES = plugins/layers/flatten.c
plugins_layers_flatten_la_LDFLAGS = $(PLUGIN_LDFLAGS)

pkglib_LTLIBRARIES += plugins/layers/dropout.la
plugins_layers_dropout_la_SOURCES = plugins/layers/dropout.c
plugins_layers_dropout_la_LDFLAGS = $(PLUGIN_LDFLAGS)

pkglib_LTLIBRARIES += plugins/layers/softmax_xent.la
plugins_layers_softmax_xent_la_SOURCES = plugins/layers/softmax_xent.c
plugins_layers_softmax_xent_la_LDFLAGS = $(PLUGIN_LDFLAGS)
plugins_layers_softmax_xent_la_LIBADD = -lm

# Transformer layers (issue #5).  transformer_ops.h holds the shared kernels,
# header-only, so every module stays self-contained.
pkglib_LTLIBRARIES += plugins/layers/embedding.la
plugins_layers_embedding_la_SOURCES = plugins/layers/embedding.c
plugins_layers_embedding_la_LDFLAGS = $(PLUGIN_LDFLAGS)
plugins_layers_embedding_la_LIBADD = -lm

pkglib_LTLIBRARIES += plugins/layers/layernorm.la
plugins_layers_layernorm_la_SOURCES = plugins/layers/layernorm.c plugins/layers/transformer_ops.h
plugins_layers_layernorm_la_LDFLAGS = $(PLUGIN_LDFLAGS)
plugins_layers_layernorm_la_LIBADD = -lm
plugins_layers_layernorm_la_CFLAGS = $(AM_CFLAGS) $(TF_VEC_CFLAGS)

pkglib_LTLIBRARIES += plugins/layers/gelu.la
plugins_layers_gelu_la_SOURCES = plugins/layers/gelu.c plugins/layers/transformer_ops.h
plugins_layers_gelu_la_LDFLAGS = $(PLUGIN_LDFLAGS)
plugins_layers_gelu_la_LIBADD = -lm
plugins_layers_gelu_la_CFLAGS = $(AM_CFLAGS) $(TF_VEC_CFLAGS)

pkglib_LTLIBRARIES += plugins/layers/seq_xent.la
plugins_layers_seq_xent_la_SOURCES = plugins/layers/seq_xent.c plugins/layers/transformer_ops.h
plugins_layers_seq_xent_la_LDFLAGS = $(PLUGIN_LDFLAGS)
plugins_layers_seq_xent_la_LIBADD = -lm
plugins_layers_seq_xent_la_CFLAGS = $(AM_CFLAGS) $(TF_VEC_CFLAGS)

pkglib_LTLIBRARIES += plugins/layers/attention.la
plugins_layers_attention_la_SOURCES = plugins/layers/attention.c plugins/layers/transformer_ops.h
plugins_layers_attention_la_LDFLAGS = $(PLUGIN_LDFLAGS)
plugins_layers_attention_la_LIBADD = $(BLAS_LIBS) -lm
plugins_layers_attention_la_CFLAGS = $(AM_CFLAGS) $(BLAS_CFLAGS) $(TF_VEC_CFLAGS)

pkglib_LTLIBRARIES += plugins/layers/gpt_block.la
plugins_layers_gpt_block_la_SOURCES = plugins/layers/gpt_block.c plugins/layers/transformer_ops.h
plugins_layers_gpt_block_la_LDFLAGS = $(PLUGIN_LDFLAGS)
plugins_layers_gpt_block_la_LIBADD = $(BLAS_LIBS) -lm
plugins_layers_gpt_block_la_CFLAGS = $(AM_CFLAGS) $(BLAS_CFLAGS) $(TF_VEC_CFLAGS)
