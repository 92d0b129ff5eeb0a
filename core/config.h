/* SPDX-License-Identifier: MIT */
/* The typed, validated configuration of a run: INI -> structs.
 * Core sections have option tables here; plugin sections use the plugin's. */
#ifndef PH_CORE_CONFIG_H
#define PH_CORE_CONFIG_H

#include <pipehost/plugin.h>

#include "comm.h"
#include "device.h"
#include "inifile.h"
#include "loader.h"
#include "optim.h"

typedef struct {
	int64_t seed;
	int64_t stages;          /* pipeline ranks p */
	int64_t chunks;          /* virtual chunks per rank v */
	int64_t micro_batches;   /* m */
	int64_t batch;           /* samples per step, split into m micro-batches */
	int64_t epochs;
	int64_t steps;           /* 0: run `epochs` epochs */
	char devices[PH_STR_MAX];
	int64_t threads;         /* BLAS threads per rank; 0 (the default) = cores / ranks.
				  * OpenBLAS results depend on its thread count, so runs
				  * are bitwise comparable for a fixed threads (0 resolves
				  * by the ranks): tests that compare stage counts pin it */
	int64_t window;          /* no-flush schedules: steps run as one stream */
	int64_t log_every;
	char metrics[PH_STR_MAX];
	int eval;                /* evaluate on the test split after each epoch and at the end */
	char plugin_path[PH_STR_MAX];
	char save_weights[PH_STR_MAX];
	int recompute;           /* PH_RECOMPUTE_* */
	char init[PH_STR_MAX];   /* safetensors file to load the initial weights from */
	int precision;           /* PH_PREC_* (plugin.h) */
	int64_t replicas;        /* R data-parallel pipelines over all processes;
				  * 0 (the default) = one per process.  Resolved
				  * to R by ph_config_resolve */
} ph_run_cfg;

enum { PH_RECOMPUTE_NO = 0, PH_RECOMPUTE_YES = 1, PH_RECOMPUTE_EXCEPT_LAST = 2 };

/* [checkpoint]: see core/checkpoint.h. */
typedef struct {
	char dir[PH_STR_MAX];    /* "": no checkpoints */
	int64_t every;           /* steps between checkpoints; 0 = on SIGINT/SIGTERM and at the end */
	int64_t keep;            /* newest checkpoints kept; 0 = all */
	int overwrite;           /* a fresh run may delete another run's checkpoints in dir */
} ph_checkpoint_cfg;

typedef struct {
	char source[PH_STR_MAX]; /* a name of the data-source registry (data_source.h) */
	char path[PH_STR_MAX];
	int shuffle;
	int64_t limit;           /* use only the first N training samples; 0 = all */
	int64_t test_limit;      /* evaluate on the first N test samples; 0 = all */
	int64_t samples;         /* synthetic: training samples */
	int64_t test_samples;    /* synthetic: test samples */
	int64_t classes;         /* synthetic */
	ph_intlist shape;        /* synthetic: per-sample shape */
	int64_t seq_len;         /* text: bytes per sequence */
	double holdout;          /* text, tokens: fraction held out for validation */
	int tokenizer;           /* text: PH_TOKENIZER_* */
	char vocab[PH_STR_MAX];  /* text, tokenizer = bpe: GPT-2's vocab.json */
	char merges[PH_STR_MAX]; /* text, tokenizer = bpe: GPT-2's merges.txt */
	char train_images[PH_STR_MAX]; /* npy: the four .npy files */
	char train_labels[PH_STR_MAX];
	char test_images[PH_STR_MAX];
	char test_labels[PH_STR_MAX];
	char tokens[PH_STR_MAX];       /* tokens: training token file */
	char test_tokens[PH_STR_MAX];  /* tokens: validation token file; "": hold out */
	int token_type;          /* tokens: PH_TOKEN_* of a headerless file */
	int64_t vocab_size;      /* tokens: ids must be below it */
} ph_data_cfg;

enum { PH_TOKENIZER_BYTES = 0, PH_TOKENIZER_BPE = 1 };
enum { PH_TOKEN_UINT16 = 0, PH_TOKEN_UINT32 = 1 };

/* PH_COST_AUTO is resolved by main() to PROFILE or FLOPS before planning
 * (ph_profile_costs_for_run). */
enum { PH_COST_FLOPS = 0, PH_COST_PARAMS = 1, PH_COST_PROFILE = 2, PH_COST_AUTO = 3 };
enum { PH_CUTS_ALL = 0, PH_CUTS_MARKED = 1 };
enum { PH_CUT_AUTO = 0, PH_CUT_YES = 1, PH_CUT_NO = 2 };

/* [partition]: the host's keys; the rest belong to the partitioner plugin. */
typedef struct {
	char type[PH_STR_MAX];
	int cost;                /* PH_COST_* */
	int cuts;                /* PH_CUTS_* */
	double memory_gib;       /* per-stage limit; 0 = none */
	double link_gbps;        /* boundary bandwidth in GB/s; 0 = free */
	double device_tflops;    /* converts FLOPs to seconds when a link is set */
	char profile_cache[PH_STR_MAX];
} ph_partition_cfg;

/* [schedule]: `type` names the plugin; the rest are its keys. */
typedef struct {
	char type[PH_STR_MAX];
} ph_schedule_cfg;

/* [gpu]: the CUDA fast paths, each auto (its PIPEHOST_* environment
 * variable decides: on unless it is 0), on or off.  ph_gpu_switches_apply
 * (gpu_switches.h) turns them into those variables before any CUDA code
 * runs.  One int per key of ph_gpu_options, in that order. */
enum { PH_GPU_AUTO = 0, PH_GPU_ON = 1, PH_GPU_OFF = 2 };
typedef struct {
	int gemm_lt, gemm_cast, optim_many, ln_warp, attn_flash, gelu_fuse, bf16_act;
} ph_gpu_cfg;

typedef struct {
	char name[64];           /* expanded name (NAME or NAMEi for repeat) */
	char section[128];       /* the INI section it came from */
	int line;                /* its header line */
	const ph_layer_ops *ops;
	void *config;            /* the plugin's config struct */
	int cut;                 /* PH_CUT_*: may a stage end after this layer */
	char tie[128];           /* "LAYER.PARAM" this layer's first parameter of that shape shares, or "" */
} ph_layer_cfg;

typedef struct {
	ph_ini ini;
	ph_run_cfg run;
	ph_data_cfg data;
	ph_optim_config optim;
	ph_checkpoint_cfg checkpoint;
	ph_partition_cfg part;
	ph_schedule_cfg sched;
	ph_gpu_cfg gpu;
	const struct ph_data_source *data_source; /* [data] source, found by ph_config_resolve */
	const ph_partitioner_ops *partitioner;
	void *partitioner_config;
	const ph_schedule_ops *schedule;
	void *schedule_config;
	ph_layer_cfg *layers;
	int nlayers;
	ph_placement place;      /* [run] devices, rank by rank of this process's replicas */
	ph_comm comm;            /* the processes of an mpirun job; set by main
				  * after ph_config_read, before ph_config_resolve */
	int progress;            /* --progress: PH_PROGRESS_*; set by main (not an INI key:
				  * how to show a run is not part of what it computes) */
} ph_config;

/* --progress: auto (tty on a terminal of our own, else lines), tty (one
 * line redrawn, fitted to the width), lines (a line every log_every
 * steps), none.  docs/conventions.md */
enum { PH_PROGRESS_AUTO, PH_PROGRESS_TTY, PH_PROGRESS_LINES, PH_PROGRESS_NONE };

/* How the processes share the work (resolved configs only):
 *   replicas >= processes: each process runs replicas / processes whole
 *                          pipelines;
 *   replicas <  processes: each pipeline is split over processes / replicas
 *                          processes, each running stages / that many of
 *                          its ranks (CPU only). */
static inline int ph_config_local_replicas(const ph_config *c)
{
	return c->run.replicas >= c->comm.size ? (int)(c->run.replicas / c->comm.size) : 1;
}

/* Processes per pipeline: 1 unless pipelines are split over processes. */
static inline int ph_config_split(const ph_config *c)
{
	return c->run.replicas >= c->comm.size ? 1 : (int)(c->comm.size / c->run.replicas);
}

/* Processes this process's pipeline spans: ph_config_split under mpirun,
 * 1 in a process alone (whatever [run] replicas says before it resolves). */
static inline int ph_config_span(const ph_config *c)
{
	return c->comm.size > 1 ? ph_config_split(c) : 1;
}

/* This process's share of a pipeline split over processes: its ranks
 * [lo, lo + per) of the pipeline's `ranks`, among the span processes
 * base .. base + span - 1 that run that pipeline.  Without a split: span
 * 1, every rank, the process alone.  config.c (placement) and
 * engine-split.c (what runs where) both read it. */
typedef struct {
	int span, per, lo, base;
} ph_split_share;

static inline ph_split_share ph_config_split_share(const ph_config *c, int ranks)
{
	ph_split_share s;
	s.span = ph_config_split(c);
	s.per = ranks / s.span;
	s.lo = s.span > 1 ? (c->comm.rank % s.span) * s.per : 0;
	s.base = s.span > 1 ? (c->comm.rank / s.span) * s.span : c->comm.rank;
	return s;
}

/* The ranks this process runs at once: its share of a pipeline's `ranks`
 * times its replicas.  The engine's BLAS threads, the profiler's, the
 * memory check's and the "cpu:" line all divide the cores by it. */
static inline long ph_config_busy(const ph_config *c, int ranks)
{
	ph_split_share s = ph_config_split_share(c, ranks > 0 ? ranks : 1);
	return (long)(s.per > 0 ? s.per : 1) * ph_config_local_replicas(c);
}

/* BLAS threads per call: [run] threads, or the cores shared among the
 * `busy` ranks this process runs (ph_config_busy).  The engine sets it
 * (engine.c); the memory check counts their buffers. */
static inline int ph_config_blas_threads(const ph_config *c, long cores, long busy)
{
	if (c->run.threads > 0)
		return (int)c->run.threads;
	return busy > 0 && cores / busy > 0 ? (int)(cores / busy) : 1;
}

/* The core INI sections, one row each, in the order --list-options and
 * the errors name them: the parser, its known-section check, its errors
 * and --list-options all read this one table. */
typedef enum {
	PH_SECTION_PLAIN,  /* its keys fill one struct of ph_config */
	PH_SECTION_TYPED,  /* `type` names a plugin whose own keys follow */
	PH_SECTION_LAYER   /* [layer NAME], one a layer */
} ph_section_kind;

typedef struct {
	const char *name;         /* "run"; "layer NAME" for the layer row; NULL ends */
	ph_section_kind kind;
	const ph_option *options; /* its keys (typed: the host's; layer: every layer's) */
	size_t offset;            /* plain and typed: its struct within ph_config */
	int before_plugins;       /* plain: applied by ph_config_read already */
	ph_plugin_kind plugin;    /* typed: the kind of plugin `type` names */
	size_t ops_offset;        /* typed: where the plugin's ops go in ph_config */
	size_t plugin_cfg_offset; /* typed: where its config goes */
	void (*list_more)(FILE *f, const char *indent); /* --list-options: more after the keys */
} ph_core_section;

extern const ph_core_section ph_core_sections[];

/* Read the INI file, apply overrides and the sections needed before any
 * plugin loads ([gpu]), and return the raw plugin path the registry must
 * load before ph_config_resolve (it may come from [run]). */
int ph_config_read(ph_config *c, const char *path, const char *const *overrides, int noverrides,
		   ph_err *err);
const char *ph_config_plugin_path(ph_config *c);

/* Check every section and key against the option tables and fill the
 * structs.  Errors say file:line, the section and what to do. */
int ph_config_resolve(ph_config *c, const ph_registry *reg, ph_err *err);

void ph_config_free(ph_config *c);

/* Core option tables, for --list-plugins and the README's INI reference. */
extern const ph_option ph_run_options[];
extern const ph_option ph_data_options[];
extern const ph_option ph_optimizer_options[];
extern const ph_option ph_checkpoint_options[];
extern const ph_option ph_layer_common_options[];
extern const ph_option ph_partition_options[];
extern const ph_option ph_schedule_options[];
extern const ph_option ph_gpu_options[];

#endif
