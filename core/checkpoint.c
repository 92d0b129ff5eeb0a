/* SPDX-License-Identifier: MIT */
/* Checkpoints: save, find, validate and load.  See checkpoint.h for the
 * layout and the crash-safety argument. */
#define _GNU_SOURCE /* renameat2, RENAME_EXCHANGE, strndup */
#include "build-config.h"
#include "checkpoint.h"
#include "outputs.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
#include <sys/random.h>
#include <xxhash.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define WEIGHTS_FILE "weights.safetensors"
#define OPTIM_FILE "optimizer.safetensors"
#define STATE_FILE "state.json"
#define MANIFEST_FILE "manifest.txt"
#define MANIFEST_MAGIC "pipehost-checkpoint-manifest 1"
#define MANIFEST_MAX 65536
#define DAMAGED_PREFIX "damaged-"
#define STEP_PREFIX "step-"
#define TMP_PREFIX ".tmp-"

/* ------------------------------------------------------------------ */
/* Identity and digest.                                                 */

typedef struct {
	char *s;
	size_t len, cap;
	int oom;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...)
{
	if (b->oom)
		return;
	for (;;) {
		va_list ap;
		va_start(ap, fmt);
		int k = vsnprintf(b->s ? b->s + b->len : NULL, b->s ? b->cap - b->len : 0, fmt, ap);
		va_end(ap);
		if (k < 0) {
			b->oom = 1;
			return;
		}
		if (b->s && b->len + (size_t)k < b->cap) {
			b->len += (size_t)k;
			return;
		}
		size_t nc = b->cap ? b->cap * 2 : 1024;
		while (nc < b->len + (size_t)k + 1)
			nc *= 2;
		char *ns = realloc(b->s, nc);
		if (!ns) {
			b->oom = 1;
			return;
		}
		b->s = ns;
		b->cap = nc;
	}
}

/* One option's value as text, the way an INI file would say it. */
static void sb_option(sbuf *b, const char *prefix, const ph_option *o, const void *cfg)
{
	const char *p = (const char *)cfg + o->offset;
	sb_printf(b, "%s.%s=", prefix, o->name);
	switch (o->type) {
	case PH_OPT_INT: {
		int64_t v;
		memcpy(&v, p, sizeof v);
		sb_printf(b, "%lld", (long long)v);
		break;
	}
	case PH_OPT_FLOAT: {
		double v;
		memcpy(&v, p, sizeof v);
		char t[40];
		/* the shortest of %.15g..%.17g that reads back exactly */
		for (int prec = 15; prec <= 17; prec++) {
			snprintf(t, sizeof t, "%.*g", prec, v);
			if (strtod(t, NULL) == v)
				break;
		}
		sb_printf(b, "%s", t);
		break;
	}
	case PH_OPT_BOOL: {
		int v;
		memcpy(&v, p, sizeof v);
		sb_printf(b, "%s", v ? "yes" : "no");
		break;
	}
	case PH_OPT_STRING:
		sb_printf(b, "%.*s", PH_STR_MAX, p);
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
			sb_printf(b, "%.*s", end ? (int)(end - c) : (int)strlen(c), c);
		} else {
			sb_printf(b, "#%d", v);
		}
		break;
	}
	case PH_OPT_INTLIST: {
		ph_intlist v;
		memcpy(&v, p, sizeof v);
		for (int i = 0; i < v.n && i < PH_INTLIST_MAX; i++)
			sb_printf(b, "%s%lld", i ? "," : "", (long long)v.v[i]);
		break;
	}
	}
	sb_printf(b, "\n");
}

static void sb_named(sbuf *b, const char *prefix, const ph_option *table, const void *cfg, const char *name)
{
	for (const ph_option *o = table; o && o->name; o++)
		if (!strcmp(o->name, name))
			sb_option(b, prefix, o, cfg);
}

static void fnv1a(const char *s, size_t n, char out[17])
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (size_t i = 0; i < n; i++) {
		h ^= (unsigned char)s[i];
		h *= 0x100000001b3ull;
	}
	snprintf(out, 17, "%016llx", (unsigned long long)h);
}

int ph_checkpoint_identity(const ph_config *c, ph_engine *e, int64_t train_samples,
			   int64_t total_steps, ph_ckpt_id *id, ph_err *err)
{
	memset(id, 0, sizeof *id);
	sbuf b = { 0 };
	sb_printf(&b, "format=%s/%d\n", PH_CKPT_FORMAT, PH_CKPT_VERSION);
	static const char *const run_keys[] = { "seed", "batch", "micro_batches", NULL };
	for (int i = 0; run_keys[i]; i++)
		sb_named(&b, "run", ph_run_options, &c->run, run_keys[i]);
	/* Every [data] key but where the files are (paths may move between a
	 * save and a resume) and what is evaluated: a key added later counts
	 * by default (refusing beats diverging). */
	static const char *const data_skip[] = { "path", "test_limit", "test_samples", "vocab", "merges",
						 "train_images", "train_labels", "test_images", "test_labels",
						 "tokens", "test_tokens", NULL };
	for (const ph_option *o = ph_data_options; o->name; o++) {
		int skip = 0;
		for (int i = 0; data_skip[i]; i++)
			skip |= !strcmp(o->name, data_skip[i]);
		if (!skip)
			sb_option(&b, "data", o, &c->data);
	}
	sb_printf(&b, "data.train_samples=%lld\n", (long long)train_samples);
	for (const ph_option *o = ph_optimizer_options; o->name; o++)
		sb_option(&b, "optimizer", o, &c->optim);
	if (c->optim.lr_schedule == PH_LR_COSINE)
		sb_printf(&b, "optimizer.total_steps=%lld\n", (long long)total_steps);
	for (int l = 0; l < c->nlayers; l++) {
		const ph_layer_cfg *L = &c->layers[l];
		char prefix[96];
		snprintf(prefix, sizeof prefix, "layer %s", L->name);
		sb_printf(&b, "%s.type=%s\n", prefix, L->ops ? L->ops->head.name : "?");
		if (L->ops && L->config)
			for (const ph_option *o = L->ops->head.options; o && o->name; o++)
				sb_option(&b, prefix, o, L->config);
	}
	if (e) {
		ph_tensor_ref *t = NULL;
		int n = 0;
		int rc = ph_engine_tensors(e, &t, &n, err);
		if (rc) {
			free(b.s);
			return rc;
		}
		for (int i = 0; i < n; i++) {
			sb_printf(&b, "tensor %s=[", t[i].name);
			for (int d = 0; d < t[i].shape.ndim; d++)
				sb_printf(&b, "%s%lld", d ? "," : "", (long long)t[i].shape.d[d]);
			sb_printf(&b, "]\n");
		}
		free(t);
	}
	if (b.oom) {
		free(b.s);
		return ph_fail(err, PH_ENOMEM, "out of memory for the checkpoint identity");
	}
	id->text = b.s;
	fnv1a(b.s, b.len, id->digest);
	return PH_OK;
}

void ph_checkpoint_id_free(ph_ckpt_id *id)
{
	if (!id)
		return;
	free(id->text);
	memset(id, 0, sizeof *id);
}

/* ------------------------------------------------------------------ */
/* Files and directories.                                               */

static int write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;
	while (len > 0) {
		ssize_t w = write(fd, p, len);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		p += w;
		len -= (size_t)w;
	}
	return 0;
}

/* Write a small file crash-safely: temp name, fsync, rename. */
static int write_file_atomic(const char *path, const char *data, size_t len, ph_err *err)
{
	if (len > 0 && !data)
		return ph_fail(err, PH_EINVAL, "%s: nothing to write", path);
	char tmp[PATH_MAX];
	if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= sizeof tmp)
		return ph_fail(err, PH_EINVAL, "%s: path too long", path);
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return ph_fail(err, PH_EIO, "cannot create %s: %s", tmp, strerror(errno));
	const char *stage = "writing";
	int bad = write_all(fd, data, len);
	if (!bad && (stage = "syncing", fsync(fd)))
		bad = 1;
	int saved = errno;
	if (close(fd) && !bad)
		bad = 1, stage = "closing", saved = errno;
	if (!bad && (stage = "renaming", rename(tmp, path)))
		bad = 1, saved = errno;
	if (bad) {
		unlink(tmp);
		return ph_fail(err, PH_EIO, "%s: %s failed: %s (check free space and permissions)", path, stage,
			       strerror(saved));
	}
	return PH_OK;
}

/* mkdir -p */
static int make_dirs(const char *dir, ph_err *err)
{
	char p[PATH_MAX];
	if ((size_t)snprintf(p, sizeof p, "%s", dir) >= sizeof p)
		return ph_fail(err, PH_EINVAL, "checkpoint dir %s: path too long", dir);
	size_t n = strlen(p);
	while (n > 1 && p[n - 1] == '/')
		p[--n] = 0;
	for (char *s = p + 1; ; s++) {
		int end = *s == 0;
		if (*s == '/' || end) {
			*s = 0;
			if (mkdir(p, 0755) && errno != EEXIST)
				return ph_fail(err, PH_EIO, "cannot create checkpoint dir %s: %s; check [checkpoint] dir",
					       p, strerror(errno));
			if (end)
				break;
			*s = '/';
		}
	}
	struct stat st;
	if (stat(p, &st) || !S_ISDIR(st.st_mode))
		return ph_fail(err, PH_EIO, "checkpoint dir %s is not a directory; check [checkpoint] dir", p);
	return PH_OK;
}

int ph_checkpoint_prepare(const char *dir, ph_err *err)
{
	if (!dir || !*dir)
		return ph_fail(err, PH_EINVAL, "no checkpoint dir given; set [checkpoint] dir");
	int rc = make_dirs(dir, err);
	if (rc)
		return rc;
	if (access(dir, W_OK | X_OK))
		return ph_fail(err, PH_EIO, "checkpoint dir %s is not writable: %s; check [checkpoint] dir", dir,
			       strerror(errno));
	/* access() passes a read-only mount for root: create a file to know */
	char probe[PATH_MAX];
	if ((size_t)snprintf(probe, sizeof probe, "%s/" TMP_PREFIX "probe.%ld", dir, (long)getpid()) >= sizeof probe)
		return ph_fail(err, PH_EINVAL, "checkpoint dir %s: path too long", dir);
	int fd = open(probe, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return ph_fail(err, PH_EIO, "checkpoint dir %s is not writable: %s; check [checkpoint] dir", dir,
			       strerror(errno));
	close(fd);
	unlink(probe);
	return PH_OK;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)ftw;
	return (flag == FTW_DP ? rmdir(path) : unlink(path)) ? -1 : 0;
}

/* rm -rf of a directory of ours (no symlinks followed). */
static int remove_tree(const char *path)
{
	return nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* "step-00000120" -> 120; -1 if the name is not exactly step-DIGITS. */
static int64_t parse_step_name(const char *name)
{
	if (strncmp(name, STEP_PREFIX, strlen(STEP_PREFIX)))
		return -1;
	const char *p = name + strlen(STEP_PREFIX);
	if (!*p)
		return -1;
	int64_t v = 0;
	for (; *p; p++) {
		if (*p < '0' || *p > '9' || v > (INT64_MAX - 9) / 10)
			return -1;
		v = v * 10 + (*p - '0');
	}
	return v;
}

static int is_dir_with_state(const char *dir)
{
	char p[PATH_MAX];
	struct stat st;
	if ((size_t)snprintf(p, sizeof p, "%s/" STATE_FILE, dir) >= sizeof p)
		return 0;
	return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

typedef struct {
	int64_t step;
	char name[64];
} step_ent;

static int by_step_desc(const void *a, const void *b)
{
	const step_ent *x = a, *y = b;
	return x->step < y->step ? 1 : x->step > y->step ? -1 : 0;
}

/* Complete step directories of dir, highest first.  *out malloc'd. */
static int list_steps(const char *dir, step_ent **out, int *n, ph_err *err)
{
	*out = NULL;
	*n = 0;
	DIR *d = opendir(dir);
	if (!d)
		return ph_fail(err, PH_EIO, "cannot read checkpoint dir %s: %s", dir, strerror(errno));
	step_ent *v = NULL;
	int cnt = 0, cap = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		int64_t s = parse_step_name(de->d_name);
		if (s < 0 || strlen(de->d_name) >= sizeof v->name)
			continue;
		char p[PATH_MAX];
		if ((size_t)snprintf(p, sizeof p, "%s/%s", dir, de->d_name) >= sizeof p || !is_dir_with_state(p))
			continue;
		if (cnt == cap) {
			int nc = cap ? cap * 2 : 16;
			step_ent *nv = realloc(v, (size_t)nc * sizeof *nv);
			if (!nv) {
				free(v);
				closedir(d);
				return ph_fail(err, PH_ENOMEM, "out of memory listing %s", dir);
			}
			v = nv;
			cap = nc;
		}
		v[cnt].step = s;
		snprintf(v[cnt].name, sizeof v[cnt].name, "%s", de->d_name);
		cnt++;
	}
	closedir(d);
	if (cnt)
		qsort(v, (size_t)cnt, sizeof *v, by_step_desc);
	*out = v;
	*n = cnt;
	return PH_OK;
}

int ph_checkpoint_latest(const char *dir, char *path, size_t len, int64_t *step, ph_err *err)
{
	step_ent *v;
	int n;
	int rc = list_steps(dir, &v, &n, err);
	if (rc)
		return -rc;
	int found = 0;
	if (n > 0) {
		found = 1;
		if (path && (size_t)snprintf(path, len, "%s/%s", dir, v[0].name) >= len) {
			free(v);
			return -ph_fail(err, PH_EINVAL, "checkpoint path %s/%s too long", dir, v[0].name);
		}
		if (step)
			*step = v[0].step;
	}
	free(v);
	return found;
}

/* Remove leftovers of interrupted saves and deletions. */
static void remove_stale(const char *dir)
{
	DIR *d = opendir(dir);
	if (!d)
		return;
	struct dirent *de;
	while ((de = readdir(d))) {
		/* only names this file makes: .tmp-step-N and .tmp-del-step-N */
		if (strncmp(de->d_name, TMP_PREFIX STEP_PREFIX, strlen(TMP_PREFIX STEP_PREFIX)) &&
		    strncmp(de->d_name, TMP_PREFIX "del-" STEP_PREFIX, strlen(TMP_PREFIX "del-" STEP_PREFIX)))
			continue;
		char p[PATH_MAX];
		if ((size_t)snprintf(p, sizeof p, "%s/%s", dir, de->d_name) < sizeof p)
			remove_tree(p);
	}
	closedir(d);
}

/* ------------------------------------------------------------------ */
/* Save.                                                                */

static char *state_json(int64_t step, const ph_ckpt_id *id, int64_t seed, int64_t total_steps,
			const char *optimizer)
{
	cJSON *root = cJSON_CreateObject();
	if (!root)
		return NULL;
	int ok = cJSON_AddStringToObject(root, "format", PH_CKPT_FORMAT) &&
		 cJSON_AddNumberToObject(root, "version", PH_CKPT_VERSION) &&
		 cJSON_AddNumberToObject(root, "step", (double)step) &&
		 cJSON_AddNumberToObject(root, "seed", (double)seed) &&
		 cJSON_AddNumberToObject(root, "total_steps", (double)total_steps) &&
		 cJSON_AddStringToObject(root, "optimizer", optimizer) &&
		 cJSON_AddStringToObject(root, "config_digest", id->digest) &&
		 cJSON_AddStringToObject(root, "producer", "pipehost " PACKAGE_VERSION);
	cJSON *lines = ok ? cJSON_AddArrayToObject(root, "identity") : NULL;
	ok = ok && lines;
	for (const char *p = id->text; ok && p && *p;) {
		const char *nl = strchr(p, '\n');
		size_t k = nl ? (size_t)(nl - p) : strlen(p);
		char *line = strndup(p, k);
		cJSON *s = line ? cJSON_CreateString(line) : NULL;
		free(line);
		ok = s && cJSON_AddItemToArray(lines, s);
		p += k + (nl ? 1 : 0);
	}
	char *out = ok ? cJSON_Print(root) : NULL;
	cJSON_Delete(root);
	return out;
}

static int write_tensors(const char *dir, const char *file, ph_tensor_ref *t, int n, int64_t step,
			 const ph_ckpt_id *id, uint64_t *size, uint64_t *hash, ph_err *err)
{
	char p[PATH_MAX], stepbuf[24];
	if ((size_t)snprintf(p, sizeof p, "%s/%s", dir, file) >= sizeof p)
		return ph_fail(err, PH_EINVAL, "checkpoint path %s too long", dir);
	snprintf(stepbuf, sizeof stepbuf, "%lld", (long long)step);
	const char *const meta[] = { "format", "pt", "producer", "pipehost " PACKAGE_VERSION, "step", stepbuf,
				     "config_digest", id->digest, NULL };
	return ph_safetensors_write_hashed(p, t, n, meta, size, hash, err);
}

/* Keep the `keep` highest steps and `just`; remove the rest, each first
 * renamed out of view so a crash mid-delete never leaves a partial step-*. */
static void apply_keep(const char *dir, int keep, int64_t just)
{
	step_ent *v;
	int n;
	ph_err e2;
	if (keep <= 0 || list_steps(dir, &v, &n, &e2))
		return;
	int others = keep - 1; /* `just` takes one place */
	for (int i = 0; i < n; i++) {
		if (v[i].step == just)
			continue;
		if (others > 0) {
			others--;
			continue;
		}
		char from[PATH_MAX], to[PATH_MAX];
		if ((size_t)snprintf(from, sizeof from, "%s/%s", dir, v[i].name) >= sizeof from ||
		    (size_t)snprintf(to, sizeof to, "%s/" TMP_PREFIX "del-%s", dir, v[i].name) >= sizeof to)
			continue;
		/* a failure here loses nothing (an extra old step stays), but
		 * it is said */
		if (rename(from, to))
			fprintf(stderr, "pipehost: warning: cannot remove old checkpoint %s ([checkpoint] keep = %d): "
				"%s\n", from, keep, strerror(errno));
		else if (remove_tree(to))
			fprintf(stderr, "pipehost: warning: cannot remove %s: %s\n", to, strerror(errno));
	}
	free(v);
	if (ph_sync_dir(dir))
		fprintf(stderr, "pipehost: warning: syncing checkpoint dir %s: %s\n", dir, strerror(errno));
}

static void hex64(uint64_t v, char out[17])
{
	snprintf(out, 17, "%016llx", (unsigned long long)v);
}

/* The manifest: every file of the step with its size and XXH3-64, the step
 * and the run, and a last line with the checksum of the lines before it. */
static int write_manifest(const char *sdir, const char *run, int64_t step, const char *const *names,
			  const uint64_t *sizes, const uint64_t *hashes, int n, ph_err *err)
{
	char text[4096];
	size_t len = 0;
	len += (size_t)snprintf(text + len, sizeof text - len, MANIFEST_MAGIC "\nrun %s\nstep %lld\n", run,
				(long long)step);
	for (int i = 0; i < n && len < sizeof text; i++) {
		char h[17];
		hex64(hashes[i], h);
		len += (size_t)snprintf(text + len, sizeof text - len, "file %s %llu xxh3 %s\n", names[i],
					(unsigned long long)sizes[i], h);
	}
	if (len + 40 >= sizeof text)
		return ph_fail(err, PH_EINTERNAL, "%s: manifest too long", sdir);
	char h[17];
	hex64(XXH3_64bits(text, len), h);
	len += (size_t)snprintf(text + len, sizeof text - len, "end xxh3 %s\n", h);
	char p[PATH_MAX];
	if ((size_t)snprintf(p, sizeof p, "%s/" MANIFEST_FILE, sdir) >= sizeof p)
		return ph_fail(err, PH_EINVAL, "checkpoint path %s too long", sdir);
	return write_file_atomic(p, text, len, err);
}

int ph_checkpoint_save(const char *dir, int64_t step, ph_engine *e, const ph_ckpt_id *id,
		       int64_t seed, int64_t total_steps, int keep, char *path, size_t len, ph_err *err)
{
	if (!dir || !*dir)
		return ph_fail(err, PH_EINVAL, "no checkpoint dir given; set [checkpoint] dir");
	if (step < 0)
		return ph_fail(err, PH_EINVAL, "checkpoint step %lld is negative", (long long)step);
	int rc = make_dirs(dir, err);
	if (rc)
		return rc;
	/* Never a checkpoint of non-finite values: it would take the place of
	 * the last good one (and push it out with `keep`). */
	ph_tensor_ref *w = NULL, *s = NULL;
	int nw = 0, ns = 0;
	char *json = NULL;
	if ((rc = ph_engine_tensors(e, &w, &nw, err)) || (rc = ph_engine_state_tensors(e, &s, &ns, err))) {
		free(w);
		return rc;
	}
	int64_t at = 0;
	int bad = ph_tensors_first_nonfinite(w, nw, &at), bad_s = bad < 0 ? ph_tensors_first_nonfinite(s, ns, &at) : -1;
	if (bad >= 0 || bad_s >= 0) {
		const ph_tensor_ref *b = bad >= 0 ? &w[bad] : &s[bad_s];
		rc = ph_fail(err, PH_EINVAL, "step %lld: %s holds %s at element %lld: training diverged; checkpoint "
			     "not written, older ones kept; lower [optimizer] lr or check beta2/eps", (long long)step,
			     b->name, isnan(b->data[at]) ? "NaN" : "an infinity", (long long)at);
		free(w);
		free(s);
		return rc;
	}
	remove_stale(dir);
	char tmp[PATH_MAX], final[PATH_MAX];
	if ((size_t)snprintf(tmp, sizeof tmp, "%s/" TMP_PREFIX STEP_PREFIX "%08lld", dir, (long long)step) >= sizeof tmp ||
	    (size_t)snprintf(final, sizeof final, "%s/" STEP_PREFIX "%08lld", dir, (long long)step) >= sizeof final) {
		rc = ph_fail(err, PH_EINVAL, "checkpoint dir %s: path too long", dir);
		goto out;
	}
	if (mkdir(tmp, 0755)) {
		rc = ph_fail(err, PH_EIO, "cannot create %s: %s; check [checkpoint] dir is writable", tmp,
			     strerror(errno));
		goto out;
	}
	static const char *const names[] = { STATE_FILE, WEIGHTS_FILE, OPTIM_FILE };
	uint64_t sizes[3], hashes[3];
	if ((rc = write_tensors(tmp, WEIGHTS_FILE, w, nw, step, id, &sizes[1], &hashes[1], err)) ||
	    (rc = write_tensors(tmp, OPTIM_FILE, s, ns, step, id, &sizes[2], &hashes[2], err)))
		goto fail;
	/* the optimizer in use, from the engine's names for its state */
	const char *itext = id->text ? id->text : "";
	const char *opt = ns > 0 ? (strstr(s[0].name, ".momentum") ? "sgd" : strstr(s[0].name, ".lion_m") ? "lion" : "adamw")
				 : (strstr(itext, "optimizer.type=sgd") ? "sgd" : strstr(itext, "optimizer.type=lion") ? "lion" : "adamw");
	json = state_json(step, id, seed, total_steps, opt);
	if (!json) {
		rc = ph_fail(err, PH_ENOMEM, "out of memory for %s", STATE_FILE);
		goto fail;
	}
	char sp[PATH_MAX];
	if ((size_t)snprintf(sp, sizeof sp, "%s/" STATE_FILE, tmp) >= sizeof sp) {
		rc = ph_fail(err, PH_EINVAL, "checkpoint dir %s: path too long", dir);
		goto fail;
	}
	sizes[0] = strlen(json);
	hashes[0] = XXH3_64bits(json, sizes[0]);
	if ((rc = write_file_atomic(sp, json, sizes[0], err)) ||
	    (rc = write_manifest(tmp, id->run, step, names, sizes, hashes, 3, err)))
		goto fail;
	if (ph_sync_dir(tmp)) {
		rc = ph_fail(err, PH_EIO, "syncing %s: %s", tmp, strerror(errno));
		goto fail;
	}
	/* The commit point.  An existing step-N (a run resumed from an older
	 * step) is swapped out atomically, then removed; where the file system
	 * cannot swap, it is moved aside first (a crash in between leaves the
	 * older steps, and the old step-N under .tmp-del-, removed next time). */
	if (rename(tmp, final)) {
		int saved = errno;
		char old[PATH_MAX];
		if (saved != ENOTEMPTY && saved != EEXIST) {
			rc = ph_fail(err, PH_EIO, "renaming %s to %s: %s", tmp, final, strerror(saved));
			goto fail;
		}
		if (renameat2(AT_FDCWD, tmp, AT_FDCWD, final, RENAME_EXCHANGE) == 0) {
			remove_tree(tmp);
		} else if ((size_t)snprintf(old, sizeof old, "%s/" TMP_PREFIX "del-" STEP_PREFIX "%08lld", dir,
					    (long long)step) < sizeof old &&
			   rename(final, old) == 0 && rename(tmp, final) == 0) {
			remove_tree(old);
		} else {
			rc = ph_fail(err, PH_EIO, "replacing %s: %s", final, strerror(errno));
			goto fail;
		}
	}
	if (ph_sync_dir(dir)) {
		rc = ph_fail(err, PH_EIO, "%s written, but syncing %s failed: %s; it may not survive a crash", final,
			     dir, strerror(errno));
		goto out;
	}
	apply_keep(dir, keep, step);
	if (path)
		snprintf(path, len, "%s", final);
	goto out;
fail:
	remove_tree(tmp);
out:
	free(json);
	free(w);
	free(s);
	return rc;
}

/* ------------------------------------------------------------------ */
/* Load.                                                                */

static int json_int64(const cJSON *j, int64_t lo, int64_t *out)
{
	if (!cJSON_IsNumber(j))
		return 0;
	double v = j->valuedouble;
	if (!(v >= (double)lo && v <= 9007199254740992.0) || v != (double)(int64_t)v)
		return 0;
	*out = (int64_t)v;
	return 1;
}

void ph_ckpt_state_free(ph_ckpt_state *st)
{
	if (!st)
		return;
	free(st->identity);
	st->identity = NULL;
}

int ph_checkpoint_parse_state(const char *text, size_t len, const char *where, ph_ckpt_state *st,
			      ph_err *err)
{
	memset(st, 0, sizeof *st);
	st->total_steps = -1;
	if (len > PH_CKPT_STATE_MAX)
		return ph_fail(err, PH_EINVAL, "%s: %zu bytes, over the %d-byte limit: not a checkpoint state", where,
			       len, PH_CKPT_STATE_MAX);
	const char *end = NULL;
	cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
	if (!root)
		return ph_fail(err, PH_EINVAL, "%s: not valid JSON (error near byte %lld of %zu): corrupt checkpoint",
			       where, end ? (long long)(end - text) : -1LL, len);
	int rc = PH_OK;
	for (const char *p = end; p && p < text + len; p++)
		if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
			rc = ph_fail(err, PH_EINVAL, "%s: bytes after the JSON (at byte %lld): corrupt checkpoint", where,
				     (long long)(p - text));
			goto done;
		}
	if (!cJSON_IsObject(root)) {
		rc = ph_fail(err, PH_EINVAL, "%s: JSON but not an object: not a checkpoint state", where);
		goto done;
	}
	const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "format");
	if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, PH_CKPT_FORMAT)) {
		rc = ph_fail(err, PH_EINVAL, "%s: \"format\" is not \"%s\": not a pipehost checkpoint", where,
			     PH_CKPT_FORMAT);
		goto done;
	}
	const cJSON *ver = cJSON_GetObjectItemCaseSensitive(root, "version");
	int64_t v;
	if (!json_int64(ver, 0, &v)) {
		rc = ph_fail(err, PH_EINVAL, "%s: \"version\" missing or not a whole number: corrupt checkpoint", where);
		goto done;
	}
	if (v != PH_CKPT_VERSION) {
		rc = ph_fail(err, PH_EINVAL, "%s: checkpoint format version %lld; this pipehost reads version %d%s",
			     where, (long long)v, PH_CKPT_VERSION, v > PH_CKPT_VERSION ? ": upgrade pipehost" : "");
		goto done;
	}
	if (!json_int64(cJSON_GetObjectItemCaseSensitive(root, "step"), 0, &st->step)) {
		rc = ph_fail(err, PH_EINVAL, "%s: \"step\" missing or not a whole number >= 0: corrupt checkpoint",
			     where);
		goto done;
	}
	if (!json_int64(cJSON_GetObjectItemCaseSensitive(root, "seed"), 0, &st->seed)) {
		rc = ph_fail(err, PH_EINVAL, "%s: \"seed\" missing or not a whole number >= 0: corrupt checkpoint",
			     where);
		goto done;
	}
	const cJSON *tot = cJSON_GetObjectItemCaseSensitive(root, "total_steps");
	if (tot && !json_int64(tot, 0, &st->total_steps)) {
		rc = ph_fail(err, PH_EINVAL, "%s: \"total_steps\" is not a whole number >= 0: corrupt checkpoint", where);
		goto done;
	}
	const cJSON *dg = cJSON_GetObjectItemCaseSensitive(root, "config_digest");
	int hex = cJSON_IsString(dg) && strlen(dg->valuestring) == 16;
	for (int i = 0; hex && i < 16; i++)
		hex = strchr("0123456789abcdef", dg->valuestring[i]) != NULL;
	if (!hex) {
		rc = ph_fail(err, PH_EINVAL, "%s: \"config_digest\" missing or not 16 hex digits: corrupt checkpoint",
			     where);
		goto done;
	}
	memcpy(st->digest, dg->valuestring, 17);
	const cJSON *op = cJSON_GetObjectItemCaseSensitive(root, "optimizer");
	if (!cJSON_IsString(op) ||
	    (strcmp(op->valuestring, "sgd") && strcmp(op->valuestring, "adamw") && strcmp(op->valuestring, "lion"))) {
		rc = ph_fail(err, PH_EINVAL, "%s: \"optimizer\" missing or not \"sgd\"/\"adamw\"/\"lion\": corrupt checkpoint",
			     where);
		goto done;
	}
	snprintf(st->optimizer, sizeof st->optimizer, "%s", op->valuestring);
	const cJSON *idl = cJSON_GetObjectItemCaseSensitive(root, "identity");
	if (idl) {
		const cJSON *it;
		int ok = cJSON_IsArray(idl);
		sbuf b = { 0 };
		cJSON_ArrayForEach(it, idl) {
			if (!ok)
				break;
			if (!cJSON_IsString(it) || strchr(it->valuestring, '\n'))
				ok = 0;
			else
				sb_printf(&b, "%s\n", it->valuestring);
		}
		if (!ok) {
			free(b.s);
			rc = ph_fail(err, PH_EINVAL, "%s: \"identity\" is not an array of one-line strings: corrupt "
				     "checkpoint", where);
			goto done;
		}
		if (b.oom) {
			free(b.s);
			rc = ph_fail(err, PH_ENOMEM, "%s: out of memory", where);
			goto done;
		}
		st->identity = b.s ? b.s : strdup("");
		if (!st->identity) {
			rc = ph_fail(err, PH_ENOMEM, "%s: out of memory", where);
			goto done;
		}
	}
done:
	cJSON_Delete(root);
	if (rc)
		ph_ckpt_state_free(st);
	return rc;
}

static int read_state_file(const char *path, ph_ckpt_state *st, ph_err *err)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return ph_fail(err, PH_EIO, "%s: cannot open: %s", path, strerror(errno));
	struct stat sb;
	if (fstat(fd, &sb) || !S_ISREG(sb.st_mode)) {
		close(fd);
		return ph_fail(err, PH_EIO, "%s: not a regular file", path);
	}
	if (sb.st_size > PH_CKPT_STATE_MAX) {
		close(fd);
		return ph_fail(err, PH_EINVAL, "%s: %lld bytes, over the %d-byte limit: not a checkpoint state", path,
			       (long long)sb.st_size, PH_CKPT_STATE_MAX);
	}
	size_t n = (size_t)sb.st_size;
	char *buf = malloc(n + 1);
	if (!buf) {
		close(fd);
		return ph_fail(err, PH_ENOMEM, "%s: out of memory", path);
	}
	size_t got = 0;
	while (got < n) {
		ssize_t r = read(fd, buf + got, n - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	close(fd);
	int rc = got == n ? ph_checkpoint_parse_state(buf, n, path, st, err)
			  : ph_fail(err, PH_EIO, "%s: short read", path);
	free(buf);
	return rc;
}

/* The first line where our identity and the checkpoint's differ, in buf:
 * "KEY: VALUE in the checkpoint, VALUE here" or "only here: LINE". */
void ph_checkpoint_diff(const char *ours, const char *theirs, char *buf, size_t len)
{
	buf[0] = 0;
	if (!ours || !theirs)
		return;
	const char *a = ours, *b = theirs;
	while (*a || *b) {
		int la = (int)strcspn(a, "\n"), lb = (int)strcspn(b, "\n");
		if (la != lb || memcmp(a, b, (size_t)la)) {
			const char *ea = memchr(a, '=', (size_t)la), *eb = memchr(b, '=', (size_t)lb);
			if (!*b)
				snprintf(buf, len, "only here: %.*s", la, a);
			else if (!*a)
				snprintf(buf, len, "only in the checkpoint: %.*s", lb, b);
			else if (ea && eb && ea - a == eb - b && !memcmp(a, b, (size_t)(ea - a)))
				snprintf(buf, len, "%.*s = %.*s in the checkpoint, %.*s here", (int)(ea - a), a,
					 (int)(lb - (eb - b) - 1), eb + 1, (int)(la - (ea - a) - 1), ea + 1);
			else
				snprintf(buf, len, "checkpoint has %.*s, here %.*s", lb, b, la, a);
			return;
		}
		a += la + (a[la] ? 1 : 0);
		b += lb + (b[lb] ? 1 : 0);
	}
}

/* ------------------------------------------------------------------ */
/* The manifest.                                                        */

typedef struct {
	char run[33];
	int64_t step;
	int n;
	struct {
		char name[64];
		uint64_t size, hash;
	} f[8];
} manifest;

/* The optimizer state, with pipedream's stash explained: its tensors are
 * named slot J of K (core/engine-versions.c), so a run that keeps another
 * number of versions for a layer finds none of its names. */
static int read_state_tensors(const char *path, ph_tensor_ref *s, int ns, ph_err *err)
{
	int rc = ph_safetensors_read(path, s, ns, err);
	const char *name = rc ? strstr(err->msg, "tensor ") : NULL; /* "tensor LAYER.PARAM.stashJofK missing" */
	const char *stash = name ? strstr(name, ".stash") : NULL;
	int j, k, used = 0;
	if (!stash || sscanf(stash, ".stash%dof%d missing%n", &j, &k, &used) != 2 || !used)
		return rc;
	name += strlen("tensor ");
	char layer[96];
	snprintf(layer, sizeof layer, "%.*s", (int)strcspn(name, "."), name);
	return ph_fail(err, rc, "%s: holds another number of pipedream weight versions of layer %s than the %d this "
		       "run keeps; resume with the stages and partition that wrote it, or its [schedule] delay", path,
		       layer, k);
}

/* Read and check sdir/manifest.txt.  *missing is set (and PH_EIO returned)
 * when there is none at all. */
static int read_manifest(const char *sdir, manifest *m, int *missing, ph_err *err)
{
	memset(m, 0, sizeof *m);
	*missing = 0;
	char p[PATH_MAX];
	if ((size_t)snprintf(p, sizeof p, "%s/" MANIFEST_FILE, sdir) >= sizeof p)
		return ph_fail(err, PH_EINVAL, "checkpoint path %s too long", sdir);
	int fd = open(p, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		*missing = errno == ENOENT;
		return ph_fail(err, PH_EIO, "%s: cannot open: %s", p, strerror(errno));
	}
	char buf[MANIFEST_MAX + 1];
	size_t len = 0;
	for (;;) {
		ssize_t r = read(fd, buf + len, sizeof buf - 1 - len);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		len += (size_t)r;
		if (len == sizeof buf - 1)
			break;
	}
	close(fd);
	buf[len] = 0;
	/* the last line checks every byte before it */
	char *end = len >= 2 ? memrchr(buf, '\n', len - 1) : NULL;
	size_t body = end ? (size_t)(end - buf) + 1 : 0;
	char want[17], got[17];
	if (!end || len == MANIFEST_MAX || sscanf(end + 1, "end xxh3 %16[0-9a-f]", want) != 1 ||
	    strlen(end + 1) != 26 || buf[len - 1] != '\n' || memchr(buf, 0, len))
		return ph_fail(err, PH_EINVAL, "%s: no valid last line \"end xxh3 HEX\": damaged checkpoint", p);
	hex64(XXH3_64bits(buf, body), got);
	if (strcmp(want, got))
		return ph_fail(err, PH_EINVAL, "%s: its checksum does not match its contents: damaged checkpoint", p);
	char *line = buf, *save = NULL;
	int lineno = 0;
	*end = 0;
	for (char *l = strtok_r(line, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
		lineno++;
		long long step;
		unsigned long long size;
		char name[64], hash[17], tail;
		if (lineno == 1) {
			if (strcmp(l, MANIFEST_MAGIC))
				return ph_fail(err, PH_EINVAL, "%s: first line is not \"" MANIFEST_MAGIC "\"", p);
		} else if (sscanf(l, "run %32[0-9a-f]%c", m->run, &tail) == 1 && strlen(m->run) == 32) {
		} else if (sscanf(l, "step %lld%c", &step, &tail) == 1 && step >= 0) {
			m->step = step;
		} else if (sscanf(l, "file %63s %llu xxh3 %16[0-9a-f]%c", name, &size, hash, &tail) == 3 &&
			   strlen(hash) == 16 && m->n < 8 && !strchr(name, '/')) {
			snprintf(m->f[m->n].name, sizeof m->f[m->n].name, "%s", name);
			m->f[m->n].size = size;
			m->f[m->n].hash = strtoull(hash, NULL, 16);
			m->n++;
		} else {
			return ph_fail(err, PH_EINVAL, "%s:%d: not a manifest line: damaged checkpoint", p, lineno);
		}
	}
	if (!m->run[0] || m->n == 0)
		return ph_fail(err, PH_EINVAL, "%s: no run or no files listed: damaged checkpoint", p);
	return PH_OK;
}

/* Each file's size and checksum against the manifest. */
static int verify_files(const char *sdir, const manifest *m, ph_err *err)
{
	char *buf = malloc(1 << 20);
	XXH3_state_t *h = XXH3_createState();
	int rc = PH_OK;
	if (!buf || !h) {
		rc = ph_fail(err, PH_ENOMEM, "out of memory verifying %s", sdir);
		goto out;
	}
	for (int i = 0; i < m->n && !rc; i++) {
		char p[PATH_MAX];
		if ((size_t)snprintf(p, sizeof p, "%s/%s", sdir, m->f[i].name) >= sizeof p) {
			rc = ph_fail(err, PH_EINVAL, "checkpoint path %s too long", sdir);
			break;
		}
		int fd = open(p, O_RDONLY | O_CLOEXEC);
		struct stat sb;
		if (fd < 0) {
			rc = ph_fail(err, PH_EIO, "%s: cannot open: %s", p, strerror(errno));
			break;
		}
		if (fstat(fd, &sb) || !S_ISREG(sb.st_mode) || (uint64_t)sb.st_size != m->f[i].size) {
			rc = ph_fail(err, PH_EINVAL, "%s: %lld bytes, its manifest says %llu: damaged checkpoint", p,
				     (long long)sb.st_size, (unsigned long long)m->f[i].size);
			close(fd);
			break;
		}
		XXH3_64bits_reset(h);
		ssize_t r;
		uint64_t got = 0;
		while ((r = read(fd, buf, 1 << 20)) != 0) {
			if (r < 0 && errno == EINTR)
				continue;
			if (r < 0) {
				rc = ph_fail(err, PH_EIO, "%s: read error: %s", p, strerror(errno));
				break;
			}
			XXH3_64bits_update(h, buf, (size_t)r);
			got += (uint64_t)r;
		}
		close(fd);
		if (!rc && (got != m->f[i].size || XXH3_64bits_digest(h) != m->f[i].hash))
			rc = ph_fail(err, PH_EINVAL, "%s: its checksum does not match the manifest's: damaged checkpoint "
				     "(changed after it was written)", p);
	}
out:
	XXH3_freeState(h);
	free(buf);
	return rc;
}

int ph_checkpoint_run_of(const char *sdir, char run[33])
{
	manifest m;
	int missing;
	ph_err e2;
	run[0] = 0;
	if (read_manifest(sdir, &m, &missing, &e2))
		return 0;
	memcpy(run, m.run, 33);
	return 1;
}

void ph_checkpoint_new_run(char run[33])
{
	unsigned char b[16];
	size_t got = 0;
	while (got < sizeof b) {
		ssize_t r = getrandom(b + got, sizeof b - got, 0);
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	if (got < sizeof b) {
		/* no entropy source: time and pid still tell runs apart */
		uint64_t x = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
		for (size_t i = got; i < sizeof b; i++, x = x * 6364136223846793005ull + 1442695040888963407ull)
			b[i] = (unsigned char)(x >> 56);
	}
	for (int i = 0; i < 16; i++)
		snprintf(run + 2 * i, 3, "%02x", b[i]);
}

/* Load one step directory.  *damaged: the failure is damage (a file
 * unreadable, malformed or not what the manifest says), not a checkpoint
 * of another config. */
static int load_step(const char *sdir, ph_engine *e, const ph_ckpt_id *id, int64_t *step, char run[33],
		     int *damaged, ph_err *err)
{
	*damaged = 1;
	run[0] = 0;
	char p[PATH_MAX];
	if ((size_t)snprintf(p, sizeof p, "%s/" STATE_FILE, sdir) >= sizeof p)
		return ph_fail(err, PH_EINVAL, "checkpoint path too long");
	ph_ckpt_state st;
	int rc = read_state_file(p, &st, err);
	if (rc)
		return rc;
	/* A step directory's name and its state agree. */
	const char *base = strrchr(sdir, '/');
	base = base ? base + 1 : sdir;
	int64_t named = parse_step_name(base);
	manifest m;
	int missing = 0, mrc;
	ph_err merr;
	if (named >= 0 && named != st.step) {
		rc = ph_fail(err, PH_EINVAL, "%s says step %lld but the directory is %s: corrupt checkpoint", p,
			     (long long)st.step, base);
		goto done;
	}
	/* every byte checked first, reported after the finer checks below
	 * (which say more about what is wrong) */
	mrc = read_manifest(sdir, &m, &missing, &merr);
	if (!mrc && (mrc = verify_files(sdir, &m, &merr)) == PH_OK && m.step != st.step)
		mrc = ph_fail(&merr, PH_EINVAL, "%s/" MANIFEST_FILE " says step %lld, " STATE_FILE " step %lld: damaged "
			      "checkpoint", sdir, (long long)m.step, (long long)st.step);
	if (id && strcmp(st.digest, id->digest)) {
		if (mrc && !missing) {
			rc = ph_fail(err, mrc, "%s", merr.msg);
			goto done;
		}
		*damaged = 0;
		char diff[160];
		ph_checkpoint_diff(id->text, st.identity, diff, sizeof diff);
		rc = ph_fail(err, PH_EINVAL, "checkpoint %s was written for another model or training config (digest "
			     "%s, this one %s%s%s); use the matching config or start fresh",
			     sdir, st.digest, id->digest, diff[0] ? "; " : "", diff);
		goto done;
	}
	ph_tensor_ref *w = NULL, *s = NULL;
	int nw = 0, ns = 0;
	if (!(rc = ph_engine_tensors(e, &w, &nw, err)) && !(rc = ph_engine_state_tensors(e, &s, &ns, err))) {
		char wf[PATH_MAX], of[PATH_MAX];
		if ((size_t)snprintf(wf, sizeof wf, "%s/" WEIGHTS_FILE, sdir) >= sizeof wf ||
		    (size_t)snprintf(of, sizeof of, "%s/" OPTIM_FILE, sdir) >= sizeof of)
			rc = ph_fail(err, PH_EINVAL, "checkpoint path too long");
		else if (!(rc = ph_safetensors_read(wf, w, nw, err)) && !(rc = read_state_tensors(of, s, ns, err))) {
			if (mrc && !missing)
				rc = ph_fail(err, mrc, "%s", merr.msg);
			else
				rc = ph_engine_upload_tensors(e, err);
			if (!rc && missing)
				fprintf(stderr, "pipehost: warning: %s has no " MANIFEST_FILE " (written by an older "
					"pipehost?): its files cannot be verified\n", sdir);
		}
	}
	free(w);
	free(s);
	if (!rc) {
		*step = st.step;
		if (!missing)
			memcpy(run, m.run, 33);
	}
done:
	ph_ckpt_state_free(&st);
	return rc;
}

int ph_checkpoint_is_step(const char *path)
{
	return is_dir_with_state(path);
}

/* Move a damaged step out of view (never deleted: it may be all there is). */
static void set_aside(const char *dir, const char *name, char *to, size_t len)
{
	char from[PATH_MAX];
	to[0] = 0;
	if ((size_t)snprintf(from, sizeof from, "%s/%s", dir, name) >= sizeof from)
		return;
	for (int i = 0; i < 100; i++) {
		if (i == 0)
			snprintf(to, len, "%s/" DAMAGED_PREFIX "%s", dir, name);
		else
			snprintf(to, len, "%s/" DAMAGED_PREFIX "%s.%d", dir, name, i);
		if (renameat2(AT_FDCWD, from, AT_FDCWD, to, RENAME_NOREPLACE) == 0)
			return;
		if (errno != EEXIST)
			break;
	}
	to[0] = 0;
}

int ph_checkpoint_load(const char *path_or_dir, ph_engine *e, const ph_ckpt_id *id, int aside, int64_t *step,
		       char run[33], char *path, size_t len, ph_err *err)
{
	if (!path_or_dir || !*path_or_dir)
		return ph_fail(err, PH_EINVAL, "no checkpoint given to resume from");
	struct stat sb;
	if (stat(path_or_dir, &sb))
		return ph_fail(err, PH_EIO, "cannot resume from %s: %s; check --resume", path_or_dir, strerror(errno));
	if (!S_ISDIR(sb.st_mode))
		return ph_fail(err, PH_EINVAL, "cannot resume from %s: not a directory; give the checkpoint dir or "
			       "one of its step-* directories", path_or_dir);
	int damaged, rc;
	int64_t st = 0;
	if (is_dir_with_state(path_or_dir)) {
		/* a step named by the user: that one or none */
		if ((rc = load_step(path_or_dir, e, id, &st, run, &damaged, err)))
			return rc;
		if (step)
			*step = st;
		if (path)
			snprintf(path, len, "%s", path_or_dir);
		return PH_OK;
	}
	step_ent *v;
	int n;
	if ((rc = list_steps(path_or_dir, &v, &n, err)))
		return rc;
	if (n == 0) {
		free(v);
		/* a step directory itself, without its state.json: that step
		 * is incomplete, not a directory of steps */
		size_t l = strlen(path_or_dir);
		while (l > 1 && path_or_dir[l - 1] == '/')
			l--;
		const char *base = path_or_dir + l;
		while (base > path_or_dir && base[-1] != '/')
			base--;
		char name[64];
		if ((size_t)(path_or_dir + l - base) < sizeof name) {
			snprintf(name, sizeof name, "%.*s", (int)(path_or_dir + l - base), base);
			if (parse_step_name(name) >= 0)
				return ph_fail(err, PH_EINVAL, "checkpoint %s has no " STATE_FILE ": an incomplete or damaged "
					       "step; resume from another step, or from the checkpoint dir (its newest "
					       "complete step)", path_or_dir);
		}
		return ph_fail(err, PH_EINVAL, "no checkpoint in %s (expected %s/step-NNNNNNNN/state.json); check "
			       "--resume", path_or_dir, path_or_dir);
	}
	/* The newest that loads; a damaged one is named and passed over,
	 * loudly, for the one before it. */
	ph_err *why = calloc((size_t)n, sizeof *why);
	if (!why) {
		free(v);
		return ph_fail(err, PH_ENOMEM, "out of memory listing %s", path_or_dir);
	}
	int i, first_rc = PH_OK;
	for (i = 0; i < n; i++) {
		char sdir[PATH_MAX];
		if ((size_t)snprintf(sdir, sizeof sdir, "%s/%s", path_or_dir, v[i].name) >= sizeof sdir) {
			rc = ph_fail(err, PH_EINVAL, "checkpoint path %s/%s too long", path_or_dir, v[i].name);
			break;
		}
		rc = load_step(sdir, e, id, &st, run, &damaged, &why[i]);
		if (!rc) {
			if (path)
				snprintf(path, len, "%s", sdir);
			break;
		}
		if (!first_rc)
			first_rc = rc;
		if (!damaged)
			break; /* another config: so are the older ones */
	}
	if (rc) {
		/* the newest one's reason: it is the one the user expected */
		*err = why[0];
		free(why);
		free(v);
		return first_rc;
	}
	/* Passed over: say which and why, and move them aside when this run
	 * will write in the directory (they would hold step numbers it needs). */
	for (int k = 0; k < i; k++) {
		char sdir[PATH_MAX], to[PATH_MAX] = "";
		snprintf(sdir, sizeof sdir, "%s/%s", path_or_dir, v[k].name);
		if (aside)
			set_aside(path_or_dir, v[k].name, to, sizeof to);
		fprintf(stderr, "pipehost: WARNING: checkpoint %s is damaged: %s; resuming from the previous verified "
			"checkpoint %s/%s%s%s\n", sdir, why[k].msg, path_or_dir, v[i].name, to[0] ? "; the damaged one is "
			"kept as " : "", to);
	}
	free(why);
	free(v);
	if (step)
		*step = st;
	return PH_OK;
}

int ph_checkpoint_claim(const char *dir, char run[33], int fresh, int overwrite, ph_err *err)
{
	step_ent *v;
	int n, rc = list_steps(dir, &v, &n, err);
	if (rc)
		return rc;
	/* resumed from a step without a manifest: the run of the newest step
	 * that has one goes on (there is no other way to tell) */
	for (int i = 0; !run[0] && !fresh && i < n; i++) {
		char sdir[PATH_MAX];
		snprintf(sdir, sizeof sdir, "%s/%s", dir, v[i].name);
		ph_checkpoint_run_of(sdir, run);
	}
	if (!run[0])
		ph_checkpoint_new_run(run);
	int others = 0, newest = -1;
	char other_run[33] = "";
	for (int i = 0; i < n; i++) {
		char sdir[PATH_MAX], r[33];
		snprintf(sdir, sizeof sdir, "%s/%s", dir, v[i].name);
		int known = ph_checkpoint_run_of(sdir, r);
		/* a resumed run passes over steps it cannot read (damaged):
		 * only a readable other run id is another run's */
		if (fresh ? (!known || strcmp(r, run)) : (known && strcmp(r, run))) {
			if (!others++) {
				newest = i;
				snprintf(other_run, sizeof other_run, "%s", known ? r : "unknown");
			}
		}
	}
	if (others && !overwrite) {
		rc = ph_fail(err, PH_EINVAL, "checkpoint dir %s holds %d checkpoint(s) of another run (run %.8s, newest "
			     "%s); resume it with --resume %s, set another [checkpoint] dir, or set [checkpoint] "
			     "overwrite = yes", dir, others, other_run, v[newest].name, dir);
		free(v);
		return rc;
	}
	if (others) {
		int removed = 0;
		for (int i = 0; i < n; i++) {
			char sdir[PATH_MAX], to[PATH_MAX], r[33];
			snprintf(sdir, sizeof sdir, "%s/%s", dir, v[i].name);
			int known = ph_checkpoint_run_of(sdir, r);
			if (!(fresh ? (!known || strcmp(r, run)) : (known && strcmp(r, run))))
				continue;
			snprintf(to, sizeof to, "%s/" TMP_PREFIX "del-%s", dir, v[i].name);
			if (rename(sdir, to) || remove_tree(to)) {
				rc = ph_fail(err, PH_EIO, "checkpoint dir %s: cannot remove %s ([checkpoint] overwrite): %s",
					     dir, v[i].name, strerror(errno));
				break;
			}
			removed++;
		}
		if (!rc) {
			ph_sync_dir(dir);
			printf("checkpoint dir %s: %d checkpoint(s) of run %.8s removed ([checkpoint] overwrite = yes)\n", dir,
			       removed, other_run);
			fflush(stdout);
		}
	}
	free(v);
	return rc;
}
