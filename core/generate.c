/* SPDX-License-Identifier: MIT */
/* Text generation (generate.h): the model's layers, one after the other on
 * the CPU, batch 1, evaluation mode, over the whole context for each new
 * token; the last position's logits pick the next token.
 *
 * The layers are created again for each context length L <= T (the data's
 * seq_len), so a short prompt costs a short forward: every layer the LM
 * uses takes any T, and only the embedding's positions depend on it, as
 * their first L rows.  Longer contexts keep their last T tokens.
 *
 * Sampling is a pure function of (seed, token index) through the project's
 * counter-based generator (Philox, pipehost/rng.h): the same seed, prompt and
 * weights give the same text on every run. */
#include "generate.h"
#include "layer_call.h"

#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "checkpoint-impl.h" /* the step checks --resume makes: manifest, state */
#include "checkpoint.h"
#include "hf_gpt2.h"
#include "model.h"
#include "outputs.h"
#include "weights.h"

/* The sampler's stream: its own key, apart from init and dropout draws. */
#define GEN_SITE 0x67656e6572617465ull /* "generate" */

/* ------------------------------------------------------------------ */
/* Writing the text.                                                   */

int ph_generate_write_error(FILE *out, ph_err *err)
{
	int e = errno ? errno : EIO;
	return ph_fail(err, PH_EIO, "--generate: cannot write the text to %s: %s; generation stopped; check the "
		       "disk or the command reading it", out == stdout ? "standard output" : "its output", strerror(e));
}

static int put_text(FILE *out, const char *p, size_t n, ph_err *err)
{
	if (n && fwrite(p, 1, n, out) != n)
		return ph_generate_write_error(out, err);
	return PH_OK;
}

/* After each token: a write into the stream's buffer fails only when the
 * buffer goes out, so flushing is where a full disk or a gone reader shows
 * (SIGPIPE is ignored: EPIPE), and generation stops at the token that
 * could not be written instead of running on for nobody. */
static int flush_text(FILE *out, ph_err *err)
{
	if (fflush(out) == EOF)
		return ph_generate_write_error(out, err);
	if (ferror(out)) {
		errno = EIO; /* an earlier write failed; its errno is gone */
		return ph_generate_write_error(out, err);
	}
	return PH_OK;
}

/* ------------------------------------------------------------------ */
/* The byte tokenizer.                                                 */

static int bytes_encode(void *self, const char *text, size_t len, int32_t **ids, int64_t *n, ph_err *err)
{
	(void)self;
	int32_t *v = malloc((len ? len : 1) * sizeof *v);
	if (!v)
		return ph_fail(err, PH_ENOMEM, "out of memory for the prompt's %zu bytes", len);
	for (size_t i = 0; i < len; i++)
		v[i] = (unsigned char)text[i];
	*ids = v;
	*n = (int64_t)len;
	return PH_OK;
}

static int bytes_decode(void *self, int32_t id, FILE *out, ph_err *err)
{
	(void)self;
	if (id < 0 || id > 255)
		return ph_fail(err, PH_EINTERNAL, "byte tokenizer: id %d is not a byte", (int)id);
	if (fputc(id, out) == EOF)
		return ph_generate_write_error(out, err);
	return PH_OK;
}

void ph_tokenizer_bytes(ph_tokenizer *t)
{
	*t = (ph_tokenizer){ .name = "bytes", .vocab = 256, .self = NULL, .encode = bytes_encode, .decode = bytes_decode };
}

/* ------------------------------------------------------------------ */
/* Which weights.                                                      */

static int is_file(const char *p)
{
	struct stat st;
	return p[0] && stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* The lines of a checkpoint identity (checkpoint.h) that give the weights
 * their meaning: every layer's type and options, and the tokenizer that
 * made the ids.  The rest (batch, optimizer, the data's size) shaped the
 * training, not the model, and is not known here (the data is not read).
 * Malloc'd; NULL when out of memory. */
static char *model_lines(const char *identity)
{
	char *s = malloc(strlen(identity) + 2), *o = s;
	if (!s)
		return NULL;
	for (const char *l = identity; *l;) {
		size_t n = strcspn(l, "\n");
		if (!strncmp(l, "layer ", 6) || !strncmp(l, "data.tokenizer=", 15)) {
			memcpy(o, l, n);
			o += n;
			*o++ = '\n';
		}
		l += n + (l[n] ? 1 : 0);
	}
	*o = 0;
	return s;
}

/* Check step directory sdir as --resume does (core/checkpoint.c): its
 * state.json valid and of this step, its manifest.txt intact and every byte
 * of the files read here (state.json, weights.safetensors) as it says, and
 * the model of its identity this config's (ours: model_lines).  The
 * optimizer's file is not read, so damage there does not matter here.
 * *damaged: the failure is damage, not a checkpoint of another model. */
static int check_step(const char *sdir, const char *ours, int *damaged, ph_err *err)
{
	*damaged = 1;
	static const char *const need[] = { STATE_FILE, WEIGHTS_FILE, NULL };
	ph_ckpt_state st;
	ph_ck_manifest m;
	int missing, mrc;
	ph_err merr;
	char *theirs = NULL;
	int rc = ph_ck_open_step(sdir, need, &st, &m, &missing, &mrc, &merr, err);
	if (rc)
		return rc;
	if (mrc && !missing) {
		rc = ph_fail(err, mrc, "%s", merr.msg);
		goto done;
	}
	/* a checkpoint without its identity (an older pipehost's) has only the
	 * digest, which covers the training too: the shapes, checked on
	 * reading the weights, are all there is to compare */
	if (st.identity) {
		char diff[160];
		if (!(theirs = model_lines(st.identity))) {
			rc = ph_fail(err, PH_ENOMEM, "out of memory reading %s/" STATE_FILE, sdir);
			goto done;
		}
		ph_checkpoint_diff(ours, theirs, diff, sizeof diff);
		if (diff[0]) {
			*damaged = 0;
			rc = ph_fail(err, PH_EINVAL, "--generate: checkpoint %s was written for another model (%s); use the "
				     "config it was trained with, or give --load-weights FILE", sdir, diff);
			goto done;
		}
	}
	if (missing)
		fprintf(stderr, "pipehost: warning: %s has no " MANIFEST_FILE " (written by an older pipehost?): its "
			"files cannot be verified\n", sdir);
done:
	free(theirs);
	ph_ckpt_state_free(&st);
	return rc;
}

/* The newest step of dir that check_step passes, as --resume picks one: a
 * damaged step is passed over for the one before it, with a WARNING line
 * naming it and why; a step of another model ends the search (so are the
 * older ones).  *found 0: dir holds no step at all. */
static int verified_step(const ph_config *c, const char *dir, char *path, size_t len, int *found, ph_err *err)
{
	ph_ck_step *v = NULL;
	ph_err *why = NULL;
	ph_ckpt_id id = { 0 };
	char *ours = NULL;
	int n = 0, i = 0, damaged = 1;
	int rc = ph_ck_list_steps(dir, &v, &n, err);
	*found = n > 0;
	if (rc || !n)
		goto out;
	/* no engine: the identity without its tensor lines, which are not compared */
	if ((rc = ph_checkpoint_identity(c, NULL, 0, 0, &id, err)))
		goto out;
	ours = model_lines(id.text);
	why = calloc((size_t)n, sizeof *why);
	if (!ours || !why) {
		rc = ph_fail(err, PH_ENOMEM, "out of memory checking checkpoint dir %s", dir);
		goto out;
	}
	for (i = 0; i < n; i++) {
		char sdir[4096];
		if ((size_t)snprintf(sdir, sizeof sdir, "%s/%s", dir, v[i].name) >= sizeof sdir) {
			rc = ph_fail(err, PH_EINVAL, "checkpoint path %s/%s too long", dir, v[i].name);
			goto out;
		}
		rc = check_step(sdir, ours, &damaged, &why[i]);
		if (rc && !ph_ck_is_damage(rc)) {
			/* out of memory, or a read the system failed: the step may be
			 * sound, so no older one is taken in its place */
			if (rc == PH_EIO)
				ph_fail(err, rc, "%s; no older checkpoint was taken in its place: run again once it reads",
					why[i].msg);
			else
				*err = why[i];
			goto out;
		}
		if (!rc || !damaged)
			break;
	}
	if (rc) {
		/* the newest one's reason: it is the one the user expected */
		if (i == 0 && !damaged)
			*err = why[0];
		else
			rc = ph_fail(err, rc, "--generate: %s; %s in %s; give --load-weights FILE", why[0].msg,
				     n == 1 ? "there is no older checkpoint" : !damaged ? "the older ones are of another model"
				     : "no older checkpoint verifies", dir);
		goto out;
	}
	if ((size_t)snprintf(path, len, "%s/%s/" WEIGHTS_FILE, dir, v[i].name) >= len) {
		rc = ph_fail(err, PH_EINVAL, "checkpoint path %s/%s too long", dir, v[i].name);
		goto out;
	}
	for (int k = 0; k < i; k++)
		fprintf(stderr, "pipehost: WARNING: checkpoint %s/%s is damaged: %s; generating from the previous "
			"verified checkpoint %s/%s\n", dir, v[k].name, why[k].msg, dir, v[i].name);
out:
	free(why);
	free(ours);
	ph_checkpoint_id_free(&id);
	free(v);
	return rc;
}

/* ph_generate_weights_path; verify: the checkpoint as verified_step picks it. */
static int weights_path(const ph_config *c, int verify, char *path, size_t len, ph_err *err)
{
	struct stat st;
	if (c->checkpoint.dir[0] && stat(c->checkpoint.dir, &st) == 0 && S_ISDIR(st.st_mode)) {
		char step[4096];
		int64_t s;
		int found;
		if (verify) {
			int rc = verified_step(c, c->checkpoint.dir, path, len, &found, err);
			if (rc || found)
				return rc;
		} else if ((found = ph_checkpoint_latest(c->checkpoint.dir, step, sizeof step, &s, err)) < 0) {
			return -found;
		} else if (found) {
			if ((size_t)snprintf(path, len, "%s/" WEIGHTS_FILE, step) >= len)
				return ph_fail(err, PH_EINVAL, "checkpoint path %s too long", step);
			return PH_OK;
		}
	}
	const char *p = is_file(c->run.save_weights) ? c->run.save_weights : c->run.init;
	if (!p[0])
		return ph_fail(err, PH_EINVAL, "--generate needs trained weights: give --load-weights FILE, or set "
			       "[checkpoint] dir, [run] save_weights (an existing file) or [run] init");
	if ((size_t)snprintf(path, len, "%s", p) >= len)
		return ph_fail(err, PH_EINVAL, "weights path %s too long", p);
	return PH_OK;
}

int ph_generate_weights_path(const ph_config *c, char *path, size_t len, ph_err *err)
{
	return weights_path(c, 0, path, len, err);
}

/* ------------------------------------------------------------------ */
/* The model on one rank.                                              */

typedef struct {
	ph_model m;       /* built at the full T, batch 1: the parameter shapes */
	float **params;   /* [m.n * PH_MAX_PARAMS], each m's shape */
	int nrun;         /* layers run: all but the loss */
	int T;            /* the longest context */
	int64_t V;        /* logits per position */
	int hf;           /* the weights came from a Hugging Face GPT-2 file */
} gen_model;

static void gen_model_free(gen_model *g)
{
	if (g->params)
		for (int i = 0; i < g->m.n * PH_MAX_PARAMS; i++)
			free(g->params[i]);
	free(g->params);
	ph_model_free(&g->m);
	memset(g, 0, sizeof *g);
}

static int gen_model_build(gen_model *g, const ph_config *c, const ph_shape *in, ph_err *err)
{
	memset(g, 0, sizeof *g);
	char s_in[96];
	ph_shape_str(in, s_in, sizeof s_in);
	int rc = ph_model_build(&g->m, c, in, 1, err);
	if (rc)
		return rc;
	const ph_layer *loss = &g->m.layers[g->m.n - 1];
	if (in->ndim != 1 || loss->in.ndim != 2 || loss->in.d[0] != in->d[0]) {
		char s_loss[96];
		ph_shape_str(&loss->in, s_loss, sizeof s_loss);
		return ph_fail(err, PH_EINVAL, "--generate needs a language model ([T] token ids in, [T, vocab] logits "
			       "into the loss); this one takes %s and its loss %s (%s) takes %s", s_in, loss->cfg->name,
			       loss->ops->head.name, s_loss);
	}
	g->nrun = g->m.n - 1;
	g->T = (int)in->d[0];
	g->V = loss->in.d[1];
	return PH_OK;
}

static double param_bytes(const ph_layer *L)
{
	double b = 0;
	for (int p = 0; p < L->meta.nparams; p++)
		b += (double)ph_shape_numel(&L->meta.params[p].shape) * sizeof(float);
	return b;
}

/* The parameters' memory: after the checks that need only the shapes, so
 * that a model the tokenizer cannot serve is refused before gigabytes are
 * asked for. */
static int gen_model_alloc(gen_model *g, ph_err *err)
{
	g->params = calloc((size_t)g->m.n * PH_MAX_PARAMS, sizeof *g->params);
	if (!g->params)
		return ph_fail(err, PH_ENOMEM, "out of memory");
	for (int i = 0; i < g->m.n; i++)
		for (int p = 0; p < g->m.layers[i].meta.nparams; p++) {
			int64_t n = ph_shape_numel(&g->m.layers[i].meta.params[p].shape);
			if (!(g->params[i * PH_MAX_PARAMS + p] = calloc((size_t)n, sizeof(float)))) {
				double total = 0;
				for (int j = 0; j < g->m.n; j++)
					total += param_bytes(&g->m.layers[j]);
				return ph_fail(err, PH_ENOMEM, "--generate: out of memory for layer %s's parameters (%.1f "
					       "MiB of the model's %.1f MiB); free memory, or make the model smaller (its "
					       "layers' dim, units or vocab)", g->m.layers[i].cfg->name,
					       param_bytes(&g->m.layers[i]) / 1048576, total / 1048576);
			}
		}
	return PH_OK;
}

/* Every parameter from `path`: pipehost's own names (LAYER.PARAM, what
 * --save-weights and checkpoints write), or a Hugging Face GPT-2 file. */
static int gen_model_load(gen_model *g, const char *path, ph_err *err)
{
	int total = 0;
	for (int i = 0; i < g->m.n; i++)
		total += g->m.layers[i].meta.nparams;
	ph_tensor_ref *t = calloc((size_t)(total ? total : 1), sizeof *t);
	if (!t)
		return ph_fail(err, PH_ENOMEM, "out of memory");
	int k = 0;
	for (int i = 0; i < g->m.n; i++)
		for (int p = 0; p < g->m.layers[i].meta.nparams; p++, k++) {
			const ph_layer *L = &g->m.layers[i];
			snprintf(t[k].name, sizeof t[k].name, "%s.%s", L->cfg->name, L->meta.params[p].name);
			t[k].shape = L->meta.params[p].shape;
			t[k].data = g->params[i * PH_MAX_PARAMS + p];
		}
	ph_model_mark_ties(&g->m, t, total); /* a tied copy is read from its source */
	int rc = ph_weights_read_any(path, &g->m, t, total, &g->hf, err);
	free(t);
	return rc;
}

/* A parameter's shape at context L must be its shape at T, or its first L
 * rows (the embedding's positions): the same buffer serves both. */
static int same_or_prefix(const ph_shape *at_l, const ph_shape *at_t)
{
	if (at_l->ndim != at_t->ndim || at_l->d[0] > at_t->d[0])
		return 0;
	for (int i = 1; i < at_l->ndim; i++)
		if (at_l->d[i] != at_t->d[i])
			return 0;
	return 1;
}

/* logits [L, V] of the context ids[0..L). */
static int gen_forward(const gen_model *g, const ph_config *c, const int32_t *ids, int L, float *logits, ph_err *err)
{
	ph_shape in = { 1, { L } };
	float *x = malloc((size_t)L * sizeof *x), *y = NULL;
	void *scratch = NULL, *saved = NULL, *state = NULL;
	int rc = PH_OK;
	if (!x)
		return ph_fail(err, PH_ENOMEM, "out of memory");
	for (int t = 0; t < L; t++)
		x[t] = (float)ids[t];
	for (int i = 0; i < g->nrun && !rc; i++) {
		const ph_layer *lay = &g->m.layers[i];
		const char *name = lay->cfg->name, *type = lay->ops->head.name;
		ph_err e = { { 0 } };
		ph_layer_meta meta;
		memset(&meta, 0, sizeof meta);
		if ((rc = lay->ops->create(lay->cfg->config, &in, 1, &state, &e))) {
			state = NULL;
			ph_fail(err, rc, "--generate: layer %s (%s) refuses a context of %d tokens: %s", name, type, L, e.msg);
			break;
		}
		if ((rc = lay->ops->meta(state, &meta, &e)))
			ph_fail(err, rc, "--generate: layer %s (%s): %s", name, type, ph_plugin_words(type, e.msg));
		else if (meta.nparams != lay->meta.nparams)
			rc = ph_fail(err, PH_EINVAL, "--generate: layer %s (%s) has %d parameters for %d tokens, %d for %d",
				     name, type, meta.nparams, L, lay->meta.nparams, g->T);
		for (int p = 0; p < meta.nparams && !rc; p++)
			if (!same_or_prefix(&meta.params[p].shape, &lay->meta.params[p].shape))
				rc = ph_fail(err, PH_EINVAL, "--generate: layer %s (%s): parameter %s changes shape with the "
					     "context length; generation needs the whole T = %d", name, type,
					     meta.params[p].name, g->T);
		int64_t ny = 0;
		if (!rc && (meta.out.ndim < 1 || meta.out.ndim > PH_MAX_DIMS || (ny = ph_shape_numel(&meta.out)) <= 0))
			rc = ph_fail(err, PH_EINVAL, "--generate: layer %s (%s) reports a broken output shape for %d tokens",
				     name, type, L);
		y = rc ? NULL : malloc((size_t)ny * sizeof *y);
		scratch = rc ? NULL : calloc(1, meta.scratch_bytes ? meta.scratch_bytes : 16);
		saved = rc ? NULL : calloc(1, meta.saved_bytes ? meta.saved_bytes : 16);
		if (!rc && (!y || !scratch || !saved))
			rc = ph_fail(err, PH_ENOMEM, "out of memory running layer %s", name);
		if (!rc) {
			ph_ctx ctx = { .batch = 1, .training = 0, .seed = (uint64_t)c->run.seed, .step = 0,
				       .microbatch = 0, .layer = (uint64_t)i, .scratch = scratch, .saved = saved,
				       .device = PH_DEV_CPU, .loss_scale = 1.0f, .group = ph_group_solo() };
			if ((rc = lay->ops->forward(state, &ctx, g->params + (size_t)i * PH_MAX_PARAMS, x, y, &e)))
				ph_fail(err, rc, "--generate: layer %s (%s) forward: %s", name, type, e.msg);
		}
		lay->ops->destroy(state);
		state = NULL;
		free(scratch), free(saved), free(x);
		scratch = saved = NULL;
		x = y;
		y = NULL;
		in = meta.out;
	}
	if (!rc && (in.ndim != 2 || in.d[0] != L || in.d[1] != g->V))
		rc = ph_fail(err, PH_EINTERNAL, "--generate: the logits came out %lld x %lld, not %d x %lld",
			     (long long)in.d[0], (long long)(in.ndim > 1 ? in.d[1] : 1), L, (long long)g->V);
	if (!rc)
		memcpy(logits, x, (size_t)L * (size_t)g->V * sizeof *logits);
	free(x);
	return rc;
}

/* ------------------------------------------------------------------ */
/* Sampling.                                                           */

static __thread const float *sort_logits; /* qsort has no context argument */

/* Higher logit first; equal logits by lower id: a total order, so the
 * candidates come out the same on every libc. */
static int by_logit(const void *a, const void *b)
{
	int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
	float x = sort_logits[i], y = sort_logits[j];
	if (x != y)
		return x > y ? -1 : 1;
	return (i > j) - (i < j);
}

/* The next token from one position's logits z [V]; u in [0, 1). */
static int32_t sample(const float *z, int64_t V, double temperature, int64_t top_k, float u, int32_t *order)
{
	int32_t best = 0;
	for (int64_t k = 1; k < V; k++)
		if (z[k] > z[best])
			best = (int32_t)k;
	if (temperature == 0 || top_k == 1)
		return best;
	for (int64_t k = 0; k < V; k++)
		order[k] = (int32_t)k;
	sort_logits = z;
	qsort(order, (size_t)V, sizeof *order, by_logit);
	int64_t n = top_k > 0 && top_k < V ? top_k : V;
	double total = 0;
	for (int64_t k = 0; k < n; k++)
		total += exp(((double)z[order[k]] - z[best]) / temperature);
	double target = (double)u * total, cum = 0;
	for (int64_t k = 0; k < n; k++) {
		cum += exp(((double)z[order[k]] - z[best]) / temperature);
		if (cum > target)
			return order[k];
	}
	return order[n - 1];
}

static int all_finite(const float *z, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		if (!isfinite(z[i]))
			return 0;
	return 1;
}

/* ------------------------------------------------------------------ */

static int write_logits(const char *path, const float *z, int L, int64_t V, ph_err *err)
{
	ph_tensor_ref r;
	memset(&r, 0, sizeof r);
	snprintf(r.name, sizeof r.name, "logits");
	r.shape = (ph_shape){ 2, { L, V } };
	r.data = (float *)z;
	static const char *const meta[] = { "producer", "pipehost --generate --logits", NULL };
	return ph_safetensors_write(path, &r, 1, meta, err);
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int ph_generate(const ph_config *c, const ph_shape *in, const ph_gen_opts *o, FILE *out, FILE *info, ph_err *err)
{
	ph_tokenizer bytes;
	ph_tokenizer_bytes(&bytes);
	const ph_tokenizer *tok = o->tok ? o->tok : &bytes;
	char wpath[4096];
	int rc;
	gen_model g;
	int32_t *ids = NULL, *order = NULL;
	float *logits = NULL;
	int64_t n = 0;
	/* the checks that need no parameters come first, the cheapest first */
	if ((rc = gen_model_build(&g, c, in, err)))
		goto out;
	if (g.V > tok->vocab) {
		rc = ph_fail(err, PH_EINVAL, "--generate: the model has %lld logits a position, the %s tokenizer only %lld "
			     "ids; use a model whose vocab is %lld", (long long)g.V, tok->name, (long long)tok->vocab,
			     (long long)tok->vocab);
		goto out;
	}
	size_t plen = strlen(o->prompt);
	if ((rc = tok->encode(tok->self, o->prompt, plen, &ids, &n, err)))
		goto out;
	if (n < 1) {
		rc = ph_fail(err, PH_EINVAL, "--generate: the prompt is empty; give at least one token of text");
		goto out;
	}
	for (int64_t i = 0; i < n; i++)
		if (ids[i] < 0 || ids[i] >= g.V) {
			rc = ph_fail(err, PH_EINVAL, "--generate: prompt token %lld is id %d, outside the model's vocab of "
				     "%lld", (long long)i, (int)ids[i], (long long)g.V);
			goto out;
		}
	if (o->weights) {
		snprintf(wpath, sizeof wpath, "%s", o->weights);
	} else {
		if ((rc = weights_path(c, 1, wpath, sizeof wpath, err)))
			goto out;
		/* the outputs were checked against the newest checkpoint; an
		 * older one taken in its place is an input too */
		const ph_output lo = { "--logits", o->logits_path };
		const char *const win[] = { wpath };
		if (o->logits_path && (rc = ph_outputs_check(&lo, 1, win, 1, err)))
			goto out;
	}
	if ((rc = gen_model_alloc(&g, err)) || (rc = gen_model_load(&g, wpath, err)))
		goto out;
	/* ids moved by a realloc that worked is the one out: frees */
	int32_t *grown = realloc(ids, (size_t)(n + o->max_new_tokens) * sizeof *ids);
	if (grown)
		ids = grown;
	logits = malloc((size_t)g.T * (size_t)g.V * sizeof *logits);
	order = malloc((size_t)g.V * sizeof *order);
	if (!grown || !logits || !order) {
		rc = ph_fail(err, PH_ENOMEM, "out of memory for %lld new tokens", (long long)o->max_new_tokens);
		goto out;
	}
	/* BLAS results depend on the thread count: [run] threads, one by default */
	openblas_set_num_threads(c->run.threads > 0 ? (int)c->run.threads : 1);
	/* the prompt is echoed once the first logits are known to be finite:
	 * broken weights then leave nothing on stdout */
	int echoed = 0;
	const uint64_t key = ph_mix64((uint64_t)o->seed ^ GEN_SITE);
	double t0 = now_s();
	for (int64_t k = 0; k <= o->max_new_tokens; k++) {
		if (k == o->max_new_tokens && !(k == 0 && o->logits_path))
			break;
		int L = n > g.T ? g.T : (int)n;
		if ((rc = gen_forward(&g, c, ids + n - L, L, logits, err)))
			goto out;
		if (k == 0 && o->logits_path) {
			/* a file of NaN logits is no answer: refuse it before it is written */
			if (!all_finite(logits, (int64_t)L * g.V)) {
				rc = ph_fail(err, PH_EINVAL, "--logits %s: not written: the logits of the %d prompt tokens are not "
					     "finite; the weights in %s are broken (NaN or Inf)", o->logits_path, L, wpath);
				goto out;
			}
			if ((rc = write_logits(o->logits_path, logits, L, g.V, err)))
				goto out;
			/* a row i of the file is not prompt position i then: said */
			if (n > g.T)
				fprintf(stderr, "pipehost: note: --logits %s holds the last %d of the prompt's %lld tokens (the "
					"model's context, seq_len = %d), positions counted from 0 as the model saw them\n",
					o->logits_path, L, (long long)n, g.T);
		}
		if (k == o->max_new_tokens)
			break;
		const float *z = logits + (size_t)(L - 1) * (size_t)g.V;
		if (!all_finite(z, g.V)) {
			rc = ph_fail(err, PH_EINVAL, "--generate: the logits after %lld tokens are not finite; the weights in "
				     "%s are broken (NaN or Inf)", (long long)n, wpath);
			goto out;
		}
		if (!echoed) {
			if ((rc = put_text(out, o->prompt, plen, err)))
				goto out;
			echoed = 1;
		}
		int32_t next = sample(z, g.V, o->temperature, o->top_k, ph_rng_uniform(key, (uint64_t)k), order);
		ids[n++] = next;
		if ((rc = tok->decode(tok->self, next, out, err)) || (rc = flush_text(out, err)))
			goto out;
	}
	if ((!echoed && (rc = put_text(out, o->prompt, plen, err))) || (rc = put_text(out, "\n", 1, err)) ||
	    (rc = flush_text(out, err)))
		goto out;
	double t = now_s() - t0;
	if (info)
		fprintf(info, "generated %lld tokens from %s%s in %.2f s (%.1f tokens/s)\n", (long long)o->max_new_tokens,
			wpath, g.hf ? " (Hugging Face GPT-2)" : "", t, t > 0 ? (double)o->max_new_tokens / t : 0.0);
out:
	free(ids);
	free(order);
	free(logits);
	gen_model_free(&g);
	return rc;
}
