/* SPDX-License-Identifier: MIT */
/* pipehost --check-plugin FILE.so (check_plugin.h): the loader's ABI and
 * descriptor checks, then for each layer, schedule and partitioner the file
 * provides the checks the project's tests run on its own plugins
 * (check_layer.c, check_sched.c).  This file is the driver: the report
 * lines, the plugins' options, and a child process for the file's first
 * load and for each entry, so that a plugin that crashes, hangs or exits
 * is reported as a FAIL of the check it was in, not a crash of pipehost. */
#define _GNU_SOURCE /* memmem */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "build-config.h"
#include "check_impl.h"
#include "loader.h"
#include "options.h"

#ifndef PH_PLUGIN_DIR
#define PH_PLUGIN_DIR "/usr/local/lib/pipehost"
#endif

/* ------------------------------------------------------------------ */
/* Reporting: one line a check; the tally lives in memory shared with   */
/* the child that runs the checks, so a crash still leaves it behind.   */

typedef struct {
	char current[192]; /* "layer linear: gradients (batch 4)": the check under way */
	char hook[64];     /* "forward": the plugin hook running in the child, "" between hooks */
	int passed, failed, skipped;
	int oom;           /* checks that ran out of memory: SKIPs, not judged */
	int done;          /* the child finished its checks (did not exit inside a plugin) */
} tally;

static tally *tl;
static FILE *out;

void ph_chk_begin(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(tl->current, sizeof tl->current, fmt, ap);
	va_end(ap);
}

void ph_chk_hook(const char *name)
{
	snprintf(tl->hook, sizeof tl->hook, "%s", name ? name : "");
}

/* "PASS <current>: message"; counts it. */
void ph_chk_verdict(const char *v, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	fprintf(out, "%s %s: %s\n", v, tl->current, msg);
	fflush(out);
	if (v[0] == 'P')
		tl->passed++;
	else if (v[0] == 'F')
		tl->failed++;
	else
		tl->skipped++;
}

/* A check that ended with status rc: a FAIL, except where it ran out of
 * memory (the checker's or the plugin's allocation, alike): a machine
 * short of memory says nothing about the plugin, so that check is a SKIP
 * and the whole check ends as out of memory (ph_check_plugin). */
void ph_chk_failed(int rc, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	if (rc == PH_ENOMEM) {
		tl->oom++;
		ph_chk_verdict("SKIP", "not judged, out of memory: %s", msg);
	} else {
		ph_chk_verdict("FAIL", "%s", msg);
	}
}


/* ------------------------------------------------------------------ */
/* Options: the plugin's defaults, the user's --set NAME.KEY=VALUE, and */
/* for a required number or choice the checker's own value.             */

/* The value of a --set entry for plugin `name` and option `key`, or NULL. */
static const char *set_value(const ph_check_opts *o, const char *name, const char *key)
{
	size_t nl = strlen(name), kl = strlen(key);
	for (int i = 0; i < o->nsets; i++) {
		const char *s = o->sets[i];
		if (!strncmp(s, name, nl) && s[nl] == '.' && !strncmp(s + nl + 1, key, kl) && s[nl + 1 + kl] == '=')
			return s + nl + 1 + kl + 1;
	}
	return NULL;
}

/* What the checker gives a required option nobody set: 2 for a number (a
 * size, a count: small, yet more than the trivial 1), moved into its
 * range; the first choice; "no".  Strings and lists cannot be guessed. */
static int guess(const ph_option *opt, char *buf, size_t len)
{
	double v = opt->type == PH_OPT_FLOAT ? 0.5 : 2;
	switch (opt->type) {
	case PH_OPT_INT:
	case PH_OPT_FLOAT:
		if (v < opt->min)
			v = opt->min;
		if (v > opt->max)
			v = opt->max;
		snprintf(buf, len, opt->type == PH_OPT_INT ? "%.0f" : "%g", v);
		return 1;
	case PH_OPT_BOOL: snprintf(buf, len, "no"); return 1;
	case PH_OPT_CHOICE:
		snprintf(buf, len, "%.*s", (int)strcspn(opt->choices ? opt->choices : "", "|"),
			 opt->choices ? opt->choices : "");
		return buf[0] != 0;
	default: return 0;
	}
}

/* A config for the plugin `h`; *notes: the values the checker chose. */
int ph_chk_build_config(const ph_ops_head *h, const ph_check_opts *o, void **cfg_out, char *notes, size_t nlen,
			ph_err *err)
{
	*cfg_out = NULL;
	notes[0] = 0;
	void *cfg = calloc(1, h->config_size ? h->config_size : 1);
	if (!cfg)
		return ph_fail(err, PH_ENOMEM, "out of memory");
	int rc = h->options ? ph_options_defaults(h->options, cfg, err) : PH_OK;
	for (const ph_option *opt = h->options; !rc && opt && opt->name; opt++) {
		const char *v = set_value(o, h->name, opt->name);
		char buf[64];
		if (!v && opt->def)
			continue;
		if (!v) {
			if (!guess(opt, buf, sizeof buf)) {
				rc = ph_fail(err, PH_EINVAL, "%s is required and has no default; give one with --set %s.%s=VALUE",
					     opt->name, h->name, opt->name);
				break;
			}
			v = buf;
			size_t used = strlen(notes);
			snprintf(notes + used, nlen - used, "%s%s = %s", used ? ", " : "", opt->name, v);
		}
		rc = ph_options_set(h->options, cfg, opt->name, v, err);
	}
	if (rc) {
		free(cfg);
		return rc;
	}
	*cfg_out = cfg;
	return PH_OK;
}

/* ------------------------------------------------------------------ */
/* The driver.                                                          */

/* How a child that ran a piece of the checks ended. */
typedef enum { CHILD_DONE, CHILD_NOT_STARTED, CHILD_HUNG, CHILD_CRASHED, CHILD_EXITED } child_end;

/* fn(o, arg) in a child process, ended by SIGALRM after the entry's
 * timeout: a crash, a hang or an exit inside a plugin ends the child, not
 * pipehost.  tl->done is the child's word that fn returned; *status the
 * wait status (a signal, an exit status). */
static child_end in_child(void (*fn)(const ph_check_opts *, const void *), const ph_check_opts *o,
			  const void *arg, int *status)
{
	tl->done = 0;
	tl->hook[0] = 0;
	fflush(out);
	fflush(stderr);
	pid_t pid = fork();
	if (pid < 0)
		return CHILD_NOT_STARTED;
	if (pid == 0) {
		alarm((unsigned)(o->timeout_s > 0 ? o->timeout_s : 600));
		fn(o, arg);
		fflush(out);
		tl->done = 1;
		_exit(0);
	}
	while (waitpid(pid, status, 0) < 0 && errno == EINTR)
		;
	if (WIFSIGNALED(*status) && WTERMSIG(*status) == SIGALRM)
		return CHILD_HUNG;
	if (WIFSIGNALED(*status))
		return CHILD_CRASHED;
	return tl->done ? CHILD_DONE : CHILD_EXITED;
}

static int exit_status(int status)
{
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* ------------------------------------------------------------------ */
/* The name: a run refuses a name two files on its path provide         */
/* (core/loader.c), so a plugin named like a built-in (relu, 1f1b) would */
/* pass every check here and then be refused by every run.              */

/* Another file on the path every run searches (--plugin-dir,
 * $PIPEHOST_PLUGIN_PATH and the compiled-in directory) that provides a plugin of this kind and
 * name: its path in *other, and 1.  The file checked is not "another",
 * whatever path names it.  Files that fail to load are a run's business
 * (it names them); here they provide nothing. */
static int provided_elsewhere(const ph_registry_entry *en, const ph_check_opts *o, char *other, size_t len)
{
	struct stat self;
	if (stat(o->file, &self) != 0)
		return 0;
	const char *env = getenv("PIPEHOST_PLUGIN_PATH");
	char path[8192];
	snprintf(path, sizeof path, "%s:%s:%s", o->plugin_dirs ? o->plugin_dirs : "", env ? env : "", PH_PLUGIN_DIR);
	char *save = NULL;
	int found = 0;
	for (char *dir = strtok_r(path, ":", &save); dir && !found; dir = strtok_r(NULL, ":", &save)) {
		DIR *d = opendir(dir);
		if (!d)
			continue;
		struct dirent *de;
		while (!found && (de = readdir(d))) {
			size_t n = strlen(de->d_name);
			char file[1024];
			struct stat st;
			if (n < 4 || strcmp(de->d_name + n - 3, ".so") ||
			    (size_t)snprintf(file, sizeof file, "%s/%s", dir, de->d_name) >= sizeof file ||
			    stat(file, &st) != 0 || (st.st_dev == self.st_dev && st.st_ino == self.st_ino) ||
			    !ph_file_mentions(file, en->head->name, 0))
				continue;
			ph_registry reg;
			memset(&reg, 0, sizeof reg);
			reg.allow_writable = o->allow_writable;
			ph_err e = { { 0 } };
			if (!ph_registry_load_file(&reg, file, &e) && ph_registry_find(&reg, en->kind, en->head->name)) {
				snprintf(other, len, "%s", file);
				found = 1;
			}
			ph_registry_free(&reg);
		}
		closedir(d);
	}
	return found;
}

static void check_name(const ph_registry_entry *en, const ph_check_opts *o)
{
	const char *kind = ph_kind_name(en->kind), *name = en->head->name;
	char other[1024];
	ph_chk_begin("%s %s: name", kind, name);
	if (provided_elsewhere(en, o, other, sizeof other))
		FAIL("%s provides a %s named %s too, and a run refuses a name that two files on its plugin path provide "
		     "(searched: $PIPEHOST_PLUGIN_PATH, %s); rename this one, or take %s off the path", other, kind, name,
		     PH_PLUGIN_DIR, other);
	else
		PASS("no other plugin on the plugin path provides a %s named %s (searched: $PIPEHOST_PLUGIN_PATH, %s)",
		     kind, name, PH_PLUGIN_DIR);
}

static void check_entry(const ph_check_opts *o, const void *arg)
{
	const ph_registry_entry *en = arg;
	check_name(en, o);
	if (en->kind == PH_KIND_LAYER)
		ph_chk_layer(en->ops, o);
	else if (en->kind == PH_KIND_SCHEDULE)
		ph_chk_schedule(en->ops, o);
	else
		ph_chk_partitioner(en->ops, o);
}

/* Run one entry's checks in a child; how it ended, where not by
 * returning, is a FAIL of the check that was under way, naming the hook
 * that was running (ph_chk_hook) where the child had entered one. */
static void run_isolated(const ph_registry_entry *en, const ph_check_opts *o)
{
	snprintf(tl->current, sizeof tl->current, "%s %s", ph_kind_name(en->kind), en->head->name);
	int status = 0;
	child_end end = in_child(check_entry, o, en, &status);
	int fork_errno = errno;
	char who[96] = "the plugin";
	if (tl->hook[0])
		snprintf(who, sizeof who, "the plugin's %s", tl->hook);
	switch (end) {
	case CHILD_DONE: break;
	case CHILD_NOT_STARTED: /* fork: no memory or no process slot, not the plugin's doing */
		FAIL_RC(fork_errno == ENOMEM || fork_errno == EAGAIN ? PH_ENOMEM : PH_EINTERNAL,
			"cannot start a process to check it in: %s", strerror(fork_errno));
		break;
	case CHILD_HUNG:
		FAIL("still running after %d s%s%s; a check of these small inputs takes seconds",
		     o->timeout_s > 0 ? o->timeout_s : 600, tl->hook[0] ? ", in " : "", tl->hook[0] ? who : "");
		break;
	case CHILD_CRASHED:
		if (tl->hook[0])
			FAIL("%s crashed (signal %d, %s)", who, WTERMSIG(status), strsignal(WTERMSIG(status)));
		else /* between hooks: the checker's own code, on memory a hook may have broken */
			FAIL("crashed (signal %d, %s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
		break;
	case CHILD_EXITED:
		FAIL("%s ended the process (exit status %d); plugins return errors, they never exit", who,
		     exit_status(status));
		break;
	}
}

/* Open the file and read its descriptor, nothing more (a child's; the
 * process ends with _exit, so no destructor runs).  *arg: the descriptor
 * its stderr goes to (trial_load's capture), or -1 for the user's. */
static void load_only(const ph_check_opts *o, const void *arg)
{
	const int *err_fd = arg;
	if (*err_fd >= 0)
		dup2(*err_fd, STDERR_FILENO);
	ph_registry reg;
	memset(&reg, 0, sizeof reg);
	reg.allow_writable = o->allow_writable;
	ph_err e = { { 0 } };
	ph_registry_load_file(&reg, o->file, &e);
}

/* What a trial load that went wrong wrote on stderr, on one line for its
 * FAIL (an assertion, a constructor's complaint); "" if nothing.  The
 * host's own lines ("pipehost: plugin X crashed while being loaded", the
 * loader's guard) are left out: the FAIL line says the same, and the
 * report is one line a check. */
static void captured_text(FILE *cap, char *buf, size_t len)
{
	char line[512];
	size_t used = 0;
	buf[0] = 0;
	rewind(cap); /* the child wrote through a dup of this descriptor: its offset is at the end */
	while (used + 1 < len && fgets(line, sizeof line, cap)) {
		line[strcspn(line, "\n")] = 0;
		char shown[PH_ECHO_BYTES_MAX]; /* the plugin's bytes: control ones as \xNN */
		if (line[0] && strncmp(line, "pipehost: ", 10))
			used += (size_t)snprintf(buf + used, len - used, "%s%s", used ? " / " : "",
						 ph_echo_bytes(line, shown, sizeof shown));
	}
	if (used >= len && len > 4)
		memcpy(buf + len - 4, "...", 4);
}

/* Open the file once in a child first: a constructor or descriptor that
 * crashes, hangs or exits would otherwise take pipehost down with it (the
 * loader's guard names the file, then the signal ends the process).  The
 * child's stderr is captured, so that such a load is one FAIL line with
 * what the plugin said in it, not the loader's line besides; after a good
 * load it is dropped: the parent's load says again whatever matters.  The
 * child's own load errors are left to the parent's load, which reports
 * them with the loader's words; only how the child ended counts here. */
static int trial_load(const ph_check_opts *o)
{
	FILE *cap = tmpfile(); /* none: the child writes to the user's stderr, as pipehost would */
	int fd = cap ? fileno(cap) : -1, status = 0;
	child_end end = in_child(load_only, o, &fd, &status);
	int fork_errno = errno; /* before the capture's reads and close */
	char said[320] = "", tail[sizeof said + 32] = "";
	if (cap && end != CHILD_DONE)
		captured_text(cap, said, sizeof said);
	if (cap)
		fclose(cap);
	if (said[0])
		snprintf(tail, sizeof tail, " (on stderr: \"%s\")", said);
	switch (end) {
	case CHILD_DONE: return 0;
	case CHILD_NOT_STARTED:
		FAIL_RC(fork_errno == ENOMEM || fork_errno == EAGAIN ? PH_ENOMEM : PH_EINTERNAL,
			"cannot start a process to load it in: %s", strerror(fork_errno));
		break;
	case CHILD_HUNG:
		FAIL("%s is still loading after %d s: a constructor or its descriptor function hangs; fix the plugin%s",
		     o->file, o->timeout_s > 0 ? o->timeout_s : 600, tail);
		break;
	case CHILD_CRASHED:
		FAIL("%s crashed while being loaded (signal %d, %s): a constructor or its descriptor function is broken; "
		     "fix the plugin%s", o->file, WTERMSIG(status), strsignal(WTERMSIG(status)), tail);
		break;
	case CHILD_EXITED:
		FAIL("%s ended the process while being loaded (exit status %d): a constructor calls exit; plugins "
		     "return errors, they never exit%s", o->file, exit_status(status), tail);
		break;
	}
	return -1;
}

/* Each --set names one of the file's plugins and one of its options. */
static int check_sets(const ph_registry *reg, const ph_check_opts *o, ph_err *err)
{
	for (int i = 0; i < o->nsets; i++) {
		const char *s = o->sets[i], *dot = strchr(s, '.'), *eq = strchr(s, '=');
		if (!dot || !eq || eq < dot || dot == s || eq == dot + 1)
			return ph_fail(err, PH_EINVAL, "--set %s: expected --set NAME.KEY=VALUE, NAME a plugin in %s", s,
				       o->file);
		const ph_registry_entry *found = NULL;
		for (int k = 0; k < reg->nentries && !found; k++) {
			size_t nl = strlen(reg->entries[k].head->name);
			if (nl == (size_t)(dot - s) && !strncmp(s, reg->entries[k].head->name, nl))
				found = &reg->entries[k];
		}
		if (!found)
			return ph_fail(err, PH_EINVAL, "--set %s: %s provides no plugin named %.*s", s, o->file, (int)(dot - s),
				       s);
		char key[128];
		snprintf(key, sizeof key, "%.*s", (int)(eq - dot - 1), dot + 1);
		if (!ph_options_find(found->head->options, key))
			return ph_fail(err, PH_EINVAL, "--set %s: %s %s has no option %s (see pipehost --list-plugins)", s,
				       ph_kind_name(found->kind), found->head->name, key);
	}
	return PH_OK;
}

int ph_check_shape_text(const char *text, ph_err *err)
{
	ph_shape s;
	return ph_chk_parse_shape(text, &s, err);
}

int ph_check_plugin(const ph_check_opts *opts, FILE *f, ph_err *err)
{
	ph_check_opts o = *opts;
	if (!o.batch)
		o.batch = 4;
	if (o.batch < 1 || o.batch > 4096)
		return ph_fail(err, PH_EINVAL, "--batch %d: give 1 to 4096", o.batch);
	int rc;
	if (o.shape && (rc = ph_check_shape_text(o.shape, err)))
		return rc;
	struct stat st;
	if (stat(o.file, &st) != 0)
		return ph_fail(err, PH_EINVAL, "--check-plugin %s: %s", o.file, strerror(errno));
	if (!S_ISREG(st.st_mode))
		return ph_fail(err, PH_EINVAL, "--check-plugin %s: not a file; give the plugin's .so", o.file);
	/* dlopen searches the library path for a name without a slash */
	char file[1024];
	snprintf(file, sizeof file, "%s%s", strchr(o.file, '/') ? "" : "./", o.file);
	o.file = file;

	out = f;
	tl = mmap(NULL, sizeof *tl, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (tl == MAP_FAILED)
		return ph_fail(err, PH_ENOMEM, "cannot map memory to share with the checks: %s", strerror(errno));
	memset(tl, 0, sizeof *tl);

	ph_registry reg;
	memset(&reg, 0, sizeof reg);
	reg.allow_writable = o.allow_writable;
	ph_err e = { { 0 } };
	ph_chk_begin("abi and descriptor");
	rc = trial_load(&o); /* a FAIL line of its own where the load would end pipehost */
	if (!rc && !(rc = ph_registry_load_file(&reg, file, &e)) && reg.nentries == 0)
		rc = ph_fail(&e, PH_EINVAL, "%s lists no layer, partitioner or schedule", file);
	if (rc) {
		if (e.msg[0])
			FAIL_RC(rc, "%s", e.msg);
	} else if ((rc = check_sets(&reg, &o, err))) {
		ph_registry_free(&reg);
		munmap(tl, sizeof *tl);
		return rc;
	} else {
		int count[PH_KIND_COUNT] = { 0 };
		for (int i = 0; i < reg.nentries; i++)
			count[reg.entries[i].kind]++;
		PASS("%s loads; descriptor and every ops table for plugin ABI %d.%d: %d layer(s), %d partitioner(s), %d "
		     "schedule(s)", file, PH_ABI_MAJOR, PH_ABI_MINOR, count[PH_KIND_LAYER], count[PH_KIND_PARTITIONER],
		     count[PH_KIND_SCHEDULE]);
		for (int i = 0; i < reg.nentries; i++)
			run_isolated(&reg.entries[i], &o);
	}
	ph_registry_free(&reg);
	int failed = tl->failed, oom = tl->oom, total = tl->passed + tl->failed + tl->skipped;
	fprintf(f, "%d check(s): %d passed, %d failed, %d skipped\n", total, tl->passed, tl->failed, tl->skipped);
	fflush(f);
	munmap(tl, sizeof *tl);
	if (oom && failed)
		return ph_fail(err, PH_ENOMEM, "%s: out of memory in %d of %d checks (SKIP lines above), and %d failed (FAIL "
			       "lines); free memory and check again", file, oom, total, failed);
	if (oom)
		return ph_fail(err, PH_ENOMEM, "%s: out of memory in %d of %d checks, which were not judged (SKIP lines "
			       "above); free memory and check again", file, oom, total);
	if (failed)
		return ph_fail(err, PH_EINVAL, "%s: %d of %d checks failed (the FAIL lines above say which)", file, failed,
			       total);
	return PH_OK;
}

