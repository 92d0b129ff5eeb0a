/* SPDX-License-Identifier: MIT */
/* Text generation from a trained language model: pipehost -c run.ini
 * --generate PROMPT.  The model's layers run on the CPU in order on one
 * rank (no pipeline), over the whole context for every new token, and the
 * logits of the last position (the input of the loss layer) pick the next
 * token.  docs/gpt2.md describes the flags, the weights it reads and the
 * sampling. */
#ifndef PH_CORE_GENERATE_H
#define PH_CORE_GENERATE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "config.h"

/* Text <-> token ids.  Bytes by default (ph_tokenizer_bytes); a BPE plugs
 * in by filling the same four fields. */
typedef struct ph_tokenizer {
	const char *name;  /* for messages: "bytes", "gpt2-bpe" */
	int64_t vocab;     /* ids run 0 .. vocab-1 */
	void *self;        /* the tokenizer's own state, passed to the hooks */
	/* *ids (malloc'd, freed by the caller) gets the ids of text[0..len). */
	int (*encode)(void *self, const char *text, size_t len, int32_t **ids, int64_t *n, ph_err *err);
	/* Write the text of one id to out (for BPE a byte string that may end
	 * inside a UTF-8 character: the bytes of the next ids complete it); a
	 * write that fails is ph_generate_write_error's PH_EIO. */
	int (*decode)(void *self, int32_t id, FILE *out, ph_err *err);
} ph_tokenizer;

/* A write of the text to out just failed (errno says why): the one line
 * saying so, naming the stream and the cause; returns PH_EIO.  A tokenizer's
 * decode uses it, so that every failed write reads the same. */
int ph_generate_write_error(FILE *out, ph_err *err);

/* The byte tokenizer: byte b is id b, vocab 256. */
void ph_tokenizer_bytes(ph_tokenizer *t);

/* GPT-2's BPE from vocab.json and merges.txt (core/tokenizer_bpe.c);
 * ph_tokenizer_bpe_free releases it. */
int ph_tokenizer_bpe(ph_tokenizer *t, const char *vocab_json, const char *merges_txt, ph_err *err);
void ph_tokenizer_bpe_free(ph_tokenizer *t);

typedef struct {
	const char *prompt;
	int64_t max_new_tokens;   /* >= 0 */
	double temperature;       /* 0: greedy */
	int64_t top_k;            /* 0: the whole vocabulary; 1: greedy */
	uint64_t seed;            /* the sampler's stream */
	const char *weights;      /* NULL: ph_generate_weights_path picks */
	const char *logits_path;  /* optional: the prompt's logits [L, vocab] as safetensors */
	const ph_tokenizer *tok;  /* NULL: bytes */
} ph_gen_opts;

/* The weights file --generate reads when no --load-weights FILE is given:
 * the newest checkpoint in [checkpoint] dir, else [run] save_weights if the
 * file exists, else [run] init.  PH_OK with path filled, or an error saying
 * what to set.  The checkpoint is not verified here (it is the path for the
 * checks of the outputs): ph_generate verifies it as --resume does and may
 * pass over a damaged one for an older one. */
int ph_generate_weights_path(const ph_config *c, char *path, size_t len, ph_err *err);

/* Generate: the prompt, then each new token as it comes, on out; a note of
 * the weights read on info.  c must be resolved; in is the data source's
 * sample shape ([T] token ids for a language model).  A write to out that
 * fails (a full disk, a reader gone) stops generation at that token with
 * PH_EIO. */
int ph_generate(const ph_config *c, const ph_shape *in, const ph_gen_opts *o, FILE *out, FILE *info, ph_err *err);

#endif
