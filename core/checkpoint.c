/* Checkpoints: save, find, validate and load.  See checkpoint.h for the
 * layout and the crash-safety argument. */
#define _GNU_SOURCE /* renameat2, RENAME_EXCHANGE, strndup */
#include "build-config.h"
#include "checkpoint.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define WEIGHTS_FILE "weights.safetensors"
#define OPTIM_FILE "optimizer.safetensors"
#define STATE_FILE "state.json"
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
	/* Every [data] key but where the files are and what is evaluated: a
	 * key added later counts by default (refusing beats diverging). */
	static const char *const data_skip[] = { "path", "test_limit", "test_samples", NULL };
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

/* fsync a directory; file systems that cannot are not our failure. */
static int sync_dir(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	int rc = fsync(fd);
	if (rc && (errno == EINVAL || errno == EROFS))
		rc = 0;
	int saved = errno;
	close(fd);
	errno = saved;
	return rc;
}

/* Write a small file crash-safely: temp name, fsync, rename. */
static int write_file_atomic(const char *path, const char *data, size_t len, ph_err *err)
{
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
			 const ph_ckpt_id *id, ph_err *err)
{
	char p[PATH_MAX], stepbuf[24];
	if ((size_t)snprintf(p, sizeof p, "%s/%s", dir, file) >= sizeof p)
		return ph_fail(err, PH_EINVAL, "checkpoint path %s too long", dir);
	snprintf(stepbuf, sizeof stepbuf, "%lld", (long long)step);
	const char *const meta[] = { "format", "pt", "producer", "pipehost " PACKAGE_VERSION, "step", stepbuf,
				     "config_digest", id->digest, NULL };
	return ph_safetensors_write(p, t, n, meta, err);
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
		if (rename(from, to) == 0)
			remove_tree(to);
	}
	free(v);
	sync_dir(dir);
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
	remove_stale(dir);
	char tmp[PATH_MAX], final[PATH_MAX];
	if ((size_t)snprintf(tmp, sizeof tmp, "%s/" TMP_PREFIX STEP_PREFIX "%08lld", dir, (long long)step) >= sizeof tmp ||
	    (size_t)snprintf(final, sizeof final, "%s/" STEP_PREFIX "%08lld", dir, (long long)step) >= sizeof final)
		return ph_fail(err, PH_EINVAL, "checkpoint dir %s: path too long", dir);
	if (mkdir(tmp, 0755))
		return ph_fail(err, PH_EIO, "cannot create %s: %s; check [checkpoint] dir is writable", tmp,
			       strerror(errno));

	ph_tensor_ref *w = NULL, *s = NULL;
	int nw = 0, ns = 0;
	char *json = NULL;
	if ((rc = ph_engine_tensors(e, &w, &nw, err)) || (rc = ph_engine_state_tensors(e, &s, &ns, err)))
		goto fail;
	if ((rc = write_tensors(tmp, WEIGHTS_FILE, w, nw, step, id, err)) ||
	    (rc = write_tensors(tmp, OPTIM_FILE, s, ns, step, id, err)))
		goto fail;
	/* the optimizer in use, from the engine's names for its state */
	const char *opt = ns > 0 ? (strstr(s[0].name, ".momentum") ? "sgd" : "adamw")
				 : (strstr(id->text ? id->text : "", "optimizer.type=sgd") ? "sgd" : "adamw");
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
	if ((rc = write_file_atomic(sp, json, strlen(json), err)))
		goto fail;
	if (sync_dir(tmp)) {
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
	if (sync_dir(dir)) {
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
	if (!cJSON_IsString(op) || (strcmp(op->valuestring, "sgd") && strcmp(op->valuestring, "adamw"))) {
		rc = ph_fail(err, PH_EINVAL, "%s: \"optimizer\" missing or not \"sgd\"/\"adamw\": corrupt checkpoint",
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

int ph_checkpoint_load(const char *path_or_dir, ph_engine *e, const ph_ckpt_id *id, int64_t *step, char *path,
		       size_t len, ph_err *err)
{
	char sdir[PATH_MAX];
	if (!path_or_dir || !*path_or_dir)
		return ph_fail(err, PH_EINVAL, "no checkpoint given to resume from");
	struct stat sb;
	if (stat(path_or_dir, &sb))
		return ph_fail(err, PH_EIO, "cannot resume from %s: %s; check --resume", path_or_dir, strerror(errno));
	if (!S_ISDIR(sb.st_mode))
		return ph_fail(err, PH_EINVAL, "cannot resume from %s: not a directory; give the checkpoint dir or "
			       "one of its step-* directories", path_or_dir);
	if (is_dir_with_state(path_or_dir)) {
		if ((size_t)snprintf(sdir, sizeof sdir, "%s", path_or_dir) >= sizeof sdir)
			return ph_fail(err, PH_EINVAL, "checkpoint path too long");
	} else {
		int64_t s;
		int found = ph_checkpoint_latest(path_or_dir, sdir, sizeof sdir, &s, err);
		if (found < 0)
			return -found;
		if (!found)
			return ph_fail(err, PH_EINVAL, "no checkpoint in %s (expected %s/step-NNNNNNNN/state.json); check "
				       "--resume", path_or_dir, path_or_dir);
	}
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
	if (named >= 0 && named != st.step) {
		rc = ph_fail(err, PH_EINVAL, "%s says step %lld but the directory is %s: corrupt checkpoint", p,
			     (long long)st.step, base);
		goto done;
	}
	if (id && strcmp(st.digest, id->digest)) {
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
		else if (!(rc = ph_safetensors_read(wf, w, nw, err)) && !(rc = ph_safetensors_read(of, s, ns, err)))
			rc = ph_engine_upload_tensors(e, err);
	}
	free(w);
	free(s);
	if (!rc) {
		if (step)
			*step = st.step;
		if (path)
			snprintf(path, len, "%s", sdir);
	}
done:
	ph_ckpt_state_free(&st);
	return rc;
}
