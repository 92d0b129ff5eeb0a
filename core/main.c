/* pipehost: train a model through a pipeline of stages.
 *
 *   pipehost -c run.ini [--set section.key=value ...] [--plan] [--save-weights FILE] [--resume DIR]
 *   pipehost --list-plugins | --list-options
 *
 * Only this file exits: everything below returns status codes, and every
 * failure reaches the user as one line on stderr and exit status 1. */
#include "build-config.h"
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm.h"
#include "config.h"
#include "engine.h"
#include "memcheck.h"
#include "options.h"
#include "planjson.h"
#include "signals.h"
#include "profile.h"
#include "simulate.h"
#include "train.h"

#ifndef PH_PLUGIN_DIR
#define PH_PLUGIN_DIR "/usr/local/lib/pipehost"
#endif

static void usage(FILE *f)
{
	fprintf(f,
		"usage: pipehost -c FILE [options]      train the model FILE describes\n"
		"       pipehost --list-plugins         every plugin found, with its options\n"
		"       pipehost --list-options         the keys of [run], [data], [optimizer], [layer]\n"
		"options:\n"
		"  -c, --config FILE        the run's INI file\n"
		"  -s, --set SEC.KEY=VALUE  override one INI key (repeatable), e.g. --set run.steps=20\n"
		"      --plan[=json]        print the partition and schedule (a table, or JSON) and exit\n"
		"      --plan-json FILE     also write the plan as JSON to FILE (- = stdout)\n"
		"      --save-weights FILE  write the trained weights (safetensors)\n"
		"      --resume DIR         continue from the newest checkpoint in DIR (or from DIR/step-N)\n"
		"      --trace FILE         write every op of every rank (Chrome trace JSON, opens in Perfetto)\n"
		"      --simulate           run the schedule on the cost model: step time, bubble, peak memory\n"
		"      --svg FILE           --simulate's timeline (default timeline.svg); --trace FILE: its Chrome trace\n"
		"      --plugin-dir DIR     search DIR for plugins first (repeatable)\n"
		"      --allow-writable-plugins  load plugins even from files or directories others can write\n"
		"  -V, --version            print the version\n"
		"plugins are searched in --plugin-dir, [run] plugin_path, $PIPEHOST_PLUGIN_PATH and %s\n",
		PH_PLUGIN_DIR);
}

typedef struct {
	const char *config;
	const char *overrides[256];
	int noverrides;
	char plugin_dirs[4096];
	int plan_only, list_plugins, list_options;
	const char *save_weights;
	const char *resume;     /* --resume DIR */
	int allow_writable;     /* --allow-writable-plugins */
	const char *plan_json; /* --plan=json: "-"; --plan-json FILE */
	const char *trace;
	int simulate;
	const char *svg;
} cli_t;

static int parse_cli(int argc, char **argv, cli_t *cli, ph_err *err)
{
	enum { OPT_PLAN = 1000, OPT_LIST, OPT_LISTOPT, OPT_SAVE, OPT_PDIR, OPT_PLANJSON, OPT_TRACE, OPT_SIMULATE, OPT_SVG, OPT_RESUME, OPT_ALLOWW };
	static const struct option longopts[] = {
		{ "config", required_argument, NULL, 'c' },  { "set", required_argument, NULL, 's' },
		{ "plan", optional_argument, NULL, OPT_PLAN }, { "plan-json", required_argument, NULL, OPT_PLANJSON },
		{ "list-plugins", no_argument, NULL, OPT_LIST },
		{ "list-options", no_argument, NULL, OPT_LISTOPT }, { "save-weights", required_argument, NULL, OPT_SAVE },
		{ "plugin-dir", required_argument, NULL, OPT_PDIR }, { "help", no_argument, NULL, 'h' },
		{ "trace", required_argument, NULL, OPT_TRACE },
		{ "simulate", no_argument, NULL, OPT_SIMULATE }, { "svg", required_argument, NULL, OPT_SVG },
		{ "resume", required_argument, NULL, OPT_RESUME },
		{ "allow-writable-plugins", no_argument, NULL, OPT_ALLOWW },
		{ "version", no_argument, NULL, 'V' },         { NULL, 0, NULL, 0 }
	};
	int ch;
	opterr = 0;
	while ((ch = getopt_long(argc, argv, ":c:s:hV", longopts, NULL)) != -1) {
		switch (ch) {
		case 'c': cli->config = optarg; break;
		case 's':
			if (cli->noverrides == 256)
				return ph_fail(err, PH_EINVAL, "too many --set options (256 at most)");
			cli->overrides[cli->noverrides++] = optarg;
			break;
		case OPT_PLAN:
			cli->plan_only = 1;
			if (optarg && !strcmp(optarg, "json"))
				cli->plan_json = "-";
			else if (optarg && strcmp(optarg, "text"))
				return ph_fail(err, PH_EINVAL, "--plan=%s: expected --plan, --plan=text or --plan=json", optarg);
			break;
		case OPT_PLANJSON: cli->plan_json = optarg; break;
		case OPT_LIST: cli->list_plugins = 1; break;
		case OPT_LISTOPT: cli->list_options = 1; break;
		case OPT_SAVE: cli->save_weights = optarg; break;
		case OPT_RESUME: cli->resume = optarg; break;
		case OPT_ALLOWW: cli->allow_writable = 1; break;
		case OPT_TRACE: cli->trace = optarg; break;
		case OPT_SIMULATE: cli->simulate = 1; break;
		case OPT_SVG: cli->svg = optarg; break;
		case OPT_PDIR: {
			size_t used = strlen(cli->plugin_dirs);
			snprintf(cli->plugin_dirs + used, sizeof cli->plugin_dirs - used, "%s%s", used ? ":" : "", optarg);
			break;
		}
		case 'h': usage(stdout); exit(0);
		case 'V':
			/* the backends this build has: tests and scripts read it */
			printf("pipehost %s (plugin ABI %d.%d; backends: cpu%s; processes: %s)\n", PACKAGE_VERSION, PH_ABI_MAJOR,
			       PH_ABI_MINOR,
#ifdef PH_WITH_CUDA
			       ", cuda",
#else
			       "",
#endif
#ifdef PH_WITH_MPI
			       "mpirun (MPI)"
#else
			       "one (built without MPI)"
#endif
			);
			exit(0);
		case ':': return ph_fail(err, PH_EINVAL, "%s needs a value; see pipehost --help", argv[optind - 1]);
		default: return ph_fail(err, PH_EINVAL, "unknown option %s; see pipehost --help", argv[optind - 1]);
		}
	}
	if (optind < argc)
		return ph_fail(err, PH_EINVAL, "unexpected argument %s; the config goes after -c", argv[optind]);
	if (!cli->config && !cli->list_plugins && !cli->list_options)
		return ph_fail(err, PH_EINVAL, "no config given; run pipehost -c FILE (see pipehost --help)");
	return PH_OK;
}

static void plugin_path(const cli_t *cli, const char *from_ini, char *buf, size_t len)
{
	const char *env = getenv("PIPEHOST_PLUGIN_PATH");
	snprintf(buf, len, "%s:%s:%s:%s", cli->plugin_dirs, from_ini ? from_ini : "", env ? env : "", PH_PLUGIN_DIR);
}

static void list_options(void)
{
	printf("[run]\n");
	ph_options_print(stdout, ph_run_options, "  ");
	printf("[data]\n");
	ph_options_print(stdout, ph_data_options, "  ");
	printf("[optimizer]\n");
	ph_options_print(stdout, ph_optimizer_options, "  ");
	printf("[partition]\n");
	ph_options_print(stdout, ph_partition_options, "  ");
	printf("[schedule]\n");
	ph_options_print(stdout, ph_schedule_options, "  ");
	printf("[checkpoint]\n");
	ph_options_print(stdout, ph_checkpoint_options, "  ");
	printf("[layer NAME]\n");
	ph_options_print(stdout, ph_layer_common_options, "  ");
}

/* The per-sample input shape a data source gives, known without loading it. */
static int data_shape(const ph_config *c, ph_shape *s, ph_err *err)
{
	memset(s, 0, sizeof *s);
	if (c->data.source == PH_DATA_FASHION_MNIST) {
		*s = (ph_shape){ 3, { 1, 28, 28 } };
		return PH_OK;
	}
	if (c->data.source == PH_DATA_TEXT) {
		*s = (ph_shape){ 1, { c->data.seq_len } };
		return PH_OK;
	}
	if (c->data.shape.n < 1 || c->data.shape.n > PH_MAX_DIMS)
		return ph_fail(err, PH_EINVAL, "[data] shape needs 1 to %d dimensions", PH_MAX_DIMS);
	s->ndim = c->data.shape.n;
	for (int i = 0; i < s->ndim; i++)
		s->d[i] = c->data.shape.v[i];
	return PH_OK;
}

static int load_data(const ph_config *c, const ph_shape *shape, ph_dataset *train, ph_dataset *test, ph_err *err)
{
	if (c->data.source == PH_DATA_FASHION_MNIST) {
		int rc = ph_data_load_fashion_mnist(c->data.path, 1, train, err);
		return rc ? rc : ph_data_load_fashion_mnist(c->data.path, 0, test, err);
	}
	if (c->data.source == PH_DATA_TEXT) {
		int rc = ph_data_load_text(c->data.path, (int)c->data.seq_len, c->data.holdout, 1, train, err);
		return rc ? rc : ph_data_load_text(c->data.path, (int)c->data.seq_len, c->data.holdout, 0, test, err);
	}
	uint64_t seed = (uint64_t)c->run.seed;
	int rc = ph_data_synthetic(c->data.samples, shape, (int)c->data.classes, seed, train, err);
	/* the test split shares the class prototypes (same seed) but not the samples */
	if (!rc) {
		ph_dataset all;
		rc = ph_data_synthetic(c->data.samples + c->data.test_samples, shape, (int)c->data.classes, seed, &all, err);
		if (!rc) {
			int64_t numel = ph_shape_numel(shape);
			memset(test, 0, sizeof *test);
			*test = all;
			test->n = c->data.test_samples;
			test->x = malloc((size_t)(test->n * numel) * sizeof(float));
			test->y = malloc((size_t)test->n * all.targets_per_sample * sizeof(int32_t));
			if (!test->x || !test->y) {
				ph_data_free(&all);
				return ph_fail(err, PH_ENOMEM, "out of memory");
			}
			memcpy(test->x, all.x + c->data.samples * numel, (size_t)(test->n * numel) * sizeof(float));
			memcpy(test->y, all.y + c->data.samples * all.targets_per_sample,
			       (size_t)test->n * all.targets_per_sample * sizeof(int32_t));
			ph_data_free(&all);
		}
	}
	return rc;
}

static int save_weights(ph_engine *e, const char *path, ph_err *err)
{
	ph_tensor_ref *t;
	int n;
	int rc = ph_engine_tensors(e, &t, &n, err);
	if (rc)
		return rc;
	static const char *const meta[] = { "format", "pt", "producer", "pipehost " PACKAGE_VERSION, NULL };
	rc = ph_safetensors_write(path, t, n, meta, err);
	free(t);
	if (!rc)
		printf("weights written to %s (%d tensors)\n", path, n);
	return rc;
}

static int run(const cli_t *cli, const ph_comm *comm, ph_err *err)
{
	ph_registry reg;
	memset(&reg, 0, sizeof reg);
	reg.allow_writable = cli->allow_writable;
	char path[8192];
	int rc;
	if (!cli->config) {
		plugin_path(cli, NULL, path, sizeof path);
		if (cli->list_options)
			list_options();
		if (cli->list_plugins) {
			if ((rc = ph_registry_load_path(&reg, path, err)))
				return rc;
			ph_registry_print(stdout, &reg);
			ph_registry_free(&reg);
		}
		return PH_OK;
	}
	ph_config cfg;
	ph_model model;
	ph_plan plan;
	ph_engine *engine = NULL;
	ph_dataset train, test;
	double *cost_f = NULL, *cost_b = NULL; /* [partition] cost = profile */
	int json_stdout = cli->plan_json && !strcmp(cli->plan_json, "-");
	memset(&model, 0, sizeof model);
	memset(&plan, 0, sizeof plan);
	memset(&train, 0, sizeof train);
	memset(&test, 0, sizeof test);
	if ((rc = ph_config_read(&cfg, cli->config, cli->overrides, cli->noverrides, err)))
		goto out;
	cfg.comm = *comm;
	plugin_path(cli, ph_config_plugin_path(&cfg), path, sizeof path);
	/* every .so of a --plugin-dir is loaded and checked; of the rest of
	 * the path, only those that may hold a plugin the INI names */
	if ((rc = ph_registry_load_path(&reg, cli->list_plugins ? path : cli->plugin_dirs, err)))
		goto out;
	ph_registry_search_path(&reg, path);
	if ((rc = ph_registry_load_for_ini(&reg, &cfg.ini, err)))
		goto out;
	if (cli->list_plugins)
		ph_registry_print(stdout, &reg);
	if ((rc = ph_config_resolve(&cfg, &reg, err)))
		goto out;
	ph_shape in;
	if ((rc = data_shape(&cfg, &in, err)))
		goto out;
	int mbsize = (int)(cfg.run.batch / (cfg.run.micro_batches * cfg.run.replicas));
	if ((rc = ph_model_build(&model, &cfg, &in, mbsize, err)))
		goto out;
	if (cfg.part.cost == PH_COST_PROFILE) {
		cost_f = calloc((size_t)model.n, sizeof *cost_f);
		cost_b = calloc((size_t)model.n, sizeof *cost_b);
		if (!cost_f || !cost_b) {
			rc = ph_fail(err, PH_ENOMEM, "out of memory");
			goto out;
		}
		if ((rc = ph_profile_costs_for_run(&model, &cfg, cost_f, cost_b, json_stdout ? NULL : stdout, err)))
			goto out;
	}
	if ((rc = ph_plan_build(&plan, &model, &cfg, cost_f, cost_b, err)))
		goto out;
	if (cli->plan_json && (rc = ph_plan_write_json_file(cli->plan_json, &plan, &model, &cfg, cost_f, cost_b, err)))
		goto out;
	if (!json_stdout)
		ph_plan_print(stdout, &plan, &model, &cfg);
	fflush(stdout);
	if (cli->simulate) {
		rc = ph_simulate_report(&plan, &model, &cfg, cost_f, cost_b, cfg.part.link_gbps * 1e9,
					cli->svg ? cli->svg : "timeline.svg", cli->trace, stdout, err);
		goto out;
	}
	if (cli->plan_only)
		goto out;
	if ((rc = ph_memcheck_run(&plan, &model, &cfg, err)))
		goto out;
	if ((rc = load_data(&cfg, &in, &train, &test, err)))
		goto out;
	/* The engine copies batch x numel(in) floats per step: a data set of
	 * other samples must never reach it. */
	if (ph_shape_numel(&train.shape) != ph_shape_numel(&in) || ph_shape_numel(&test.shape) != ph_shape_numel(&in) ||
	    train.targets_per_sample != model.targets_per_sample) {
		char want[64], got[64];
		ph_shape_str(&in, want, sizeof want);
		ph_shape_str(ph_shape_numel(&train.shape) != ph_shape_numel(&in) ? &train.shape : &test.shape, got, sizeof got);
		rc = ph_fail(err, PH_EINVAL, "the data's samples are %s with %d target(s), the model was planned for %s with %d; "
			     "check [data] and the loss layer", got, train.targets_per_sample, want, model.targets_per_sample);
		goto out;
	}
	if ((rc = ph_engine_create(&engine, &model, &plan, &cfg, err)))
		goto out;
	if (cfg.run.init[0]) {
		/* every parameter must be in the file with its exact shape; tied
		 * copies are read from the file too, so they must agree there */
		ph_tensor_ref *t;
		int nt;
		if ((rc = ph_engine_tensors(engine, &t, &nt, err)))
			goto out;
		rc = ph_safetensors_read(cfg.run.init, t, nt, err);
		free(t);
		if (rc || (rc = ph_engine_upload_tensors(engine, err)))
			goto out;
		printf("initial weights read from %s\n", cfg.run.init);
	}
	/* only process 0 writes files: the processes hold the same weights */
	int writer = ph_comm_writer(comm);
	if (cli->trace && writer && (rc = ph_engine_trace(engine, err)))
		goto out;
	ph_train_ckpt ck = { cfg.checkpoint.dir, cfg.checkpoint.every, cfg.checkpoint.keep, cli->resume };
	ph_train_result res;
	if ((rc = ph_train_ck(&cfg, engine, &train, &test, &ck, &res, err)))
		goto out;
	if (res.interrupted)
		goto out; /* stopped by SIGINT/SIGTERM after writing a checkpoint: exit 0 */
	printf("trained %lld steps in %.1f s; final loss %.4f", (long long)res.steps, res.seconds, res.final_loss);
	if (res.test_loss >= 0 && cfg.data.source == PH_DATA_TEXT)
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
	if (cli->trace && writer) {
		if ((rc = ph_engine_write_trace(engine, cli->trace, err)))
			goto out;
		printf("trace written to %s\n", cli->trace);
	}
	const char *wpath = cli->save_weights ? cli->save_weights : cfg.run.save_weights;
	if (wpath[0] && !(rc = ph_engine_gather(engine, err)) && writer)
		rc = save_weights(engine, wpath, err);
out:
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

int main(int argc, char **argv)
{
	cli_t cli;
	memset(&cli, 0, sizeof cli);
	ph_err err = { { 0 } };
	ph_comm comm = { 0, 1, 0, 0, 0, NULL };
	ph_signals_init(); /* a closed stdout or a file-size limit: an error, not a silent death */
	int rc = parse_cli(argc, argv, &cli, &err);
	/* under mpirun: join the other processes; only process 0 prints
	 * progress (errors still reach stderr from every process) */
	if (!rc && !(rc = ph_comm_init(&comm, &err)) && !ph_comm_writer(&comm) && !freopen("/dev/null", "w", stdout))
		rc = ph_fail(&err, PH_EIO, "process %d: cannot silence its output (/dev/null)", comm.rank);
	if (!rc)
		rc = run(&cli, &comm, &err);
	if (rc) {
		fflush(stdout);
		/* under mpirun a failure every process shares (a config error)
		 * is best reported once: process 0 prints and aborts at once,
		 * which ends the others during this pause; a failure of this
		 * process alone is printed after it */
		if (comm.size > 1 && comm.rank != 0)
			sleep(1);
		if (comm.size > 1)
			fprintf(stderr, "pipehost: process %d of %d: %s\n", comm.rank, comm.size,
				err.msg[0] ? err.msg : "failed");
		else
			fprintf(stderr, "pipehost: %s\n", err.msg[0] ? err.msg : "failed");
		/* the others may be waiting for this one: stop them all */
		if (comm.size > 1)
			comm.ops->abort(1);
		return 1;
	}
	ph_comm_finalize(&comm);
	return 0;
}
