/* SPDX-License-Identifier: MIT */
/* Checkpoints: the identity a checkpoint is written for (the canonical
 * "key=value" lines of what gives the weights their meaning, and their
 * digest), and the first line where two identities differ.  See
 * checkpoint.h for what counts and why. */
#include "checkpoint-impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One option's value as text, the way an INI file would say it. */
static void sb_option(ph_ck_sbuf *b, const char *prefix, const ph_option *o, const void *cfg)
{
	const char *p = (const char *)cfg + o->offset;
	ph_ck_printf(b, "%s.%s=", prefix, o->name);
	switch (o->type) {
	case PH_OPT_INT: {
		int64_t v;
		memcpy(&v, p, sizeof v);
		ph_ck_printf(b, "%lld", (long long)v);
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
		ph_ck_printf(b, "%s", t);
		break;
	}
	case PH_OPT_BOOL: {
		int v;
		memcpy(&v, p, sizeof v);
		ph_ck_printf(b, "%s", v ? "yes" : "no");
		break;
	}
	case PH_OPT_STRING:
		ph_ck_printf(b, "%.*s", PH_STR_MAX, p);
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
			ph_ck_printf(b, "%.*s", end ? (int)(end - c) : (int)strlen(c), c);
		} else {
			ph_ck_printf(b, "#%d", v);
		}
		break;
	}
	case PH_OPT_INTLIST: {
		ph_intlist v;
		memcpy(&v, p, sizeof v);
		for (int i = 0; i < v.n && i < PH_INTLIST_MAX; i++)
			ph_ck_printf(b, "%s%lld", i ? "," : "", (long long)v.v[i]);
		break;
	}
	}
	ph_ck_printf(b, "\n");
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
