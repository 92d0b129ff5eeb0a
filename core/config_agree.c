/* SPDX-License-Identifier: MIT */
/* Under mpirun: every process's resolved config against process 0's,
 * before any work (config_agree.h says why and how). */
#include "config_agree.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <xxhash.h>

#include "checkpoint-impl.h" /* ph_ck_sbuf, a growing string */

void ph_option_value_text(const ph_option *o, const void *cfg, char *buf, size_t len)
{
	const char *p = (const char *)cfg + o->offset;
	buf[0] = 0;
	switch (o->type) {
	case PH_OPT_INT: {
		int64_t v;
		memcpy(&v, p, sizeof v);
		snprintf(buf, len, "%lld", (long long)v);
		break;
	}
	case PH_OPT_FLOAT: {
		double v;
		memcpy(&v, p, sizeof v);
		/* the shortest of %.15g..%.17g that reads back exactly */
		for (int prec = 15; prec <= 17; prec++) {
			snprintf(buf, len, "%.*g", prec, v);
			if (strtod(buf, NULL) == v)
				break;
		}
		break;
	}
	case PH_OPT_BOOL: {
		int v;
		memcpy(&v, p, sizeof v);
		snprintf(buf, len, "%s", v ? "yes" : "no");
		break;
	}
	case PH_OPT_STRING:
		snprintf(buf, len, "%.*s", PH_STR_MAX, p);
		break;
	case PH_OPT_CHOICE: {
		int v;
		memcpy(&v, p, sizeof v);
		const char *c = o->choices ? o->choices : "";
		for (int i = 0; i < v && c; i++)
			if ((c = strchr(c, '|')))
				c++;
		if (c) {
			const char *end = strchr(c, '|');
			snprintf(buf, len, "%.*s", end ? (int)(end - c) : (int)strlen(c), c);
		} else {
			snprintf(buf, len, "#%d", v);
		}
		break;
	}
	case PH_OPT_INTLIST: {
		ph_intlist v;
		memcpy(&v, p, sizeof v);
		size_t used = 0;
		for (int i = 0; i < v.n && i < PH_INTLIST_MAX && used < len; i++) {
			int k = snprintf(buf + used, len - used, "%s%lld", i ? "," : "", (long long)v.v[i]);
			if (k < 0)
				break;
			used += (size_t)k;
		}
		break;
	}
	}
}

/* The keys that may differ between processes, and why; every other key
 * of every section, a plugin's included, must be the same (a key added
 * later counts by default: refusing beats diverging).
 *   LOCAL: the host's, not the job's, or read by process 0 alone: left
 *     out.
 *   PRESENCE: a path; where the file is may differ from node to node (a
 *     relative path in an INI is resolved against the INI's own
 *     directory, which differs where each node keeps its copy), whether
 *     there is one may not: compared as "a path" or "none". */
enum { KEEP, LOCAL, PRESENCE };
static const struct {
	const char *section, *key;
	int how;
} keys[] = {
	/* the device of each rank (cuda:0 here, cuda:1 there) and the BLAS
	 * threads suit the node; whether the ranks run on a GPU is compared
	 * (a line of its own): the CPU's and the GPU's updates differ in
	 * their last bits, so such replicas would drift apart */
	{ "run", "devices", LOCAL },
	{ "run", "threads", LOCAL },
	/* where this node finds its plugins; what they are and their options
	 * are compared (type, each key) */
	{ "run", "plugin_path", LOCAL },
	/* process 0 alone writes the metrics and progress lines */
	{ "run", "metrics", LOCAL },
	{ "run", "log_every", LOCAL },
	/* the profiler's cache: process 0's costs are broadcast to all */
	{ "partition", "profile_cache", LOCAL },
	/* where the data files are (each node may keep its own copy); their
	 * contents are compared once loaded (ph_data_agree) */
	{ "data", "path", LOCAL },
	{ "data", "vocab", LOCAL },
	{ "data", "merges", LOCAL },
	{ "data", "train_images", LOCAL },
	{ "data", "train_labels", LOCAL },
	{ "data", "test_images", LOCAL },
	{ "data", "test_labels", LOCAL },
	{ "data", "tokens", LOCAL },
	{ "data", "test_tokens", LOCAL },
	/* the table schedule's CSV, the same (its path is always set) */
	{ "schedule", "file", LOCAL },
	/* every process reads the initial weights, or none does */
	{ "run", "init", PRESENCE },
	/* checkpoints: every process takes part in each save (the weights
	 * gathered, a stop agreed on), or none does */
	{ "checkpoint", "dir", PRESENCE },
	/* with --save-weights, in the command line's lines */
	{ "run", "save_weights", LOCAL },
};

static int key_how(const char *section, const char *key)
{
	for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
		if (!strcmp(keys[i].section, section) && !strcmp(keys[i].key, key))
			return keys[i].how;
	return KEEP;
}

static void table_lines(ph_ck_sbuf *b, const char *section, const ph_option *table, const void *cfg, int exceptions)
{
	char v[PH_OPTION_TEXT_MAX];
	for (const ph_option *o = table; cfg && o && o->name; o++) {
		int how = exceptions ? key_how(section, o->name) : KEEP;
		if (how == LOCAL)
			continue;
		ph_option_value_text(o, cfg, v, sizeof v);
		if (how == PRESENCE)
			snprintf(v, sizeof v, "%s", v[0] ? "a path" : "none");
		ph_ck_printf(b, "%s.%s=%s\n", section, o->name, v);
	}
}

char *ph_config_agree_text(const ph_config *c, const ph_agree_cli *cli)
{
	ph_ck_sbuf b = { 0 };
	/* the command line's part: each makes collective calls in every
	 * process or in none */
	ph_ck_printf(&b, "mode=%s\n", cli && cli->mode ? cli->mode : "training");
	ph_ck_printf(&b, "--resume=%s\n", cli && cli->resume ? "a checkpoint" : "none");
	ph_ck_printf(&b, "--trace=%s\n", cli && cli->trace ? "a file" : "none");
	ph_ck_printf(&b, "--save-weights or [run] save_weights=%s\n", cli && cli->save_weights ? "a file" : "none");
	for (const ph_core_section *r = ph_core_sections; r->name; r++) {
		if (r->kind == PH_SECTION_LAYER)
			continue; /* below, layer by layer */
		table_lines(&b, r->name, r->options, (const char *)c + r->offset, 1);
		if (r->kind == PH_SECTION_TYPED) {
			const ph_ops_head *h = *(const void *const *)((const char *)c + r->ops_offset);
			const void *pcfg = *(void *const *)((const char *)c + r->plugin_cfg_offset);
			if (h)
				table_lines(&b, r->name, h->options, pcfg, 1);
		}
		if (!strcmp(r->name, "run"))
			ph_ck_printf(&b, "run.devices (CPU or GPU)=%s\n", c->place.cuda ? "GPU" : "CPU");
	}
	static const char *const cuts[] = { "auto", "yes", "no" };
	for (int l = 0; l < c->nlayers; l++) {
		const ph_layer_cfg *L = &c->layers[l];
		char prefix[96];
		snprintf(prefix, sizeof prefix, "layer %s", L->name);
		ph_ck_printf(&b, "%s.type=%s\n", prefix, L->ops ? L->ops->head.name : "?");
		ph_ck_printf(&b, "%s.cut=%s\n", prefix, L->cut >= 0 && L->cut < 3 ? cuts[L->cut] : "?");
		ph_ck_printf(&b, "%s.tie=%s\n", prefix, L->tie);
		if (L->ops)
			table_lines(&b, prefix, L->ops->head.options, L->config, 0);
	}
	if (b.oom) {
		free(b.s);
		return NULL;
	}
	return b.s ? b.s : calloc(1, 1);
}

/* s[0..n) for a message: printable ASCII as it is, other bytes as \xNN,
 * at most max characters of it and "..." after a cut. */
static void clip(char *out, size_t len, const char *s, int n, int max)
{
	size_t o = 0;
	int i;
	for (i = 0; i < n && i < max && o + 5 < len; i++) {
		unsigned char ch = (unsigned char)s[i];
		if (ch >= 0x20 && ch < 0x7f)
			out[o++] = (char)ch;
		else
			o += (size_t)snprintf(out + o, len - o, "\\x%02x", ch);
	}
	out[o] = 0;
	if (i < n && o + 4 <= len)
		memcpy(out + o, "...", 4);
}

void ph_config_agree_diff(const char *here, const char *p0, char *buf, size_t len)
{
	buf[0] = 0;
	if (!here || !p0)
		return;
	const char *a = here, *b = p0;
	while (*a || *b) {
		int la = (int)strcspn(a, "\n"), lb = (int)strcspn(b, "\n");
		if (la != lb || memcmp(a, b, (size_t)la)) {
			const char *ea = memchr(a, '=', (size_t)la), *eb = memchr(b, '=', (size_t)lb);
			char k[80], va[48], vb[48], A[80], B[80];
			if (!*b) {
				clip(A, sizeof A, a, la, 64);
				snprintf(buf, len, "only here: %s", A);
			} else if (!*a) {
				clip(B, sizeof B, b, lb, 64);
				snprintf(buf, len, "only in process 0: %s", B);
			} else if (ea && eb && ea - a == eb - b && !memcmp(a, b, (size_t)(ea - a))) {
				clip(k, sizeof k, a, (int)(ea - a), 56);
				clip(va, sizeof va, ea + 1, (int)(la - (ea - a) - 1), 32);
				clip(vb, sizeof vb, eb + 1, (int)(lb - (eb - b) - 1), 32);
				snprintf(buf, len, "%s = %s here, %s in process 0", k, va, vb);
			} else {
				clip(A, sizeof A, a, la, 64);
				clip(B, sizeof B, b, lb, 64);
				snprintf(buf, len, "here %s, in process 0 %s", A, B);
			}
			return;
		}
		a += la + (a[la] ? 1 : 0);
		b += lb + (b[lb] ? 1 : 0);
	}
}

/* Sleep s seconds whatever signals come (the SIGTERM of an abort is
 * caught, core/signals.c, and would cut a plain sleep short). */
static void sleep_through(double s)
{
	struct timespec now, end;
	clock_gettime(CLOCK_MONOTONIC, &end);
	end.tv_sec += (time_t)s;
	for (;;) {
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (now.tv_sec > end.tv_sec || (now.tv_sec == end.tv_sec && now.tv_nsec >= end.tv_nsec))
			return;
		struct timespec d = { end.tv_sec - now.tv_sec, end.tv_nsec - now.tv_nsec };
		if (d.tv_nsec < 0) {
			d.tv_sec--;
			d.tv_nsec += 1000000000L;
		}
		nanosleep(&d, NULL); /* EINTR: around again */
	}
}

/* The agreement itself, on any text: process 0's length, its text, then
 * the first process that differs (max_int), the same collective calls in
 * every process and in this order.  `mine` is freed.  The line says "its
 * <subject> from process 0's" ("config differs", "data differ"). */
static int agree_on_text(const ph_comm *cm, char *mine, const char *subject, const char *advice, ph_err *err)
{
	/* A process that fails alone before the calls (out of memory)
	 * returns at once: main() aborts the job, which ends the others
	 * waiting in one of them (the max_int at the latest). */
	char *theirs = NULL;
	uint64_t n = cm->rank == 0 ? (uint64_t)strlen(mine) : 0;
	int rc = cm->ops->bcast(&n, sizeof n, 0, err);
	if (rc)
		goto out;
	if (cm->rank == 0) {
		theirs = mine;
	} else if (n >= (uint64_t)1 << 30 || !(theirs = malloc((size_t)n + 1))) {
		rc = ph_fail(err, PH_ENOMEM, "out of memory for process 0's text to compare (%llu bytes)",
			     (unsigned long long)n);
		goto out;
	}
	if ((rc = cm->ops->bcast(theirs, (size_t)n, 0, err)))
		goto out;
	theirs[n] = 0;
	char diff[168];
	ph_config_agree_diff(mine, theirs, diff, sizeof diff);
	/* the lowest rank that differs, as size - rank: the largest wins */
	int first = diff[0] ? cm->size - cm->rank : 0;
	if ((rc = cm->ops->max_int(&first, err)))
		goto out;
	if (!first)
		goto out;
	first = cm->size - first;
	/* One line for the job: the first process that differs says where,
	 * at once; main() prints it after its pause of 1 s and aborts every
	 * process, so the others wait here to be ended rather than print a
	 * line of their own (process 0's would come first and end the job
	 * before the line that says where) or go on alone. */
	if (cm->rank != first)
		sleep_through(PH_AGREE_WAIT_S);
	if (diff[0])
		rc = ph_fail(err, PH_EINVAL, "its %s from process 0's: %s; %s", subject, diff, advice);
	else
		rc = ph_fail(err, PH_EINVAL, "process %d's %s from process 0's (its own line says where); %s", first,
			     subject, advice);
out:
	if (theirs != mine)
		free(theirs);
	free(mine);
	return rc;
}

int ph_start_agree(const ph_comm *cm, char *mine, const char *subject, const char *advice, ph_err *err)
{
	if (cm->size <= 1 || !cm->ops) {
		free(mine);
		return PH_OK;
	}
	if (!mine)
		return ph_fail(err, PH_ENOMEM, "out of memory for the %s digest", subject);
	return agree_on_text(cm, mine, subject, advice, err);
}

int ph_setup_agree(const ph_comm *cm, int rc, ph_err *err)
{
	if (cm->size <= 1 || !cm->ops)
		return rc;
	ph_err e2;
	/* the lowest failing rank, as size - rank: the largest wins */
	int first = rc ? cm->size - cm->rank : 0;
	int rc2 = cm->ops->max_int(&first, &e2);
	if (rc2)
		return rc ? rc : (*err = e2, rc2);
	if (!first)
		return PH_OK;
	first = cm->size - first;
	if (cm->rank == first)
		return rc;
	sleep_through(PH_AGREE_WAIT_S);
	return ph_fail(err, PH_EINVAL, "process %d failed before training (its own line says why)", first);
}

int ph_config_agree(const ph_config *c, const ph_agree_cli *cli, ph_err *err)
{
	const ph_comm *cm = &c->comm;
	if (cm->size <= 1 || !cm->ops)
		return PH_OK;
	char *mine = ph_config_agree_text(c, cli);
	if (!mine)
		return ph_fail(err, PH_ENOMEM, "out of memory for the config's text");
	return agree_on_text(cm, mine, "config differs", "give every process the same config and --set options", err);
}

static void data_lines(ph_ck_sbuf *b, const char *split, const ph_dataset *d, int64_t in_numel)
{
	const int64_t n = d ? d->n : 0;
	ph_ck_printf(b, "%s samples=%lld\n", split, (long long)n);
	if (n <= 0)
		return;
	ph_ck_printf(b, "%s inputs (XXH3-64)=%016llx\n", split,
		     (unsigned long long)XXH3_64bits(d->x, (size_t)(n * in_numel) * sizeof *d->x));
	ph_ck_printf(b, "%s targets (XXH3-64)=%016llx\n", split,
		     (unsigned long long)XXH3_64bits(d->y, (size_t)(n * d->targets_per_sample) * sizeof *d->y));
}

char *ph_data_agree_text(const ph_dataset *train, const ph_dataset *test, const ph_shape *in)
{
	ph_ck_sbuf b = { 0 };
	const int64_t numel = ph_shape_numel(in);
	data_lines(&b, "training data:", train, numel);
	data_lines(&b, "test data:", test, numel);
	if (b.oom) {
		free(b.s);
		return NULL;
	}
	return b.s ? b.s : calloc(1, 1);
}

int ph_data_agree(const ph_comm *cm, const ph_dataset *train, const ph_dataset *test, const ph_shape *in,
		  ph_err *err)
{
	if (cm->size <= 1 || !cm->ops)
		return PH_OK;
	char *mine = ph_data_agree_text(train, test, in);
	if (!mine)
		return ph_fail(err, PH_ENOMEM, "out of memory for the data's digest");
	return agree_on_text(cm, mine, "data differ", "give every process the same data files", err);
}
