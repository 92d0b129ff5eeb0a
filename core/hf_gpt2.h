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
 * transformer.wte.weight) that pipehost did not write (its __metadata__
 * "producer")?  Only the header's names count, not whether the tensors
 * are sound.  1 yes, 0 no (or not readable as safetensors:
 * ph_safetensors_read will say why). */
int ph_hf_gpt2_detect(const char *path);

/* Fill t[0..n) (pipehost names LAYER.PARAM of model m, F32) from the
 * Hugging Face file: every tensor checked for its shape, converted to F32
 * exactly, Conv1D weights ([in, out]) transposed.  When config.json lies
 * beside the file, its n_head, n_layer and activation are checked against
 * the model too.  One line naming the file and the tensor on any fault. */
int ph_hf_gpt2_read(const char *path, const ph_model *m, ph_tensor_ref *t, int n, ph_err *err);

/* What [run] init and --generate read: a Hugging Face GPT-2 file when
 * ph_hf_gpt2_detect says so and the file does not hold every tensor of
 * t[] by its pipehost name (*hf = 1), else pipehost's own names.  Once
 * chosen, the file is read as that format only: a damaged GPT-2 file is
 * reported as GPT-2's. */
int ph_weights_read_any(const char *path, const ph_model *m, ph_tensor_ref *t, int n, int *hf, ph_err *err);

#endif
