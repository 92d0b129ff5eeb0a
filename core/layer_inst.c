/* SPDX-License-Identifier: MIT */
/* A layer plugin instance on the CPU with guarded buffers (layer_inst.h). */
#include <stdlib.h>
#include <string.h>

#include "layer_inst.h"
#include "layer_call.h"

uint64_t ph_rng64_next(ph_rng64 *g)
{
	uint64_t z = (g->state += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

float ph_rng64_uniform(ph_rng64 *g, float lo, float hi)
{
	return lo + (hi - lo) * (float)((ph_rng64_next(g) >> 40) * (1.0 / 16777216.0));
}

void ph_rng64_fill(ph_rng64 *g, float *p, int64_t n, float lo, float hi)
{
	for (int64_t i = 0; i < n; i++)
		p[i] = ph_rng64_uniform(g, lo, hi);
}

/* ------------------------------------------------------------------ */
/* Guarded buffers: `bytes` zeroed, then a guard zone of GUARD_BYTE as  */
/* long as the buffer (at most 1 MiB) plus 64 bytes, so that a layer    */
/* whose meta under-counts by a whole row still writes into the guard.  */

#define GUARD_BYTE 0xA5

static size_t guard_len(size_t bytes)
{
	return (bytes < (1u << 20) ? bytes : (1u << 20)) + 64;
}

static void *guarded_alloc(size_t bytes)
{
	size_t g = guard_len(bytes);
	unsigned char *p = malloc(bytes + g);
	if (!p)
		return NULL;
	memset(p, 0, bytes);
	memset(p + bytes, GUARD_BYTE, g);
	return p;
}

/* Offset of the first guard byte overwritten, or -1. */
static int64_t guard_hit(const void *buf, size_t bytes)
{
	if (!buf)
		return -1;
	const unsigned char *g = (const unsigned char *)buf + bytes;
	size_t n = guard_len(bytes);
	for (size_t i = 0; i < n; i++)
		if (g[i] != GUARD_BYTE)
			return (int64_t)i;
	return -1;
}

static size_t fbytes(int64_t n)
{
	return (size_t)n * sizeof(float);
}

static int meta_sane(const ph_layer_inst *L, ph_err *err)
{
	const char *name = L->ops->head.name;
	const ph_layer_meta *m = &L->meta;
	if (m->out.ndim < 1 || m->out.ndim > PH_MAX_DIMS)
		return ph_fail(err, PH_EINVAL, "%s meta: output has %d dimensions; give 1 to %d", name, m->out.ndim,
			       PH_MAX_DIMS);
	for (int i = 0; i < m->out.ndim; i++)
		if (m->out.d[i] < 1 || m->out.d[i] > (1ll << 31))
			return ph_fail(err, PH_EINVAL, "%s meta: output dimension %d is %lld", name, i, (long long)m->out.d[i]);
	if (m->nparams < 0 || m->nparams > PH_MAX_PARAMS)
		return ph_fail(err, PH_EINVAL, "%s meta: %d parameters; 0 to %d allowed", name, m->nparams, PH_MAX_PARAMS);
	for (int p = 0; p < m->nparams; p++) {
		const ph_shape *s = &m->params[p].shape;
		if (!m->params[p].name[0] || !memchr(m->params[p].name, 0, sizeof m->params[p].name))
			return ph_fail(err, PH_EINVAL, "%s meta: parameter %d has no name (or one without its NUL)", name, p);
		if (s->ndim < 1 || s->ndim > PH_MAX_DIMS)
			return ph_fail(err, PH_EINVAL, "%s meta: parameter %s has %d dimensions; give 1 to %d", name,
				       m->params[p].name, s->ndim, PH_MAX_DIMS);
		for (int i = 0; i < s->ndim; i++)
			if (s->d[i] < 1 || s->d[i] > (1ll << 31))
				return ph_fail(err, PH_EINVAL, "%s meta: parameter %s dimension %d is %lld", name,
					       m->params[p].name, i, (long long)s->d[i]);
	}
	if (m->targets_per_sample < 0)
		return ph_fail(err, PH_EINVAL, "%s meta: targets_per_sample %d", name, m->targets_per_sample);
	return PH_OK;
}

int ph_layer_inst_create(ph_layer_inst *L, const ph_layer_ops *ops, void *cfg, ph_shape in, int batch, ph_ctx ctx,
			 ph_err *err)
{
	memset(L, 0, sizeof *L);
	L->ops = ops;
	L->cfg = cfg;
	L->in = in;
	L->batch = batch;
	L->loss = (ops->flags & PH_LAYER_LOSS) != 0;
	ph_err e = { { 0 } };
	int rc = ops->create(cfg, &in, batch, &L->state, &e);
	if (rc) {
		L->state = NULL;
		return ph_fail(err, rc, "%s create: %s", ops->head.name, e.msg[0] ? e.msg : "failed, saying nothing");
	}
	rc = ops->meta(L->state, &L->meta, &e);
	if (rc) {
		ph_fail(err, rc, "%s meta: %s", ops->head.name, e.msg[0] ? e.msg : "failed, saying nothing");
		goto fail;
	}
	if ((rc = meta_sane(L, err)))
		goto fail;
	L->nx = batch * ph_shape_numel(&in);
	L->ny = batch * ph_shape_numel(&L->meta.out);
	L->x = guarded_alloc(fbytes(L->nx));
	L->dx = guarded_alloc(fbytes(L->nx));
	L->y = guarded_alloc(fbytes(L->ny));
	L->r = guarded_alloc(fbytes(L->ny));
	int ok = L->x && L->dx && L->y && L->r;
	for (int p = 0; p < L->meta.nparams; p++) {
		L->pn[p] = ph_shape_numel(&L->meta.params[p].shape);
		L->params[p] = guarded_alloc(fbytes(L->pn[p]));
		L->grads[p] = guarded_alloc(fbytes(L->pn[p]));
		ok = ok && L->params[p] && L->grads[p];
	}
	L->ctx = ctx;
	if (!L->ctx.group)
		L->ctx.group = ph_group_solo(); /* ABI 1.5: never NULL */
	L->ctx.scratch = L->ctx.saved = NULL;
	L->ctx.targets = NULL;
	if (L->meta.scratch_bytes && !(L->ctx.scratch = guarded_alloc(L->meta.scratch_bytes)))
		ok = 0;
	if (L->meta.saved_bytes && !(L->ctx.saved = guarded_alloc(L->meta.saved_bytes * (size_t)batch)))
		ok = 0;
	if (L->meta.targets_per_sample) {
		L->nt = (int64_t)batch * L->meta.targets_per_sample;
		if (!(L->targets = guarded_alloc((size_t)L->nt * sizeof(int32_t))))
			ok = 0;
		L->ctx.targets = L->targets;
	}
	if (!ok) {
		rc = ph_fail(err, PH_ENOMEM, "%s: out of memory for its buffers", ops->head.name);
		goto fail;
	}
	return PH_OK;
fail:
	ph_layer_inst_close(L);
	return rc;
}

void ph_layer_inst_close(ph_layer_inst *L)
{
	if (L->state)
		L->ops->destroy(L->state);
	L->state = NULL;
	for (int p = 0; p < PH_MAX_PARAMS; p++) {
		free(L->params[p]), free(L->grads[p]);
		L->params[p] = L->grads[p] = NULL;
	}
	free(L->x), free(L->y), free(L->r), free(L->dx), free(L->targets);
	free(L->ctx.scratch), free(L->ctx.saved);
	L->x = L->y = L->r = L->dx = NULL;
	L->targets = NULL;
	L->ctx.scratch = L->ctx.saved = NULL;
}

void ph_layer_inst_draw(ph_layer_inst *L, ph_rng64 *g, float pscale, int64_t classes)
{
	ph_rng64_fill(g, L->r, L->ny, -1, 1);
	for (int p = 0; p < L->meta.nparams; p++)
		for (int64_t i = 0; i < L->pn[p]; i++)
			L->params[p][i] = ph_rng64_uniform(g, -1, 1) * pscale;
	for (int64_t i = 0; i < L->nt; i++)
		L->targets[i] = (int32_t)(ph_rng64_next(g) % (uint64_t)classes);
}

int ph_layer_inst_forward(ph_layer_inst *L, ph_err *err)
{
	ph_err e = { { 0 } };
	int rc = L->ops->forward(L->state, &L->ctx, L->params, L->x, L->y, &e);
	if (rc)
		return ph_fail(err, rc, "%s forward: %s", L->ops->head.name, e.msg[0] ? e.msg : "failed, saying nothing");
	return PH_OK;
}

int ph_layer_inst_backward(ph_layer_inst *L, float *dx, ph_err *err)
{
	ph_err e = { { 0 } };
	int rc = L->ops->backward(L->state, &L->ctx, L->params, L->grads, L->x, L->y, L->loss ? NULL : L->r, dx, &e);
	if (rc)
		return ph_fail(err, rc, "%s backward: %s", L->ops->head.name, e.msg[0] ? e.msg : "failed, saying nothing");
	return PH_OK;
}

void ph_layer_inst_fill_scratch(ph_layer_inst *L, unsigned char byte)
{
	if (L->ctx.scratch)
		memset(L->ctx.scratch, byte, L->meta.scratch_bytes);
	if (L->ctx.saved)
		memset(L->ctx.saved, byte, L->meta.saved_bytes * (size_t)L->batch);
}

int ph_layer_inst_check_guards(const ph_layer_inst *L, const char *call, ph_err *err)
{
	const char *name = L->ops->head.name;
	int64_t at;
	if ((at = guard_hit(L->y, fbytes(L->ny))) >= 0)
		return ph_fail(err, PH_EINVAL, "%s %s wrote past y: meta says %lld output floats a sample (%lld for batch "
			       "%d), and byte %lld after them changed; meta's out must match what forward writes", name, call,
			       (long long)(L->ny / L->batch), (long long)L->ny, L->batch, (long long)at);
	if ((at = guard_hit(L->dx, fbytes(L->nx))) >= 0)
		return ph_fail(err, PH_EINVAL, "%s %s wrote past dx (%lld floats, the input's size): byte %lld after it "
			       "changed", name, call, (long long)L->nx, (long long)at);
	if ((at = guard_hit(L->x, fbytes(L->nx))) >= 0)
		return ph_fail(err, PH_EINVAL, "%s %s wrote past x (%lld floats): byte %lld after it changed", name, call,
			       (long long)L->nx, (long long)at);
	for (int p = 0; p < L->meta.nparams; p++)
		if ((at = guard_hit(L->grads[p], fbytes(L->pn[p]))) >= 0 ||
		    (at = guard_hit(L->params[p], fbytes(L->pn[p]))) >= 0)
			return ph_fail(err, PH_EINVAL, "%s %s wrote past parameter %s or its gradient (%lld floats as meta "
				       "gives its shape): byte %lld after it changed", name, call, L->meta.params[p].name,
				       (long long)L->pn[p], (long long)at);
	if (L->ctx.scratch && (at = guard_hit(L->ctx.scratch, L->meta.scratch_bytes)) >= 0)
		return ph_fail(err, PH_EINVAL, "%s %s wrote past its scratch: meta says scratch_bytes = %zu for max_batch "
			       "%d, byte %lld after it changed", name, call, L->meta.scratch_bytes, L->batch, (long long)at);
	if (L->ctx.saved && (at = guard_hit(L->ctx.saved, L->meta.saved_bytes * (size_t)L->batch)) >= 0)
		return ph_fail(err, PH_EINVAL, "%s %s wrote past its saved state: meta says saved_bytes = %zu a sample, "
			       "byte %lld after the batch's %zu changed", name, call, L->meta.saved_bytes, (long long)at,
			       L->meta.saved_bytes * (size_t)L->batch);
	return PH_OK;
}

/* ---- A replica group of one (plugin ABI 1.5) ---- */

static void solo_report(const ph_group *g, const ph_ctx *ctx, const char *key, double value)
{
	(void)g, (void)ctx, (void)key, (void)value;
}

/* As solo_report: outside the engine nobody prints figures.  (Never read:
 * on a GPU `value` is device memory.) */
static void solo_report_device(const ph_group *g, const ph_ctx *ctx, const char *key, const float *value)
{
	(void)g, (void)ctx, (void)key, (void)value;
}

static int solo_all_to_all(const ph_group *g, const ph_ctx *ctx, const float *send, float *recv, size_t count,
			   ph_err *err)
{
	(void)g, (void)err;
	if (ctx && ctx->device != PH_DEV_CPU)
		return ph_fail(err, PH_EUNSUPPORTED, "a group of one outside the engine runs on the CPU only");
	memcpy(recv, send, count * sizeof(float));
	return PH_OK;
}

static int solo_all_reduce_sum(const ph_group *g, const ph_ctx *ctx, float *buf, size_t count, ph_err *err)
{
	(void)g, (void)ctx, (void)buf, (void)count, (void)err;
	return PH_OK;
}

const ph_group *ph_group_solo(void)
{
	static const ph_group solo = { sizeof(ph_group), 1, 0, solo_all_to_all, solo_all_reduce_sum, solo_report,
				       NULL, solo_report_device };
	return &solo;
}
