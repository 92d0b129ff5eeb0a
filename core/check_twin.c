/* SPDX-License-Identifier: MIT */
/* pipehost --check-plugin: a layer's CUDA twin on cuda:0 against its own
 * CPU code (check_twin.h).  The host's CUDA backend (core/device.h) holds
 * the GPU: a rank state, device memory, copies; the layer runs through
 * the host's one way into its hooks (layer_call.h), as in training. */
#include "check_twin.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"
#include "layer_call.h"

/* test-cuda-layers' bounds: fp32 for every layer; bf16 its "deep" row
 * (attention, gpt_block), since a third party's layer may chain products.
 * fp32 leaves 10 to 100x of room for another summation order and FMA
 * contraction, and still fails on TF32 (~1e-3 relative) and on any real
 * bug (a wrong index, term, scale or mask: ~1e-1 of the scale). */
const ph_twin_tol ph_twin_tol_fp32 = { 1e-4, 1e-5, 1e-5 };
const ph_twin_tol ph_twin_tol_bf16 = { 5e-2, 5e-2, 3e-2 };

#define GUARD_BYTES 256
#define GUARD_BYTE 0xa5

int ph_check_twin_available(ph_err *err)
{
	const ph_device_ops *dev = ph_cuda_backend(err);
	if (!dev)
		return PH_EUNSUPPORTED;
	int n = 0;
	int rc = dev->count(&n, err);
	if (rc)
		return rc;
	if (n < 1)
		return ph_fail(err, PH_EUNSUPPORTED, "no CUDA device is visible");
	return PH_OK;
}

/* One rank on cuda:0 and the device buffers of one instance, each with
 * GUARD_BYTES of GUARD_BYTE after it. */
typedef struct {
	const ph_device_ops *dev;
	void *rs;
	void *buf[2 * PH_MAX_PARAMS + 8];
	size_t bytes[2 * PH_MAX_PARAMS + 8];
	int n;
} gpu;

/* *out: `bytes` of device memory, `src` in it (zero where src is NULL),
 * the guard after it. */
static int gpu_buf(gpu *g, void *out, const void *src, size_t bytes, ph_err *err)
{
	if (g->n == (int)(sizeof g->buf / sizeof g->buf[0]))
		return ph_fail(err, PH_EINTERNAL, "check_twin: too many buffers");
	void *p = NULL;
	unsigned char guard[GUARD_BYTES];
	memset(guard, GUARD_BYTE, sizeof guard);
	int rc = g->dev->alloc(g->rs, bytes + GUARD_BYTES, &p, err);
	if (rc)
		return rc;
	g->buf[g->n] = p;
	g->bytes[g->n++] = bytes;
	if ((src && bytes && (rc = g->dev->copy(g->rs, p, src, bytes, PH_COPY_H2D, err))) ||
	    (rc = g->dev->copy(g->rs, (char *)p + bytes, guard, GUARD_BYTES, PH_COPY_H2D, err)))
		return rc;
	memcpy(out, &p, sizeof p);
	return PH_OK;
}

/* n floats of `pattern` into device buffer p. */
static int gpu_fill(gpu *g, float *p, int64_t n, uint32_t pattern, ph_err *err)
{
	if (n <= 0)
		return PH_OK;
	uint32_t *h = malloc((size_t)n * sizeof *h);
	if (!h)
		return ph_fail(err, PH_ENOMEM, "out of memory");
	for (int64_t i = 0; i < n; i++)
		h[i] = pattern;
	int rc = g->dev->copy(g->rs, p, h, (size_t)n * sizeof *h, PH_COPY_H2D, err);
	free(h);
	return rc;
}

/* Which buffer (by name) had its guard written. */
static int gpu_guards(gpu *g, const char *const *names, const char *call, const char *layer, ph_err *err)
{
	unsigned char h[GUARD_BYTES];
	for (int i = 0; i < g->n; i++) {
		int rc = g->dev->copy(g->rs, h, (char *)g->buf[i] + g->bytes[i], GUARD_BYTES, PH_COPY_D2H, err);
		if (rc)
			return rc;
		const int sized = !strcmp(names[i], "scratch") || !strcmp(names[i], "saved");
		for (int k = 0; k < GUARD_BYTES; k++)
			if (h[k] != GUARD_BYTE)
				return ph_fail(err, PH_EINVAL, "%s's CUDA %s wrote past %s (byte %d after its %zu); %s", layer,
					       call, names[i], k, g->bytes[i],
					       sized ? "ask for more in meta (device_scratch_bytes, saved_bytes) or fix the index"
						     : "the host gives exactly the floats meta's shapes say: fix the index");
	}
	return PH_OK;
}

static void gpu_close(gpu *g)
{
	for (int i = 0; i < g->n; i++)
		g->dev->free(g->rs, g->buf[i]);
	g->n = 0;
	if (g->rs)
		g->dev->close(g->rs);
	g->rs = NULL;
}

/* A replica group of one on the GPU (ABI 1.5), as the engine gives a
 * stage's layers: all_to_all a device copy, the sum nothing; figures are
 * dropped, as outside the engine. */
static int twin_all_to_all(const ph_group *grp, const ph_ctx *ctx, const float *send, float *recv, size_t count,
			   ph_err *err)
{
	gpu *g = grp->host;
	(void)ctx;
	return count ? g->dev->copy(g->rs, recv, send, count * sizeof(float), PH_COPY_D2D, err) : PH_OK;
}

/* gpu against cpu, n floats (every `stride`-th from 0: a loss layer's
 * losses); the norm error relative to ntol in *worst. */
static int compare(const char *layer, const char *what, const float *gpu_v, const float *cpu_v, int64_t n,
		   int stride, const ph_twin_tol *t, const char *prec, double *worst, ph_err *err)
{
	double max = 0, diff2 = 0, ref2 = 0;
	for (int64_t i = 0; i < n; i += stride)
		max = fabs(cpu_v[i]) > max ? fabs(cpu_v[i]) : max;
	for (int64_t i = 0; i < n; i += stride) {
		double d = (double)gpu_v[i] - (double)cpu_v[i];
		if (!(fabs(d) <= t->rtol * fabs(cpu_v[i]) + t->atol * max))
			return ph_fail(err, PH_EINVAL, "%s's CUDA twin (%s): %s[%lld] is %.9g, the CPU's %.9g (bound %.2g "
				       "relative + %.2g of the largest |%s|); the twin computes something else%s",
				       layer, prec, what, (long long)i, gpu_v[i], cpu_v[i], t->rtol, t->atol, what,
				       isnan(gpu_v[i]) ? " or never writes it" : "");
		diff2 += d * d;
		ref2 += (double)cpu_v[i] * cpu_v[i];
	}
	double rel = ref2 > 0 ? sqrt(diff2 / ref2) : sqrt(diff2);
	if (!(rel <= t->ntol))
		return ph_fail(err, PH_EINVAL, "%s's CUDA twin (%s): %s differs from the CPU's by %.3g of its norm (bound "
			       "%.2g)", layer, prec, what, rel, t->ntol);
	if (rel / t->ntol > *worst)
		*worst = rel / t->ntol;
	return PH_OK;
}

/* One forward and backward of the twin; y, dx and the gradients back into
 * the host arrays given (grads zeroed first: they accumulate). */
typedef struct {
	const ph_layer_ops *ops;
	void *state;
	int batch;
	ph_ctx ctx;
	float *x, *y, *dy, *dx;
	float *params[PH_MAX_PARAMS], *grads[PH_MAX_PARAMS];
	int64_t ny, nx, pn[PH_MAX_PARAMS];
	int nparams;
	const ph_layer_inst *cpu; /* x and the parameters as uploaded */
} twin_run;

/* x and the parameters on the GPU still hold what was uploaded: they
 * belong to the previous layer and to the optimizer. */
static int inputs_kept(gpu *g, const twin_run *t, float *tmp, ph_err *err)
{
	const char *layer = t->ops->head.name;
	int rc = g->dev->copy(g->rs, tmp, t->x, (size_t)t->nx * sizeof(float), PH_COPY_D2H, err);
	if (rc)
		return rc;
	if (memcmp(tmp, t->cpu->x, (size_t)t->nx * sizeof(float)))
		return ph_fail(err, PH_EINVAL, "%s's CUDA twin changed its input x; x belongs to the previous layer", layer);
	for (int p = 0; p < t->nparams; p++) {
		if ((rc = g->dev->copy(g->rs, tmp, t->params[p], (size_t)t->pn[p] * sizeof(float), PH_COPY_D2H, err)))
			return rc;
		if (memcmp(tmp, t->cpu->params[p], (size_t)t->pn[p] * sizeof(float)))
			return ph_fail(err, PH_EINVAL, "%s's CUDA twin changed parameter %s; only the optimizer writes "
				       "parameters", layer, t->cpu->meta.params[p].name);
	}
	return PH_OK;
}

static int run_twin(gpu *g, const twin_run *t, const char *const *names, float *y, float *dx, float **grads,
		    ph_err *err)
{
	const char *layer = t->ops->head.name;
	int rc;
	if ((rc = gpu_fill(g, t->y, t->ny, PH_CHECK_UNWRITTEN, err)) ||
	    (rc = gpu_fill(g, t->dx, t->nx, PH_CHECK_UNWRITTEN, err)))
		return rc;
	for (int p = 0; p < t->nparams; p++)
		if (t->pn[p] && (rc = g->dev->zero(g->rs, t->grads[p], (size_t)t->pn[p] * sizeof(float), err)))
			return rc;
	ph_err e = { { 0 } };
	if ((rc = ph_layer_forward(t->ops, t->state, t->batch, &t->ctx, t->params, t->x, t->y, &e)) ||
	    (rc = g->dev->sync(g->rs, &e)))
		return ph_fail(err, rc, "%s's CUDA forward: %s", layer, e.msg);
	if ((rc = gpu_guards(g, names, "forward", layer, err)))
		return rc;
	if ((rc = ph_layer_backward(t->ops, t->state, t->batch, &t->ctx, t->params, t->grads, t->x, t->y, t->dy, t->dx,
				    &e)) ||
	    (rc = g->dev->sync(g->rs, &e)))
		return ph_fail(err, rc, "%s's CUDA backward: %s", layer, e.msg);
	if ((rc = gpu_guards(g, names, "backward", layer, err)))
		return rc;
	int64_t most = t->nx; /* room to read back x or any parameter */
	for (int p = 0; p < t->nparams; p++)
		most = t->pn[p] > most ? t->pn[p] : most;
	float *tmp = malloc((size_t)(most ? most : 1) * sizeof *tmp);
	if (!tmp)
		return ph_fail(err, PH_ENOMEM, "out of memory");
	rc = inputs_kept(g, t, tmp, err);
	free(tmp);
	if (rc)
		return rc;
	if ((rc = g->dev->copy(g->rs, y, t->y, (size_t)t->ny * sizeof(float), PH_COPY_D2H, err)) ||
	    (rc = g->dev->copy(g->rs, dx, t->dx, (size_t)t->nx * sizeof(float), PH_COPY_D2H, err)))
		return rc;
	for (int p = 0; p < t->nparams; p++)
		if (t->pn[p] &&
		    (rc = g->dev->copy(g->rs, grads[p], t->grads[p], (size_t)t->pn[p] * sizeof(float), PH_COPY_D2H, err)))
			return rc;
	return PH_OK;
}

/* What the twin keeps per sample on the GPU where it says (ABI 1.6), else
 * meta's saved_bytes: as the engine allocates it (core/model.c). */
static size_t twin_saved_bytes(const ph_layer_ops *ops, const void *state, const ph_layer_meta *m, int precision)
{
	const size_t b = ph_layer_device_saved_bytes(ops, state, precision);
	return b ? b : m->saved_bytes;
}

int ph_check_twin(const ph_layer_inst *cpu, int precision, char *detail, size_t len, ph_err *err)
{
	const ph_layer_ops *ops = cpu->ops;
	const char *layer = ops->head.name, *prec = precision == PH_PREC_BF16 ? "bf16" : "fp32";
	const ph_twin_tol *tol = precision == PH_PREC_BF16 ? &ph_twin_tol_bf16 : &ph_twin_tol_fp32;
	gpu g = { 0 };
	twin_run t = { .ops = ops, .batch = cpu->batch, .ny = cpu->ny, .nx = cpu->nx, .nparams = cpu->meta.nparams,
		       .cpu = cpu };
	float *y[2] = { NULL }, *dx[2] = { NULL }, *grads[2][PH_MAX_PARAMS] = { { NULL } };
	int rc = PH_OK;
	if (!(g.dev = ph_cuda_backend(err)))
		return PH_EUNSUPPORTED;
	if ((rc = g.dev->open(0, precision, &g.rs, err)))
		return rc;
	if ((rc = g.dev->bind(g.rs, err))) {
		gpu_close(&g);
		return rc;
	}
	ph_group group = *ph_group_solo();
	group.all_to_all = twin_all_to_all;
	group.host = &g;
	/* the twin's own instance: a layer may keep per-device things in its
	 * state (cuDNN descriptors made on a first call) */
	ph_layer_meta m;
	ph_err e = { { 0 } };
	if ((rc = ops->create(cpu->cfg, &cpu->in, cpu->batch, &t.state, &e))) {
		rc = ph_fail(err, rc, "%s create (for the GPU): %s", layer, e.msg);
		t.state = NULL;
		goto out;
	}
	memset(&m, 0, sizeof m);
	if ((rc = ops->meta(t.state, &m, &e))) {
		rc = ph_fail(err, rc, "%s meta (for the GPU): %s", layer, e.msg);
		goto out;
	}
	const size_t scratch = m.device_scratch_bytes ? m.device_scratch_bytes : m.scratch_bytes;
	const size_t saved = twin_saved_bytes(ops, t.state, &m, precision) * (size_t)cpu->batch;
	const char *names[2 * PH_MAX_PARAMS + 8];
	int nb = 0;
#define BUF(dst, src, bytes, name)                                      \
	do {                                                            \
		names[nb++] = (name);                                   \
		if ((rc = gpu_buf(&g, &(dst), (src), (bytes), err)))    \
			goto out;                                       \
	} while (0)
	BUF(t.x, cpu->x, (size_t)cpu->nx * sizeof(float), "x");
	BUF(t.y, NULL, (size_t)cpu->ny * sizeof(float), "y");
	BUF(t.dx, NULL, (size_t)cpu->nx * sizeof(float), "dx");
	if (cpu->r && !cpu->loss)
		BUF(t.dy, cpu->r, (size_t)cpu->ny * sizeof(float), "dy");
	for (int p = 0; p < t.nparams; p++) {
		t.pn[p] = cpu->pn[p];
		BUF(t.params[p], cpu->params[p], (size_t)cpu->pn[p] * sizeof(float), cpu->meta.params[p].name);
		BUF(t.grads[p], NULL, (size_t)cpu->pn[p] * sizeof(float), "a parameter gradient");
		/* as the engine registers weights: under bf16 the products read
		 * a bf16 copy made once */
		if (g.dev->param_block && cpu->pn[p] && (rc = g.dev->param_block(g.rs, t.params[p], cpu->pn[p], err)))
			goto out;
	}
	void *dscratch, *dsaved, *dtargets = NULL;
	BUF(dscratch, NULL, scratch, "scratch");
	BUF(dsaved, NULL, saved, "saved");
	if (cpu->targets)
		BUF(dtargets, cpu->targets, (size_t)cpu->nt * sizeof(int32_t), "targets");
#undef BUF
	t.ctx = cpu->ctx;
	g.dev->fill_ctx(g.rs, &t.ctx);
	t.ctx.device = PH_DEV_CUDA;
	t.ctx.group = &group;
	t.ctx.scratch = dscratch;
	t.ctx.saved = dsaved;
	t.ctx.targets = dtargets;

	for (int k = 0; k < 2; k++) {
		y[k] = malloc((size_t)(cpu->ny ? cpu->ny : 1) * sizeof(float));
		dx[k] = malloc((size_t)(cpu->nx ? cpu->nx : 1) * sizeof(float));
		if (!y[k] || !dx[k]) {
			rc = ph_fail(err, PH_ENOMEM, "out of memory");
			goto out;
		}
		for (int p = 0; p < t.nparams; p++)
			if (!(grads[k][p] = malloc((size_t)(cpu->pn[p] ? cpu->pn[p] : 1) * sizeof(float)))) {
				rc = ph_fail(err, PH_ENOMEM, "out of memory");
				goto out;
			}
		if ((rc = run_twin(&g, &t, names, y[k], dx[k], grads[k], err)))
			goto out;
	}
	double worst = 0;
	if ((rc = compare(layer, cpu->loss ? "the loss" : "y", y[0], cpu->y, cpu->ny, cpu->loss ? 2 : 1, tol, prec,
			  &worst, err)) ||
	    (rc = compare(layer, "dx", dx[0], cpu->dx, cpu->nx, 1, tol, prec, &worst, err)))
		goto out;
	for (int p = 0; p < t.nparams; p++) {
		char what[96];
		snprintf(what, sizeof what, "the gradient of %s", cpu->meta.params[p].name);
		if ((rc = compare(layer, what, grads[0][p], cpu->grads[p], cpu->pn[p], 1, tol, prec, &worst, err)))
			goto out;
	}
	/* the same bits a second time: the project's runs repeat bit for bit
	 * on a GPU too, and rely on every layer for it */
	const char *again = memcmp(y[0], y[1], (size_t)cpu->ny * sizeof(float)) ? "y"
			    : memcmp(dx[0], dx[1], (size_t)cpu->nx * sizeof(float)) ? "dx"
										  : NULL;
	for (int p = 0; p < t.nparams && !again; p++)
		if (memcmp(grads[0][p], grads[1][p], (size_t)cpu->pn[p] * sizeof(float)))
			again = cpu->meta.params[p].name;
	if (again) {
		rc = ph_fail(err, PH_EINVAL, "%s's CUDA twin (%s) gives other bits for %s%s the second time on the same "
			     "input; sum in a fixed order (no float atomics)", layer, prec, again,
			     strcmp(again, "y") && strcmp(again, "dx") ? "'s gradient" : "");
		goto out;
	}
	snprintf(detail, len,
		 "y%s, dx and %d parameter gradient(s) within %s's bounds (worst norm error %.2g of its bound), "
		 "the same bits twice, x and parameters untouched, nothing written past a buffer",
		 cpu->loss ? " (the losses)" : "", t.nparams, prec, worst);
out:
	for (int k = 0; k < 2; k++) {
		free(y[k]);
		free(dx[k]);
		for (int p = 0; p < PH_MAX_PARAMS; p++)
			free(grads[k][p]);
	}
	if (t.state)
		ph_layer_destroy(ops, t.state);
	gpu_close(&g);
	return rc;
}
