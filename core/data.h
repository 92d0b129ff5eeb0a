/* SPDX-License-Identifier: MIT */
/* Data sets in memory, and the loaders behind the data sources
 * (data_source.h: the ops a [data] source = NAME provides). */
#ifndef PH_CORE_DATA_H
#define PH_CORE_DATA_H

#include <pipehost/plugin.h>

#define PH_FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"
#define PH_FORTUNES_DIR "/usr/share/games/fortunes"

/* Refuse anything bigger before allocating: a corrupt header must not make
 * us try to allocate terabytes.  Fashion-MNIST train is 47 M pixels. */
#define PH_DATA_MAX_ELEMS 100000000LL

typedef struct {
	int64_t n;                 /* samples */
	ph_shape shape;            /* per-sample input shape, e.g. [1,28,28] */
	int targets_per_sample;    /* int32 targets per sample (1 for classes) */
	int nclasses;
	float *x;                  /* n * numel(shape) */
	int32_t *y;                /* n * targets_per_sample */
	/* Where the samples came from, for the errors that point at one
	 * (ph_data_where): the file of the inputs and of the targets with
	 * the source's name ("npy: y.npy (train_labels)"), or what made
	 * them ("synthetic: [data] classes = 10").  For sequences cut from
	 * one stream of ids (text, tokens) `unit` names an id ("byte",
	 * "token") and sample i position t is id first + i*T + t of the
	 * stream, its target the next one; unit NULL: sample i is record i
	 * of each file. */
	char x_from[PH_STR_MAX + 32], y_from[PH_STR_MAX + 32];
	const char *unit;
	int64_t first;
} ph_dataset;

/* Load the train (train=1) or test split from dir's gzip IDX files
 * (train-images-idx3-ubyte.gz, ...).  Pixels scaled to [0,1].  A missing
 * directory or file says to install Debian's dataset-fashion-mnist package;
 * a file of the wrong format names the file and what is wrong. */
int ph_data_load_fashion_mnist(const char *dir, int train, ph_dataset *ds, ph_err *err);

/* Learnable synthetic classification data: class c has a fixed random
 * prototype; a sample is its prototype plus noise.  Same seed, same data. */
int ph_data_synthetic(int64_t n, const ph_shape *shape, int nclasses, uint64_t seed,
		      ph_dataset *ds, ph_err *err);

/* Byte-level text from a file or a directory (its regular files, sorted by
 * name, without .dat indexes or files holding NUL bytes; the default is
 * Debian's fortunes).  The first (1 - holdout) of the bytes train, the rest
 * validate.  Sample i: bytes [i*T, i*T+T) as floats in, each next byte as
 * the target: shape [T], T targets per sample, 256 classes. */
int ph_data_load_text(const char *path, int seq_len, double holdout, int train, ph_dataset *ds, ph_err *err);

/* Inputs and class labels from two .npy files (data_npy.c): images
 * [N, ...] float32 or uint8 (scaled to [0,1]), labels [N] int64, int32 or
 * uint8; C order, little-endian.  nclasses is the largest label + 1. */
int ph_data_load_npy(const char *images, const char *labels, ph_dataset *ds, ph_err *err);

/* Token ids from a token file (data_tokens.c): llm.c's format when it
 * starts with its header (magic 20240520 version 1, uint16; 20240801
 * version 7, uint32), else raw little-endian ids of
 * token_bytes (2 or 4) each.  Every id must be below vocab: the first that
 * is not is an error naming its position.  *tok is malloc'd. */
int ph_data_read_tokens(const char *path, int token_bytes, int64_t vocab, uint32_t **tok, size_t *n, ph_err *err);

/* Sequences of tokens [a, b), cut as the text source cuts bytes: sample
 * i is tokens [a+i*T, a+i*T+T) in, each next token out; shape [T], T
 * targets, vocab classes.  `what` (a file) and `split` name the errors. */
int ph_data_token_sequences(const uint32_t *tok, size_t a, size_t b, int seq_len, int64_t vocab, const char *what,
			    const char *split, ph_dataset *ds, ph_err *err);

void ph_data_free(ph_dataset *ds);

/* An evaluation split of no samples, each of `shape` with tps targets:
 * what text and tokens give for a held-out part too short for one
 * sequence when the run never evaluates ([run] eval = no). */
void ph_data_empty_split(ph_dataset *ds, const ph_shape *shape, int tps);

/* A seeded permutation of 0..n-1 for the given epoch (Fisher-Yates driven
 * by the counter-based generator: no hidden state). */
void ph_data_permutation(uint64_t seed, uint64_t epoch, int64_t n, int64_t *perm);

/* Copy samples idx[0..count) into x [count, numel] and y [count, tps]. */
void ph_data_gather(const ph_dataset *ds, const int64_t *idx, int count, float *x, int32_t *y);

/* The first input (target 0) or target (target 1) of ds's first n
 * samples, as an index into x or y, that is not a whole number in
 * [0, limit); -1 when every one is.  One pass, run once at load: a
 * class or token id past the model's would otherwise fail only when a
 * batch happens to hold it (and a CUDA loss would make it a NaN). */
int64_t ph_data_first_outside(const ph_dataset *ds, int64_t n, int target, int64_t limit);

/* Where element k of ds's inputs (target 0) or targets (target 1) lies,
 * for an error: "token 3000 (training sample 187, position 8)" in a
 * stream (its place there, then in the sample), "index 50 (training
 * sample 50)" in a file of records; `split` names the split. */
void ph_data_where(const ph_dataset *ds, const char *split, int target, int64_t k, char *buf, size_t len);

#endif
