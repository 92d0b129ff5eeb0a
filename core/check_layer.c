/* SPDX-License-Identifier: MIT */
/* pipehost --check-plugin, a layer's checks (check_impl.h): its options,
 * an input it accepts, meta against what forward and backward do,
 * determinism, the split backward and the in-place claims, finite-
 * difference gradients, and its CUDA twin (check_twin.c). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check_impl.h"
#include "check_twin.h"
#include "fd_check.h"
#include "layer_call.h"
#include "layer_inst.h"

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

int ph_chk_parse_shape(const char *text, ph_shape *s, ph_err *err)
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

static const uint32_t UNWRITTEN = PH_CHECK_UNWRITTEN;

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
	/* FLOPs become the partitioner's costs and --plan's seconds: a run
	 * refuses a negative or non-finite figure (core/model.c) */
	const double flops[2] = { L->meta.fwd_flops, L->meta.bwd_flops };
	for (int k = 0; k < 2; k++)
		if (!isfinite(flops[k]) || flops[k] < 0)
			return ph_fail(err, PH_EINVAL, "%s reports %s FLOPs %g; FLOPs a sample are finite and 0 or more: fix "
				       "the plugin's meta", name, k ? "backward" : "forward", flops[k]);
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

/* The elements a tensor is checked at, from one timed forward of L; a
 * failed forward's status negated. */
static int64_t fd_sample(ph_layer_inst *L, int tensors, ph_err *err)
{
	double t0 = seconds();
	int rc = ph_layer_inst_forward(L, err);
	if (rc)
		return -rc;
	double each = 2.0 * (seconds() - t0) * (tensors > 0 ? tensors : 1);
	double fit = each > 0 ? PH_CHECK_FD_BUDGET_S / each : PH_CHECK_FD_SAMPLE;
	return fit >= PH_CHECK_FD_SAMPLE ? PH_CHECK_FD_SAMPLE : fit <= PH_CHECK_FD_LEAST ? PH_CHECK_FD_LEAST : (int64_t)fit;
}

static void gradients(const layer_plan *lp, int batch)
{
	ph_chk_begin("layer %s: gradients (batch %d)", lp->ops->head.name, batch);
	ph_layer_inst L;
	ph_err e = { { 0 } };
	ph_fd_grads a = { 0 };
	double worst = 0;
	ph_fd_check c = checker_fd;
	c.x_ids = lp->ids;
	int rc = open_inst(&L, lp, batch, 77 + (uint64_t)batch, &e);
	if (rc) {
		FAIL_RC(rc, "%s", e.msg);
		return;
	}
	if (!(rc = ph_fd_analytic(&L, &a, &e)) && (c.sample = fd_sample(&L, L.meta.nparams + !lp->ids, &e)) < 0)
		rc = (int)-c.sample;
	if (!rc)
		rc = ph_fd_check_numeric(&L, &a, &c, &worst, &e);
	if (rc) {
		FAIL_RC(rc, "%s", e.msg);
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
	int rc;
	ph_chk_begin("layer %s: cuda twin", name);
	if (!(ph_layer_devices(lp->ops) & PH_DEV_CUDA)) {
		SKIP("the layer has no CUDA twin (devices: cpu)");
		return;
	}
	if (ph_check_twin_available(&e)) {
		SKIP("no GPU to run it on: %s", e.msg);
		return;
	}
	/* one CPU run, the reference for both precisions */
	ph_layer_inst L;
	if ((rc = open_inst(&L, lp, lp->batch, 91, &e))) {
		FAIL_RC(rc, "%s", e.msg);
		return;
	}
	if ((rc = ph_layer_inst_forward(&L, &e)) || (rc = ph_layer_inst_backward(&L, L.dx, &e))) {
		FAIL_RC(rc, "the CPU run it is compared with: %s", e.msg);
		ph_layer_inst_close(&L);
		return;
	}
	for (int k = 0; k < 2; k++) {
		char detail[512];
		ph_chk_begin("layer %s: cuda twin (%s, batch %d)", name, k ? "bf16" : "fp32", lp->batch);
		if ((rc = ph_check_twin(&L, k ? PH_PREC_BF16 : PH_PREC_FP32, detail, sizeof detail, &e)))
			FAIL_RC(rc, "%s", e.msg);
		else
			PASS("%s", detail);
	}
	ph_layer_inst_close(&L);
}

/* ------------------------------------------------------------------ */
/* The hooks, each named (ph_chk_hook) while it runs: the checks reach    */
/* them through layer_inst.c, fd_check.c and check_twin.c, so the checked */
/* layer's ops are a copy whose hooks name themselves, then call the      */
/* layer's.  One layer a child process, so one `real` at a time.          */

static const ph_layer_ops *real;

static int named_create(const void *config, const ph_shape *in, int max_batch, void **state, ph_err *err)
{
	ph_chk_hook("create");
	int rc = real->create(config, in, max_batch, state, err);
	ph_chk_hook(NULL);
	return rc;
}

static void named_destroy(void *state)
{
	ph_chk_hook("destroy");
	real->destroy(state);
	ph_chk_hook(NULL);
}

static int named_meta(const void *state, ph_layer_meta *meta, ph_err *err)
{
	ph_chk_hook("meta");
	int rc = real->meta(state, meta, err);
	ph_chk_hook(NULL);
	return rc;
}

static int named_forward(void *state, const ph_ctx *ctx, float *const *params, const float *x, float *y, ph_err *err)
{
	ph_chk_hook("forward");
	int rc = real->forward(state, ctx, params, x, y, err);
	ph_chk_hook(NULL);
	return rc;
}

/* the dx it is given named too: writing through dx = NULL is a bug of its own */
static int named_backward(void *state, const ph_ctx *ctx, float *const *params, float *const *grads, const float *x,
			  const float *y, const float *dy, float *dx, ph_err *err)
{
	ph_chk_hook(!dx ? "backward (dx = NULL)" : dx == x ? "backward (dx = x)" : "backward");
	int rc = real->backward(state, ctx, params, grads, x, y, dy, dx, err);
	ph_chk_hook(NULL);
	return rc;
}

static int named_backward_input(void *state, const ph_ctx *ctx, float *const *params, const float *x, const float *y,
				const float *dy, float *dx, ph_err *err)
{
	ph_chk_hook(!dx ? "backward_input (dx = NULL)" : "backward_input");
	int rc = real->backward_input(state, ctx, params, x, y, dy, dx, err);
	ph_chk_hook(NULL);
	return rc;
}

static int named_backward_weight(void *state, const ph_ctx *ctx, float *const *params, float *const *grads,
				 const float *x, const float *y, const float *dy, ph_err *err)
{
	ph_chk_hook("backward_weight");
	int rc = real->backward_weight(state, ctx, params, grads, x, y, dy, err);
	ph_chk_hook(NULL);
	return rc;
}

/* ops with its CPU hooks named; the optional split stays absent where it
 * is (the CUDA twin's hooks are called as they are: its check names it). */
static ph_layer_ops named_hooks(const ph_layer_ops *ops)
{
	ph_layer_ops t = *ops; /* the loader's copy, at this ABI's size */
	real = ops;
	t.create = named_create;
	t.destroy = named_destroy;
	t.meta = named_meta;
	t.forward = named_forward;
	t.backward = named_backward;
	if (ops->backward_input && ops->backward_weight) {
		t.backward_input = named_backward_input;
		t.backward_weight = named_backward_weight;
	}
	return t;
}

void ph_chk_layer(const ph_layer_ops *layer, const ph_check_opts *o)
{
	const ph_layer_ops named = named_hooks(layer), *ops = &named;
	const char *name = ops->head.name;
	ph_err e = { { 0 } };
	int rc;
	ph_chk_begin("layer %s: cpu", name);
	if (!(ops->devices & PH_DEV_CPU)) {
		SKIP("the layer has no CPU code (devices lacks PH_DEV_CPU); the checker runs the CPU code only");
		return;
	}
	ph_chk_begin("layer %s: options", name);
	layer_plan lp = { .ops = ops, .batch = o->batch };
	char notes[256];
	if ((rc = ph_chk_build_config(&ops->head, o, &lp.cfg, notes, sizeof notes, &e))) {
		FAIL_RC(rc, "%s", e.msg);
		return;
	}
	if (notes[0])
		PASS("defaults, and for the required: %s (the checker's choice; --set %s.KEY=VALUE for others)", notes,
		     name);
	else
		PASS("defaults%s", o->nsets ? " and --set" : "");

	/* The input: --shape, or the first default shape create() accepts. */
	ph_chk_begin("layer %s: create", name);
	ph_shape tried[4];
	int ntried = 0;
	if (o->shape) {
		if (ph_chk_parse_shape(o->shape, &tried[0], &e)) {
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
	rc = PH_EINVAL;
	for (int i = 0; i < ntried && rc; i++) {
		char s[64];
		shape_str(&tried[i], s, sizeof s);
		lp.in = tried[i];
		/* create() alone first: an input it accepts whose meta is then
		 * broken (an output size of 0, too many parameters) is the
		 * plugin's bug, and no --shape fixes it */
		void *state = NULL;
		ph_err e2 = { { 0 } };
		const int rc_alone = ops->create(lp.cfg, &lp.in, lp.batch, &state, &e2), accepted = !rc_alone;
		if (accepted && state)
			ops->destroy(state);
		if (rc_alone == PH_ENOMEM) { /* no memory is no refusal of this shape */
			FAIL_RC(rc_alone, "create, input %s: %s", s, e2.msg);
			goto out;
		}
		if (!(rc = ph_layer_inst_create(&big, ops, lp.cfg, lp.in, lp.batch, train_ctx(lp.batch), &e)))
			break;
		if (accepted || rc == PH_ENOMEM) {
			FAIL_RC(rc, "create accepts input %s, but %s; fix the plugin's meta", s, e.msg);
			goto out;
		}
		size_t used = strlen(refused);
		snprintf(refused + used, sizeof refused - used, "%s%s: %s", used ? "; " : "", s, e.msg);
	}
	if (rc) {
		FAIL_RC(rc, "refused every input tried (%s); give one it accepts with --shape", refused);
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
			FAIL_RC(rc, "%s", e.msg);
			goto out;
		}
		rc = ph_layer_inst_forward(&big, lp.ids ? &e : &e_real);
		ph_layer_inst_close(&big);
		if (!rc || rc == PH_ENOMEM) /* no memory is no refusal of reals */
			break;
	}
	if (rc) {
		/* lp.ids 1: token ids ran out of memory; else the reals' refusal */
		FAIL_RC(rc, "input %s: %s", s, lp.ids == 1 ? e.msg : e_real.msg);
		goto out;
	}
	PASS("input %s of %s%s, batches 1 and %d", s, lp.ids ? "token ids (0, 1)" : "reals U(-1, 1)",
	     lp.ids ? " (forward refused reals)" : "", lp.batch);

	int batches[2] = { 1, lp.batch };
	for (int k = 0; k < (lp.batch > 1 ? 2 : 1); k++) {
		ph_chk_begin("layer %s: meta matches forward and backward (batch %d)", name, batches[k]);
		if ((rc = open_inst(&big, &lp, batches[k], 21, &e)) || (rc = meta_matches(&big, &e)))
			FAIL_RC(rc, "%s", e.msg);
		else
			PASS("every output float written, every dx float written, nothing past a buffer, x and parameters "
			     "untouched");
		ph_layer_inst_close(&big); /* a no-op after a failed create */
	}

	ph_chk_begin("layer %s: determinism (batch %d)", name, lp.batch);
	ph_fd_grads a = { 0 };
	if ((rc = open_inst(&big, &lp, lp.batch, 31, &e))) {
		FAIL_RC(rc, "%s", e.msg);
		goto out;
	}
	if ((rc = ph_fd_analytic(&big, &a, &e)) || (rc = ph_fd_check_repeat(&big, &a, &e)) ||
	    (rc = same_from_fresh(&big, &lp, &e)))
		FAIL_RC(rc, "%s", e.msg);
	else
		PASS("forward and backward give the same bits twice, from a fresh instance, and with dx = NULL");

	ph_chk_begin("layer %s: split backward (batch %d)", name, lp.batch);
	if (!ph_layer_has_split_backward(ops))
		SKIP("the layer has no backward_input/backward_weight; backward() serves both halves");
	else if (!a.dx)
		SKIP("backward failed above");
	else if ((rc = ph_fd_check_split(&big, &a, &e)))
		FAIL_RC(rc, "%s", e.msg);
	else
		PASS("backward_input then backward_weight give backward()'s bits");

	ph_chk_begin("layer %s: in place (batch %d)", name, lp.batch);
	const uint32_t claims = ops->flags & (PH_LAYER_BACKWARD_NO_Y | PH_LAYER_DX_OVER_X);
	if (!claims)
		SKIP("the layer claims neither PH_LAYER_BACKWARD_NO_Y nor PH_LAYER_DX_OVER_X");
	else if (!a.dx)
		SKIP("backward failed above");
	else if ((rc = ph_fd_check_in_place(&big, &a, &e)))
		FAIL_RC(rc, "%s", e.msg);
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

