/* SPDX-License-Identifier: MIT */
/* Data sources: what a [data] source = NAME must provide, and the one
 * registry of them (core/data_sources.c).  docs/data-sources.md says how
 * to add one. */
#ifndef PH_CORE_DATA_SOURCE_H
#define PH_CORE_DATA_SOURCE_H

#include <stdio.h>

#include "config.h"
#include "data.h"

typedef struct ph_data_source {
	const char *name;         /* [data] source = NAME */
	const char *help;         /* one line, for --list-options */
	/* The [data] keys it reads besides source, shuffle, limit and
	 * test_limit (which the trainer applies to every source). */
	const char *const *keys;
	/* The per-sample input shape, known without reading anything: the
	 * model is planned (and --plan printed) from it alone. */
	int (*sample_shape)(const ph_config *c, ph_shape *s, ph_err *err);
	/* Read or make the training split and the evaluation split; samples
	 * of `shape` (sample_shape's).  On error both are left empty.  The
	 * trainer draws the batches (a seeded permutation, ph_data_gather)
	 * and ph_data_free closes them, the same for every source. */
	int (*load)(const ph_config *c, const ph_shape *shape, ph_dataset *train, ph_dataset *eval, ph_err *err);
	/* Targets are next bytes: losses are reported per byte (nats and
	 * bits), accuracy as next-byte accuracy. */
	int per_byte;
	/* Optional: for one of `keys` that c's other settings leave unread,
	 * the setting that reads it (text: "tokenizer = bpe" for vocab);
	 * NULL when it is read.  The config refuses a [data] key the source
	 * does not read, as it refuses an unknown one: it would be dropped
	 * without a word. */
	const char *(*unread)(const ph_config *c, const char *key);
} ph_data_source;

extern const ph_data_source ph_data_source_fashion_mnist, ph_data_source_synthetic, ph_data_source_text,
	ph_data_source_npy, ph_data_source_tokens;

/* The source named `name`, or NULL. */
const ph_data_source *ph_data_source_find(const char *name);

/* Whether c's losses are per byte: a byte-level source, not tokenised
 * (with tokenizer = bpe a target is a token, and so is a loss). */
int ph_data_per_byte(const ph_config *c);

/* Whether `key` is one of the [data] keys source s reads (its `keys`,
 * or one the trainer applies to every source). */
int ph_data_source_reads(const ph_data_source *s, const char *key);

/* "path, seq_len, ...": the keys s reads besides the trainer's, and
 * "fashion-mnist or text": the sources that read `key` ("" if none). */
void ph_data_source_keys(const ph_data_source *s, char *buf, size_t len);
void ph_data_sources_reading(const char *key, char *buf, size_t len);

/* "fashion-mnist, synthetic, text, npy, tokens": every registered name. */
void ph_data_source_names(char *buf, size_t len);

/* Each source, its help and its keys, one line each, indented. */
void ph_data_sources_print(FILE *f, const char *indent);

#endif
