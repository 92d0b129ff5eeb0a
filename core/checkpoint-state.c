/* SPDX-License-Identifier: MIT */
/* Checkpoints: state.json, written (the step, seed, optimizer, digest
 * and identity lines) and read back, every field validated, so that a
 * damaged or foreign file is refused with what is wrong in it. */
#define _GNU_SOURCE /* strndup */
#include "build-config.h"
#include "checkpoint-impl.h"
#include "json.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

char *ph_ck_state_json(int64_t step, const ph_ckpt_id *id, int64_t seed, int64_t total_steps,
			const char *optimizer, int eval_pending)
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
	/* only when set: a reader that predates it sees the file as before */
	if (ok && eval_pending)
		ok = cJSON_AddTrueToObject(root, "eval_pending") != NULL;
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
	int oom;
	cJSON *root = ph_json_parse(text, len, &end, &oom);
	if (!root && oom)
		return ph_fail(err, PH_ENOMEM, "%s: out of memory parsing it", where);
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
	const cJSON *ep = cJSON_GetObjectItemCaseSensitive(root, "eval_pending");
	if (ep && !cJSON_IsBool(ep)) {
		rc = ph_fail(err, PH_EINVAL, "%s: \"eval_pending\" is not true or false: corrupt checkpoint", where);
		goto done;
	}
	st->eval_pending = cJSON_IsTrue(ep);
	const cJSON *idl = cJSON_GetObjectItemCaseSensitive(root, "identity");
	if (idl) {
		const cJSON *it;
		int ok = cJSON_IsArray(idl);
		ph_ck_sbuf b = { 0 };
		cJSON_ArrayForEach(it, idl) {
			if (!ok)
				break;
			if (!cJSON_IsString(it) || strchr(it->valuestring, '\n'))
				ok = 0;
			else
				ph_ck_printf(&b, "%s\n", it->valuestring);
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

int ph_ck_read_state_file(const char *path, ph_ckpt_state *st, ph_err *err)
{
	int fd;
	struct stat sb;
	int rc = ph_ck_open_read(path, &fd, &sb, NULL, err);
	if (rc)
		return rc;
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
	int read_errno = 0;
	while (got < n) {
		ssize_t r = read(fd, buf + got, n - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			read_errno = errno;
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	close(fd);
	if (got == n)
		rc = ph_checkpoint_parse_state(buf, n, path, st, err);
	else if (read_errno)
		rc = ph_fail(err, PH_EIO, "%s: read error: %s", path, strerror(read_errno));
	else
		rc = ph_fail(err, PH_EIO, "%s: shrank while being read (%zu of %zu bytes)", path, got, n);
	free(buf);
	return rc;
}
