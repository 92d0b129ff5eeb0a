/* SPDX-License-Identifier: MIT */
/* Hugging Face GPT-2 weights (model.safetensors of GPT2LMHeadModel or
 * GPT2Model, F32, F16 or BF16) into pipehost's GPT layers: embedding,
 * gpt_block N <- h.N, the layernorm <- ln_f, the linear head <- lm_head or
 * the tied wte.  The mapping, tensor by tensor, is in docs/gpt2.md. */
#ifndef PH_CORE_HF_GPT2_H
#define PH_CORE_HF_GPT2_H

#include "model.h"
#include "weights.h"

/* Is path a safetensors file with Hugging Face GPT-2 names (wte.weight or
 * transformer.wte.weight)?  1 yes, 0 no (or not readable as safetensors:
 * ph_safetensors_read will say why). */
int ph_hf_gpt2_detect(const char *path);

/* Fill t[0..n) (pipehost names LAYER.PARAM of model m, F32) from the
 * Hugging Face file: every tensor checked for its shape, converted to F32
 * exactly, Conv1D weights ([in, out]) transposed.  When config.json lies
 * beside the file, its n_head, n_layer and activation are checked against
 * the model too.  One line naming the file and the tensor on any fault. */
int ph_hf_gpt2_read(const char *path, const ph_model *m, ph_tensor_ref *t, int n, ph_err *err);

/* What [run] init and --generate read: a Hugging Face GPT-2 file when
 * ph_hf_gpt2_detect says so (*hf = 1), else pipehost's own names. */
int ph_weights_read_any(const char *path, const ph_model *m, ph_tensor_ref *t, int n, int *hf, ph_err *err);

#endif
