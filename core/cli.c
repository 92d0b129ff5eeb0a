/* SPDX-License-Identifier: MIT */
/* The command line (cli.h): options, their values and the combinations
 * that do not go together, checked before anything is loaded. */
#include "build-config.h"
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <sys/stat.h>

#include "check_plugin.h"
#include "cli.h"
#include "config.h"

#ifndef PH_PLUGIN_DIR
#define PH_PLUGIN_DIR "/usr/local/lib/pipehost"
#endif

void ph_cli_usage(FILE *f)
{
	fprintf(f,
		"usage: pipehost -c FILE [options]      train the model FILE describes\n"
		"       pipehost --list-plugins         every plugin found, with its options\n"
		"       pipehost --list-options         the keys of every core section ([run], [data], ...)\n"
		"       pipehost --check-plugin FILE.so  run the project's plugin tests on a plugin (PASS/FAIL lines)\n"
		"options:\n"
		"  -c, --config FILE        the run's INI file\n"
		"  -s, --set SEC.KEY=VALUE  override one INI key (repeatable), e.g. --set run.steps=20\n"
		"      --plan[=text|json]   print the partition and schedule (a table, or JSON) and exit\n"
		"      --plan-json FILE     also write the plan as JSON to FILE (- = stdout)\n"
		"      --save-weights FILE  write the trained weights (safetensors)\n"
		"      --resume DIR         continue from the newest checkpoint in DIR (or from DIR/step-N)\n"
		"      --progress=MODE      auto (default), tty (one line redrawn), lines (a line every [run] log_every\n"
		"                           steps, no carriage returns), none\n"
		"      --trace FILE         write every op of every rank (Chrome trace JSON, opens in Perfetto)\n"
		"      --simulate           run the schedule on the cost model: step time, bubble, peak memory\n"
		"      --svg FILE           with --simulate: draw the timeline as SVG in FILE; --trace FILE: its Chrome trace\n"
		"      --plugin-dir DIR     search DIR for plugins first (repeatable)\n"
		"      --allow-writable-plugins  load plugins even from files or directories others can write\n"
		"      --check-plugin FILE  check a plugin: ABI, then each layer's meta, gradients, determinism,\n"
		"                           its CUDA twin against its CPU code on cuda:0 (where there is a GPU),\n"
		"                           each schedule's validity, each partitioner's cuts; --set NAME.KEY=VALUE\n"
		"                           sets a plugin's option\n"
		"      --shape DxD...       --check-plugin: a layer's per-sample input, e.g. 4x8 (default: 4x8,\n"
		"                           2x6x6 or 8, the first the layer accepts)\n"
		"      --batch N            --check-plugin: the largest batch to check (default 4; 1 is checked too)\n"
		"      --generate PROMPT    print PROMPT and its continuation by the trained language model (docs/gpt2.md)\n"
		"      --max-new-tokens N   --generate: tokens to add (default 100)\n"
		"      --temperature T      --generate: divide the logits by T (default 1; 0 = greedy)\n"
		"      --top-k K            --generate: sample among the K likeliest tokens (default 0 = all)\n"
		"      --seed S             --generate: the sampler's seed (default [run] seed)\n"
		"      --load-weights FILE  --generate: the weights, pipehost's or a Hugging Face GPT-2 file (default:\n"
		"                           the newest checkpoint, else [run] save_weights if it exists, else [run] init)\n"
		"      --logits FILE        --generate: write the prompt's logits [L, vocab] (safetensors)\n"
		"  -h, --help               print this summary\n"
		"  -V, --version            print the version\n"
		"plugins are searched in --plugin-dir, [run] plugin_path, $PIPEHOST_PLUGIN_PATH and %s\n",
		PH_PLUGIN_DIR);
}


/* A number for a --generate flag, in [lo, hi]; `what` says what is accepted. */
static int gen_number(const char *flag, const char *text, double lo, double hi, int integer, double *v,
		      const char *what, ph_err *err)
{
	char *end;
	errno = 0;
	double d = strtod(text, &end);
	if (errno == ERANGE && fabs(d) < 1) /* underflow: a number this close to 0 is that number */
		errno = 0;
	if (end == text || *end || errno || !(d >= lo && d <= hi) || (integer && d != (double)(int64_t)d))
		return ph_fail(err, PH_EINVAL, "%s %s: give %s", flag, text, what);
	*v = d;
	return PH_OK;
}

/* The long options without a short one */
enum {
	OPT_PLAN = 1000, OPT_LIST, OPT_LISTOPT, OPT_SAVE, OPT_PDIR, OPT_PLANJSON, OPT_TRACE, OPT_SIMULATE, OPT_SVG,
	OPT_RESUME, OPT_ALLOWW, OPT_CHECK, OPT_SHAPE, OPT_BATCH, OPT_GEN, OPT_GEN_N, OPT_GEN_TEMP, OPT_GEN_TOPK,
	OPT_GEN_SEED, OPT_GEN_LOAD, OPT_GEN_LOGITS, OPT_PROGRESS
};

/* Does the option's value name a file or directory? */
static int is_path_option(int ch)
{
	switch (ch) {
	case 'c': case OPT_PLANJSON: case OPT_SAVE: case OPT_PDIR: case OPT_TRACE: case OPT_SVG: case OPT_RESUME:
	case OPT_CHECK: case OPT_GEN_LOAD: case OPT_GEN_LOGITS: return 1;
	default: return 0;
	}
}

/* the backends this build has: tests and scripts read it */
void ph_cli_print_version(void)
{
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
}

/* The long options "--ARG" (or "--ARG=...") names, as getopt_long reads
 * it: one when ARG is an option's whole name (*hit) or the prefix of one
 * alone (*hit), more when it is the prefix of several (ambiguous; buf,
 * may be NULL, lists them joined by ", "), 0 when none or not "--". */
static int options_named(const struct option *longopts, const char *arg, const char **hit, char *buf, size_t len)
{
	*hit = NULL;
	if (buf && len)
		buf[0] = 0;
	if (strncmp(arg, "--", 2) || !arg[2])
		return 0;
	size_t n = strcspn(arg + 2, "="), used = 0;
	int count = 0;
	for (const struct option *o = longopts; o->name; o++) {
		if (strncmp(o->name, arg + 2, n))
			continue;
		if (!o->name[n]) {
			*hit = o->name; /* exact: never ambiguous */
			return 1;
		}
		*hit = o->name;
		if (buf && used < len)
			used += (size_t)snprintf(buf + used, len - used, "%s--%s", count ? ", " : "", o->name);
		count++;
	}
	if (count > 1)
		*hit = NULL;
	return count;
}

int ph_cli_parse(int argc, char **argv, ph_cli *cli, ph_err *err)
{
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
		{ "check-plugin", required_argument, NULL, OPT_CHECK }, { "shape", required_argument, NULL, OPT_SHAPE },
		{ "batch", required_argument, NULL, OPT_BATCH },
		{ "generate", required_argument, NULL, OPT_GEN }, { "max-new-tokens", required_argument, NULL, OPT_GEN_N },
		{ "temperature", required_argument, NULL, OPT_GEN_TEMP }, { "top-k", required_argument, NULL, OPT_GEN_TOPK },
		{ "seed", required_argument, NULL, OPT_GEN_SEED }, { "load-weights", required_argument, NULL, OPT_GEN_LOAD },
		{ "logits", required_argument, NULL, OPT_GEN_LOGITS },
		{ "progress", required_argument, NULL, OPT_PROGRESS },
		{ "version", no_argument, NULL, 'V' },         { NULL, 0, NULL, 0 }
	};
	int ch, li = -1;
	double v;
	/* an option that takes one value, given twice: the first value
	 * would be dropped without a word (--set and --plugin-dir repeat) */
	const char *given[OPT_PROGRESS + 1] = { NULL };
	opterr = 0;
	cli->gen.max_new_tokens = 100;
	cli->gen.temperature = 1.0;
	while ((ch = getopt_long(argc, argv, ":c:s:hV", longopts, &li)) != -1) {
		/* a path given as "" would read as "not given" further on:
		 * --resume "" would train from the start, --save-weights "" drop
		 * [run] save_weights */
		if (optarg && !*optarg && is_path_option(ch))
			return ph_fail(err, PH_EINVAL, "%s%s: the path is empty; give a file or directory name, or leave "
				       "the option out", ch == 'c' ? "-" : "--", ch == 'c' ? "c" : longopts[li].name);
		/* "--trace --simulate": the value is the next word, and that word is
		 * one of our options, so the option was given without its value
		 * (it trained, and wrote the trace to a file named --simulate).
		 * A path that starts with "-" goes after "./"; "--opt=VALUE"
		 * takes VALUE as given. */
		if (optarg && optarg == argv[optind - 1] && ch != OPT_PLAN) {
			const char *other;
			options_named(longopts, optarg, &other, NULL, 0);
			int path_dash = is_path_option(ch) && optarg[0] == '-' && optarg[1];
			if (other || path_dash) {
				char name[64];
				if (li >= 0)
					snprintf(name, sizeof name, "--%s", longopts[li].name);
				else
					snprintf(name, sizeof name, "-%c", ch);
				if (other)
					return ph_fail(err, PH_EINVAL, "%s needs a value, and the word after it is the option "
						       "--%s; give %s its value first%s%s%s", name, other, name,
						       is_path_option(ch) ? " (a file of that name: ./" : " (or that very text: ",
						       is_path_option(ch) ? optarg : name,
						       is_path_option(ch) ? ")" : "=VALUE)");
				return ph_fail(err, PH_EINVAL, "%s %s: a path that starts with '-' reads as an option; "
					       "write ./%s", name, optarg, optarg);
			}
		}
		if (optarg && ch > 0 && ch <= OPT_PROGRESS && ch != 's' && ch != OPT_PDIR && ch != OPT_PLAN) {
			if (given[ch] && ch == 'c')
				return ph_fail(err, PH_EINVAL, "-c given twice (%s, then %s); give one config, and --set for "
					       "changes to it", given[ch], optarg);
			if (given[ch])
				return ph_fail(err, PH_EINVAL, "--%s given twice (%s, then %s); give it once",
					       longopts[li].name, given[ch], optarg);
			given[ch] = optarg;
		}
		li = -1;
		switch (ch) {
		case 'c':
			cli->config = optarg;
			break;
		case 's':
			if (cli->noverrides == 256)
				return ph_fail(err, PH_EINVAL, "too many --set options (256 at most)");
			cli->overrides[cli->noverrides++] = optarg;
			break;
		case OPT_PLAN: {
			const char *form = optarg ? optarg : "text";
			if (strcmp(form, "json") && strcmp(form, "text"))
				return ph_fail(err, PH_EINVAL, "--plan=%s: expected --plan, --plan=text or --plan=json", optarg);
			/* --plan=json --plan printed JSON: the second form dropped */
			if (cli->plan_only && (!strcmp(form, "json")) != cli->plan_as_json)
				return ph_fail(err, PH_EINVAL, "--plan given twice (%s, then %s); give one form",
					       cli->plan_as_json ? "json" : "text", form);
			cli->plan_only = 1;
			if (!strcmp(form, "json"))
				cli->plan_json = "-", cli->plan_as_json = 1;
			break;
		}
		case OPT_PLANJSON: cli->plan_json = optarg, cli->plan_json_file = 1; break;
		case OPT_LIST: cli->list_plugins = 1; break;
		case OPT_LISTOPT: cli->list_options = 1; break;
		case OPT_SAVE: cli->save_weights = optarg; break;
		case OPT_RESUME: {
			/* "--resume c1/": the step it names is printed as c1/step-N,
			 * not c1//step-N */
			size_t l = strlen(optarg);
			while (l > 1 && optarg[l - 1] == '/')
				optarg[--l] = 0;
			cli->resume = optarg;
			break;
		}
		case OPT_ALLOWW: cli->allow_writable = 1; break;
		case OPT_TRACE: cli->trace = optarg; break;
		case OPT_SIMULATE: cli->simulate = 1; break;
		case OPT_SVG: cli->svg = optarg; break;
		case OPT_CHECK: cli->check_plugin = optarg; break;
		case OPT_SHAPE: cli->shape = optarg; break;
		case OPT_BATCH: {
			char *end;
			long v = strtol(optarg, &end, 10);
			if (end == optarg || *end || v < 1 || v > 4096)
				return ph_fail(err, PH_EINVAL, "--batch %s: give a number of samples from 1 to 4096", optarg);
			cli->batch = (int)v;
			break;
		}
		case OPT_GEN:
			/* a usage error like every other bad --generate value (exit
			 * 2), before a model is built: nothing to continue */
			if (!*optarg)
				return ph_fail(err, PH_EINVAL, "--generate: the prompt is empty; give at least one character "
					       "of text to continue");
			cli->gen.prompt = optarg;
			break;
		case OPT_GEN_N:
			if (gen_number("--max-new-tokens", optarg, 0, 1 << 20, 1, &v, "a number of tokens from 0 to 1048576", err))
				return PH_EINVAL;
			cli->gen.max_new_tokens = (int64_t)v, cli->gen_flags = 1;
			break;
		case OPT_GEN_TEMP:
			if (gen_number("--temperature", optarg, 0, 1e6, 0, &v, "a number from 0 to 1e6 (0 = greedy)", err))
				return PH_EINVAL;
			cli->gen.temperature = v, cli->gen_flags = 1;
			break;
		case OPT_GEN_TOPK:
			if (gen_number("--top-k", optarg, 0, 1 << 30, 1, &v, "a whole number from 0 to 2^30 (0 = every token)", err))
				return PH_EINVAL;
			cli->gen.top_k = (int64_t)v, cli->gen_flags = 1;
			break;
		case OPT_GEN_SEED: {
			/* digits, read exactly: through a double, 2^53 + 1 became 2^53 */
			char *end;
			errno = 0;
			unsigned long long u = strtoull(optarg, &end, 10);
			if (!isdigit((unsigned char)optarg[0]) || *end || errno || u > (1ull << 53))
				return ph_fail(err, PH_EINVAL, "--seed %s: give a whole number from 0 to 2^53", optarg);
			cli->gen.seed = (uint64_t)u, cli->gen_flags = 1, cli->gen_seed_set = 1;
			break;
		}
		case OPT_GEN_LOAD: cli->gen.weights = optarg, cli->gen_flags = 1; break;
		case OPT_GEN_LOGITS: cli->gen.logits_path = optarg, cli->gen_flags = 1; break;
		case OPT_PROGRESS: {
			static const char *const modes[] = { "auto", "tty", "lines", "none" };
			int m = 0;
			while (m < 4 && strcmp(optarg, modes[m]))
				m++;
			if (m == 4)
				return ph_fail(err, PH_EINVAL, "--progress=%s: expected auto, tty, lines or none", optarg);
			cli->progress = m; /* the order of PH_PROGRESS_* */
			break;
		}
		case OPT_PDIR: {
			struct stat st;
			if (stat(optarg, &st) != 0 || !S_ISDIR(st.st_mode))
				return ph_fail(err, PH_EINVAL, "--plugin-dir %s: %s; give a directory that holds plugins (.so files)",
					       optarg, stat(optarg, &st) != 0 ? "no such directory" : "not a directory");
			size_t used = strlen(cli->plugin_dirs);
			if ((size_t)snprintf(cli->plugin_dirs + used, sizeof cli->plugin_dirs - used, "%s%s", used ? ":" : "",
					     optarg) >= sizeof cli->plugin_dirs - used)
				return ph_fail(err, PH_EINVAL, "--plugin-dir: the directories given add up to more than %zu "
					       "characters; give fewer, or shorter paths (the one past it: %s)",
					       sizeof cli->plugin_dirs - 1, optarg);
			break;
		}
		case 'h': cli->help = 1; break;
		case 'V': cli->version = 1; break;
		case ':': return ph_fail(err, PH_EINVAL, "%s needs a value; see pipehost --help", argv[optind - 1]);
		default: {
			char which[512];
			const char *one;
			if (options_named(longopts, argv[optind - 1], &one, which, sizeof which) > 1)
				return ph_fail(err, PH_EINVAL, "ambiguous option %s: it could be %s; write more of it",
					       argv[optind - 1], which);
			return ph_fail(err, PH_EINVAL, "unknown option %s; see pipehost --help", argv[optind - 1]);
		}
		}
	}
	if (optind < argc && (!strcmp(argv[optind], "json") || !strcmp(argv[optind], "text")))
		return ph_fail(err, PH_EINVAL, "unexpected argument %s; for the plan as %s write --plan=%s, with the '='",
			       argv[optind], argv[optind][0] == 'j' ? "JSON" : "text", argv[optind]);
	if (optind < argc)
		return ph_fail(err, PH_EINVAL, "unexpected argument %s; the config goes after -c", argv[optind]);
	/* -h and -V answer whatever else the line asks (a bad option is
	 * still refused above, wherever it stands) */
	if (cli->help || cli->version)
		return PH_OK;
	if (cli->gen_flags && !cli->gen.prompt)
		return ph_fail(err, PH_EINVAL, "--max-new-tokens, --temperature, --top-k, --seed, --load-weights and --logits "
			       "are for --generate PROMPT only");
	if (cli->gen.prompt &&
	    (cli->plan_only || cli->simulate || cli->resume || cli->save_weights || cli->trace || cli->plan_json))
		return ph_fail(err, PH_EINVAL, "--generate runs alone: drop %s",
			       cli->plan_only ? "--plan" : cli->simulate ? "--simulate" : cli->resume ? "--resume"
			       : cli->save_weights ? "--save-weights" : cli->trace ? "--trace" : "--plan-json");
	if ((cli->shape || cli->batch) && !cli->check_plugin)
		return ph_fail(err, PH_EINVAL, "%s is for --check-plugin FILE.so only", cli->shape ? "--shape" : "--batch");
	if (cli->shape && ph_check_shape_text(cli->shape, err)) /* a usage error: exit 2, as the others */
		return PH_EINVAL;
	if (cli->check_plugin && (cli->config || cli->list_plugins || cli->list_options))
		return ph_fail(err, PH_EINVAL, "--check-plugin runs alone: drop %s",
			       cli->config ? "-c" : cli->list_plugins ? "--list-plugins" : "--list-options");
	if (!cli->config && !cli->list_plugins && !cli->list_options && !cli->check_plugin)
		return ph_fail(err, PH_EINVAL, "no config given; run pipehost -c FILE (see pipehost --help)");
	/* --check-plugin and the lists train nothing: a flag only a run reads
	 * would be dropped without a word */
	const char *run_flag = cli->plan_only ? "--plan" : cli->simulate ? "--simulate"
			       : cli->save_weights ? "--save-weights" : cli->resume ? "--resume"
			       : cli->trace ? "--trace" : cli->plan_json ? "--plan-json"
			       : cli->svg ? "--svg" : cli->gen.prompt ? "--generate" : NULL;
	if (cli->check_plugin && run_flag)
		return ph_fail(err, PH_EINVAL, "--check-plugin runs alone (it trains nothing): drop %s", run_flag);
	if ((cli->list_plugins || cli->list_options) && run_flag)
		return ph_fail(err, PH_EINVAL, "%s only lists (it trains nothing): drop %s",
			       cli->list_plugins ? "--list-plugins" : "--list-options", run_flag);
	if ((cli->list_plugins || cli->list_options) && !cli->config && cli->noverrides)
		return ph_fail(err, PH_EINVAL, "--set %s changes a config, and %s reads none: drop it, or add -c FILE "
			       "(whose [run] plugin_path the list then takes)", cli->overrides[0],
			       cli->list_plugins ? "--list-plugins" : "--list-options");
	/* --plan and --simulate stop before training: a flag only training
	 * reads would be dropped without a word */
	if (cli->plan_only || cli->simulate) {
		const char *stop = cli->simulate ? "--simulate" : "--plan";
		if (cli->save_weights)
			return ph_fail(err, PH_EINVAL, "%s stops before training, so --save-weights %s would write nothing: "
				       "drop it, or drop %s to train", stop, cli->save_weights, stop);
		if (cli->resume)
			return ph_fail(err, PH_EINVAL, "%s stops before training and reads no checkpoint, so --resume %s "
				       "would do nothing: drop it, or drop %s to resume", stop, cli->resume, stop);
		if (!cli->simulate && cli->trace)
			return ph_fail(err, PH_EINVAL, "--plan stops before training, so --trace %s would write nothing: "
				       "add --simulate for the simulated timeline, or drop --plan to trace a real run",
				       cli->trace);
	}
	/* --plan=json's stdout is one JSON document and nothing else */
	if (cli->plan_as_json && cli->plan_json_file)
		return ph_fail(err, PH_EINVAL, "--plan=json prints the plan's JSON on stdout and --plan-json writes it to a "
			       "file: give one of them");
	if (cli->plan_as_json && cli->simulate)
		return ph_fail(err, PH_EINVAL, "--plan=json prints only the plan's JSON on stdout, --simulate a report beside "
			       "it: for both, give --simulate --plan-json FILE");
	/* "-" is standard output for --plan-json alone: a value these options
	 * cannot take, so a usage error (the same line as for an INI's output
	 * key, core/outputs.c, which exits 1 as a config's errors do) */
	const char *const dash[][2] = { { "--save-weights", cli->save_weights }, { "--trace", cli->trace },
				       { "--svg", cli->svg }, { "--logits", cli->gen.logits_path } };
	for (size_t i = 0; i < sizeof dash / sizeof dash[0]; i++)
		if (dash[i][1] && !strcmp(dash[i][1], "-"))
			return ph_fail(err, PH_EINVAL, "%s -: only --plan-json writes to standard output; give a file name "
				       "(./- for a file named -)", dash[i][0]);
	/* the SVG draws the simulated timeline; a real run's is --trace */
	if (cli->svg && !cli->simulate)
		return ph_fail(err, PH_EINVAL, "--svg %s needs --simulate (it draws the simulated timeline); add --simulate, "
				       "or use --trace for a real run's timeline", cli->svg);
	return PH_OK;
}
