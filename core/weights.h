/* SPDX-License-Identifier: MIT */
/* Weights in safetensors: https://huggingface.co/docs/safetensors (format:
 * u64 little-endian header length N, N bytes of JSON header padded with
 * spaces to a multiple of 8, then the raw little-endian tensor bytes). */
#ifndef PH_CORE_WEIGHTS_H
#define PH_CORE_WEIGHTS_H

#include <pipehost/plugin.h>
#include <stdint.h>

typedef struct {
	char name[128];       /* "LAYER.PARAM" */
	ph_shape shape;
	float *data;          /* F32 */
	/* A tied copy (`tie =`): the name of the tensor it equals, an entry of
	 * the same list; NULL otherwise.  Written once: the copy is left out of
	 * the file and named in __metadata__ "tied" ("copy=source,...");
	 * reading fills it from its source when the file has no copy of its own
	 * (a file written before, with both, is read as it is). */
	const char *tied_to;
} ph_tensor_ref;

/* Write tensors (in the given order, tied copies left out) as F32 to path: a temp file in the same
 * directory, fsync, rename, fsync the directory; never a half-written file.
 * A symlink is followed, a device or FIFO written through (core/outputs.h).
 * metadata: optional NULL-terminated key/value pairs for __metadata__. */
int ph_safetensors_write(const char *path, const ph_tensor_ref *t, int n,
			 const char *const *metadata, ph_err *err);

/* How many of t[0..n) ph_safetensors_write leaves out: tied copies equal
 * to their source, named in the file's "tied" metadata instead. */
int ph_safetensors_tied_out(const ph_tensor_ref *t, int n);

/* ph_safetensors_write, and the file's size and XXH3-64 checksum of every
 * byte written (for a checkpoint's manifest; either may be NULL). */
int ph_safetensors_write_hashed(const char *path, const ph_tensor_ref *t, int n,
				const char *const *metadata, uint64_t *size, uint64_t *hash,
				ph_err *err);

/* Read path and copy each tensor named in t[] into t[i].data, checking dtype
 * (F32; F16 and BF16 are widened to F32 exactly) and shape.  Validates the whole file first: header length bounded
 * (<= 100 MB) and inside the file, JSON well formed, every tensor's offsets
 * inside the data section and consistent with dtype and shape.  A missing
 * name, a wrong shape, or any fault is one clear line naming the file. */
int ph_safetensors_read(const char *path, ph_tensor_ref *t, int n, ph_err *err);

/* The first of t[0..n) holding a NaN or an infinity, its element in *at;
 * -1 if all are finite. */
int ph_tensors_first_nonfinite(const ph_tensor_ref *t, int n, int64_t *at);

/* The float an IEEE 754 half (binary16) holds, exactly: subnormals,
 * infinities and NaN (payload kept) included. */
float ph_half_to_float(uint16_t h);

/* The float a bfloat16 holds, exactly (its bits are a float's top 16). */
float ph_bf16_to_float(uint16_t b);

#endif
