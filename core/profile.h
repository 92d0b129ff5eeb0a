/* SPDX-License-Identifier: MIT */
/* [partition] cost = profile: measure each layer's forward and backward on
 * the device the run trains on (the CPU, or the first rank's GPU), once per
 * model shape, and remember the result.
 *
 * Each layer runs alone at the model's micro-batch size (m->max_batch) on its
 * own buffers, sized from its meta: parameters (filled by their init rule),
 * gradients, saved and scratch bytes.  The model's input is uniform in
 * [0, 1) unless the run gives a micro-batch of its own training samples
 * (ph_profile_input: kernels that branch on their data, ReLU and max
 * pooling, cost what they cost in training only on such data); every later layer
 * gets the forward output of the layer before it, so ReLU sparsity and the
 * like look as in training.  Backward gets a random output gradient (a loss
 * layer: all targets 0 and no dy).  Per layer: 2 warm-up forward+backward
 * pairs (1 for a slow layer), then up to 7 timed pairs, stopping early once
 * a layer has used PH_PROFILE_LAYER_BUDGET_S seconds after 3 pairs (after 1
 * pair for a layer slower than that); the cost is the median time.
 *
 * The cache is one small text file per model shape,
 *     CACHE_DIR/profile-<16 hex digits>.txt
 * CACHE_DIR = [partition] profile_cache, else $XDG_CACHE_HOME/pipehost, else
 * $HOME/.cache/pipehost; profile_cache = off turns the cache off.  The key is the 64-bit FNV-1a hash of a text that
 * lists, per layer, its type, input shape, output shape, parameter shapes,
 * FLOPs and saved/scratch bytes, and then the micro-batch size, the device
 * ("cpu" and the CPU model from /proc/cpuinfo) and OpenBLAS's thread count.
 * The file repeats the key and every layer's name and type, so a stale or
 * foreign file is a miss, never a wrong answer.  A cache that cannot be
 * written is not an error: the measured costs are used and `out` says so.
 *
 * File format (version 1), one record per line, '#' lines are comments:
 *     pipehost-profile 1
 *     key 0123456789abcdef
 *     layers N
 *     layer INDEX NAME TYPE FWD_SECONDS BWD_SECONDS      (N lines, in order)
 */
#ifndef PH_CORE_PROFILE_H
#define PH_CORE_PROFILE_H

#include <stdint.h>
#include <stdio.h>

#include "device.h"
#include "model.h"

#define PH_PROFILE_WARMUP 2
#define PH_PROFILE_REPEATS 7
#define PH_PROFILE_LAYER_BUDGET_S 1.0
/* The longest time the cache may hold for one forward or one backward of
 * one layer on one micro-batch: 1e6 s (11.6 days).  No measurement reaches
 * it: the profiler times every layer at least twice (a warm-up and a timed
 * pair), so such a layer would have kept it busy for weeks.  A larger value,
 * like a negative or NaN one, is a damaged file: a miss, measured afresh
 * (1e308 once went through, and the simulator printed a step of "inf s"). */
#define PH_PROFILE_MAX_S 1e6

/* Fill fwd_s[i] and bwd_s[i] (seconds per micro-batch) for every layer of m,
 * from the cache or by measuring.  The BLAS thread count is OpenBLAS's at the
 * time of the call: set it to what each rank will use before calling.
 * A table (layer, name, type, fwd ms, bwd ms) and one line on where the
 * numbers came from go to `out` (NULL: silent).  cache_dir NULL or "": the
 * default.  Errors (a layer that fails, out of memory) return a status and
 * one line in err; nothing is printed to stderr. */
int ph_profile_costs(const ph_model *m, const char *cache_dir, double *fwd_s, double *bwd_s, FILE *out,
		     ph_err *err);

/* The same on a GPU: each layer through the CUDA backend's ops (a rank
 * state of its own on `ordinal`, at `precision`), timed from the launch to
 * the end of a stream synchronisation.  The cache key names the GPU and the
 * precision instead of the CPU and BLAS threads.  gpu NULL: the CPU. */
typedef struct {
	const ph_device_ops *ops;
	int ordinal;
	int precision; /* PH_PREC_* */
} ph_profile_gpu;

int ph_profile_costs_on(const ph_model *m, const char *cache_dir, const ph_profile_gpu *gpu, double *fwd_s,
			double *bwd_s, FILE *out, ph_err *err);

/* Where the profiler gets a micro-batch of the run's own training
 * samples: get() returns batch x numel(input) floats (or NULL with a
 * reason in err: the profiler then times random input).  It is called
 * only when the profiler measures (not on a cache hit). */
typedef struct {
	const float *(*get)(void *ctx, int batch, ph_err *err);
	void *ctx;
} ph_profile_input;

/* ph_profile_costs for a run.  With its ranks on the CPU: first sets
 * OpenBLAS to the thread count each rank will train with (the engine's
 * rule: [run] threads, or cores / stages when 0), then measures or reads
 * [partition] profile_cache.  With its ranks on GPUs: measures on the first
 * rank's GPU at the run's precision. */
int ph_profile_costs_for_run(const ph_model *m, const ph_config *c, const ph_profile_input *input, double *fwd_s,
			     double *bwd_s, int *used, FILE *out, ph_err *err);
/* With [partition] cost = auto it measures only when the model has more
 * than one chunk and measuring looks cheap (its FLOPs, at a modest rate,
 * take at most ~10 s for the warm-up and repeats), or the cache already
 * holds the answer; *used says whether fwd_s/bwd_s were filled (else the
 * caller plans on FLOPs).  cost = profile: always (*used = 1), with the
 * table; auto prints only where the numbers came from.
 * [partition] profile_cache = off: neither read nor write a cache. */

/* The BLAS threads per rank a run uses: [run] threads, or the cores over
 * this process's ranks (the engine's rule). */
int ph_profile_run_threads(const ph_config *c);

/* The pieces, exposed for tests. */

/* The cache key of m measured with `threads` BLAS threads on `device`
 * ("cpu ..."); the text it hashes goes to text (may be NULL). */
uint64_t ph_profile_key(const ph_model *m, int threads, const char *device, char *text, size_t len);

/* CACHE_DIR/profile-KEY.txt; cache_dir NULL or "" uses the default.  Fails
 * (PH_EINVAL) only when no directory is known (no XDG_CACHE_HOME, no HOME). */
int ph_profile_cache_path(const char *cache_dir, uint64_t key, char *buf, size_t len, ph_err *err);

/* Write the cache file (creating its directory), via a temp file and rename. */
int ph_profile_cache_write(const char *path, uint64_t key, const ph_model *m, const double *fwd_s,
			   const double *bwd_s, ph_err *err);

/* 1: the file holds costs for exactly this key and these layers, now in
 * fwd_s/bwd_s.  0: a miss (absent, other key, other layers, malformed, a
 * time that is negative, not finite or over PH_PROFILE_MAX_S); why->msg
 * says why (with the file:line) unless the file is simply absent. */
int ph_profile_cache_read(const char *path, uint64_t key, const ph_model *m, double *fwd_s, double *bwd_s,
			  ph_err *why);

#endif
