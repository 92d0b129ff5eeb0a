/* SPDX-License-Identifier: MIT */
/* pipehost: train a model through a pipeline of stages.
 *
 *   pipehost -c run.ini [--set section.key=value ...] [--plan] [--save-weights FILE] [--resume DIR]
 *   pipehost -c run.ini --generate PROMPT [--max-new-tokens N] [--temperature T] [--top-k K] [--seed S]
 *   pipehost --list-plugins | --list-options
 *   pipehost --check-plugin FILE.so [--shape 4x8] [--batch N] [--set NAME.KEY=VALUE ...]
 *
 * Only this file exits: everything below returns status codes, and every
 * failure reaches the user as one line on stderr.  Exit status: 0 done, 1 a
 * failure, 2 a usage error (the command line), 130/143 stopped by
 * SIGINT/SIGTERM after writing a checkpoint (docs/conventions.md). */
#include "build-config.h"
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "blas_gate.h"
#include "check_plugin.h"
#include "cli.h"
#include "comm.h"
#include "config.h"
#include "config_agree.h"
#include "data_source.h"
#include "engine.h"
#include "errline.h"
#include "generate.h"
#include "gpu_switches.h"
#include "hf_gpt2.h"
#include "memcheck.h"
#include "options.h"
#include "planjson.h"
#include "signals.h"
#include "profile.h"
#include "layer_times.h"
#include "simulate.h"
#include "train.h"

#ifndef PH_PLUGIN_DIR
#define PH_PLUGIN_DIR "/usr/local/lib/pipehost"
#endif


/* The files this invocation will write, checked before it measures, loads
 * or trains anything (ph_run_check_outputs): writable, none of its inputs
 * (an --svg or --plan-json naming the INI once replaced it), no two the
 * same.  Which files depends on what the line asks for. */
static int check_outputs(const ph_cli *cli, const ph_config *cfg, ph_err *err)
{
	ph_output outs[4];
	int n = 0;
	const char *plan_json = cli->plan_json && strcmp(cli->plan_json, "-") ? cli->plan_json : NULL;
	if (cli->gen.prompt) {
		/* the weights --generate will read are an input; if none can be
		 * found, ph_generate says so in its own words */
		char w[4096] = "";
		ph_err ignored;
		if (cli->gen.weights)
			snprintf(w, sizeof w, "%s", cli->gen.weights);
		else if (ph_generate_weights_path(cfg, w, sizeof w, &ignored))
			w[0] = 0;
		outs[n++] = (ph_output){ "--logits", cli->gen.logits_path };
		return ph_run_check_outputs(cfg, cli->config, NULL, w, outs, n, err);
	}
	outs[n++] = (ph_output){ "--plan-json", plan_json };
	if (cli->simulate) {
		outs[n++] = (ph_output){ "--svg", cli->svg };
		outs[n++] = (ph_output){ "--trace", cli->trace };
	} else if (!cli->plan_only) {
		const char *w = cli->save_weights ? cli->save_weights : cfg->run.save_weights;
		outs[n++] = (ph_output){ cli->save_weights ? "--save-weights" : "[run] save_weights", w };
		outs[n++] = (ph_output){ "[run] metrics", cfg->run.metrics };
		outs[n++] = (ph_output){ "--trace", cli->trace };
		/* the checkpoints' directory is written too: an output file of
		 * that name would fail only after training, or (metrics, opened
		 * at the start) leave the directory made for nothing */
		int rc = ph_outputs_check_not_dir(outs, n, "[checkpoint] dir", cfg->checkpoint.dir, err);
		if (rc)
			return rc;
	}
	return ph_run_check_outputs(cfg, cli->config, cli->resume, NULL, outs, n, err);
}

static void plugin_path(const ph_cli *cli, const char *from_ini, char *buf, size_t len)
{
	const char *env = getenv("PIPEHOST_PLUGIN_PATH");
	snprintf(buf, len, "%s:%s:%s:%s", cli->plugin_dirs, from_ini ? from_ini : "", env ? env : "", PH_PLUGIN_DIR);
}

static void list_options(void)
{
	for (const ph_core_section *r = ph_core_sections; r->name; r++) {
		printf("[%s]\n", r->name);
		ph_options_print(stdout, r->options, "  ");
		if (r->list_more)
			r->list_more(stdout, "  ");
	}
}

enum { EXIT_USAGE = 2 };

/* One line on how the CPU's cores are shared, so a user can pin them:
 * results are bitwise reproducible for a fixed ranks x threads only. */
static void print_threads(const ph_config *c)
{
	if (c->place.cuda)
		return;
	if (c->place.auto_cpu[0]) /* a job written for GPUs, on none: said, not silent */
		printf("devices = auto: no GPU (%s); every rank runs on the CPU\n", c->place.auto_cpu);
	long cores = sysconf(_SC_NPROCESSORS_ONLN);
	int threads = ph_profile_run_threads(c);
	long ranks = ph_config_busy(c, (int)c->run.stages);
	printf("cpu: %ld rank(s) x %d BLAS thread(s) on %ld core(s)%s\n", ranks, threads, cores,
	       c->run.threads > 0 ? "" : " ([run] threads = 0: cores / ranks; set threads to pin it)");
	if (ranks > cores)
		printf("note: %ld ranks share %ld cores, so they take turns; fewer stages (or more cores) run faster\n",
		       ranks, cores);
	int built = ph_blas_build_threads(); /* blas_gate.h */
	if (ranks > built)
		printf("note: this OpenBLAS was built for %d threads: at most %d of the %ld ranks are inside it at once\n",
		       built, built, ranks);
}

/* ph_profile_input for the run: its first `batch` training samples,
 * loading the data set on the first call (run() then does not load it
 * again).  A data set that does not load leaves the profiler on random
 * input; run() meets the same error again when it loads. */
typedef struct {
	const ph_config *cfg;
	const ph_shape *in;
	ph_dataset *train, *test;
	int loaded;
} profile_data;

static const float *profile_samples(void *ctx, int batch, ph_err *err)
{
	profile_data *pd = ctx;
	if (!pd->loaded) {
		if (pd->cfg->data_source->load(pd->cfg, pd->in, pd->train, pd->test, err)) {
			ph_data_free(pd->train);
			ph_data_free(pd->test);
			memset(pd->train, 0, sizeof *pd->train);
			memset(pd->test, 0, sizeof *pd->test);
			return NULL;
		}
		pd->loaded = 1;
	}
	if (pd->train->n < batch || ph_shape_numel(&pd->train->shape) != ph_shape_numel(pd->in)) {
		ph_fail(err, PH_EINVAL, "the training data do not fill a micro-batch");
		return NULL;
	}
	return pd->train->x;
}

/* Layer L's integer option `name` (its plugin's table), into *v. */
static int layer_int_option(const ph_layer *L, const char *name, int64_t *v)
{
	const ph_option *o = L->ops->head.options ? ph_options_find(L->ops->head.options, name) : NULL;
	if (!o || o->type != PH_OPT_INT)
		return 0;
	memcpy(v, (const char *)L->cfg->config + o->offset, sizeof *v);
	return 1;
}

/* The key that makes the loss's `classes`, for an error: going back from
 * the loss over the layers whose output ends in that many (a dropout
 * passes it on), the first integer option of that value ("[layer fc2]
 * units"); else the loss's input. */
static void classes_key(const ph_model *m, int64_t classes, char *buf, size_t len)
{
	for (int i = m->n - 2; i >= 0; i--) {
		const ph_layer *L = &m->layers[i];
		const ph_shape *out = &L->meta.out;
		if (out->ndim < 1 || out->d[out->ndim - 1] != classes)
			break;
		for (const ph_option *o = L->ops->head.options; o && o->name; o++) {
			int64_t v;
			if (o->type == PH_OPT_INT && layer_int_option(L, o->name, &v) && v == classes) {
				snprintf(buf, len, "[%s] %s", L->cfg->section, o->name);
				return;
			}
		}
	}
	const ph_layer *loss = &m->layers[m->n - 1];
	snprintf(buf, len, "the logits into layer %s, %s", loss->cfg->name, loss->ops->head.name);
}

/* Every class and token id of the samples a run reads is one its model
 * takes, checked once at load: a batch holding one past it would stop
 * the run only at that step, after checkpoints (and a CUDA loss or
 * embedding would make it a NaN).  The classes are the loss's: its
 * targets index numel(in) / targets_per_sample logits each, the range
 * --check-plugin draws them from (docs/plugin-templates.md).  A layer's
 * meta has no word for "my input is ids below N", so the inputs are
 * checked where a first layer says so by an integer option `vocab`
 * (embedding, and any layer that takes token ids by that name). */
static int check_ids(const ph_model *model, const ph_dataset *ds, const char *split, int64_t n, ph_err *err)
{
	const ph_layer *first = &model->layers[0], *loss = &model->layers[model->n - 1];
	int64_t classes = ph_shape_numel(&loss->in) / model->targets_per_sample, vocab;
	char where[128], ckey[PH_STR_MAX + 64];
	classes_key(model, classes, ckey, sizeof ckey);
	if (layer_int_option(first, "vocab", &vocab)) {
		int64_t k = ph_data_first_outside(ds, n, 0, vocab);
		if (k >= 0) {
			double v = ds->x[k];
			ph_data_where(ds, split, 0, k, where, sizeof where);
			if (!(v >= 0) || v != (double)(int64_t)v)
				return ph_fail(err, PH_EINVAL, "%s: input %g at %s is not a token id; layer %s (%s) takes whole "
					       "numbers in [0, %lld): give it token ids", ds->x_from, v, where, first->cfg->name,
					       first->ops->head.name, (long long)vocab);
			/* in a stream the id is the target before it too */
			int also = ds->unit && v >= (double)classes;
			return ph_fail(err, PH_EINVAL, "%s: id %.0f at %s is past the model's %lld ids ([%s] vocab%s%s); "
				       "give ids below %lld or raise %s", ds->x_from, v, where, (long long)vocab,
				       first->cfg->section, also ? ", " : "", also ? ckey : "", (long long)vocab,
				       also ? "both" : "it");
		}
	}
	int64_t k = ph_data_first_outside(ds, n, 1, classes);
	if (k >= 0) {
		ph_data_where(ds, split, 1, k, where, sizeof where);
		return ph_fail(err, PH_EINVAL, "%s: %s %d at %s is past the model's %lld classes (%s); give %ss below %lld "
			       "or raise it", ds->y_from, ds->unit ? "id" : "label", (int)ds->y[k], where,
			       (long long)classes, ckey, ds->unit ? "id" : "label", (long long)classes);
	}
	return PH_OK;
}

/* The data loaded for a run fit the model planned: the engine copies
 * batch x numel(in) floats per step, so a data set of other samples must
 * never reach it; they hold at least one batch; and every id the run
 * reads is one the model takes: the training samples it trains on ([data]
 * limit), the test samples it evaluates ([data] test_limit; none
 * with [run] eval = no). */
static int check_data(const ph_config *cfg, const ph_model *model, const ph_shape *in, const ph_dataset *train,
		      const ph_dataset *test, ph_err *err)
{
	if (ph_shape_numel(&train->shape) != ph_shape_numel(in) || ph_shape_numel(&test->shape) != ph_shape_numel(in) ||
	    train->targets_per_sample != model->targets_per_sample) {
		char want[64], got[64];
		ph_shape_str(in, want, sizeof want);
		ph_shape_str(ph_shape_numel(&train->shape) != ph_shape_numel(in) ? &train->shape : &test->shape, got,
			     sizeof got);
		return ph_fail(err, PH_EINVAL, "the data's samples are %s with %d target(s), the model was planned for %s with "
			       "%d; check [data] and the loss layer", got, train->targets_per_sample, want,
			       model->targets_per_sample);
	}
	int rc = ph_train_check_data(cfg, train, err);
	int64_t ntrain = cfg->data.limit && cfg->data.limit < train->n ? cfg->data.limit : train->n;
	int64_t ntest = !cfg->run.eval ? 0 : cfg->data.test_limit ? cfg->data.test_limit : test->n;
	if (!rc)
		rc = check_ids(model, train, "training", ntrain, err);
	if (!rc)
		rc = check_ids(model, test, cfg->data_source->per_byte || test->unit ? "validation" : "test", ntest, err);
	return rc;
}

/* After files written under ph_stop_hold: whether a stop signal came
 * meanwhile (then main exits 128 + the signal, and says so here). */
static int stopped_after(const char *what)
{
	int sig = ph_stop_signal();
	if (!sig)
		return 0;
	fflush(stdout);
	fprintf(stderr, "pipehost: interrupted by %s while %s wrote its files: they were written in full first; "
		"stopping with exit status %d\n", sig == SIGINT ? "SIGINT" : "SIGTERM", what, ph_stop_exit_status());
	return 1;
}

/* What the processes compare after reading [run] init (ph_start_agree):
 * the XXH3-64 of every tensor as read, in layer order.  NULL: out of
 * memory. */
static char *init_text(const ph_tensor_ref *t, int n)
{
	XXH3_state_t *st = XXH3_createState();
	char *text = malloc(96);
	if (!st || !text || XXH3_64bits_reset(st) != XXH_OK) {
		XXH3_freeState(st);
		free(text);
		return NULL;
	}
	for (int i = 0; i < n; i++)
		XXH3_64bits_update(st, t[i].data, (size_t)ph_shape_numel(&t[i].shape) * sizeof *t[i].data);
	snprintf(text, 96, "[run] init weights (XXH3-64)=%016llx\n", (unsigned long long)XXH3_64bits_digest(st));
	XXH3_freeState(st);
	return text;
}

/* stdout as it was before run() set it aside (*fd, closed and -1 after):
 * what went to it meanwhile is flushed to stderr first */
static void stdout_back(int *fd)
{
	fflush(stdout);
	dup2(*fd, STDOUT_FILENO);
	close(*fd);
	*fd = -1;
}

/* What run() was doing, for a bare "out of memory" (oom_line) */
static const char *phase;

static int run(const ph_cli *cli, const ph_comm *comm, int *stopped, ph_err *err)
{
	ph_registry reg;
	memset(&reg, 0, sizeof reg);
	reg.allow_writable = cli->allow_writable;
	char path[8192];
	int rc;
	if (cli->check_plugin) {
		ph_check_opts co = { .file = cli->check_plugin, .shape = cli->shape, .batch = cli->batch,
				     .sets = cli->overrides, .nsets = cli->noverrides, .allow_writable = cli->allow_writable,
				     .plugin_dirs = cli->plugin_dirs };
		return ph_check_plugin(&co, stdout, err);
	}
	if (!cli->config) {
		plugin_path(cli, NULL, path, sizeof path);
		if (cli->list_options)
			list_options();
		rc = PH_OK;
		if (cli->list_plugins) {
			if (!(rc = ph_registry_load_path(&reg, path, err)))
				ph_registry_print(stdout, &reg);
			ph_registry_free(&reg); /* what loaded before a refused plugin too */
		}
		return rc;
	}
	ph_config cfg;
	ph_model model;
	ph_plan plan;
	ph_engine *engine = NULL;
	ph_dataset train, test;
	double *cost_f = NULL, *cost_b = NULL; /* [partition] cost = profile */
	int data_loaded = 0;
	int json_stdout = cli->plan_json && !strcmp(cli->plan_json, "-");
	/* --plan=json owns stdout: until the document is written, what else
	 * would go there (a plugin's printf in create, say) goes to stderr,
	 * so the document stays JSON */
	int json_fd = -1;
	if (json_stdout) {
		fflush(stdout);
		if ((json_fd = dup(STDOUT_FILENO)) < 0 || dup2(STDERR_FILENO, STDOUT_FILENO) < 0) {
			rc = ph_fail(err, PH_EIO, "--plan=json: cannot set stdout aside: %s", strerror(errno));
			if (json_fd >= 0)
				close(json_fd);
			return rc;
		}
	}
	memset(&model, 0, sizeof model);
	memset(&plan, 0, sizeof plan);
	memset(&train, 0, sizeof train);
	memset(&test, 0, sizeof test);
	phase = "reading the config";
	if ((rc = ph_config_read(&cfg, cli->config, cli->overrides, cli->noverrides, err)))
		goto out;
	cfg.comm = *comm;
	cfg.progress = cli->progress;
	/* before the plugins load, so before any CUDA code can read them */
	if ((rc = ph_gpu_switches_apply(&cfg.gpu, err)))
		goto out;
	plugin_path(cli, ph_config_plugin_path(&cfg), path, sizeof path);
	/* every .so of a --plugin-dir is loaded and checked; of the rest of
	 * the path, only those that may hold a plugin the INI names */
	phase = "loading the plugins";
	if ((rc = ph_registry_load_path(&reg, cli->list_plugins ? path : cli->plugin_dirs, err)))
		goto out;
	ph_registry_search_path(&reg, path);
	if ((rc = ph_registry_load_for_ini(&reg, &cfg.ini, err)))
		goto out;
	/* with -c the lists take the INI's plugin path, and the run stops
	 * there, as after --plan: a listing is not a request to train */
	if (cli->list_options)
		list_options();
	if (cli->list_plugins)
		ph_registry_print(stdout, &reg);
	if (cli->list_plugins || cli->list_options)
		goto out;
	if ((rc = ph_config_resolve(&cfg, &reg, err)))
		goto out;
	/* under mpirun every process must run one job: its resolved config
	 * and the command line's part in it against process 0's, before
	 * anything is loaded, measured or planned (core/config_agree.h) */
	const char *wout = cli->save_weights ? cli->save_weights : cfg.run.save_weights;
	const char *mode = cli->gen.prompt ? "--generate" : cli->simulate ? "--simulate" : cli->plan_only ? "--plan" : "training";
	ph_agree_cli agree = { mode, cli->trace != NULL, cli->resume != NULL, wout[0] != 0 };
	if ((rc = ph_config_agree(&cfg, &agree, err)))
		goto out;
	if ((rc = check_outputs(cli, &cfg, err)))
		goto out; /* an output that cannot be written fails now, not after the work */
	ph_shape in;
	const ph_data_source *source = cfg.data_source;
	if ((rc = source->sample_shape(&cfg, &in, err)))
		goto out;
	if (cli->gen.prompt) {
		/* under mpirun process 0 alone generates and prints (the
		 * others would repeat its text and its "generated" line) */
		if (!ph_comm_writer(&cfg.comm))
			goto out;
		ph_gen_opts go = cli->gen;
		if (!cli->gen_seed_set)
			go.seed = (uint64_t)cfg.run.seed;
		/* the ids the model was trained on: a BPE run generates in BPE */
		ph_tokenizer bpe = { 0 };
		if (cfg.data.tokenizer == PH_TOKENIZER_BPE) {
			if ((rc = ph_tokenizer_bpe(&bpe, cfg.data.vocab, cfg.data.merges, err)))
				goto out;
			go.tok = &bpe;
		}
		phase = "generating";
		rc = ph_generate(&cfg, &in, &go, stdout, stderr, err);
		if (go.tok)
			ph_tokenizer_bpe_free(&bpe);
		goto out;
	}
	int mbsize = (int)(cfg.run.batch / (cfg.run.micro_batches * cfg.run.replicas));
	phase = "building the model";
	if ((rc = ph_model_build(&model, &cfg, &in, mbsize, err)) || (rc = ph_plan_check_cuttable(&model, &cfg, err)) ||
	    (rc = ph_plan_check_per_mb(&model, &cfg, err)))
		goto out; /* a job that cannot run: before the profiler measures it */
	/* A run that trains loads its data now, before the profiler measures
	 * and before --plan-json is written: data that cannot train this
	 * model fail the run before it has done or left anything. */
	if (!cli->plan_only && !cli->simulate) {
		phase = "loading the data";
		if ((rc = source->load(&cfg, &in, &train, &test, err)) || (rc = check_data(&cfg, &model, &in, &train, &test, err)))
			goto out;
		data_loaded = 1;
		/* under mpirun: the same samples in every process, whatever
		 * copy of the files each node read (core/config_agree.h) */
		if ((rc = ph_data_agree(&cfg.comm, &train, &test, &in, err)))
			goto out;
	}
	if (cfg.part.cost == PH_COST_PROFILE || cfg.part.cost == PH_COST_AUTO) {
		cost_f = calloc((size_t)model.n, sizeof *cost_f);
		cost_b = calloc((size_t)model.n, sizeof *cost_b);
		if (!cost_f || !cost_b) {
			rc = ph_fail(err, PH_ENOMEM, "out of memory");
			goto out;
		}
		/* the profiler times the layers on the run's own samples, loaded
		 * now only if it measures */
		profile_data pd = { &cfg, &in, &train, &test, data_loaded };
		ph_profile_input input = { profile_samples, &pd };
		int used = 0;
		if ((rc = ph_profile_costs_for_run(&model, &cfg, &input, cost_f, cost_b, &used, json_stdout ? NULL : stdout,
						   err)))
			goto out;
		/* under mpirun every process must cut alike: process 0's costs */
		if (cfg.comm.size > 1 && cfg.comm.ops &&
		    ((rc = cfg.comm.ops->bcast(&used, sizeof used, 0, err)) ||
		     (used && ((rc = cfg.comm.ops->bcast(cost_f, (size_t)model.n * sizeof *cost_f, 0, err)) ||
			       (rc = cfg.comm.ops->bcast(cost_b, (size_t)model.n * sizeof *cost_b, 0, err))))))
			goto out;
		cfg.part.cost = used ? PH_COST_PROFILE : PH_COST_FLOPS; /* auto, resolved */
		if (!used) {
			free(cost_f);
			free(cost_b);
			cost_f = cost_b = NULL;
		}
	}
	phase = "planning";
	if ((rc = ph_plan_build(&plan, &model, &cfg, cost_f, cost_b, err)))
		goto out;
	/* a SIGINT/SIGTERM while these files are written waits until they are
	 * whole, then stops the run (core/signals.h: a second one 2 s later
	 * stops at once and removes the temporary file) */
	/* under mpirun one process writes the files, as a run's outputs */
	const int writer = ph_comm_writer(&cfg.comm);
	if (json_fd >= 0)
		stdout_back(&json_fd);
	if (cli->plan_json && writer) {
		ph_stop_hold();
		rc = ph_plan_write_json_file(cli->plan_json, &plan, &model, &cfg, cost_f, cost_b, err);
		ph_stop_release();
		if (rc || (*stopped = stopped_after("--plan-json")))
			goto out;
	}
	if (!json_stdout) {
		ph_plan_print(stdout, &plan, &model, &cfg);
		print_threads(&cfg);
	} else if (!cfg.place.cuda && cfg.place.auto_cpu[0]) {
		/* stdout is the JSON's: the note that a job written for GPUs
		 * runs on the CPU goes to stderr, not nowhere */
		fprintf(stderr, "pipehost: note: devices = auto: no GPU (%s); every rank runs on the CPU\n",
			cfg.place.auto_cpu);
	}
	fflush(stdout);
	if (cli->simulate) {
		ph_stop_hold();
		rc = ph_simulate_report(&plan, &model, &cfg, cost_f, cost_b, cfg.part.link_gbps * 1e9,
					writer ? cli->svg : NULL, writer ? cli->trace : NULL, stdout, err);
		ph_stop_release();
		if (!rc)
			*stopped = stopped_after("--simulate");
		goto out;
	}
	if (cli->plan_only)
		goto out;
	if ((rc = ph_memcheck_run(&plan, &model, &cfg, err)))
		goto out;
	const char *wpath = cli->save_weights ? cli->save_weights : cfg.run.save_weights;
	phase = "setting up the engine";
	if ((rc = ph_engine_create(&engine, &model, &plan, &cfg, err)))
		goto out;
	if (ph_comm_writer(&cfg.comm)) {
		ph_engine_print_window(engine, stdout);
		ph_engine_print_reduction(engine, stdout);
	}
	if (cfg.run.init[0]) {
		/* every parameter must be in the file with its exact shape; tied
		 * copies are read from the file too, so they must agree there */
		ph_tensor_ref *t;
		int nt;
		if ((rc = ph_engine_tensors(engine, &t, &nt, err)))
			goto out;
		int hf; /* a Hugging Face GPT-2 file maps onto the layers (docs/gpt2.md) */
		rc = ph_weights_read_any(cfg.run.init, &model, t, nt, &hf, err);
		/* a NaN here would surface as "the loss is NaN" at step 1,
		 * which reads as a learning-rate problem: name the tensor */
		int64_t at = 0;
		const int bad = rc ? -1 : ph_tensors_first_nonfinite(t, nt, &at);
		if (bad >= 0)
			rc = ph_fail(err, PH_EINVAL, "[run] init %s: %s holds %s at element %lld; give weights that are "
				     "all finite", cfg.run.init, t[bad].name, isnan(t[bad].data[at]) ? "NaN" : "an infinity",
				     (long long)at);
		char *digest = rc || cfg.comm.size <= 1 ? NULL : init_text(t, nt);
		free(t);
		if (rc || (rc = ph_engine_upload_tensors(engine, err))) {
			free(digest);
			goto out;
		}
		/* every process read the same weights: the paths may differ from
		 * node to node, the contents may not */
		if (cfg.comm.size > 1 &&
		    (rc = ph_start_agree(&cfg.comm, digest, "initial weights differ",
					 "give every process the same [run] init file", err)))
			goto out;
		printf("initial weights read from %s%s\n", cfg.run.init, hf ? " (Hugging Face GPT-2)" : "");
	}
	/* every process records its own ranks; process 0 writes them all */
	if (cli->trace && (rc = ph_engine_trace(engine, err)))
		goto out;
	ph_train_ckpt ck = { cfg.checkpoint.dir, cfg.checkpoint.every, cfg.checkpoint.keep, cli->resume };
	ph_train_result res;
	if ((rc = ph_layer_times_from_env(model.n, err))) /* bench/profile-vs-step.sh */
		goto out;
	phase = "training";
	if ((rc = ph_train_ck(&cfg, engine, &train, &test, &ck, &res, err)) || (rc = ph_layer_times_finish(&model, err)))
		goto out;
	if (res.interrupted) {
		*stopped = 1; /* by SIGINT/SIGTERM after writing a checkpoint: exit 128 + signal */
		goto out;
	}
	if (res.steps_run && res.steps_run < res.steps) /* resumed: say what this run trained */
		printf("trained %lld steps (steps %lld..%lld, resumed) in %.1f s; final loss %.4f", (long long)res.steps_run,
		       (long long)(res.steps - res.steps_run + 1), (long long)res.steps, res.seconds, res.final_loss);
	else if (res.steps_run)
		printf("trained %lld steps in %.1f s; final loss %.4f", (long long)res.steps, res.seconds, res.final_loss);
	else
		printf("trained no step (the run of %lld steps was complete); no loss to report", (long long)res.steps);
	if (res.test_loss >= 0 && ph_data_per_byte(&cfg))
		printf("; validation loss %.4f nats/byte (%.4f bits/byte) on %lld sequences", res.test_loss,
		       res.test_loss / 0.6931471805599453, (long long)res.test_samples);
	else if (res.test_loss >= 0)
		printf("; test accuracy %.2f%% on %lld samples", 100.0 * res.test_accuracy, (long long)res.test_samples);
	printf("\n");
	printf("activation memory per rank:");
	for (int r = 0; r < plan.ranks; r++) {
		double b = ph_engine_activation_bytes(engine, r);
		if (b < 0)
			printf(" %d: in another process%s", r, r + 1 < plan.ranks ? "," : "");
		else
			printf(" %d: %.2f MiB%s", r, b / (1024.0 * 1024.0), r + 1 < plan.ranks ? "," : "");
	}
	printf("%s\n", cfg.run.recompute ? " (recompute on)" : "");
	int gpu_ord[64], ngpu = 0;
	size_t gpu_bytes[64], gpu_phase[64][3];
	if ((rc = ph_engine_gpu_memory(engine, gpu_ord, gpu_bytes, gpu_phase, 64, &ngpu, err)))
		goto out;
	for (int k = 0; k < ngpu; k++) {
		/* each phase's growth: where the peak comes from */
		const double M = 1048576.0;
		const size_t *ph = gpu_phase[k];
		printf("%s cuda:%d %.1f MiB (ranks opened %.1f, parameters and optimizer state %+.1f, activations and "
		       "buffers %+.1f, training %+.1f)%s",
		       k ? "," : "peak GPU memory (held beyond the CUDA context):", gpu_ord[k], gpu_bytes[k] / M, ph[0] / M,
		       ((double)ph[1] - (double)ph[0]) / M, ((double)ph[2] - (double)ph[1]) / M,
		       ((double)gpu_bytes[k] - (double)ph[2]) / M, k + 1 == ngpu ? "\n" : "");
	}
	rc = ph_train_write_outputs(&cfg, engine, &res, cli->trace, wpath, err);
	if (!rc && ph_stop_signal())
		*stopped = 1; /* held while the outputs were written: exit 128 + signal */
out:
	if (json_fd >= 0)
		stdout_back(&json_fd);
	free(cost_f);
	free(cost_b);
	ph_engine_destroy(engine);
	ph_data_free(&train);
	ph_data_free(&test);
	ph_plan_free(&plan);
	ph_model_free(&model);
	ph_config_free(&cfg);
	ph_registry_free(&reg);
	return rc;
}

/* A positive count from environment variable NAME, or 0. */
static long env_count(const char *name)
{
	const char *s = getenv(name);
	char *end;
	long v = s && *s ? strtol(s, &end, 10) : 0;
	return v > 0 && !*end ? v : 0;
}

/* torchrun (RANK, WORLD_SIZE) and a plain srun (SLURM_PROCID,
 * SLURM_STEP_NUM_TASKS) start N processes pipehost cannot join: each would
 * run the whole job alone, N copies writing the same files.  Refuse, and
 * say how to launch.  An MPI launcher (OMPI_COMM_WORLD_SIZE, PMI_SIZE,
 * PMIX_RANK: srun --mpi=pmix) is ph_comm_init's.  SLURM_NTASKS alone is
 * not a launch: a batch script of sbatch -n 4 has it, run once. */
static int refuse_foreign_launcher(ph_err *err)
{
	if (getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK"))
		return PH_OK;
	long n = env_count("WORLD_SIZE");
	const char *who = "torchrun (WORLD_SIZE)";
	if (n <= 1 && getenv("SLURM_PROCID")) {
		n = env_count("SLURM_STEP_NUM_TASKS");
		who = "srun (SLURM_STEP_NUM_TASKS)";
	}
	if (n <= 1)
		return PH_OK;
	return ph_fail(err, PH_EUNSUPPORTED,
		       "started as one of %ld processes by %s, which pipehost does not join (each would train alone); "
		       "launch it with mpirun -np %ld pipehost ... (or srun --mpi=pmix)", n, who, n);
}

/* A failure for want of memory says where and what to do: most of the
 * places that find it know no more than "out of memory". */
static void oom_line(ph_err *err)
{
	if (strchr(err->msg, ';') || strstr(err->msg, "free memory"))
		return; /* it already says what to do */
	char line[PH_ERR_MAX];
	snprintf(line, sizeof line, "%s%s%s; free memory, or make the job smaller ([run] batch, micro_batches, replicas, "
		 "the model's sizes): --plan estimates what a run needs", err->msg,
		 phase && !strcmp(err->msg, "out of memory") ? " while " : "",
		 phase && !strcmp(err->msg, "out of memory") ? phase : "");
	snprintf(err->msg, sizeof err->msg, "%s", line);
}

int main(int argc, char **argv)
{
	ph_cli cli;
	memset(&cli, 0, sizeof cli);
	ph_err err = { { 0 } };
	ph_comm comm = { 0, 1, 0, 0, 0, NULL };
	ph_signals_init(); /* a closed stdout or a file-size limit: an error, not a silent death */
	int rc = ph_cli_parse(argc, argv, &cli, &err), stopped = 0;
	if (rc) {
		ph_err_line(stderr, "pipehost: ", err.msg[0] ? err.msg : "bad command line");
		return EXIT_USAGE;
	}
	if (cli.help) {
		ph_cli_usage(stdout);
		return 0;
	}
	if (cli.version) {
		ph_cli_print_version();
		return 0;
	}
	/* under mpirun: join the other processes; only process 0 prints
	 * progress (errors still reach stderr from every process).  A run
	 * under another launcher stops here (--list-plugins and the like
	 * still work there). */
	if (!(rc = cli.config ? refuse_foreign_launcher(&err) : PH_OK) && !(rc = ph_comm_init(&comm, &err)) &&
	    !ph_comm_writer(&comm) && !freopen("/dev/null", "w", stdout))
		rc = ph_fail(&err, PH_EIO, "process %d: cannot silence its output (/dev/null)", comm.rank);
	/* a run's plugin code that calls exit() or crashes gets one line
	 * (core/signals.h); main's own exits below come after the disarm.
	 * Not --check-plugin: it runs plugin code in a child of its own,
	 * and reports how that ended. */
	if (!rc && cli.config)
		ph_plugin_guard_arm();
	if (!rc)
		rc = run(&cli, &comm, &stopped, &err);
	ph_plugin_guard_disarm();
	if (rc) {
		fflush(stdout);
		/* under mpirun a failure every process shares (a config error)
		 * is best reported once: process 0 prints and aborts at once,
		 * which ends the others during this pause; a failure of this
		 * process alone is printed after it */
		if (comm.size > 1 && comm.rank != 0)
			sleep(1);
		/* every caller passes a failed allocation on as PH_ENOMEM
		 * (tests/test-oom.sh fails each allocation in turn) */
		if (rc == PH_ENOMEM)
			oom_line(&err);
		char prefix[64] = "pipehost: ";
		if (comm.size > 1)
			snprintf(prefix, sizeof prefix, "pipehost: process %d of %d: ", comm.rank, comm.size);
		ph_err_line(stderr, prefix, err.msg[0] ? err.msg : "failed");
		/* the others may be waiting for this one: stop them all */
		if (comm.size > 1)
			comm.ops->abort(1);
		return 1;
	}
	ph_comm_finalize(&comm);
	return stopped ? ph_stop_exit_status() : 0;
}
