/* SPDX-License-Identifier: MIT */
/* The model: layer instances built from the config, shapes inferred forward,
 * each layer's meta (Lingvo's FPropMeta) gathered once. */
#ifndef PH_CORE_MODEL_H
#define PH_CORE_MODEL_H

#include "config.h"
#include "weights.h"

typedef struct {
	const ph_layer_cfg *cfg;
	const ph_layer_ops *ops;
	void *state;
	ph_shape in;
	ph_layer_meta meta;
	int64_t param_numel;       /* all its parameter tensors together, as
				    * one replica holds them (a sharded
				    * tensor's rows / R) */
	int shards;                /* R for its sharded tensors
				    * (meta.sharded_params), else 1 */
	size_t gpu_saved_bytes;    /* on a GPU: what its CUDA twin saves per
				    * sample there (ABI 1.6 saved_bytes); 0 =
				    * meta's (ph_layer_saved_bytes) */
} ph_layer;

/* Saved bytes per sample where the run places the layer. */
static inline size_t ph_layer_saved_bytes(const ph_layer *L)
{
	return L->gpu_saved_bytes ? L->gpu_saved_bytes : L->meta.saved_bytes;
}

/* Floats of parameter tensor q of L that one replica holds: the whole
 * tensor, or its d[0] / R rows when sharded. */
static inline int64_t ph_param_local_numel(const ph_layer *L, int q)
{
	int64_t n = ph_shape_numel(&L->meta.params[q].shape);
	return L->meta.sharded_params >> q & 1u ? n / L->shards : n;
}

/* A parameter shared by two layers (tie = LAYER.PARAM): dst starts as a copy
 * of src, their gradients are summed before every update, so the copies stay
 * bitwise equal wherever the two layers run. */
typedef struct {
	int src_layer, src_param;
	int dst_layer, dst_param;
} ph_tie;

typedef struct {
	ph_layer *layers;
	int n;
	ph_tie *ties;
	int nties;
	ph_shape input;
	int max_batch;             /* micro-batch size */
	int targets_per_sample;    /* from the loss layer */
} ph_model;

/* Create every layer in order, feeding each the previous one's output shape.
 * A layer that refuses its input names both layers and the shape. */
int ph_model_build(ph_model *m, const ph_config *c, const ph_shape *input, int max_batch, ph_err *err);
void ph_model_free(ph_model *m);

/* t[0..n) lists every parameter in model order (LAYER.PARAM, as the
 * engine and --generate list them): point each tied copy's tied_to at its
 * source's name, so that it is written once and read from its source
 * (weights.h). */
void ph_model_mark_ties(const ph_model *m, ph_tensor_ref *t, int n);

/* "[1,28,28]" */
void ph_shape_str(const ph_shape *s, char *buf, size_t len);

/* A plugin's message past its own "TYPE: " (plugins start their messages
 * with their name, for use on their own), for a line that names the layer
 * and its type already: "layer moe (moe): top_k = 2 ...", not
 * "layer moe (moe): moe: top_k = 2 ...". */
const char *ph_plugin_words(const char *type, const char *msg);

#endif
