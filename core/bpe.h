/* SPDX-License-Identifier: MIT */
/* GPT-2's byte-level BPE tokenizer: a user's vocab.json + merges.txt in,
 * text <-> token ids (docs/tokenizer.md). */
#ifndef PH_CORE_BPE_H
#define PH_CORE_BPE_H

#include <stddef.h>
#include <stdint.h>

#include <pipehost/plugin.h>

typedef struct ph_bpe ph_bpe;

/* Read GPT-2's two files: vocab.json (an object of byte-level-unicode
 * token string -> id, ids 0 .. N-1 with none missing) and merges.txt (one
 * "a b" pair a line, best rank first; a first line starting "#version" is
 * skipped; at least one merge).  Every merge must join two tokens of the
 * vocabulary into one of it, the 256 single bytes must be in it, and every
 * other token must be made by some merge unless the pre-tokeniser would
 * cut it up (a special token such as <|endoftext|>).  Errors name the file
 * (and line). */
int ph_bpe_load(ph_bpe **out, const char *vocab_json, const char *merges_txt, ph_err *err);

/* Ids are 0 .. vocab_size - 1 (one more than the largest id). */
int ph_bpe_vocab_size(const ph_bpe *b);

/* Encode len bytes of text into a malloc'd array of *n ids.  Any bytes
 * encode: a byte that is not valid UTF-8 is pre-tokenised as one
 * character that is neither letter, number nor space. */
int ph_bpe_encode(const ph_bpe *b, const unsigned char *text, size_t len, int32_t **ids, size_t *n, ph_err *err);

/* Decode n ids into a malloc'd array of *len bytes (NUL-terminated, the
 * NUL not counted).  An id outside the vocabulary is an error naming its
 * position. */
int ph_bpe_decode(const ph_bpe *b, const int32_t *ids, size_t n, unsigned char **out, size_t *len, ph_err *err);

void ph_bpe_free(ph_bpe *b);

/* The pre-tokeniser alone: the end of the chunk of text[0..len) that
 * starts at pos (GPT-2's regex; a trainer cuts its corpus the same way). */
size_t ph_bpe_next_chunk(const unsigned char *text, size_t len, size_t pos);

#endif
