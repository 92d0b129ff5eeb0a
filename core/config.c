/* SPDX-License-Identifier: MIT */
/* INI -> typed configuration.  Every key is checked against an option table;
 * every error says where (file:line), what, and what to do. */
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "config.h"
#include "data_source.h"
#include "options.h"

const ph_option ph_run_options[] = {
	PH_OPT_INT_(ph_run_cfg, seed, "seed", "1", 0, PH_NO_MAX, "seed of every random draw (init, dropout, data order)"),
	PH_OPT_INT_(ph_run_cfg, stages, "stages", "1", 1, 64, "pipeline ranks p"),
	PH_OPT_INT_(ph_run_cfg, chunks, "chunks", "1", 1, 16, "virtual chunks per rank v (interleaved schedules)"),
	PH_OPT_INT_(ph_run_cfg, micro_batches, "micro_batches", "4", 1, 4096, "micro-batches m per step"),
	PH_OPT_INT_(ph_run_cfg, batch, "batch", "64", 1, 1 << 24, "samples per step, split evenly into micro-batches"),
	PH_OPT_INT_(ph_run_cfg, epochs, "epochs", "1", 1, 100000, "passes over the training set (when steps = 0)"),
	PH_OPT_INT_(ph_run_cfg, steps, "steps", "0", 0, PH_NO_MAX, "optimizer steps to run; 0 = epochs * steps per epoch"),
	PH_OPT_STRING_(ph_run_cfg, devices, "devices", "cpu",
		       "device of each rank: cpu, auto (the GPUs round-robin, else the CPU), cuda, or a list cuda:0,cuda:0,cuda:1 "
		       "with one entry per rank (ranks may share a GPU)"),
	PH_OPT_INT_(ph_run_cfg, replicas, "replicas", "0", 0, 4096,
		    "data-parallel copies R of the pipeline, each on batch / R samples, gradients summed before every step; "
		    "0 = one per process (mpirun -np N: N)"),
	PH_OPT_CHOICE_(ph_run_cfg, precision, "precision", "fp32", "fp32|bf16",
		       "CUDA matrix products: fp32, or bf16 on tensor cores with fp32 accumulation and fp32 master weights"),
	PH_OPT_INT_(ph_run_cfg, threads, "threads", "0", 0, 256,
		    "BLAS threads per rank; 0 = the cores over the ranks (printed at startup); results are bitwise "
		    "the same for a fixed threads whatever the schedule or stage count, so pin it to compare runs"),
	PH_OPT_INT_(ph_run_cfg, window, "window", "16", 1, 1024,
		    "steps a no-flush schedule (2bw, pipedream) runs as one stream before the pipeline drains "
		    "(evaluation, checkpoints and the run's end drain it too); 1 = drain every step; the bits are the same"),
	PH_OPT_INT_(ph_run_cfg, log_every, "log_every", "100", 1, PH_NO_MAX, "steps between progress lines when not on a terminal"),
	PH_OPT_STRING_(ph_run_cfg, metrics, "metrics", "", "write one JSON object per logged step and evaluation to this file"),
	PH_OPT_BOOL_(ph_run_cfg, eval, "eval", "yes", "evaluate on the test split after each epoch, and at the last step of a run cut short by steps"),
	PH_OPT_STRING_(ph_run_cfg, plugin_path, "plugin_path", "", "extra plugin directories, colon-separated, searched first"),
	PH_OPT_STRING_(ph_run_cfg, save_weights, "save_weights", "", "write the trained weights (safetensors) to this file"),
	PH_OPT_STRING_(ph_run_cfg, init, "init", "",
		       "load the initial weights from this safetensors file (LAYER.PARAM in F32, F16 or BF16, or a Hugging Face GPT-2 file); \"\" = random"),
	PH_OPT_CHOICE_(ph_run_cfg, recompute, "recompute", "no", "no|yes|except_last",
		       "keep only each chunk's input and last output per micro-batch and rerun the forward before "
		       "the backward (except_last: not for the last micro-batch)"),
	PH_OPT_END
};

const ph_option ph_data_options[] = {
	PH_OPT_STRING_(ph_data_cfg, source, "source", "fashion-mnist", "where samples come from: one of the sources below"),
	PH_OPT_STRING_(ph_data_cfg, path, "path", "",
		       "fashion-mnist: directory of the IDX .gz files (default " PH_FASHION_MNIST_DIR "); text: a file or "
		       "directory (default " PH_FORTUNES_DIR ")"),
	PH_OPT_BOOL_(ph_data_cfg, shuffle, "shuffle", "yes", "seeded reshuffle of the training set every epoch"),
	PH_OPT_INT_(ph_data_cfg, limit, "limit", "0", 0, PH_NO_MAX, "train on the first N samples only; 0 = all"),
	PH_OPT_INT_(ph_data_cfg, test_limit, "test_limit", "0", 0, PH_NO_MAX, "evaluate on the first N test samples; 0 = all"),
	PH_OPT_INT_(ph_data_cfg, samples, "samples", "4096", 1, 1 << 26, "synthetic: training samples"),
	PH_OPT_INT_(ph_data_cfg, test_samples, "test_samples", "1024", 1, 1 << 26, "synthetic: test samples"),
	PH_OPT_INT_(ph_data_cfg, classes, "classes", "10", 2, 1 << 20, "synthetic: classes"),
	PH_OPT_INTLIST_(ph_data_cfg, shape, "shape", "1,28,28", 1, 1 << 20, "synthetic: per-sample shape"),
	PH_OPT_INT_(ph_data_cfg, seq_len, "seq_len", "128", 1, 1 << 20, "text: bytes per sequence (T)"),
	PH_OPT_FLOAT_(ph_data_cfg, holdout, "holdout", "0.1", 0.001, 0.9,
		      "text: fraction of the bytes held out for validation; tokens: of the tokens, without test_tokens"),
	PH_OPT_CHOICE_(ph_data_cfg, tokenizer, "tokenizer", "bytes", "bytes|bpe",
		       "text: bytes (256 ids) or bpe (GPT-2's byte-level BPE from vocab and merges)"),
	PH_OPT_STRING_(ph_data_cfg, vocab, "vocab", "", "text: with tokenizer = bpe, GPT-2's vocab.json"),
	PH_OPT_STRING_(ph_data_cfg, merges, "merges", "", "text: with tokenizer = bpe, GPT-2's merges.txt"),
	PH_OPT_STRING_(ph_data_cfg, train_images, "train_images", "", "npy: training inputs, [N, ...] float32 or uint8"),
	PH_OPT_STRING_(ph_data_cfg, train_labels, "train_labels", "", "npy: training labels, [N] int64, int32 or uint8"),
	PH_OPT_STRING_(ph_data_cfg, test_images, "test_images", "", "npy: test inputs, the same shape per sample (not needed under [run] eval = no)"),
	PH_OPT_STRING_(ph_data_cfg, test_labels, "test_labels", "", "npy: test labels"),
	PH_OPT_STRING_(ph_data_cfg, tokens, "tokens", "", "tokens: training token file (nanoGPT's train.bin, llm.c's .bin)"),
	PH_OPT_STRING_(ph_data_cfg, test_tokens, "test_tokens", "",
		       "tokens: validation token file; empty: the last holdout of the training tokens"),
	PH_OPT_CHOICE_(ph_data_cfg, token_type, "token_type", "uint16", "uint16|uint32",
		       "tokens: the ids of a headerless file (llm.c's header says its own)"),
	PH_OPT_INT_(ph_data_cfg, vocab_size, "vocab_size", "50257", 2, 1 << 24, "tokens: ids must be below it"),
	PH_OPT_END
};

const ph_option ph_optimizer_options[] = {
	PH_OPT_CHOICE_(ph_optim_config, type, "type", "adamw", "sgd|adamw|lion", "update rule"),
	PH_OPT_FLOAT_(ph_optim_config, lr, "lr", "0.001", 0, 10, "peak learning rate"),
	PH_OPT_FLOAT_(ph_optim_config, momentum, "momentum", "0.9", 0, 1, "SGD momentum"),
	PH_OPT_BOOL_(ph_optim_config, nesterov, "nesterov", "no", "SGD: Nesterov momentum (needs momentum > 0)"),
	/* below 1: AdamW's bias correction divides by 1 - beta^t */
	PH_OPT_FLOAT_(ph_optim_config, beta1, "beta1", "0.9", 0, 0.999999,
		      "AdamW first-moment decay; Lion: the moment's weight in the step's sign"),
	PH_OPT_FLOAT_(ph_optim_config, beta2, "beta2", "0.999", 0, 0.999999,
		      "AdamW second-moment decay; Lion: the moment's decay (its paper: 0.99)"),
	PH_OPT_FLOAT_(ph_optim_config, eps, "eps", "1e-8", 0, 1, "AdamW denominator epsilon"),
	PH_OPT_FLOAT_(ph_optim_config, weight_decay, "weight_decay", "0", 0, 10,
		      "weight decay, biases and norm gains exempt (SGD: L2 added to the gradient; AdamW, Lion: decoupled)"),
	PH_OPT_INT_(ph_optim_config, warmup, "warmup", "0", 0, PH_NO_MAX, "steps of linear learning-rate warm-up"),
	PH_OPT_CHOICE_(ph_optim_config, lr_schedule, "lr_schedule", "cosine", "constant|cosine", "learning rate after warm-up"),
	PH_OPT_FLOAT_(ph_optim_config, min_lr, "min_lr", "0", 0, 10, "cosine floor, at most lr: the last step's learning rate"),
	PH_OPT_FLOAT_(ph_optim_config, clip, "clip", "0", 0, PH_NO_MAX, "clip the global gradient norm to this; 0 = off"),
	PH_OPT_END
};

const ph_option ph_checkpoint_options[] = {
	PH_OPT_STRING_(ph_checkpoint_cfg, dir, "dir", "", "write checkpoints to DIR/step-NNNNNNNN (resume with --resume DIR); empty = none"),
	PH_OPT_INT_(ph_checkpoint_cfg, every, "every", "0", 0, PH_NO_MAX, "save every N steps; 0 = only on SIGINT/SIGTERM and at the end"),
	PH_OPT_INT_(ph_checkpoint_cfg, keep, "keep", "0", 0, 1000000, "keep the newest K checkpoints, delete older ones; 0 = keep all"),
	PH_OPT_BOOL_(ph_checkpoint_cfg, overwrite, "overwrite", "no", "a fresh run deletes another run's checkpoints in dir instead of refusing"),
	PH_OPT_END
};

typedef struct {
	char type[PH_STR_MAX];
	int64_t repeat;
	int cut;
	char tie[PH_STR_MAX];
} layer_common;

const ph_option ph_layer_common_options[] = {
	PH_OPT_STRING_(layer_common, type, "type", NULL, "layer plugin name (pipehost --list-plugins)"),
	PH_OPT_INT_(layer_common, repeat, "repeat", "1", 1, 4096, "expand into N layers NAME0..NAME(N-1)"),
	PH_OPT_CHOICE_(layer_common, cut, "cut", "auto", "auto|yes|no",
		       "may a stage end after this layer; with [partition] cuts = marked only yes may"),
	PH_OPT_STRING_(layer_common, tie, "tie", "",
		       "LAYER.PARAM: share that tensor (e.g. the head's weight with embed.tokens); gradients are summed"),
	PH_OPT_END
};

const ph_option ph_partition_options[] = {
	PH_OPT_STRING_(ph_partition_cfg, type, "type", "dp", "partitioner plugin name; its own keys follow"),
	PH_OPT_CHOICE_(ph_partition_cfg, cost, "cost", "auto", "flops|params|profile|auto",
		       "layer cost: FLOPs from meta, parameter count, measured on the device, or auto (measured when "
		       "that is cheap or cached, else FLOPs)"),
	PH_OPT_CHOICE_(ph_partition_cfg, cuts, "cuts", "all", "all|marked",
		       "boundaries after any layer (except cut = no), or only after cut = yes"),
	PH_OPT_FLOAT_(ph_partition_cfg, memory_gib, "memory", "0", 0, 1e6,
		      "per-stage memory limit in GiB, as --plan's est. MiB counts it (params, grads, optimizer state, "
		      "activations, scratch); 0 = none"),
	PH_OPT_FLOAT_(ph_partition_cfg, link_gbps, "link_bandwidth", "0", 0, 1e6,
		      "stage-to-stage bandwidth in GB/s for the cost model; 0 = free"),
	PH_OPT_FLOAT_(ph_partition_cfg, device_tflops, "device_tflops", "0.05", 1e-6, 1e6,
		      "device speed turning FLOPs into seconds when link_bandwidth is set"),
	PH_OPT_STRING_(ph_partition_cfg, profile_cache, "profile_cache", "",
		       "cost = profile/auto: cache directory (default $XDG_CACHE_HOME/pipehost or ~/.cache/pipehost); off = no cache"),
	PH_OPT_END
};
const ph_option ph_schedule_options[] = {
	PH_OPT_STRING_(ph_schedule_cfg, type, "type", "1f1b", "schedule plugin name"),
	PH_OPT_END
};

/* Each key's environment variable is PIPEHOST_ and its name in capitals
 * (gpu_switches.c); the variables stay for the bench scripts. */
#define GPU_SWITCH(field, FIELD, help)                                                                 \
	PH_OPT_CHOICE_(ph_gpu_cfg, field, #field, "auto", "auto|on|off",                               \
		       help "; auto: on unless $PIPEHOST_" #FIELD " is 0 (on and off win over it)")
const ph_option ph_gpu_options[] = {
	GPU_SWITCH(gemm_lt, GEMM_LT, "cuBLASLt products with their epilogues (bias, GELU) fused; off: a product, then a pass of its own"),
	GPU_SWITCH(gemm_cast, GEMM_CAST, "bf16: round product operands into bf16 copies of our own; off: cuBLAS rounds fp32 "
			      "inputs itself (the same values by another road)"),
	GPU_SWITCH(optim_many, OPTIM_MANY, "the step's end (clip norm, update) in one launch for all of a rank's tensors; off: "
			       "one launch per tensor (the same bits)"),
	GPU_SWITCH(ln_warp, LN_WARP, "layernorm: one warp a row held in registers; off: the 8-lane kernels, the CPU's order"),
	GPU_SWITCH(attn_flash, ATTN_FLASH, "bf16 attention: the flash kernels; off: the materialised path"),
	GPU_SWITCH(gelu_fuse, GELU_FUSE, "bf16 gpt_block: the GELU fused into the products; off: a separate pass"),
	GPU_SWITCH(bf16_act, BF16_ACT, "bf16 gpt_block: layernorm and GELU outputs written in bf16; off: fp32"),
	PH_OPT_END
};

#define CFG(field) offsetof(ph_config, field)
#define PLAIN(name, options, field, early, more) { name, PH_SECTION_PLAIN, options, CFG(field), early, 0, 0, 0, more }
#define TYPED(name, options, field, kind, ops, cfg) \
	{ name, PH_SECTION_TYPED, options, CFG(field), 0, kind, CFG(ops), CFG(cfg), NULL }
const ph_core_section ph_core_sections[] = {
	PLAIN("run", ph_run_options, run, 0, NULL),
	PLAIN("data", ph_data_options, data, 0, ph_data_sources_print),
	PLAIN("optimizer", ph_optimizer_options, optim, 0, NULL),
	TYPED("partition", ph_partition_options, part, PH_KIND_PARTITIONER, partitioner, partitioner_config),
	TYPED("schedule", ph_schedule_options, sched, PH_KIND_SCHEDULE, schedule, schedule_config),
	PLAIN("checkpoint", ph_checkpoint_options, checkpoint, 0, NULL),
	/* read before the plugins load: the switches must be in the
	 * environment before any CUDA code can look */
	PLAIN("gpu", ph_gpu_options, gpu, 1, NULL),
	{ "layer NAME", PH_SECTION_LAYER, ph_layer_common_options, 0, 0, 0, 0, 0, NULL },
	{ NULL, 0, NULL, 0, 0, 0, 0, 0, NULL }
};

const char *ph_config_plugin_path(ph_config *c)
{
	ph_ini_entry *e = ph_ini_find(&c->ini, "run", "plugin_path");
	return e ? e->value : "";
}

static int where_fail(ph_config *c, int line, int code, ph_err *err, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));
static int where_fail(ph_config *c, int line, int code, ph_err *err, const char *fmt, ...)
{
	char where[PH_STR_MAX + 16], msg[PH_ERR_MAX];
	ph_ini_where(&c->ini, line, where, sizeof where);
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	return ph_fail(err, code, "%s: %s", where, msg);
}

/* Apply every entry of `section` to the tables (first match wins).
 * `plugin`: the plugin whose keys follow the host's ("layer plugin
 * 'linear'"), NULL in a core section: --list-options lists the host's
 * keys, --list-plugins the plugins'. */
static int apply_section(ph_config *c, const char *section, const ph_option *const *tables,
			 void *const *cfgs, const char *plugin, ph_err *err)
{
	for (ph_ini_entry *e = ph_ini_next_in(&c->ini, section, NULL); e; e = ph_ini_next_in(&c->ini, section, e)) {
		e->used = 1;
		int t;
		for (t = 0; tables[t]; t++)
			if (ph_options_find(tables[t], e->key))
				break;
		if (!tables[t]) {
			const char *s = ph_options_suggest(tables, e->key);
			if (s)
				return where_fail(c, e->line, PH_EINVAL, err, "unknown key '%s' in [%s]; did you mean '%s'?",
						  e->key, section, s);
			if (!plugin)
				return where_fail(c, e->line, PH_EINVAL, err,
						  "unknown key '%s' in [%s]; pipehost --list-options shows the keys", e->key,
						  section);
			return where_fail(c, e->line, PH_EINVAL, err,
					  "unknown key '%s' in [%s]; pipehost --list-options shows the keys every [%s] has, "
					  "pipehost --list-plugins those of %s",
					  e->key, section, strncmp(section, "layer ", 6) ? section : "layer NAME", plugin);
		}
		ph_err e2;
		if (ph_options_set(tables[t], cfgs[t], e->key, e->value, &e2))
			return where_fail(c, e->line, PH_EINVAL, err, "[" PH_ECHO "] %s", PH_ECHO_ARG(section), e2.msg);
	}
	/* required keys */
	for (int t = 0; tables[t]; t++)
		for (const ph_option *o = tables[t]; o->name; o++)
			if (!o->def && !ph_ini_find(&c->ini, section, o->name)) {
				int line = 0;
				for (int s = 0; s < c->ini.nsections; s++)
					if (strcmp(c->ini.sections[s].name, section) == 0)
						line = c->ini.sections[s].line;
				char r[96];
				ph_option_range_text(o, r, sizeof r);
				return where_fail(c, line, PH_EINVAL, err, "[%s] needs %s (%s%s%s): add %s = ...", section,
						  o->name, ph_opt_type_name(o->type), r[0] ? " " : "", r, o->name);
			}
	return PH_OK;
}

static int defaults(const ph_option *t, void *cfg, ph_err *err)
{
	return ph_options_defaults(t, cfg, err);
}

static void *section_cfg(ph_config *c, const ph_core_section *r)
{
	return (char *)c + r->offset;
}

/* A plain section: its defaults, then its keys. */
static int resolve_plain(ph_config *c, const ph_core_section *r, ph_err *err)
{
	int rc = defaults(r->options, section_cfg(c, r), err);
	if (rc)
		return rc;
	const ph_option *t[2] = { r->options, NULL };
	void *p[1] = { section_cfg(c, r) };
	return apply_section(c, r->name, t, p, NULL, err);
}

/* The keys whose values are paths (a list of them for plugin_path): a
 * relative one in the INI means relative to the INI's directory, so a run
 * directory holding its INI, data and outputs works from any directory.
 * A --set value is the command line's and stays relative to the current
 * directory.  Plugins' options are the plugins' own; [schedule] file is
 * the table schedule's. */
static const struct {
	const char *section, *key;
	int list;         /* colon-separated */
	const char *word; /* a value that is a word, not a path (NULL: none) */
} path_keys[] = {
	{ "run", "metrics", 0, NULL },	      { "run", "save_weights", 0, NULL }, { "run", "init", 0, NULL },
	{ "run", "plugin_path", 1, NULL },    { "data", "path", 0, NULL },	  { "checkpoint", "dir", 0, NULL },
	{ "partition", "profile_cache", 0, "off" }, { "schedule", "file", 0, NULL },
};

/* VALUE with each relative path (one, or each of a list) put under DIR. */
static int under_dir(const char *dir, const char *value, int list, char *out, size_t len)
{
	size_t used = 0;
	const char *p = value;
	for (;;) {
		size_t n = list ? strcspn(p, ":") : strlen(p);
		/* "" stays empty; ~ is the user's, / absolute */
		int rel = n > 0 && p[0] != '/' && p[0] != '~';
		int w = snprintf(out + used, len - used, "%s%s%s%.*s", used || p != value ? ":" : "", rel ? dir : "",
				 rel ? "/" : "", (int)n, p);
		if (w < 0 || (size_t)w >= len - used)
			return -1;
		used += (size_t)w;
		if (!list || !p[n])
			return 0;
		p += n + 1;
	}
}

static int resolve_ini_paths(ph_config *c, ph_err *err)
{
	char dir[PH_STR_MAX];
	snprintf(dir, sizeof dir, "%s", c->ini.path);
	char *slash = strrchr(dir, '/');
	if (!slash)
		return PH_OK; /* the INI is in the current directory */
	if (slash == dir)
		slash[1] = 0;
	else
		*slash = 0;
	for (int i = 0; i < c->ini.nentries; i++) {
		ph_ini_entry *e = &c->ini.entries[i];
		for (size_t k = 0; e->line > 0 && k < sizeof path_keys / sizeof path_keys[0]; k++) {
			if (strcmp(e->section, path_keys[k].section) || strcmp(e->key, path_keys[k].key) ||
			    (path_keys[k].word && !strcmp(e->value, path_keys[k].word)))
				continue;
			char v[PH_STR_MAX];
			if (under_dir(strcmp(dir, "/") ? dir : "", e->value, path_keys[k].list, v, sizeof v))
				return where_fail(c, e->line, PH_EINVAL, err,
						  "[%s] %s = %s: relative to the INI's directory %s it is longer than %d "
						  "characters; give an absolute path or move the INI", e->section, e->key,
						  e->value, dir, PH_STR_MAX - 1);
			memcpy(e->value, v, sizeof v);
		}
	}
	return PH_OK;
}

int ph_config_read(ph_config *c, const char *path, const char *const *overrides, int noverrides,
		   ph_err *err)
{
	memset(c, 0, sizeof *c);
	int rc = ph_ini_load(path, &c->ini, err);
	if (!rc)
		rc = resolve_ini_paths(c, err); /* before --set, whose values stay the cwd's */
	for (int i = 0; !rc && i < noverrides; i++)
		rc = ph_ini_override(&c->ini, overrides[i], err);
	for (const ph_core_section *r = ph_core_sections; !rc && r->name; r++)
		if (r->kind == PH_SECTION_PLAIN && r->before_plugins)
			rc = resolve_plain(c, r, err);
	return rc;
}

/* Whether the INI section `name` is one of the table's. */
static int known_section(const char *name)
{
	for (const ph_core_section *r = ph_core_sections; r->name; r++) {
		if (r->kind == PH_SECTION_LAYER ? strncmp(name, "layer ", 6) == 0 || strcmp(name, "layer") == 0
						: strcmp(name, r->name) == 0)
			return 1;
	}
	return 0;
}

/* An unknown section: the nearest name, or every one ("[run], ... and [layer NAME]"). */
static int unknown_section(ph_config *c, const ph_ini_section *s, ph_err *err)
{
	const char *best = NULL;
	int bd = 1 << 30;
	for (const ph_core_section *r = ph_core_sections; r->name; r++) {
		int d = r->kind == PH_SECTION_LAYER ? 1 << 30 : ph_edit_distance(s->name, r->name);
		if (d < bd)
			bd = d, best = r->name;
	}
	if (bd <= 3)
		return where_fail(c, s->line, PH_EINVAL, err, "unknown section [%s]; did you mean [%s]?", s->name, best);
	char all[512];
	size_t len = 0;
	all[0] = 0;
	for (const ph_core_section *r = ph_core_sections; r->name && len < sizeof all; r++)
		len += (size_t)snprintf(all + len, sizeof all - len, "%s[%s]",
					r == ph_core_sections ? "" : r[1].name ? ", " : " and ", r->name);
	return where_fail(c, s->line, PH_EINVAL, err, "unknown section [%s]; sections are %s", s->name, all);
}

/* Every [data] key given is one the source reads: the others' keys are
 * known to the table, so a key for another source (data.tokens on the
 * text source), or one the source skips in this setting (vocab without
 * tokenizer = bpe), would be dropped without a word.  When --set changes
 * the source itself, the INI's keys were written for the INI's source:
 * only the command line's are held to the new one (-c tiny.ini --set
 * data.source=npy leaves tiny.ini's synthetic keys unread on purpose). */
static int check_data_keys(ph_config *c, ph_err *err)
{
	const ph_data_source *s = c->data_source;
	const ph_ini_entry *src = ph_ini_find(&c->ini, "data", "source");
	int switched = src && src->line == 0;
	for (int i = 0; i < c->ini.nentries; i++) {
		const ph_ini_entry *e = &c->ini.entries[i];
		if (strcmp(e->section, "data") || (switched && e->line > 0))
			continue;
		if (!ph_data_source_reads(s, e->key)) {
			char keys[256], others[128];
			ph_data_source_keys(s, keys, sizeof keys);
			ph_data_sources_reading(e->key, others, sizeof others);
			return where_fail(c, e->line, PH_EINVAL, err,
					  "[data] %s is not read by source = %s, which reads %s (and shuffle, limit, "
					  "test_limit); drop %s%s%s", e->key, s->name, keys, e->key,
					  others[0] ? ", or use source = " : "", others);
		}
		const char *with = s->unread ? s->unread(c, e->key) : NULL;
		if (with)
			return where_fail(c, e->line, PH_EINVAL, err,
					  "[data] %s is read by source = %s only with %s; set %s, or drop %s", e->key,
					  s->name, with, with, e->key);
	}
	return PH_OK;
}

/* [data] source names a source of the registry (data_source.h). */
static int resolve_data_source(ph_config *c, ph_err *err)
{
	c->data_source = ph_data_source_find(c->data.source);
	if (c->data_source)
		return check_data_keys(c, err);
	ph_ini_entry *e = ph_ini_find(&c->ini, "data", "source");
	char names[256];
	ph_data_source_names(names, sizeof names);
	return where_fail(c, e ? e->line : 0, PH_EINVAL, err, "[data] source = %s is not a data source; the sources are: %s",
			  c->data.source, names);
}

/* [partition] or [schedule]: `type` picks the plugin, the rest are its keys. */
static int resolve_typed(ph_config *c, const ph_registry *reg, const ph_core_section *r, ph_err *err)
{
	const char *section = r->name;
	const ph_option *head = r->options;
	void *head_cfg = section_cfg(c, r);
	ph_plugin_kind kind = r->plugin;
	const void **ops_out = (const void **)((char *)c + r->ops_offset);
	void **cfg_out = (void **)((char *)c + r->plugin_cfg_offset);
	int rc = defaults(head, head_cfg, err);
	if (rc)
		return rc;
	char *type = head_cfg; /* both head structs start with type[] */
	ph_ini_entry *te = ph_ini_find(&c->ini, section, "type");
	int line = 0;
	if (te) {
		snprintf(type, PH_STR_MAX, "%s", te->value);
		line = te->line;
	}
	const void *ops = ph_registry_find(reg, kind, type);
	if (!ops) {
		const char *s = ph_registry_suggest(reg, kind, type);
		char names[512];
		ph_registry_names(reg, kind, names, sizeof names);
		if (!type[0])
			return where_fail(c, line, PH_EINVAL, err, "[%s] type is empty; give one of: %s", section, names);
		if (s)
			return where_fail(c, line, PH_EINVAL, err, "unknown %s plugin '%s'; did you mean '%s'? (found: %s)",
					  ph_kind_name(kind), type, s, names);
		/* no near name: most likely a plugin not installed where runs
		 * look, so say where they looked (a list of none says it) */
		if (strncmp(names, "none in ", 8) && reg->searched[0])
			return where_fail(c, line, PH_EINVAL, err, "unknown %s plugin '%s': add its --plugin-dir or install "
					  "it; searched: %s; found: %s", ph_kind_name(kind), type, reg->searched, names);
		return where_fail(c, line, PH_EINVAL, err, "unknown %s plugin '%s'; found: %s", ph_kind_name(kind), type,
				  names);
	}
	const ph_ops_head *h = ops;
	void *cfg = calloc(1, h->config_size ? h->config_size : 1);
	if (!cfg)
		return ph_fail(err, PH_ENOMEM, "out of memory");
	*cfg_out = cfg;
	*ops_out = ops;
	if (h->options && (rc = defaults(h->options, cfg, err)))
		return rc;
	const ph_option *tables[3] = { head, h->options, NULL };
	void *cfgs[2] = { head_cfg, cfg };
	char plugin[PH_STR_MAX + 32];
	snprintf(plugin, sizeof plugin, "%s '%s'", ph_kind_name(kind), h->name);
	return apply_section(c, section, tables, cfgs, plugin, err);
}

static int add_layer(ph_config *c, const char *name, const ph_ini_section *s, const ph_layer_ops *ops,
		     const void *proto, const layer_common *lc, ph_err *err)
{
	ph_layer_cfg *nl = realloc(c->layers, (size_t)(c->nlayers + 1) * sizeof *nl);
	if (!nl)
		return ph_fail(err, PH_ENOMEM, "out of memory");
	c->layers = nl;
	ph_layer_cfg *l = &c->layers[c->nlayers];
	memset(l, 0, sizeof *l);
	snprintf(l->name, sizeof l->name, "%s", name);
	snprintf(l->section, sizeof l->section, "%s", s->name);
	l->line = s->line;
	l->ops = ops;
	l->cut = lc->cut;
	if (strlen(lc->tie) >= sizeof l->tie)
		return ph_fail(err, PH_EINVAL, "[%s] tie = %s is too long", s->name, lc->tie);
	strcpy(l->tie, lc->tie);
	size_t size = ops->head.config_size ? ops->head.config_size : 1;
	if (!(l->config = malloc(size)))
		return ph_fail(err, PH_ENOMEM, "out of memory");
	memcpy(l->config, proto, size);
	c->nlayers++;
	return PH_OK;
}

static int resolve_layer(ph_config *c, const ph_registry *reg, const ph_ini_section *s, ph_err *err)
{
	const char *name = s->name + 6; /* after "layer " */
	while (*name == ' ')
		name++;
	if (!*name)
		return where_fail(c, s->line, PH_EINVAL, err, "[layer] needs a name: [layer NAME]");
	if (strlen(name) > PH_LAYER_NAME_MAX) /* from --set: a file's stop at its line (inifile.c) */
		return where_fail(c, s->line, PH_EINVAL, err, "layer name '" PH_ECHO "' is longer than %d characters; shorten it",
				  PH_ECHO_ARG(name), PH_LAYER_NAME_MAX);
	layer_common lc;
	memset(&lc, 0, sizeof lc);
	int rc = defaults(ph_layer_common_options, &lc, err);
	if (rc)
		return rc;
	ph_ini_entry *te = ph_ini_find(&c->ini, s->name, "type");
	if (!te && s->line == 0) {
		/* a --set naming a layer the INI lacks: most likely a typo of a
		 * name; say the nearest, and how to add a layer on purpose */
		const char *best = NULL;
		int bd = 1 << 30;
		for (int i = 0; i < c->ini.nsections; i++) {
			const ph_ini_section *o = &c->ini.sections[i];
			if (o->line == 0 || strncmp(o->name, "layer ", 6))
				continue;
			int d = ph_edit_distance(name, o->name + 6);
			if (d < bd)
				bd = d, best = o->name + 6;
		}
		if (best && bd <= 3)
			return where_fail(c, 0, PH_EINVAL, err, "no layer '%s' in the INI; did you mean '%s'? (to add a layer, "
					  "--set its type too)", name, best);
		return where_fail(c, 0, PH_EINVAL, err, "no layer '%s' in the INI (to add a layer, --set its type too)",
				  name);
	}
	if (!te) {
		char names[512];
		ph_registry_names(reg, PH_KIND_LAYER, names, sizeof names);
		return where_fail(c, s->line, PH_EINVAL, err, "[%s] has no type; add type = one of: %s", s->name, names);
	}
	const ph_layer_ops *ops = ph_registry_find(reg, PH_KIND_LAYER, te->value);
	if (!ops) {
		const char *sug = ph_registry_suggest(reg, PH_KIND_LAYER, te->value);
		char names[512];
		ph_registry_names(reg, PH_KIND_LAYER, names, sizeof names);
		if (!te->value[0])
			return where_fail(c, te->line, PH_EINVAL, err, "[%s] type is empty; give one of: %s", s->name, names);
		if (sug)
			return where_fail(c, te->line, PH_EINVAL, err,
					  "unknown layer plugin '%s' in [%s]; did you mean '%s'? (found: %s)", te->value,
					  s->name, sug, names);
		if (strncmp(names, "none in ", 8) && reg->searched[0])
			return where_fail(c, te->line, PH_EINVAL, err, "unknown layer plugin '%s' in [%s]: add its "
					  "--plugin-dir or install it; searched: %s; found: %s", te->value, s->name,
					  reg->searched, names);
		return where_fail(c, te->line, PH_EINVAL, err, "unknown layer plugin '%s' in [%s]; found: %s", te->value,
				  s->name, names);
	}
	void *cfg = calloc(1, ops->head.config_size ? ops->head.config_size : 1);
	if (!cfg)
		return ph_fail(err, PH_ENOMEM, "out of memory");
	if (ops->head.options && (rc = defaults(ops->head.options, cfg, err))) {
		free(cfg);
		return rc;
	}
	const ph_option *tables[3] = { ph_layer_common_options, ops->head.options, NULL };
	void *cfgs[2] = { &lc, cfg };
	char plugin[PH_STR_MAX + 32];
	snprintf(plugin, sizeof plugin, "layer plugin '%s'", ops->head.name);
	rc = apply_section(c, s->name, tables, cfgs, plugin, err);
	for (int i = 0; !rc && i < c->nlayers; i++)
		if (strcmp(c->layers[i].name, name) == 0 ||
		    (lc.repeat > 1 && strncmp(c->layers[i].name, name, strlen(name)) == 0))
			rc = where_fail(c, s->line, PH_EINVAL, err, "layer name '%s' clashes with layer '%s' (line %d); rename one",
					name, c->layers[i].name, c->layers[i].line);
	for (int64_t r = 0; !rc && r < lc.repeat; r++) {
		char full[64];
		if (lc.repeat == 1)
			snprintf(full, sizeof full, "%s", name);
		else
			snprintf(full, sizeof full, "%s%lld", name, (long long)r);
		rc = add_layer(c, full, s, ops, cfg, &lc, err);
	}
	free(cfg);
	return rc;
}

/* Whether the schedule orders m micro-batches of the run's shape. */
/* 1 when the schedule takes m micro-batches; 0 when it refuses them;
 * *io set (and *e says why) when it could not tell: a table schedule's
 * file that failed to read, or out of memory (once reported as a count
 * it does not take, with the nearest it would). */
static int schedule_takes(const ph_config *c, int64_t m, ph_err *e, int *io)
{
	ph_schedule_shape sh = { (int)c->run.stages, (int)c->run.chunks, (int)m };
	int rc = c->schedule->check(c->schedule_config, &sh, e);
	if ((rc == PH_EIO || rc == PH_ENOMEM) && !*io)
		*io = rc;
	return rc == PH_OK;
}

/* [optimizer] keys that are each in range but mean nothing together, which
 * PyTorch refuses or a user would not ask for on purpose: silently, SGD
 * with nesterov and no momentum is plain SGD, and a cosine "floor" above
 * the peak climbs to it. */
static int check_optimizer(ph_config *c, ph_err *err)
{
	const ph_optim_config *o = &c->optim;
	ph_ini_entry *e;
	if (o->type == PH_OPTIM_SGD && o->nesterov && !(o->momentum > 0)) {
		e = ph_ini_find(&c->ini, "optimizer", "nesterov");
		return where_fail(c, e ? e->line : 0, PH_EINVAL, err, "[optimizer] nesterov = yes needs momentum above 0 "
				  "(momentum = %g: Nesterov's step looks ahead along the momentum); set momentum, or "
				  "nesterov = no", o->momentum);
	}
	if (o->lr_schedule == PH_LR_COSINE && o->min_lr > o->lr) {
		e = ph_ini_find(&c->ini, "optimizer", "min_lr");
		return where_fail(c, e ? e->line : 0, PH_EINVAL, err, "[optimizer] min_lr = %g is above lr = %g: the cosine "
				  "would climb to it; set min_lr at most lr (or lr_schedule = constant)", o->min_lr, o->lr);
	}
	return PH_OK;
}

/* The schedule's own check of the run's shape, made here, where the batch
 * is known: a schedule sees ranks, chunks and micro-batches only, so the
 * counts it would suggest may not split [run] batch (interleaved over 3
 * ranks takes 3 or 6, and 32 splits into neither).  Name the nearest
 * counts it takes that the batch splits into, or say to change the batch
 * as well.  A refusal no other count cures (a table schedule's file
 * that does not parse), or a shape with more chunks than the schedule
 * runs, is left to the plan, which makes the same check again. */
static int check_schedule_shape(ph_config *c, ph_err *err)
{
	const ph_schedule_ops *s = c->schedule;
	int64_t m = c->run.micro_batches, R = c->run.replicas, B = c->run.batch, per = B / R;
	ph_err e2 = { { 0 } }, other;
	int io = 0;
	if (!s || !s->check || c->run.chunks > s->max_chunks_per_rank || schedule_takes(c, m, &e2, &io))
		return PH_OK;
	if (io) { /* no answer, so no count to suggest */
		*err = e2;
		return io;
	}
	int64_t lo = 0, hi = 0, near = 0, top = per < 4096 ? per : 4096;
	for (int64_t k = m - 1; k >= 1 && !lo && !io; k--)
		if (per % k == 0 && schedule_takes(c, k, &other, &io))
			lo = k;
	for (int64_t k = m + 1; k <= top && !hi && !io; k++)
		if (per % k == 0 && schedule_takes(c, k, &other, &io))
			hi = k;
	/* none splits the batch: the nearest count taken at all (within
	 * reach: a table schedule reads its file at each try) */
	for (int64_t d = 1; !lo && !hi && !near && !io && d <= 256; d++) {
		if (m - d >= 1 && schedule_takes(c, m - d, &other, &io))
			near = m - d;
		else if (m + d <= 4096 && schedule_takes(c, m + d, &other, &io))
			near = m + d;
	}
	if (io) {
		*err = other;
		return io;
	}
	/* no count helps (a table that does not parse): the plan says so, in
	 * the schedule's words */
	if (!lo && !hi && !near)
		return PH_OK;
	char where[PH_STR_MAX + 16], fix[160];
	ph_ini_where_key(&c->ini, "run", "micro_batches", where, sizeof where);
	int64_t step = near * R, blo = step ? B / step * step : 0;
	if (lo && hi)
		snprintf(fix, sizeof fix, "of the counts it takes, [run] batch = %lld splits into %lld or %lld: set "
			 "micro_batches to one", (long long)B, (long long)lo, (long long)hi);
	else if (lo || hi)
		snprintf(fix, sizeof fix, "of the counts it takes, [run] batch = %lld splits into %lld: set micro_batches = "
			 "%lld", (long long)B, (long long)(lo ? lo : hi), (long long)(lo ? lo : hi));
	else if (blo)
		snprintf(fix, sizeof fix, "no count it takes divides [run] batch = %lld: change the batch too, e.g. "
			 "micro_batches = %lld with batch = %lld or %lld", (long long)B, (long long)near, (long long)blo,
			 (long long)(blo + step));
	else
		snprintf(fix, sizeof fix, "no count it takes divides [run] batch = %lld: change the batch too, e.g. "
			 "micro_batches = %lld with batch = %lld", (long long)B, (long long)near, (long long)step);
	/* the schedule's own advice ("; use ...") is what fix replaces, and
	 * the line must fit PH_ERR_MAX with a long path before it: the
	 * schedule's reason gives way ("..."), never the fix at the end */
	char *advice = strstr(e2.msg, "; ");
	if (advice)
		*advice = 0;
	const size_t room = PH_ERR_MAX - 1, others = strlen(where) + strlen(": ; ") + strlen(fix);
	if (others + strlen(e2.msg) > room && others + 16 < room)
		memcpy(e2.msg + (room - others - 3), "...", 4);
	return ph_fail(err, PH_EINVAL, "%s: %s; %s", where, e2.msg, fix);
}

int ph_config_resolve(ph_config *c, const ph_registry *reg, ph_err *err)
{
	int rc;
	for (const ph_core_section *r = ph_core_sections; r->name; r++)
		if (r->kind == PH_SECTION_PLAIN && (rc = defaults(r->options, section_cfg(c, r), err)))
			return rc;
	/* Sections must be known before any key is read, so that a misspelt
	 * section is reported as such rather than as missing keys. */
	for (int i = 0; i < c->ini.nsections; i++)
		if (!known_section(c->ini.sections[i].name))
			return unknown_section(c, &c->ini.sections[i], err);
	/* The plain sections, then the typed ones (they need the registry),
	 * then the layers. */
	for (const ph_core_section *r = ph_core_sections; r->name; r++)
		if (r->kind == PH_SECTION_PLAIN && (rc = resolve_plain(c, r, err)))
			return rc;
	if ((rc = resolve_data_source(c, err)))
		return rc;
	for (const ph_core_section *r = ph_core_sections; r->name; r++)
		if (r->kind == PH_SECTION_TYPED && (rc = resolve_typed(c, reg, r, err)))
			return rc;
	for (int i = 0; i < c->ini.nsections; i++)
		if (strncmp(c->ini.sections[i].name, "layer", 5) == 0 &&
		    (rc = resolve_layer(c, reg, &c->ini.sections[i], err)))
			return rc;
	if (c->nlayers == 0)
		return ph_fail(err, PH_EINVAL, "%s: the model has no layers; add [layer NAME] sections with type = ...",
			       c->ini.path);
	{
		/* where each rank runs: a bad list, or a GPU that is not there,
		 * stops here, before anything is allocated */
		if (c->comm.size < 1)
			c->comm.size = 1; /* a caller that set no processes: one */
		ph_ini_entry *re = ph_ini_find(&c->ini, "run", "replicas");
		int64_t N = c->comm.size, R = c->run.replicas ? c->run.replicas : N;
		c->run.replicas = R;
		if (R >= N ? R % N : N % R)
			return where_fail(c, re ? re->line : 0, PH_EINVAL, err,
					  "[run] replicas = %lld does not divide among %lld processes (mpirun -np %lld); use a "
					  "multiple of %lld (whole pipelines per process), a divisor of it (each pipeline "
					  "split over processes), or 0 for one per process",
					  (long long)R, (long long)N, (long long)N, (long long)N);
		if (R < N && c->run.stages % (N / R))
			return where_fail(c, re ? re->line : 0, PH_EINVAL, err,
					  "[run] replicas = %lld on %lld processes splits each pipeline over %lld processes, "
					  "and its %lld stages do not divide among them; use stages = a multiple of %lld",
					  (long long)R, (long long)N, (long long)(N / R), (long long)c->run.stages,
					  (long long)(N / R));
		if (R < N && !c->comm.threads)
			return where_fail(c, re ? re->line : 0, PH_EUNSUPPORTED, err,
					  "[run] replicas = %lld on %lld processes splits each pipeline over processes, "
					  "whose links need an MPI with MPI_THREAD_MULTIPLE, which this one does not "
					  "provide; use replicas = %lld (a whole pipeline per process)",
					  (long long)R, (long long)N, (long long)N);
		int local = ph_config_local_replicas(c);
		ph_ini_entry *e = ph_ini_find(&c->ini, "run", "devices");
		ph_err e2 = { { 0 } };
		/* auto counts GPUs from the process's place on its node times
		 * the ranks it runs: whole pipelines' ranks, or its share of a
		 * split one's, whose first rank is lo */
		ph_split_share sh = ph_config_split_share(c, (int)c->run.stages);
		int first = R < N ? c->comm.local_rank * sh.per - sh.lo : c->comm.local_rank * local * (int)c->run.stages;
		if ((rc = ph_placement_parse(&c->place, c->run.devices, (int)c->run.stages, local, first, &e2)))
			return where_fail(c, e ? e->line : 0, rc, err, "[run] %s", e2.msg);
		if (R < N && c->place.cuda && c->place.ordinal) {
			/* a split pipeline: the ranks another process runs sit on
			 * this process's first GPU, so that it makes no CUDA
			 * context on the other processes' GPUs (their tensors
			 * live in host copies alone: here(), engine-impl.h) */
			if (!(c->place.process = malloc((size_t)c->run.stages * sizeof *c->place.process)))
				return ph_fail(err, PH_ENOMEM, "out of memory");
			for (int r = 0; r < (int)c->run.stages; r++) {
				int mine = r >= sh.lo && r < sh.lo + sh.per;
				c->place.process[r] = mine ? -1 : sh.base + r / sh.per;
				if (!mine)
					c->place.ordinal[r] = c->place.ordinal[sh.lo];
			}
		}
		if (c->run.precision == PH_PREC_BF16 && !c->place.cuda) {
			ph_ini_entry *pe = ph_ini_find(&c->ini, "run", "precision");
			return where_fail(c, pe ? pe->line : 0, PH_EINVAL, err,
					  "[run] precision = bf16 needs a CUDA device (devices = %s runs on the CPU, "
					  "which computes in fp32); use precision = fp32 or devices = cuda",
					  c->run.devices);
		}
	}
	if (c->run.batch % (c->run.micro_batches * c->run.replicas)) {
		int64_t m = c->run.micro_batches * c->run.replicas, b = c->run.batch;
		int64_t lo = b / m * m, hi = lo + m;
		ph_ini_entry *e = ph_ini_find(&c->ini, "run", "batch");
		/* the nearest batches that split, below and above; below b
		 * there may be none (b < m) */
		char fix[96];
		if (lo)
			snprintf(fix, sizeof fix, "use batch = %lld or %lld", (long long)lo, (long long)hi);
		else
			snprintf(fix, sizeof fix, "use batch = %lld (or a multiple of it), or fewer micro-batches",
				 (long long)hi);
		if (c->run.replicas > 1)
			return where_fail(c, e ? e->line : 0, PH_EINVAL, err,
					  "[run] batch = %lld does not split into %lld replicas of %lld equal micro-batches; %s",
					  (long long)b, (long long)c->run.replicas, (long long)c->run.micro_batches, fix);
		return where_fail(c, e ? e->line : 0, PH_EINVAL, err,
				  "[run] batch = %lld does not split into %lld equal micro-batches; %s", (long long)b,
				  (long long)m, fix);
	}
	if ((rc = check_optimizer(c, err)))
		return rc;
	if ((rc = check_schedule_shape(c, err)))
		return rc;
	/* a file where the cache directory goes: said now, not only when a
	 * run happens to measure (cost = flops never reads the cache) */
	struct stat st;
	const char *pc = c->part.profile_cache;
	if (pc[0] && strcmp(pc, "off") && stat(pc, &st) == 0 && !S_ISDIR(st.st_mode)) {
		ph_ini_entry *e = ph_ini_find(&c->ini, "partition", "profile_cache");
		return where_fail(c, e ? e->line : 0, PH_EINVAL, err,
				  "[partition] profile_cache = " PH_ECHO " is a file, not a directory; give a directory "
				  "for the measured costs (made if missing), or off",
				  PH_ECHO_ARG(pc));
	}
	return PH_OK;
}

void ph_config_free(ph_config *c)
{
	for (int i = 0; i < c->nlayers; i++)
		free(c->layers[i].config);
	free(c->layers);
	free(c->partitioner_config);
	free(c->schedule_config);
	ph_placement_free(&c->place);
	ph_ini_free(&c->ini);
	memset(c, 0, sizeof *c);
}
