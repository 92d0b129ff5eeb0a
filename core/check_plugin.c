/* SPDX-License-Identifier: MIT */
/* pipehost --check-plugin FILE.so (check_plugin.h): the loader's ABI and
 * descriptor checks, then for each layer, schedule and partitioner the file
 * provides the checks the project's tests run on its own plugins.  Each
 * entry is checked in a child process, so that a plugin that crashes, hangs
 * or exits is reported as a FAIL of the check it was in, not a crash of
 * pipehost. */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check_plugin.h"
#include "check_twin.h"
#include "layer_call.h"
#include "fd_check.h"
#include "layer_inst.h"
#include "loader.h"
#include "options.h"
#include "plan.h"

/* ------------------------------------------------------------------ */
/* Reporting: one line a check; the tally lives in memory shared with   */
/* the child that runs the checks, so a crash still leaves it behind.   */

typedef struct {
	char current[192]; /* "layer linear: gradients (batch 4)": the check under way */
	int passed, failed, skipped;
	int done;          /* the child finished its checks (did not exit inside a plugin) */
} tally;

static tally *tl;
static FILE *out;

static void begin(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void begin(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(tl->current, sizeof tl->current, fmt, ap);
	va_end(ap);
}

/* "PASS <current>: message"; counts it. */
static void verdict(const char *v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void verdict(const char *v, const char *fmt, ...)
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

#define PASS(...) verdict("PASS", __VA_ARGS__)
#define FAIL(...) verdict("FAIL", __VA_ARGS__)
#define SKIP(...) verdict("SKIP", __VA_ARGS__)

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
static int build_config(const ph_ops_head *h, const ph_check_opts *o, void **cfg_out, char *notes, size_t nlen,
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
/* Layers.                                                              */

/* The inputs tried when --shape gives none, in this order: a sequence of
 * vectors [T, d] (attention, layernorm, seq_xent and anything elementwise),
 * an image [C, H, W] (conv2d, maxpool2d), a vector [n] (softmax_xent, the
 * embedding's token ids).  Small, so that every element's finite
 * difference stays cheap. */
static const ph_shape default_shapes[] = { { 2, { 4, 8 } }, { 3, { 2, 6, 6 } }, { 1, { 8 } } };

static void shape_str(const ph_shape *s, char *buf, size_t len)
{
	size_t used = 0;
	buf[0] = 0;
	for (int i = 0; i < s->ndim && used < len; i++)
		used += (size_t)snprintf(buf + used, len - used, "%s%lld", i ? "x" : "", (long long)s->d[i]);
}

static int parse_shape(const char *text, ph_shape *s, ph_err *err)
{
	memset(s, 0, sizeof *s);
	const char *p = text;
	while (*p) {
		char *end;
		errno = 0;
		/* digits only: strtoll alone would take " 4" and "+4" */
		long long v = *p >= '0' && *p <= '9' ? strtoll(p, &end, 10) : (end = (char *)p, 0);
		if (end == p || errno || v < 1 || v > (1 << 20) || s->ndim == PH_MAX_DIMS || (*end && *end != 'x'))
			return ph_fail(err, PH_EINVAL, "--shape %s: expected 1 to %d sizes from 1 to %d joined by x, e.g. 4x8 "
				       "or 2x6x6 (one sample; the batch is --batch)", text, PH_MAX_DIMS, 1 << 20);
		s->d[s->ndim++] = v;
		p = *end ? end + 1 : end;
		if (*end && !*p)
			return ph_fail(err, PH_EINVAL, "--shape %s ends with x; give the last size", text);
	}
	if (!s->ndim)
		return ph_fail(err, PH_EINVAL, "--shape is empty; give sizes joined by x, e.g. 4x8");
	return PH_OK;
}

/* How the check drives one layer: its config, input, the largest batch. */
typedef struct {
	const ph_layer_ops *ops;
	void *cfg;
	ph_shape in;
	int batch;
	int ids;         /* x holds token ids (0, 1), not reals */
	int64_t classes; /* a loss layer's targets are drawn from [0, classes) */
} layer_plan;

static ph_ctx train_ctx(int batch)
{
	return (ph_ctx){ .batch = batch, .training = 1, .seed = 1234, .step = 7, .microbatch = 3, .layer = 2,
			 .device = PH_DEV_CPU, .loss_scale = 1.0f, .group = ph_group_solo() };
}

/* An instance at `batch` with x, r, parameters and targets drawn from a
 * seed of its own (the same seed, the same numbers). */
static int open_inst(ph_layer_inst *L, const layer_plan *lp, int batch, uint64_t seed, ph_err *err)
{
	int rc = ph_layer_inst_create(L, lp->ops, lp->cfg, lp->in, batch, train_ctx(batch), err);
	if (rc)
		return rc;
	ph_rng64 g = { seed };
	if (lp->ids)
		for (int64_t i = 0; i < L->nx; i++)
			L->x[i] = (float)(ph_rng64_next(&g) % 2);
	else
		ph_rng64_fill(&g, L->x, L->nx, -1, 1);
	ph_layer_inst_draw(L, &g, 0.5f, lp->classes);
	return PH_OK;
}

/* A NaN no arithmetic produces: a float still holding it was never written. */
static const uint32_t UNWRITTEN = 0x7fa5a5a5u;

static void fill_unwritten(float *p, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		memcpy(&p[i], &UNWRITTEN, sizeof UNWRITTEN);
}

static int64_t first_unwritten(const float *p, int64_t n)
{
	for (int64_t i = 0; i < n; i++)
		if (!memcmp(&p[i], &UNWRITTEN, sizeof UNWRITTEN))
			return i;
	return -1;
}

/* Bytes of x and every parameter, to see that no call wrote them. */
static int inputs_untouched(const ph_layer_inst *L, float *const *snap, const char *call, ph_err *err)
{
	if (memcmp(snap[0], L->x, (size_t)L->nx * sizeof(float)))
		return ph_fail(err, PH_EINVAL, "%s %s changed its input x; x belongs to the previous layer", L->ops->head.name,
			       call);
	for (int p = 0; p < L->meta.nparams; p++)
		if (memcmp(snap[p + 1], L->params[p], (size_t)L->pn[p] * sizeof(float)))
			return ph_fail(err, PH_EINVAL, "%s %s changed parameter %s; only the optimizer writes parameters",
				       L->ops->head.name, call, L->meta.params[p].name);
	return PH_OK;
}

/* meta() against what forward and backward do: every output float meta
 * announces is written, nothing past y, dx, a gradient, scratch or saved;
 * every dx float written; x and the parameters untouched; a loss layer's
 * output is 2 floats a sample. */
static int meta_matches(ph_layer_inst *L, ph_err *err)
{
	const char *name = L->ops->head.name;
	if (L->loss && ph_shape_numel(&L->meta.out) != 2)
		return ph_fail(err, PH_EINVAL, "%s is a loss layer (PH_LAYER_LOSS) but meta gives %lld output floats a "
			       "sample; a loss layer outputs 2 (the loss, the correct count)", name,
			       (long long)ph_shape_numel(&L->meta.out));
	if (L->loss && L->meta.targets_per_sample < 1)
		return ph_fail(err, PH_EINVAL, "%s is a loss layer but meta gives targets_per_sample %d; it needs >= 1",
			       name, L->meta.targets_per_sample);
	float *snap[PH_MAX_PARAMS + 1] = { 0 };
	int rc = PH_OK;
	if (!(snap[0] = malloc((size_t)L->nx * sizeof(float))))
		return ph_fail(err, PH_ENOMEM, "out of memory");
	memcpy(snap[0], L->x, (size_t)L->nx * sizeof(float));
	for (int p = 0; p < L->meta.nparams && !rc; p++) {
		if (!(snap[p + 1] = malloc((size_t)L->pn[p] * sizeof(float))))
			rc = ph_fail(err, PH_ENOMEM, "out of memory");
		else
			memcpy(snap[p + 1], L->params[p], (size_t)L->pn[p] * sizeof(float));
	}
	int64_t at;
	if (!rc) {
		fill_unwritten(L->y, L->ny);
		rc = ph_layer_inst_forward(L, err);
	}
	if (!rc)
		rc = ph_layer_inst_check_guards(L, "forward", err);
	if (!rc && (at = first_unwritten(L->y, L->ny)) >= 0) {
		char s[64];
		shape_str(&L->meta.out, s, sizeof s);
		rc = ph_fail(err, PH_EINVAL, "%s forward left y[%lld] unwritten: meta says out = %s, %lld floats a "
			     "sample (%lld for batch %d); meta's out must match what forward writes", name, (long long)at, s,
			     (long long)ph_shape_numel(&L->meta.out), (long long)L->ny, L->batch);
	}
	if (!rc)
		rc = inputs_untouched(L, snap, "forward", err);
	if (!rc) {
		fill_unwritten(L->dx, L->nx);
		rc = ph_layer_inst_backward(L, L->dx, err);
	}
	if (!rc)
		rc = ph_layer_inst_check_guards(L, "backward", err);
	if (!rc && (at = first_unwritten(L->dx, L->nx)) >= 0)
		rc = ph_fail(err, PH_EINVAL, "%s backward left dx[%lld] unwritten; dx is overwritten (=) in full, "
			     "with 0 where the input has no gradient", name, (long long)at);
	if (!rc)
		rc = inputs_untouched(L, snap, "backward", err);
	for (int p = 0; p <= PH_MAX_PARAMS; p++)
		free(snap[p]);
	return rc;
}

/* Forward and backward from a second instance, its scratch and saved
 * full of other bytes, give the first one's bits. */
static int same_from_fresh(ph_layer_inst *A, const layer_plan *lp, ph_err *err)
{
	ph_layer_inst B;
	int rc = ph_layer_inst_create(&B, lp->ops, lp->cfg, lp->in, A->batch, train_ctx(A->batch), err);
	if (rc)
		return rc;
	memcpy(B.x, A->x, (size_t)A->nx * sizeof(float));
	memcpy(B.r, A->r, (size_t)A->ny * sizeof(float));
	for (int p = 0; p < A->meta.nparams; p++)
		memcpy(B.params[p], A->params[p], (size_t)A->pn[p] * sizeof(float));
	if (A->nt)
		memcpy(B.targets, A->targets, (size_t)A->nt * sizeof(int32_t));
	ph_layer_inst *two[2] = { A, &B };
	float *keep[2 + 2 * PH_MAX_PARAMS] = { 0 };
	for (int k = 0; k < 2 && !rc; k++) {
		ph_layer_inst *L = two[k];
		ph_layer_inst_fill_scratch(L, k ? 0xff : 0x00);
		for (int p = 0; p < L->meta.nparams; p++)
			memset(L->grads[p], 0, (size_t)L->pn[p] * sizeof(float));
		if ((rc = ph_layer_inst_forward(L, err)) || (rc = ph_layer_inst_backward(L, L->dx, err)))
			break;
		if (k == 0) {
			keep[0] = malloc((size_t)L->ny * sizeof(float));
			keep[1] = malloc((size_t)L->nx * sizeof(float));
			if (!keep[0] || !keep[1]) {
				rc = ph_fail(err, PH_ENOMEM, "out of memory");
				break;
			}
			memcpy(keep[0], L->y, (size_t)L->ny * sizeof(float));
			memcpy(keep[1], L->dx, (size_t)L->nx * sizeof(float));
			for (int p = 0; p < L->meta.nparams && !rc; p++) {
				if (!(keep[2 + p] = malloc((size_t)L->pn[p] * sizeof(float))))
					rc = ph_fail(err, PH_ENOMEM, "out of memory");
				else
					memcpy(keep[2 + p], L->grads[p], (size_t)L->pn[p] * sizeof(float));
			}
		} else if (memcmp(keep[0], L->y, (size_t)L->ny * sizeof(float))) {
			rc = ph_fail(err, PH_EINVAL, "%s: a second instance's forward gives other bits for the same input "
				     "and parameters (does it read scratch or saved before writing them?)", L->ops->head.name);
		} else if (memcmp(keep[1], L->dx, (size_t)L->nx * sizeof(float))) {
			rc = ph_fail(err, PH_EINVAL, "%s: a second instance's backward gives another dx", L->ops->head.name);
		} else {
			for (int p = 0; p < L->meta.nparams && !rc; p++)
				if (memcmp(keep[2 + p], L->grads[p], (size_t)L->pn[p] * sizeof(float)))
					rc = ph_fail(err, PH_EINVAL, "%s: a second instance's backward gives another d%s",
						     L->ops->head.name, L->meta.params[p].name);
		}
	}
	for (int i = 0; i < 2 + 2 * PH_MAX_PARAMS; i++)
		free(keep[i]);
	ph_layer_inst_close(&B);
	return rc;
}

/* The finite differences the checker takes: those of the project's layer
 * tests, and the fallbacks for inputs nobody chose (fd_check.h: kinks).
 * A tensor past PH_CHECK_FD_SAMPLE elements (a large --shape) is checked
 * at that many of them, evenly spread: every element would cost one
 * forward each, hours for a 64k-wide linear. */
#define PH_CHECK_FD_SAMPLE 1024
static const ph_fd_check checker_fd = { .eps = 1e-2f, .tol = 1e-2, .kinks = 1, .tensor_floor = 1e-2,
					.sample = PH_CHECK_FD_SAMPLE };
/* ... and fewer where one forward is slow (an attention over a long
 * --shape): each element takes two forwards or more, and a check should
 * end in about this many seconds; never fewer than PH_CHECK_FD_LEAST. */
#define PH_CHECK_FD_BUDGET_S 10.0
#define PH_CHECK_FD_LEAST 32

static double seconds(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The elements a tensor is checked at, from one timed forward of L. */
static int64_t fd_sample(ph_layer_inst *L, int tensors, ph_err *err)
{
	double t0 = seconds();
	if (ph_layer_inst_forward(L, err))
		return -1;
	double each = 2.0 * (seconds() - t0) * (tensors > 0 ? tensors : 1);
	double fit = each > 0 ? PH_CHECK_FD_BUDGET_S / each : PH_CHECK_FD_SAMPLE;
	return fit >= PH_CHECK_FD_SAMPLE ? PH_CHECK_FD_SAMPLE : fit <= PH_CHECK_FD_LEAST ? PH_CHECK_FD_LEAST : (int64_t)fit;
}

static void gradients(const layer_plan *lp, int batch)
{
	begin("layer %s: gradients (batch %d)", lp->ops->head.name, batch);
	ph_layer_inst L;
	ph_err e = { { 0 } };
	ph_fd_grads a = { 0 };
	double worst = 0;
	ph_fd_check c = checker_fd;
	c.x_ids = lp->ids;
	int rc = open_inst(&L, lp, batch, 77 + (uint64_t)batch, &e);
	if (rc) {
		FAIL("%s", e.msg);
		return;
	}
	if (!(rc = ph_fd_analytic(&L, &a, &e)) && (c.sample = fd_sample(&L, L.meta.nparams + !lp->ids, &e)) < 0)
		rc = PH_EINVAL;
	if (!rc)
		rc = ph_fd_check_numeric(&L, &a, &c, &worst, &e);
	if (rc) {
		FAIL("%s", e.msg);
	} else {
		int64_t n = lp->ids ? 0 : L.nx, probed = lp->ids ? 0 : ph_fd_probes(&c, L.nx);
		for (int p = 0; p < L.meta.nparams; p++)
			n += L.pn[p], probed += ph_fd_probes(&c, L.pn[p]);
		char count[96];
		if (probed < n)
			snprintf(count, sizeof count, "%lld of %lld values (evenly spread)", (long long)probed, (long long)n);
		else
			snprintf(count, sizeof count, "%lld values", (long long)n);
		PASS("%s and %d parameter tensor(s), %s, within %g of finite differences (worst %.2g)",
		     lp->ids ? "dx = 0 (ids)" : "dx", L.meta.nparams, count, c.tol, worst);
	}
	ph_fd_grads_free(&a);
	ph_layer_inst_close(&L);
}

/* The CUDA twin on cuda:0 against the layer's CPU code, fp32 then bf16
 * (check_twin.h): one SKIP line where there is no twin or no GPU. */
static void twin(const layer_plan *lp)
{
	const char *name = lp->ops->head.name;
	ph_err e = { { 0 } };
	begin("layer %s: cuda twin", name);
	if (!(ph_layer_devices(lp->ops) & PH_DEV_CUDA)) {
		SKIP("the layer has no CUDA twin (devices: cpu)");
		return;
	}
	if (ph_check_twin_available(&e)) {
		SKIP("no GPU to run it on: %s", e.msg);
		return;
	}
	for (int k = 0; k < 2; k++) {
		const int prec = k ? PH_PREC_BF16 : PH_PREC_FP32;
		begin("layer %s: cuda twin (%s, batch %d)", name, k ? "bf16" : "fp32", lp->batch);
		ph_layer_inst L;
		char detail[512];
		if (open_inst(&L, lp, lp->batch, 91, &e)) {
			FAIL("%s", e.msg);
			return;
		}
		if (ph_layer_inst_forward(&L, &e) || ph_layer_inst_backward(&L, L.dx, &e))
			FAIL("the CPU run it is compared with: %s", e.msg);
		else if (ph_check_twin(&L, prec, detail, sizeof detail, &e))
			FAIL("%s", e.msg);
		else
			PASS("%s", detail);
		ph_layer_inst_close(&L);
	}
}

static void check_layer(const ph_layer_ops *ops, const ph_check_opts *o)
{
	const char *name = ops->head.name;
	ph_err e = { { 0 } };
	begin("layer %s: cpu", name);
	if (!(ops->devices & PH_DEV_CPU)) {
		SKIP("the layer has no CPU code (devices lacks PH_DEV_CPU); the checker runs the CPU code only");
		return;
	}
	begin("layer %s: options", name);
	layer_plan lp = { .ops = ops, .batch = o->batch };
	char notes[256];
	if (build_config(&ops->head, o, &lp.cfg, notes, sizeof notes, &e)) {
		FAIL("%s", e.msg);
		return;
	}
	if (notes[0])
		PASS("defaults, and for the required: %s (the checker's choice; --set %s.KEY=VALUE for others)", notes,
		     name);
	else
		PASS("defaults%s", o->nsets ? " and --set" : "");

	/* The input: --shape, or the first default shape create() accepts. */
	begin("layer %s: create", name);
	ph_shape tried[4];
	int ntried = 0;
	if (o->shape) {
		if (parse_shape(o->shape, &tried[0], &e)) {
			FAIL("%s", e.msg);
			goto out;
		}
		ntried = 1;
	} else {
		ntried = (int)(sizeof default_shapes / sizeof default_shapes[0]);
		memcpy(tried, default_shapes, sizeof default_shapes);
	}
	ph_layer_inst big;
	char refused[768] = "";
	int rc = PH_EINVAL;
	for (int i = 0; i < ntried && rc; i++) {
		char s[64];
		shape_str(&tried[i], s, sizeof s);
		lp.in = tried[i];
		if (!(rc = ph_layer_inst_create(&big, ops, lp.cfg, lp.in, lp.batch, train_ctx(lp.batch), &e)))
			break;
		size_t used = strlen(refused);
		snprintf(refused + used, sizeof refused - used, "%s%s: %s", used ? "; " : "", s, e.msg);
	}
	if (rc) {
		FAIL("refused every input tried (%s); give one it accepts with --shape", refused);
		goto out;
	}
	/* What x holds: reals, or (if forward refuses those) token ids. */
	lp.classes = 1;
	if (big.meta.targets_per_sample > 0)
		lp.classes = ph_shape_numel(&lp.in) / big.meta.targets_per_sample;
	if (lp.classes < 1)
		lp.classes = 1;
	ph_layer_inst_close(&big);
	ph_err e_real = { { 0 } };
	char s[64];
	shape_str(&lp.in, s, sizeof s);
	for (lp.ids = 0; lp.ids < 2; lp.ids++) {
		if ((rc = open_inst(&big, &lp, lp.batch, 11, &e))) {
			FAIL("%s", e.msg);
			goto out;
		}
		rc = ph_layer_inst_forward(&big, lp.ids ? &e : &e_real);
		ph_layer_inst_close(&big);
		if (!rc)
			break;
	}
	if (rc) {
		FAIL("input %s: %s", s, e_real.msg);
		goto out;
	}
	PASS("input %s of %s%s, batches 1 and %d", s, lp.ids ? "token ids (0, 1)" : "reals U(-1, 1)",
	     lp.ids ? " (forward refused reals)" : "", lp.batch);

	int batches[2] = { 1, lp.batch };
	for (int k = 0; k < (lp.batch > 1 ? 2 : 1); k++) {
		begin("layer %s: meta matches forward and backward (batch %d)", name, batches[k]);
		if ((rc = open_inst(&big, &lp, batches[k], 21, &e)) || (rc = meta_matches(&big, &e)))
			FAIL("%s", e.msg);
		else
			PASS("every output float written, every dx float written, nothing past a buffer, x and parameters "
			     "untouched");
		ph_layer_inst_close(&big); /* a no-op after a failed create */
	}

	begin("layer %s: determinism (batch %d)", name, lp.batch);
	ph_fd_grads a = { 0 };
	if ((rc = open_inst(&big, &lp, lp.batch, 31, &e))) {
		FAIL("%s", e.msg);
		goto out;
	}
	if ((rc = ph_fd_analytic(&big, &a, &e)) || (rc = ph_fd_check_repeat(&big, &a, &e)) ||
	    (rc = same_from_fresh(&big, &lp, &e)))
		FAIL("%s", e.msg);
	else
		PASS("forward and backward give the same bits twice, from a fresh instance, and with dx = NULL");

	begin("layer %s: split backward (batch %d)", name, lp.batch);
	if (!ph_layer_has_split_backward(ops))
		SKIP("the layer has no backward_input/backward_weight; backward() serves both halves");
	else if (!a.dx)
		SKIP("backward failed above");
	else if ((rc = ph_fd_check_split(&big, &a, &e)))
		FAIL("%s", e.msg);
	else
		PASS("backward_input then backward_weight give backward()'s bits");

	begin("layer %s: in place (batch %d)", name, lp.batch);
	const uint32_t claims = ops->flags & (PH_LAYER_BACKWARD_NO_Y | PH_LAYER_DX_OVER_X);
	if (!claims)
		SKIP("the layer claims neither PH_LAYER_BACKWARD_NO_Y nor PH_LAYER_DX_OVER_X");
	else if (!a.dx)
		SKIP("backward failed above");
	else if ((rc = ph_fd_check_in_place(&big, &a, &e)))
		FAIL("%s", e.msg);
	else
		PASS("backward's bits %s%s%s", claims & PH_LAYER_BACKWARD_NO_Y ? "with y all NaN (PH_LAYER_BACKWARD_NO_Y)" : "",
		     claims == (PH_LAYER_BACKWARD_NO_Y | PH_LAYER_DX_OVER_X) ? " and " : "",
		     claims & PH_LAYER_DX_OVER_X ? "with dx = x (PH_LAYER_DX_OVER_X)" : "");
	ph_fd_grads_free(&a);
	ph_layer_inst_close(&big);

	gradients(&lp, 1);
	if (lp.batch > 1)
		gradients(&lp, lp.batch);
	twin(&lp);
out:
	free(lp.cfg);
}

/* ------------------------------------------------------------------ */
/* Schedules: the host's own checks (core/plan.c) on a few shapes.      */

static const ph_schedule_shape sched_shapes[] = {
	{ 1, 1, 1 }, { 1, 1, 4 }, { 2, 1, 4 }, { 3, 1, 7 }, { 4, 1, 8 }, { 2, 2, 4 }, { 4, 2, 8 }, { 2, 3, 6 },
};

static void check_schedule(const ph_schedule_ops *s, const ph_check_opts *o)
{
	const char *name = s->head.name;
	ph_err e = { { 0 } };
	void *cfg;
	char notes[256];
	begin("schedule %s: options", name);
	if (build_config(&s->head, o, &cfg, notes, sizeof notes, &e)) {
		FAIL("%s", e.msg);
		return;
	}
	PASS("defaults%s%s", notes[0] ? "; the checker's choice for the required: " : "", notes);
	if (s->max_chunks_per_rank < 1) {
		begin("schedule %s: max_chunks_per_rank", name);
		FAIL("is %d; 1 for a schedule without virtual chunks", s->max_chunks_per_rank);
		free(cfg);
		return;
	}
	int accepted = 0;
	for (size_t i = 0; i < sizeof sched_shapes / sizeof sched_shapes[0]; i++) {
		ph_schedule_shape sh = sched_shapes[i];
		if (sh.chunks_per_rank > s->max_chunks_per_rank)
			continue;
		begin("schedule %s: p=%d v=%d m=%d", name, sh.ranks, sh.chunks_per_rank, sh.microbatches);
		if (s->check && s->check(cfg, &sh, &e)) {
			SKIP("refused by its check: %s", e.msg);
			continue;
		}
		accepted++;
		ph_plan p;
		memset(&p, 0, sizeof p);
		p.ranks = sh.ranks;
		p.v = sh.chunks_per_rank;
		p.nchunks = p.ranks * p.v;
		p.m = sh.microbatches;
		int cap = 4 * p.v * p.m, rc = PH_OK; /* the room the host gives (core/plan.c) */
		p.actions = calloc((size_t)p.ranks, sizeof *p.actions);
		p.nactions = calloc((size_t)p.ranks, sizeof *p.nactions);
		if (!p.actions || !p.nactions)
			rc = ph_fail(&e, PH_ENOMEM, "out of memory");
		for (int r = 0; r < p.ranks && !rc; r++) {
			ph_err e2 = { { 0 } };
			if (!(p.actions[r] = calloc((size_t)cap, sizeof(ph_action))))
				rc = ph_fail(&e, PH_ENOMEM, "out of memory");
			else if ((rc = s->generate(cfg, &sh, r, p.actions[r], cap, &p.nactions[r], &e2)))
				ph_fail(&e, rc, "generate for rank %d failed after its check accepted the shape: %s", r, e2.msg);
			else if (p.nactions[r] < 0 || p.nactions[r] > cap)
				rc = ph_fail(&e, PH_EINVAL, "rank %d returned %d actions (room for %d)", r, p.nactions[r], cap);
		}
		if (!rc)
			rc = ph_plan_set_actions(&p, p.actions, p.nactions, &e);
		if (rc) {
			FAIL("%s", e.msg);
		} else {
			int peak = 0;
			for (int c = 0; c < p.nchunks; c++)
				peak = p.slots[c] > peak ? p.slots[c] : peak;
			PASS("every action once, each backward after its forward, no deadlock (at most %d micro-batch(es) in "
			     "flight on a chunk)", peak);
		}
		ph_plan_free(&p);
	}
	if (!accepted) {
		begin("schedule %s: shapes", name);
		FAIL("its check refused every shape tried; it must accept some (1 rank, 1 micro-batch at least)");
	}
	free(cfg);
}

/* ------------------------------------------------------------------ */
/* Partitioners: a few synthetic models' costs; the cut must be valid.  */

typedef struct {
	const char *what;
	int n, stages;
	int cuts_every;   /* 0: a cut after every layer; k: after every k-th only */
	int heavy;        /* index of one layer 20x the others' cost, or -1 */
	int rising;       /* costs 1, 2, 3, ... */
} profile;

static const profile profiles[] = {
	{ "8 equal layers into 2 stages", 8, 2, 0, -1, 0 },
	{ "12 layers of rising cost into 3 stages", 12, 3, 0, -1, 1 },
	{ "10 layers, layer 3 twenty times the others, into 4 stages", 10, 4, 0, 3, 0 },
	{ "8 layers cut only after every second, into 2 stages", 8, 2, 2, -1, 0 },
	{ "4 layers into 4 stages", 4, 4, 0, -1, 0 },
};

static void check_partitioner(const ph_partitioner_ops *pt, const ph_check_opts *o)
{
	const char *name = pt->head.name;
	ph_err e = { { 0 } };
	void *cfg;
	char notes[256];
	begin("partitioner %s: options", name);
	if (build_config(&pt->head, o, &cfg, notes, sizeof notes, &e)) {
		FAIL("%s", e.msg);
		return;
	}
	PASS("defaults%s%s", notes[0] ? "; the checker's choice for the required: " : "", notes);
	int accepted = 0;
	for (size_t i = 0; i < sizeof profiles / sizeof profiles[0]; i++) {
		const profile *pf = &profiles[i];
		int n = pf->n, K = pf->stages;
		double fwd[16], bwd[16], pbytes[16], act[16], keep[16], lim[16];
		const char *names[16], *types[16];
		char namebuf[16][8];
		uint8_t cut[16];
		int inflight[16], first[17], again[17];
		for (int l = 0; l < n; l++) {
			double c = pf->rising ? l + 1 : l == pf->heavy ? 20 : 1;
			fwd[l] = c;
			bwd[l] = 2 * c;
			pbytes[l] = 4096 * c;
			act[l] = keep[l] = 1024;
			snprintf(namebuf[l], sizeof namebuf[l], "l%d", l);
			names[l] = namebuf[l];
			/* a language model's types: embedding, blocks, a loss */
			types[l] = l == 0 ? "embedding" : l == n - 1 ? "seq_xent" : "gpt_block";
			cut[l] = l + 1 < n && (!pf->cuts_every || (l + 1) % pf->cuts_every == 0);
		}
		for (int k = 0; k < K; k++) {
			lim[k] = 0;
			inflight[k] = K - k;
		}
		ph_partition_problem pb = {
			.n = n, .stages = K, .fwd_cost = fwd, .bwd_cost = bwd, .param_bytes = pbytes, .act_bytes = act,
			.keep_bytes = keep, .names = names, .types = types, .cut_after = cut, .mem_limit = lim,
			.in_flight = inflight, .state_factor = 4, .link_bytes_per_s = 0,
		};
		begin("partitioner %s: %s", name, pf->what);
		for (int k = 0; k <= K; k++)
			first[k] = again[k] = -1;
		ph_err warn = { { 0 } }, warn2 = { { 0 } };
		if (pt->partition(cfg, &pb, first, &warn, &e)) {
			SKIP("refused: %s", e.msg);
			continue;
		}
		accepted++;
		int rc = ph_plan_check_bounds(name, &pb, first, &e);
		if (!rc && pt->partition(cfg, &pb, again, &warn2, &e))
			rc = ph_fail(&e, PH_EINVAL, "the same problem a second time is refused: %s", e.msg);
		if (!rc && memcmp(first, again, (size_t)(K + 1) * sizeof(int)))
			rc = ph_fail(&e, PH_EINVAL, "the same problem a second time gives other bounds");
		if (rc) {
			FAIL("%s", e.msg);
			continue;
		}
		char b[128] = "";
		for (int k = 0; k <= K; k++) {
			size_t used = strlen(b);
			snprintf(b + used, sizeof b - used, "%s%d", k ? "," : "", first[k]);
		}
		PASS("bounds %s: cover the layers, no stage empty, cuts where allowed, the same twice%s%s", b,
		     warn.msg[0] ? "; its note: " : "", warn.msg);
	}
	if (!accepted) {
		begin("partitioner %s: profiles", name);
		FAIL("refused every profile tried; it must split some");
	}
	free(cfg);
}

/* ------------------------------------------------------------------ */
/* The driver.                                                          */

/* Run one entry's checks in a child: a crash, a hang or an exit inside
 * the plugin ends the child, and the parent reports it against the check
 * that was under way. */
static void run_isolated(const ph_registry_entry *en, const ph_check_opts *o)
{
	int timeout = o->timeout_s > 0 ? o->timeout_s : 600;
	snprintf(tl->current, sizeof tl->current, "%s %s", ph_kind_name(en->kind), en->head->name);
	tl->done = 0;
	fflush(out);
	pid_t pid = fork();
	if (pid < 0) {
		FAIL("cannot start a process to check it in: %s", strerror(errno));
		return;
	}
	if (pid == 0) {
		alarm((unsigned)timeout);
		if (en->kind == PH_KIND_LAYER)
			check_layer(en->ops, o);
		else if (en->kind == PH_KIND_SCHEDULE)
			check_schedule(en->ops, o);
		else
			check_partitioner(en->ops, o);
		fflush(out);
		tl->done = 1;
		_exit(0);
	}
	int status;
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM)
		FAIL("still running after %d s; a check of these small inputs takes seconds", timeout);
	else if (WIFSIGNALED(status))
		FAIL("crashed (signal %d, %s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
	else if (!tl->done)
		FAIL("the plugin ended the process (exit status %d); plugins return errors, they never exit",
		     WIFEXITED(status) ? WEXITSTATUS(status) : -1);
}

/* Open the file once in a child first: a constructor or descriptor that
 * crashes, hangs or exits would otherwise take pipehost down with it (the
 * loader's guard names the file, then the signal ends the process).  The
 * child's own load errors are left to the parent's load, which reports
 * them with the loader's words; only how the child ended counts here. */
static int trial_load(const ph_check_opts *o)
{
	int timeout = o->timeout_s > 0 ? o->timeout_s : 600;
	tl->done = 0;
	fflush(out);
	fflush(stderr);
	pid_t pid = fork();
	if (pid < 0) {
		FAIL("cannot start a process to load it in: %s", strerror(errno));
		return -1;
	}
	if (pid == 0) {
		alarm((unsigned)timeout);
		ph_registry reg;
		memset(&reg, 0, sizeof reg);
		reg.allow_writable = o->allow_writable;
		ph_err e = { { 0 } };
		ph_registry_load_file(&reg, o->file, &e);
		tl->done = 1; /* before freeing: a destructor that exits is the run's problem, not the load's */
		_exit(0);
	}
	int status;
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM)
		FAIL("%s is still loading after %d s: a constructor or its descriptor function hangs; fix the plugin",
		     o->file, timeout);
	else if (!tl->done && WIFSIGNALED(status))
		FAIL("%s crashed while being loaded (signal %d, %s): a constructor or its descriptor function is broken; "
		     "fix the plugin", o->file, WTERMSIG(status), strsignal(WTERMSIG(status)));
	else if (!tl->done)
		FAIL("%s ended the process while being loaded (exit status %d): a constructor calls exit; plugins "
		     "return errors, they never exit", o->file, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
	else
		return 0;
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

int ph_check_plugin(const ph_check_opts *opts, FILE *f, ph_err *err)
{
	ph_check_opts o = *opts;
	if (!o.batch)
		o.batch = 4;
	if (o.batch < 1 || o.batch > 4096)
		return ph_fail(err, PH_EINVAL, "--batch %d: give 1 to 4096", o.batch);
	if (o.shape) {
		ph_shape s;
		int rc = parse_shape(o.shape, &s, err);
		if (rc)
			return rc;
	}
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
	begin("abi and descriptor");
	int rc = trial_load(&o); /* a FAIL line of its own where the load would end pipehost */
	if (!rc && !(rc = ph_registry_load_file(&reg, file, &e)) && reg.nentries == 0)
		rc = ph_fail(&e, PH_EINVAL, "%s lists no layer, partitioner or schedule", file);
	if (rc) {
		if (e.msg[0])
			FAIL("%s", e.msg);
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
	int failed = tl->failed, total = tl->passed + tl->failed + tl->skipped;
	fprintf(f, "%d check(s): %d passed, %d failed, %d skipped\n", total, tl->passed, tl->failed, tl->skipped);
	fflush(f);
	munmap(tl, sizeof *tl);
	if (failed)
		return ph_fail(err, PH_EINVAL, "%s: %d of %d checks failed (the FAIL lines above say which)", file, failed,
			       total);
	return PH_OK;
}
