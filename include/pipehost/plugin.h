/* SPDX-License-Identifier: MIT */
/*
 * pipehost plugin ABI.
 *
 * This is the only header a plugin includes (with its companions rng.h and
 * option.h, which it pulls in).  A plugin is a shared object that exports one
 * symbol, pipehost_plugin(), returning a descriptor that lists the layer,
 * partitioner and schedule ops it provides.  Build one out of tree with
 *
 *     cc -shared -fPIC $(pkg-config --cflags pipehost) -o mylayer.so mylayer.c
 *
 * A layer's CUDA twin, compiled with nvcc into the same module, includes
 * <pipehost/cuda.h> and fills a ph_layer_device_ops (docs/plugins-cuda.md).
 *
 * Contracts (see docs/design.md):
 *  - The host owns all memory.  Plugins get pointers to parameters, gradients,
 *    activations, saved state and scratch sized from their meta.
 *  - Plugins never print and never exit: they return PH_OK or an error code and
 *    write one line into the ph_err they are given (ph_fail() does both).
 *  - Plugins never parse strings: the host parses INI values against the
 *    plugin's option table into the plugin's config struct.
 *  - Parameter gradients accumulate (+=); input gradients are overwritten (=).
 *
 * Versioning: a plugin built for another ABI major, or for a newer minor than
 * the host speaks, is refused at load time.  Fields are only ever appended to
 * the ops structs; head.struct_size tells the host which ones a plugin has.
 */
#ifndef PIPEHOST_PLUGIN_H
#define PIPEHOST_PLUGIN_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <pipehost/option.h>
#include <pipehost/rng.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PH_ABI_MAJOR 1
#define PH_ABI_MINOR 9 /* 1.1: optional split backward (backward_input/weight)
                       * 1.2: CUDA: ph_ctx gains gpu, dnn, precision; ph_layer_meta
                       *      gains device_scratch_bytes (see device.h)
                       * 1.3: ph_gpu_api gains reuse_operand (device.h)
                       * 1.4: ph_layer_ops gains `cuda`, the layer's CUDA hooks
                       *      (ph_layer_device_ops), called by the host
                       * 1.5: ph_ctx gains `group`, collectives over the
                       *      replicas of the layer's stage (ph_group);
                       *      ph_layer_meta gains sharded_params; loss_scale
                       *      is set for every layer's backward
                       * 1.5 (also): ph_schedule_ops gains flags and
                       *      weight_versions, what an asynchronous
                       *      schedule (2bw, pipedream) needs of the host
                       * 1.6: ph_layer_device_ops gains saved_bytes, what
                       *      a twin keeps on the GPU when less than meta's
                       * 1.7: flags PH_LAYER_DX_OVER_X and
                       *      PH_LAYER_BACKWARD_NO_Y: the host may hand a
                       *      layer its input as dx (a loss writes the
                       *      logits' gradient over the logits)
                       * 1.8: ph_group gains report_device, a figure in
                       *      device memory
                       * 1.9: ph_ctx gains objective_samples, what an
                       *      auxiliary loss per token or per sample scales
                       *      by (loss_scale is per target of the loss) */

#define PH_MAX_DIMS 4   /* per-sample dimensions; the batch dimension is implicit */
#define PH_MAX_PARAMS 8 /* parameter tensors per layer */
#define PH_ERR_MAX 256

/* Status codes.  Every hook returns one; PH_OK is zero. */
enum {
	PH_OK = 0,
	PH_EINVAL = 1,      /* bad configuration or input */
	PH_ENOMEM = 2,      /* out of memory */
	PH_EIO = 3,         /* file or device I/O */
	PH_EUNSUPPORTED = 4,/* valid request this plugin cannot serve */
	PH_EINTERNAL = 5    /* a bug: a broken invariant */
};

/* One line of error text, written by whoever fails first. */
typedef struct {
	char msg[PH_ERR_MAX];
} ph_err;

/* Record an error and return its code: `return ph_fail(err, PH_EINVAL, "...")`.
 * A line longer than the buffer ends in "..." so that a reader knows it was
 * cut (keep the what-to-do part short, or early). */
static inline int ph_fail(ph_err *err, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static inline int ph_fail(ph_err *err, int code, const char *fmt, ...)
{
	if (err) {
		va_list ap;
		va_start(ap, fmt);
		int n = vsnprintf(err->msg, sizeof err->msg, fmt, ap);
		va_end(ap);
		for (size_t k = 2; n >= (int)sizeof err->msg && k <= 4; k++)
			err->msg[sizeof err->msg - k] = '.'; /* the last byte stays the NUL */
	}
	return code;
}

/* ------------------------------------------------------------------ */
/* Common head of every ops table.                                     */

typedef struct {
	uint16_t abi_major;        /* PH_ABI_MAJOR the plugin was built with */
	uint16_t abi_minor;        /* PH_ABI_MINOR the plugin was built with */
	uint32_t struct_size;      /* sizeof the whole ops struct, as built */
	const char *name;          /* what the INI names it by: `type = NAME` */
	const char *help;          /* one line for --list-plugins */
	const ph_option *options;  /* terminated by PH_OPT_END; NULL = none */
	size_t config_size;        /* bytes of the config struct the options fill */
} ph_ops_head;

#define PH_HEAD(ops_type, name_, help_, options_, config_type) \
	{ PH_ABI_MAJOR, PH_ABI_MINOR, (uint32_t)sizeof(ops_type), (name_), (help_), \
	  (options_), sizeof(config_type) }
/* For a plugin without options. */
#define PH_HEAD_NOOPT(ops_type, name_, help_) \
	{ PH_ABI_MAJOR, PH_ABI_MINOR, (uint32_t)sizeof(ops_type), (name_), (help_), NULL, 0 }

/* ------------------------------------------------------------------ */
/* Layers.                                                             */

/* Per-sample shape: the batch dimension is never part of it. */
typedef struct {
	int ndim;
	int64_t d[PH_MAX_DIMS];
} ph_shape;

static inline int64_t ph_shape_numel(const ph_shape *s)
{
	int64_t n = 1;
	for (int i = 0; i < s->ndim; i++)
		n *= s->d[i];
	return n;
}

/* Devices a layer implements (ph_layer_ops.devices) or runs on (ph_ctx.device). */
enum { PH_DEV_CPU = 1u << 0, PH_DEV_CUDA = 1u << 1 };

/* How the host initialises a parameter tensor. */
typedef enum {
	PH_INIT_ZEROS = 0,
	PH_INIT_ONES = 1,
	PH_INIT_UNIFORM = 2, /* U(-init_arg, +init_arg) */
	PH_INIT_NORMAL = 3   /* N(0, init_arg^2) */
} ph_init_rule;

typedef struct {
	char name[32];        /* "weight", "bias": the tensor is LAYER.NAME */
	ph_shape shape;
	ph_init_rule init;
	float init_arg;
	int no_decay;         /* 1: weight decay never applies (biases, norm gains) */
} ph_param_desc;

/* What a layer tells the host about itself (Lingvo's FPropMeta). */
typedef struct {
	ph_shape out;              /* per-sample output shape */
	double fwd_flops;          /* per sample */
	double bwd_flops;          /* per sample, input and weight gradients together */
	int nparams;
	ph_param_desc params[PH_MAX_PARAMS];
	size_t saved_bytes;        /* per sample, kept from forward to backward besides x, y */
	size_t scratch_bytes;      /* for max_batch samples; shared, valid during one call */
	int targets_per_sample;    /* loss layers: int32 targets per sample */
	/* ABI 1.2: scratch on a CUDA device, when it differs from scratch_bytes
	 * (a cuDNN workspace, say); 0 = scratch_bytes.  The host zeroes the
	 * struct before meta(), so an older plugin leaves it 0. */
	size_t device_scratch_bytes;
	/* ABI 1.5: bit i set = params[i] is split along its first dimension
	 * across the replicas of the stage (ph_group): each replica holds and
	 * trains d[0] / R rows (R must divide d[0]), the rows of
	 * replica r being [r * d[0] / R, (r + 1) * d[0] / R).  The shape in
	 * params[i] is the whole tensor's: the host initialises the whole
	 * tensor from the seed and keeps each replica's rows, so every R
	 * starts from the same weights, and checkpoints hold the whole
	 * tensor.  A sharded tensor's gradient is never summed across
	 * replicas: its rows belong to one replica.  0 in older plugins. */
	uint32_t sharded_params;
} ph_layer_meta;

/* Flags in ph_layer_ops.flags. */
enum {
	/* The model's last layer.  Output is 2 floats per sample: the loss summed
	 * over the sample's targets, and the number of correct predictions. */
	PH_LAYER_LOSS = 1u << 0,
	/* ABI 1.7: backward (and the CUDA twin's) gives the same bits when
	 * dx is x: it reads each input element before it writes any output
	 * element that could overwrite it (an elementwise backward, or one
	 * that finishes reading a row before writing it).  The host then
	 * writes dx over x when the layer before has PH_LAYER_BACKWARD_NO_Y,
	 * and needs no buffer of x's size for the gradient: for a GPT's loss
	 * that is the [T, vocab] logits' gradient, 197 MiB at GPT-2's size. */
	PH_LAYER_DX_OVER_X = 1u << 1,
	/* ABI 1.7: backward, backward_input and backward_weight (and the CUDA
	 * twin's) never read y, the layer's own output: the host may have
	 * written the next layer's input gradient over it (above), and then
	 * passes that same memory as dy. */
	PH_LAYER_BACKWARD_NO_Y = 1u << 2
};

struct ph_group;

/* Everything a forward or backward call needs besides tensors. */
typedef struct {
	int batch;              /* samples in this micro-batch, <= max_batch */
	int training;           /* 0 in evaluation (dropout is off) */
	/* Randomness is keyed by (seed, step, micro-batch, layer) so that any
	 * schedule, placement or recomputation draws the same numbers. */
	uint64_t seed, step, microbatch, layer;
	void *scratch;          /* meta.scratch_bytes */
	void *saved;            /* meta.saved_bytes * batch, this micro-batch's own */
	int device;             /* PH_DEV_CPU or PH_DEV_CUDA */
	void *stream;           /* cudaStream_t on CUDA; NULL on CPU */
	void *blas;             /* cublasHandle_t on CUDA; NULL on CPU */
	/* Loss layers only. */
	const int32_t *targets; /* batch * targets_per_sample */
	float loss_scale;       /* backward: d(objective)/d(per-target loss);
				 * ABI 1.5: set for every layer's backward,
				 * so that a layer adding its own term to the
				 * objective (an auxiliary loss) scales it
				 * the same way */
	/* ---- ABI 1.2, CUDA only (NULL / 0 on the CPU) ----
	 * On CUDA every tensor pointer above (params, grads, x, y, dy, dx,
	 * scratch, saved, targets) is device memory of the rank's GPU; work goes
	 * on `stream` and the host orders it; a hook never synchronises. */
	const struct ph_gpu_api *gpu; /* host services: GEMM at the run's precision */
	void *dnn;              /* cudnnHandle_t bound to `stream` */
	int precision;          /* PH_PREC_*: what `[run] precision` asked for */
	/* ---- ABI 1.5 ----
	 * The replicas of this layer's stage, for layers that exchange data
	 * with them (expert parallelism, tensor parallelism): never NULL from
	 * the host; size 1 when the stage has one replica.  (A plugin built
	 * for 1.5 is refused by older hosts, so it may rely on this.) */
	const struct ph_group *group;
	/* ---- ABI 1.9 ----
	 * backward: the samples the objective's mean runs over (the step's,
	 * or the micro-batch's under per-micro-batch updates).  loss_scale is
	 * per target of the loss layer, which may have one target per sample
	 * or one per token; a layer with a loss of its own per token scales
	 * it by 1 / (objective_samples x its tokens per sample).  0 from a
	 * caller that does not set it (a test harness): take loss_scale. */
	int64_t objective_samples;
} ph_ctx;

/* [run] precision.  bf16: matrix products in bf16 on tensor cores with fp32
 * accumulation; tensors in memory and master weights stay fp32. */
enum { PH_PREC_FP32 = 0, PH_PREC_BF16 = 1 };

/* ABI 1.5: collectives over the R replicas of a layer's stage, run by the
 * host over its links (threads in one process, MPI between processes, NCCL
 * between GPUs).  Every replica of the stage must make the same calls in
 * the same order with the same counts: the calls are rendezvous, as MPI's
 * are.  Buffers are on the layer's device (device memory on CUDA, ordered
 * on ctx->stream).  Results are bitwise the same for a given R whether the
 * replicas are threads or processes.  Fields are only appended:
 * struct_size tells a layer which ones the host has. */
typedef struct ph_group {
	uint32_t struct_size;   /* sizeof(ph_group), as the host built it */
	int size;               /* R: replicas of this stage */
	int rank;               /* this replica, 0..R-1 */
	/* send holds R blocks of `count` floats, block j for replica j;
	 * recv receives R blocks, block j from replica j.  send != recv. */
	int (*all_to_all)(const struct ph_group *g, const ph_ctx *ctx,
			  const float *send, float *recv, size_t count, ph_err *err);
	/* buf[0..count) = the sum over replicas of buf, summed in replica
	 * order 0..R-1 (so every replica gets the same bits). */
	int (*all_reduce_sum)(const struct ph_group *g, const ph_ctx *ctx,
			      float *buf, size_t count, ph_err *err);
	/* A figure for the progress line and the metrics file, e.g.
	 * ("moe.drop_frac", 0.03): the host averages each key over the
	 * step's calls (micro-batches, replicas) and prints LAYER.KEY.
	 * Forward passes in training only; may be NULL. */
	void (*report)(const struct ph_group *g, const ph_ctx *ctx,
		       const char *key, double value);
	void *host;             /* the host's; a layer never touches it */
	/* ABI 1.8 (check struct_size; ph_group_report_at below): report's
	 * figure where the layer computed it: `value` points at one float in
	 * memory of the layer's device (device memory on CUDA, written by work
	 * queued on ctx->stream before this call; host memory on the CPU).
	 * The host reads it later, after that work, without making the layer
	 * wait (work queued after the call may reuse the float); the figure
	 * then counts exactly as report()'s would.
	 * Forward passes in training only; may be NULL. */
	void (*report_device)(const struct ph_group *g, const ph_ctx *ctx,
			      const char *key, const float *value);
} ph_group;

/* ctx->group->report_device where the host has it: 1 if queued, 0 if not
 * (an older host, or no group): the caller may then skip the figure, or
 * copy it to the host and give it to report().  A CUDA twin's way to
 * report without synchronising its stream. */
static inline int ph_group_report_at(const ph_ctx *ctx, const char *key, const float *value)
{
	const ph_group *g = ctx ? ctx->group : NULL;
	if (!g || g->struct_size < offsetof(ph_group, report_device) + sizeof(void *) || !g->report_device)
		return 0;
	g->report_device(g, ctx, key, value);
	return 1;
}

/* ABI 1.4: a layer's hooks for one device besides the CPU (its CUDA twin,
 * in a file of its own compiled with nvcc; docs/plugins-cuda.md).  The
 * same signatures and contracts as ph_layer_ops' hooks, on the state the
 * layer's create() made; create(), destroy() and meta() are the layer's
 * own, for every device.  The host calls these instead of the layer's own
 * hooks when the layer runs on that device, after checking, as for every
 * call, that ctx->batch lies in [0, max_batch].  Fields are only appended:
 * struct_size tells the host which ones a twin has. */
typedef struct ph_layer_device_ops {
	uint32_t struct_size;   /* sizeof(ph_layer_device_ops), as built */
	/* Required. */
	int (*forward)(void *state, const ph_ctx *ctx, float *const *params,
		       const float *x, float *y, ph_err *err);
	int (*backward)(void *state, const ph_ctx *ctx, float *const *params,
			float *const *grads, const float *x, const float *y,
			const float *dy, float *dx, ph_err *err);
	/* The split backward on this device: both exactly when the layer's
	 * own hooks have them (the host plans the split once for every
	 * device), neither otherwise. */
	int (*backward_input)(void *state, const ph_ctx *ctx, float *const *params,
			      const float *x, const float *y, const float *dy, float *dx,
			      ph_err *err);
	int (*backward_weight)(void *state, const ph_ctx *ctx, float *const *params,
			       float *const *grads, const float *x, const float *y,
			       const float *dy, ph_err *err);
	/* Optional: free what these hooks attached to the state (descriptors,
	 * device buffers made on a first call).  The host calls it just before
	 * the layer's destroy(), from any thread, whether or not the device ran. */
	void (*release)(void *state);
	/* ABI 1.6, optional: bytes saved per sample on the GPU at `precision`
	 * (PH_PREC_*), where the twin keeps less than meta's saved_bytes (a
	 * fused kernel's statistics instead of a materialised matrix); 0 =
	 * meta's.  The host sizes ctx->saved by it on the GPU, and plans and
	 * checks memory with it; host code, called without a GPU. */
	size_t (*saved_bytes)(const void *state, int precision);
} ph_layer_device_ops;

typedef struct {
	ph_ops_head head;
	uint32_t devices;       /* PH_DEV_* this layer's own hooks implement (a
				 * layer with `cuda` hooks need not list
				 * PH_DEV_CUDA: the host adds it) */
	uint32_t flags;         /* PH_LAYER_* */

	/* Check the config against the input shape and build the state.
	 * max_batch bounds ctx->batch in every later call. */
	int (*create)(const void *config, const ph_shape *in, int max_batch,
		      void **state, ph_err *err);
	void (*destroy)(void *state);
	int (*meta)(const void *state, ph_layer_meta *meta, ph_err *err);

	/* x: [batch, in]  ->  y: [batch, out].  params as meta listed them. */
	int (*forward)(void *state, const ph_ctx *ctx, float *const *params,
		       const float *x, float *y, ph_err *err);

	/* dy: [batch, out] (NULL for a loss layer, which reads ctx->targets).
	 * grads[i] += d/d params[i];  dx = d/dx, or skipped when dx is NULL. */
	int (*backward)(void *state, const ph_ctx *ctx, float *const *params,
			float *const *grads, const float *x, const float *y,
			const float *dy, float *dx, ph_err *err);

	/* ---- ABI 1.1: optional, both or neither ----
	 * The backward split in two for zero-bubble schedules (ZB-H1): the
	 * input-gradient half (dx = ..., overwritten; dx may be NULL) and the
	 * weight-gradient half (grads += ...).  Run one after the other on the
	 * same x, y, dy and ctx->saved they must give bitwise the same results as
	 * backward(); the easy way is for backward() to call both.  Without them
	 * the host runs backward() for I and nothing for W. */
	int (*backward_input)(void *state, const ph_ctx *ctx, float *const *params,
			      const float *x, const float *y, const float *dy, float *dx,
			      ph_err *err);
	int (*backward_weight)(void *state, const ph_ctx *ctx, float *const *params,
			       float *const *grads, const float *x, const float *y,
			       const float *dy, ph_err *err);

	/* ---- ABI 1.4: optional ----
	 * The layer's CUDA hooks, or NULL.  The usual way to fill it lets one
	 * NAME.c serve a build with and without its twin NAME_cuda.cu:
	 *     PH_LAYER_TWIN(NAME_cuda_ops);        (a weak reference)
	 *     ... .cuda = &NAME_cuda_ops, ...
	 * links to NULL when NAME_cuda.cu (which defines it with
	 * PH_LAYER_CUDA_OPS, <pipehost/cuda.h>) is not linked in.  A layer
	 * without it may still list PH_DEV_CUDA in devices and look at
	 * ctx->device in its own hooks, as plugins of ABI 1.3 and older do. */
	const ph_layer_device_ops *cuda;
} ph_layer_ops;

/* Declare a layer's device hooks, defined in another file (its CUDA twin),
 * as a weak reference: &sym is NULL in a module built without that file.
 * Hidden, so that it never binds to another module's symbol. */
#define PH_LAYER_TWIN(sym) \
	extern const ph_layer_device_ops sym __attribute__((weak, visibility("hidden")))

/* Does a layer plugin (of any 1.x minor) provide the split backward? */
static inline int ph_layer_has_split_backward(const ph_layer_ops *ops)
{
	return ops->head.struct_size >= offsetof(ph_layer_ops, backward_weight) + sizeof(void *) &&
	       ops->backward_input && ops->backward_weight;
}

/* A layer's CUDA hooks: NULL for a plugin of ABI 1.3 or older, or one built
 * without its twin. */
static inline const ph_layer_device_ops *ph_layer_cuda_ops(const ph_layer_ops *ops)
{
	return ops->head.struct_size >= offsetof(ph_layer_ops, cuda) + sizeof(void *) ? ops->cuda : NULL;
}

/* The devices a layer runs on: its own hooks' and those it has hooks for. */
static inline uint32_t ph_layer_devices(const ph_layer_ops *ops)
{
	return ops->devices | (ph_layer_cuda_ops(ops) ? (uint32_t)PH_DEV_CUDA : 0u);
}

/* ------------------------------------------------------------------ */
/* Partitioners: cut n layers into `stages` contiguous, non-empty runs. */

typedef struct {
	int n;                         /* layers */
	int stages;                    /* ranks * virtual chunks per rank */
	const double *fwd_cost;        /* per layer, >= 0, in the cost source's unit */
	const double *bwd_cost;        /* per layer */
	const double *param_bytes;     /* per layer */
	const double *act_bytes;       /* per layer: its output for one micro-batch */
	const double *keep_bytes;      /* per layer: bytes held per in-flight micro-batch */
	const char *const *names;      /* per layer */
	const char *const *types;      /* per layer */
	const uint8_t *cut_after;      /* per layer: 1 if a stage may end after it */
	const double *mem_limit;       /* per stage, bytes; 0 = unlimited */
	const int *in_flight;          /* per stage: micro-batches the schedule keeps in flight */
	double state_factor;           /* bytes of params+grads+optimizer state per param byte */
	double link_bytes_per_s;       /* boundary bandwidth; 0 = free */
} ph_partition_problem;

typedef struct {
	ph_ops_head head;
	/* first[s] = index of stage s's first layer, s = 0..stages-1, and
	 * first[stages] = n.  A note for the user (e.g. why a heuristic fell
	 * back) goes into warn->msg; leave it empty otherwise. */
	int (*partition)(const void *config, const ph_partition_problem *pb,
			 int *first, ph_err *warn, ph_err *err);
} ph_partitioner_ops;

/* ------------------------------------------------------------------ */
/* Schedules: per-rank orders of compute actions, no communication.    */

typedef enum {
	PH_ACT_F = 0, /* forward */
	PH_ACT_B = 1, /* full backward */
	PH_ACT_I = 2, /* backward, input-gradient half */
	PH_ACT_W = 3  /* backward, weight-gradient half */
} ph_action_kind;

typedef struct {
	uint8_t kind;    /* ph_action_kind */
	uint8_t reserved;
	uint16_t chunk;  /* global chunk index: rank r holds chunks r, r+p, r+2p, ... */
	int32_t mb;      /* micro-batch */
} ph_action;

typedef struct {
	int ranks;            /* p */
	int chunks_per_rank;  /* v */
	int microbatches;     /* m */
} ph_schedule_shape;

typedef struct {
	ph_ops_head head;
	int max_chunks_per_rank;   /* 1 for non-interleaved schedules */
	/* Optional: refuse a shape this schedule cannot order (say why, and
	 * what would work).  NULL = every shape is fine. */
	int (*check)(const void *config, const ph_schedule_shape *shape, ph_err *err);
	/* Write rank's actions into out[0..cap) and their number into *n.
	 * The host refuses a plan that breaks its rules (docs/reference.md,
	 * Schedules): every action once, on the rank of its chunk, each
	 * backward after its forward, each W after its I, each chunk's B or
	 * W in micro-batch order (the weight gradients' sum, the same bits
	 * for every schedule), and no deadlock once sends and receives are
	 * added. */
	int (*generate)(const void *config, const ph_schedule_shape *shape, int rank,
			ph_action *out, int cap, int *n, ph_err *err);
	/* ---- ABI 1.5: optional, what the schedule needs of the host ----
	 * The host reads these (never the schedule's name); an older plugin
	 * has neither and is a synchronous schedule: one weight version, a
	 * flush at every step's end, gradients of a step taken on the weights
	 * that step updates. */
	uint32_t flags;            /* PH_SCHED_* */
	/* Weight versions rank r keeps in memory (the live weights included)
	 * for a shape; NULL = 1.  The host sizes its buffers and --plan's
	 * memory from it. */
	int (*weight_versions)(const void *config, const ph_schedule_shape *shape, int rank);
} ph_schedule_ops;

/* Flags in ph_schedule_ops.flags (ABI 1.5). */
enum {
	/* The order is meant to run across steps without a flush: step t+1's
	 * first forwards overlap step t's last backwards.  The engine runs
	 * the order over several steps' micro-batches as one stream ([run]
	 * window), and --simulate reports its steady state.  generate() must
	 * give, for m' = k * m micro-batches, the order of k consecutive
	 * steps; under a delayed update each rank's backwards of step t must
	 * come before its first op of step t+2 (the engine checks). */
	PH_SCHED_NO_FLUSH = 1u << 0,
	/* Delayed update (PipeDream-2BW): every micro-batch of step t runs its
	 * forward and backward on W(t-1), and the update is W(t+1) = W(t) -
	 * lr * grad f(W(t-1)), with W(-1) = W(0).  Needs weight_versions >= 2. */
	PH_SCHED_DELAYED_UPDATE = 1u << 1,
	/* Per-micro-batch updates with weight stashing (PipeDream): a rank
	 * updates its weights after every backward, with that micro-batch's
	 * gradient (of its own mean loss); counting micro-batches over the
	 * steps, n = step * m + j, and with K = weight_versions(rank), the
	 * forward of micro-batch n reads version max(0, n - K + 1) (the
	 * weights after the updates of micro-batches 0 .. n - K) and its
	 * backward reads the same one.  The order must run micro-batch n's
	 * forward after micro-batch n - K's backward (1F1B with K = p - r). */
	PH_SCHED_UPDATE_PER_MB = 1u << 2
};

/* A schedule's flags and weight versions, for a plugin of any 1.x minor. */
static inline uint32_t ph_schedule_flags(const ph_schedule_ops *ops)
{
	return ops->head.struct_size >= offsetof(ph_schedule_ops, flags) + sizeof(uint32_t) ? ops->flags : 0u;
}

static inline int ph_schedule_weight_versions(const ph_schedule_ops *ops, const void *config,
					      const ph_schedule_shape *shape, int rank)
{
	if (ops->head.struct_size < offsetof(ph_schedule_ops, weight_versions) + sizeof(void *) ||
	    !ops->weight_versions)
		return 1;
	return ops->weight_versions(config, shape, rank);
}

/* ------------------------------------------------------------------ */
/* The descriptor: the one symbol a plugin exports.                     */

typedef struct {
	uint16_t abi_major;
	uint16_t abi_minor;
	const ph_layer_ops *const *layers;             /* NULL-terminated, or NULL */
	const ph_partitioner_ops *const *partitioners; /* NULL-terminated, or NULL */
	const ph_schedule_ops *const *schedules;       /* NULL-terminated, or NULL */
} ph_plugin;

#define PH_PLUGIN_SYMBOL "pipehost_plugin"

typedef const ph_plugin *(*ph_plugin_fn)(void);

/* Define the exported descriptor.  Pass NULL-terminated arrays or NULL. */
#define PH_PLUGIN(layers_, partitioners_, schedules_)                         \
	__attribute__((visibility("default"))) const ph_plugin *pipehost_plugin(void); \
	const ph_plugin *pipehost_plugin(void)                                \
	{                                                                     \
		static const ph_plugin d = { PH_ABI_MAJOR, PH_ABI_MINOR,      \
					     (layers_), (partitioners_),      \
					     (schedules_) };                  \
		return &d;                                                    \
	}

#ifdef __cplusplus
}
#endif
#endif /* PIPEHOST_PLUGIN_H */
