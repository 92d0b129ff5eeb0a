/* SPDX-License-Identifier: MIT */
/* Checkpoints: save a step, load the newest that verifies, claim a
 * directory for a run.  See checkpoint.h for the layout and the
 * crash-safety argument; the pieces are checkpoint-id.c (the identity),
 * checkpoint-state.c (state.json), checkpoint-manifest.c (manifest.txt)
 * and checkpoint-files.c (files and directories). */
#define _GNU_SOURCE /* renameat2, RENAME_EXCHANGE */
#include "build-config.h"
#include "checkpoint-impl.h"
#include "outputs.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

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

int ph_checkpoint_save(const char *dir, int64_t step, ph_engine *e, const ph_ckpt_id *id,
		       int64_t seed, int64_t total_steps, int keep, int eval_pending, char *path, size_t len,
		       ph_err *err)
{
	if (!dir || !*dir)
		return ph_fail(err, PH_EINVAL, "no checkpoint dir given; set [checkpoint] dir");
	if (step < 0)
		return ph_fail(err, PH_EINVAL, "checkpoint step %lld is negative", (long long)step);
	int rc = ph_ck_make_dirs(dir, err);
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
	ph_ck_remove_stale(dir);
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
	json = ph_ck_state_json(step, id, seed, total_steps, opt, eval_pending);
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
	if ((rc = ph_ck_write_file_atomic(sp, json, sizes[0], err)) ||
	    (rc = ph_ck_write_manifest(tmp, id->run, step, names, sizes, hashes, 3, err)))
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
			ph_ck_remove_tree(tmp);
		} else if ((size_t)snprintf(old, sizeof old, "%s/" TMP_PREFIX "del-" STEP_PREFIX "%08lld", dir,
					    (long long)step) < sizeof old &&
			   rename(final, old) == 0 && rename(tmp, final) == 0) {
			ph_ck_remove_tree(old);
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
	ph_ck_apply_keep(dir, keep, step);
	if (path)
		snprintf(path, len, "%s", final);
	goto out;
fail:
	ph_ck_remove_tree(tmp);
out:
	free(json);
	free(w);
	free(s);
	return rc;
}

/* The optimizer state, with the asynchronous schedules' names explained:
 * pipedream's stash is slot J of K (core/engine-versions.c), so a run that
 * keeps another number of versions for a layer finds none of its names;
 * 2bw's W(t-1) is LAYER.PARAM.prev, which a synchronous schedule's
 * checkpoint of the same model lacks. */
static int read_state_tensors(const char *path, ph_tensor_ref *s, int ns, ph_err *err)
{
	int rc = ph_safetensors_read(path, s, ns, err);
	const char *name = rc ? strstr(err->msg, "tensor ") : NULL; /* "tensor LAYER.PARAM.stashJofK missing" */
	const char *prev = name ? strstr(name, ".prev missing") : NULL;
	if (prev) {
		char t[128];
		name += strlen("tensor ");
		snprintf(t, sizeof t, "%.*s", (int)(prev + strlen(".prev") - name), name);
		return ph_fail(err, rc, "%s: no %s: written under a schedule that keeps one weight version, and this "
			       "one resumes from two; resume under the checkpoint's schedule, or start fresh", path, t);
	}
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

/* Load one step directory.  *damaged: the failure is damage (a file
 * unreadable, malformed or not what the manifest says), not a checkpoint
 * of another config. */
static int load_step(const char *sdir, ph_engine *e, const ph_ckpt_id *id, int64_t *step, int *eval_pending,
		     char run[33], int *damaged, ph_err *err)
{
	*damaged = 1;
	run[0] = 0;
	static const char *const need[] = { STATE_FILE, WEIGHTS_FILE, OPTIM_FILE, NULL };
	ph_ckpt_state st;
	ph_ck_manifest m;
	int missing, mrc;
	ph_err merr;
	/* every byte checked first, reported after the finer checks below
	 * (which say more about what is wrong) */
	int rc = ph_ck_open_step(sdir, need, &st, &m, &missing, &mrc, &merr, err);
	if (rc)
		return rc;
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
		*eval_pending = st.eval_pending;
		if (!missing)
			memcpy(run, m.run, 33);
	}
done:
	ph_ckpt_state_free(&st);
	return rc;
}

int ph_checkpoint_load(const char *path_or_dir, ph_engine *e, const ph_ckpt_id *id, int aside, int64_t *step,
		       int *eval_pending, char run[33], char *path, size_t len, ph_err *err)
{
	if (!path_or_dir || !*path_or_dir)
		return ph_fail(err, PH_EINVAL, "no checkpoint given to resume from");
	struct stat sb;
	if (stat(path_or_dir, &sb))
		return ph_fail(err, PH_EIO, "cannot resume from %s: %s; check --resume", path_or_dir, strerror(errno));
	if (!S_ISDIR(sb.st_mode))
		return ph_fail(err, PH_EINVAL, "cannot resume from %s: not a directory; give the checkpoint dir or "
			       "one of its step-* directories", path_or_dir);
	int damaged, rc, pending = 0;
	int64_t st = 0;
	if (ph_checkpoint_is_step(path_or_dir)) {
		/* a step named by the user: that one or none */
		if ((rc = load_step(path_or_dir, e, id, &st, &pending, run, &damaged, err)))
			return rc;
		if (step)
			*step = st;
		if (eval_pending)
			*eval_pending = pending;
		if (path)
			snprintf(path, len, "%s", path_or_dir);
		return PH_OK;
	}
	ph_ck_step *v;
	int n;
	if ((rc = ph_ck_list_steps(path_or_dir, &v, &n, err)))
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
			if (ph_ck_parse_step_name(name) >= 0)
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
		rc = load_step(sdir, e, id, &st, &pending, run, &damaged, &why[i]);
		if (!rc) {
			if (path)
				snprintf(path, len, "%s", sdir);
			break;
		}
		if (!ph_ck_is_damage(rc)) {
			/* out of memory, or a read the system failed: the step may be
			 * sound, so nothing is set aside and no older step taken */
			if (rc == PH_EIO)
				ph_fail(err, rc, "%s; nothing was set aside or skipped: run again once it reads", why[i].msg);
			else
				*err = why[i];
			free(why);
			free(v);
			return rc;
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
			ph_ck_set_aside(path_or_dir, v[k].name, to, sizeof to);
		fprintf(stderr, "pipehost: WARNING: checkpoint %s is damaged: %s; resuming from the previous verified "
			"checkpoint %s/%s%s%s\n", sdir, why[k].msg, path_or_dir, v[i].name, to[0] ? "; the damaged one is "
			"kept as " : "", to);
	}
	free(why);
	free(v);
	if (step)
		*step = st;
	if (eval_pending)
		*eval_pending = pending;
	return PH_OK;
}

int ph_checkpoint_claim(const char *dir, char run[33], int fresh, int overwrite, ph_err *err)
{
	ph_ck_step *v;
	int n, rc = ph_ck_check_entries(dir, err);
	if (rc || (rc = ph_ck_list_steps(dir, &v, &n, err)))
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
			if (rename(sdir, to) || ph_ck_remove_tree(to)) {
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
