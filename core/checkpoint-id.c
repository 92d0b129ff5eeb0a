/* SPDX-License-Identifier: MIT */
/* Checkpoints: the identity a checkpoint is written for (the canonical
 * "key=value" lines of what gives the weights their meaning, and their
 * digest), and the first line where two identities differ.  See
 * checkpoint.h for what counts and why. */
#include "checkpoint-impl.h"
#include "config_agree.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One option's line, its value as an INI file would say it (the canonical
 * form config_agree.c shares). */
static void sb_option(ph_ck_sbuf *b, const char *prefix, const ph_option *o, const void *cfg)
{
	char v[PH_OPTION_TEXT_MAX];
	ph_option_value_text(o, cfg, v, sizeof v);
	ph_ck_printf(b, "%s.%s=%s\n", prefix, o->name, v);
}

static void sb_named(ph_ck_sbuf *b, const char *prefix, const ph_option *table, const void *cfg, const char *name)
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
	ph_ck_sbuf b = { 0 };
	ph_ck_printf(&b, "format=%s/%d\n", PH_CKPT_FORMAT, PH_CKPT_VERSION);
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
	ph_ck_printf(&b, "data.train_samples=%lld\n", (long long)train_samples);
	for (const ph_option *o = ph_optimizer_options; o->name; o++)
		sb_option(&b, "optimizer", o, &c->optim);
	if (c->optim.lr_schedule == PH_LR_COSINE)
		ph_ck_printf(&b, "optimizer.total_steps=%lld\n", (long long)total_steps);
	for (int l = 0; l < c->nlayers; l++) {
		const ph_layer_cfg *L = &c->layers[l];
		char prefix[96];
		snprintf(prefix, sizeof prefix, "layer %s", L->name);
		ph_ck_printf(&b, "%s.type=%s\n", prefix, L->ops ? L->ops->head.name : "?");
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
			ph_ck_printf(&b, "tensor %s=[", t[i].name);
			for (int d = 0; d < t[i].shape.ndim; d++)
				ph_ck_printf(&b, "%s%lld", d ? "," : "", (long long)t[i].shape.d[d]);
			ph_ck_printf(&b, "]\n");
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
			else if (ea && eb && ea - a == eb - b && !memcmp(a, b, (size_t)(ea - a)) &&
				 !strncmp(a, "optimizer.total_steps=", (size_t)(ea - a) + 1))
				/* cosine's length, not a key a user sets (the
				 * digest's name for it stays, or older checkpoints
				 * would no longer match) */
				snprintf(buf, len, "[run] steps or epochs: %.*s steps in the checkpoint, %.*s here",
					 (int)(lb - (eb - b) - 1), eb + 1, (int)(la - (ea - a) - 1), ea + 1);
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
