/* Weights in safetensors: https://huggingface.co/docs/safetensors (format:
 * u64 little-endian header length N, N bytes of JSON header padded with
 * spaces to a multiple of 8, then the raw little-endian tensor bytes). */
#ifndef PH_CORE_WEIGHTS_H
#define PH_CORE_WEIGHTS_H

#include <pipehost/plugin.h>

typedef struct {
	char name[128];       /* "LAYER.PARAM" */
	ph_shape shape;
	float *data;          /* F32 */
} ph_tensor_ref;

/* Write tensors (in the given order) as F32 to path: a temp file in the same
 * directory, fsync, rename, fsync the directory; never a half-written file.
 * metadata: optional NULL-terminated key/value pairs for __metadata__. */
int ph_safetensors_write(const char *path, const ph_tensor_ref *t, int n,
			 const char *const *metadata, ph_err *err);

/* Read path and copy each tensor named in t[] into t[i].data, checking dtype
 * (F32) and shape.  Validates the whole file first: header length bounded
 * (<= 100 MB) and inside the file, JSON well formed, every tensor's offsets
 * inside the data section and consistent with dtype and shape.  A missing
 * name, a wrong shape, or any fault is one clear line naming the file. */
int ph_safetensors_read(const char *path, ph_tensor_ref *t, int n, ph_err *err);

#endif
