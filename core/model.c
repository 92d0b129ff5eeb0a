/* SPDX-License-Identifier: MIT */
/* Model building: create layers in order and infer shapes forward. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "layer_call.h"
#include "model.h"

void ph_shape_str(const ph_shape *s, char *buf, size_t len)
{
	size_t used = (size_t)snprintf(buf, len, "[");
	for (int i = 0; i < s->ndim && used < len; i++)
		used += (size_t)snprintf(buf + used, len - used, "%s%lld", i ? "," : "", (long long)s->d[i]);
	if (used < len)
		snprintf(buf + used, len - used, "]");
}

static int same_shape(const ph_shape *a, const ph_shape *b)
{
	if (a->ndim != b->ndim)
		return 0;
	for (int i = 0; i < a->ndim; i++)
		if (a->d[i] != b->d[i])
			return 0;
	return 1;
}

/* Every size a plugin reports is multiplied by the micro-batch, the slots in
 * flight and the optimizer's state count before it reaches malloc: past
 * 2^50 bytes (a PiB) any of those products may wrap, and no real layer
 * asks for that much, so such a figure is refused as a broken meta. */
#define PH_MAX_LAYER_BYTES ((uint64_t)1 << 50)

/* numel of a shape, or -1 when a dimension is < 1 or the product passes
 * PH_MAX_LAYER_BYTES / 4 elements. */
static int64_t checked_numel(const ph_shape *s)
{
	uint64_t n = 1;
	for (int i = 0; i < s->ndim; i++) {
		if (s->d[i] < 1 || __builtin_mul_overflow(n, (uint64_t)s->d[i], &n) || n > PH_MAX_LAYER_BYTES / 4)
			return -1;
	}
	return (int64_t)n;
}

/* bytes per sample times the micro-batch, within PH_MAX_LAYER_BYTES */
static int batch_bytes_ok(uint64_t per_sample, int max_batch)
{
	uint64_t total;
	return !__builtin_mul_overflow(per_sample, (uint64_t)(max_batch > 0 ? max_batch : 1), &total) &&
	       total <= PH_MAX_LAYER_BYTES;
}

/* The meta of layer l is sane: shapes, element counts and byte counts all
 * within PH_MAX_LAYER_BYTES for this micro-batch. */
/* What the layer saves per sample on the run's GPU, where its CUDA twin
 * keeps another amount than meta says (ABI 1.6); 0 = meta's. */
static size_t gpu_saved_bytes(const ph_layer *l, const ph_config *c)
{
	return c->place.cuda ? ph_layer_device_saved_bytes(l->ops, l->state, (int)c->run.precision) : 0;
}

static int check_meta(const ph_layer *l, int max_batch, ph_err *err)
{
	const ph_layer_meta *mt = &l->meta;
	const char *name = l->cfg->name, *type = l->ops->head.name;
	char sh[160];
	if (mt->out.ndim < 1 || mt->out.ndim > PH_MAX_DIMS || mt->nparams < 0 || mt->nparams > PH_MAX_PARAMS)
		return ph_fail(err, PH_EINTERNAL, "layer %s (%s) reports a broken meta (output rank %d, %d params); "
			       "fix the plugin", name, type, mt->out.ndim, mt->nparams);
	int64_t out = checked_numel(&mt->out);
	if (out < 0 || !batch_bytes_ok((uint64_t)out * 4, max_batch)) {
		ph_shape_str(&mt->out, sh, sizeof sh);
		return ph_fail(err, PH_EINVAL, "layer %s (%s) reports the output shape %s: a dimension below 1, or "
			       "over 1 PiB for a micro-batch of %d; fix the plugin or the layer's options", name, type, sh,
			       max_batch);
	}
	/* FLOPs become costs and seconds (the partitioner, --plan, --simulate):
	 * a negative or non-finite figure would give wrong cuts and advice */
	const struct { const char *what; double v; } flops[] = {
		{ "forward", mt->fwd_flops },
		{ "backward", mt->bwd_flops },
	};
	for (size_t i = 0; i < sizeof flops / sizeof *flops; i++)
		if (!isfinite(flops[i].v) || flops[i].v < 0)
			return ph_fail(err, PH_EINVAL, "layer %s (%s) reports %s FLOPs %g; FLOPs a sample are finite and 0 "
				       "or more: fix the plugin's meta", name, type, flops[i].what, flops[i].v);
	const struct { const char *what; size_t v; int per_sample; } sizes[] = {
		{ "saved_bytes", mt->saved_bytes, 1 },
		{ "scratch_bytes", mt->scratch_bytes, 0 },
		{ "device_scratch_bytes", mt->device_scratch_bytes, 0 },
	};
	for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
		if (!batch_bytes_ok(sizes[i].v, sizes[i].per_sample ? max_batch : 1))
			return ph_fail(err, PH_EINVAL, "layer %s (%s) reports %s = %zu%s, over 1 PiB: its meta is broken; "
				       "fix the plugin", name, type, sizes[i].what, sizes[i].v,
				       sizes[i].per_sample ? " per sample" : "");
	uint64_t total = 0;
	for (int p = 0; p < mt->nparams; p++) {
		const ph_param_desc *d = &mt->params[p];
		if (strnlen(d->name, sizeof d->name) == sizeof d->name || !d->name[0])
			return ph_fail(err, PH_EINVAL, "layer %s (%s): parameter %d has an empty or unterminated name; "
				       "fix the plugin", name, type, p);
		int64_t n = d->shape.ndim >= 1 && d->shape.ndim <= PH_MAX_DIMS ? checked_numel(&d->shape) : -1;
		/* weights, gradients and up to 2 optimizer states: 16 bytes a weight */
		if (n < 0 || __builtin_add_overflow(total, (uint64_t)n, &total) || total > PH_MAX_LAYER_BYTES / 16) {
			if (d->shape.ndim < 1 || d->shape.ndim > PH_MAX_DIMS)
				snprintf(sh, sizeof sh, "of rank %d", d->shape.ndim);
			else
				ph_shape_str(&d->shape, sh, sizeof sh);
			return ph_fail(err, PH_EINVAL, "layer %s (%s): parameter %s has the shape %s: a dimension below "
				       "1, or over 1 PiB with its optimizer state; fix the plugin or the layer's options",
				       name, type, d->name, sh);
		}
	}
	return PH_OK;
}

/* tie = LAYER.PARAM on layer i: its first parameter with that tensor's shape. */
static int resolve_ties(ph_model *m, ph_err *err)
{
	for (int i = 0; i < m->n; i++) {
		const char *t = m->layers[i].cfg->tie;
		if (!t[0])
			continue;
		const char *name = m->layers[i].cfg->name;
		const char *dot = strrchr(t, '.');
		if (!dot || dot == t || !dot[1])
			return ph_fail(err, PH_EINVAL, "layer %s: tie = %s; write tie = LAYER.PARAM, e.g. tie = embed.tokens",
				       name, t);
		int src = -1;
		for (int j = 0; j < m->n; j++)
			if ((size_t)(dot - t) == strlen(m->layers[j].cfg->name) &&
			    strncmp(m->layers[j].cfg->name, t, (size_t)(dot - t)) == 0)
				src = j;
		if (src < 0 || src == i)
			return ph_fail(err, PH_EINVAL, "layer %s: tie = %s names %s; name another layer of the model", name, t,
				       src == i ? "the layer itself" : "no layer");
		const ph_layer_meta *sm = &m->layers[src].meta;
		int sp = -1;
		for (int q = 0; q < sm->nparams; q++)
			if (strcmp(sm->params[q].name, dot + 1) == 0)
				sp = q;
		if (sp < 0)
			return ph_fail(err, PH_EINVAL, "layer %s: tie = %s: layer %s has no parameter %s", name, t,
				       m->layers[src].cfg->name, dot + 1);
		const ph_layer_meta *dm = &m->layers[i].meta;
		int dp = -1;
		for (int q = 0; q < dm->nparams && dp < 0; q++)
			if (same_shape(&dm->params[q].shape, &sm->params[sp].shape))
				dp = q;
		if (dp < 0) {
			/* both sides' shapes: which size differs is the fix */
			char sh[96], own[512] = "";
			ph_shape_str(&sm->params[sp].shape, sh, sizeof sh);
			size_t used = 0;
			for (int q = 0; q < dm->nparams && used < sizeof own; q++) {
				char one[96];
				ph_shape_str(&dm->params[q].shape, one, sizeof one);
				used += (size_t)snprintf(own + used, sizeof own - used, "%s%s %s", q ? ", " : "",
							 dm->params[q].name, one);
			}
			return ph_fail(err, PH_EINVAL, "layer %s: tie = %s: %s is %s, and no parameter of %s has that shape "
				       "(%s); change the sizes of %s or %s so they match", name, t, t, sh, name,
				       dm->nparams ? own : "it has none", name, m->layers[src].cfg->name);
		}
		for (int k = 0; k < m->nties; k++)
			if ((m->ties[k].dst_layer == i && m->ties[k].dst_param == dp) ||
			    (m->ties[k].dst_layer == src && m->ties[k].dst_param == sp))
				return ph_fail(err, PH_EINVAL, "layer %s: tie = %s chains ties; tie every copy to the same source",
					       name, t);
		if ((m->layers[src].meta.sharded_params >> sp | m->layers[i].meta.sharded_params >> dp) & 1u)
			return ph_fail(err, PH_EINVAL, "layer %s: tie = %s shares a sharded parameter, which cannot be tied",
				       name, t);
		ph_tie *n = realloc(m->ties, (size_t)(m->nties + 1) * sizeof *n);
		if (!n)
			return ph_fail(err, PH_ENOMEM, "out of memory");
		m->ties = n;
		m->ties[m->nties++] = (ph_tie){ src, sp, i, dp };
	}
	return PH_OK;
}

/* Sharded tensors (ph_layer_meta.sharded_params): each of the R replicas
 * holds d[0] / R rows, so R must divide d[0].  A pipeline split over
 * processes and a tied sharded tensor are not supported. */
static int shard_rows(ph_layer *l, const ph_config *c, ph_err *err)
{
	int R = (int)c->run.replicas;
	l->shards = 1;
	if (!l->meta.sharded_params)
		return PH_OK;
	if (R < 1)
		R = 1;
	if (l->meta.sharded_params >> l->meta.nparams)
		return ph_fail(err, PH_EINTERNAL, "layer %s (%s) shards parameter %d of %d", l->cfg->name,
			       l->ops->head.name, 31 - __builtin_clz(l->meta.sharded_params), l->meta.nparams);
	for (int q = 0; q < l->meta.nparams; q++) {
		const ph_param_desc *d = &l->meta.params[q];
		if (!(l->meta.sharded_params >> q & 1u))
			continue;
		if (d->shape.ndim < 1 || d->shape.d[0] % R)
			return ph_fail(err, PH_EINVAL,
				       "layer %s (%s): [run] replicas = %d does not divide the %lld rows of its sharded "
				       "parameter %s (each replica holds rows / replicas); pick replicas dividing %lld",
				       l->cfg->name, l->ops->head.name, R, d->shape.ndim ? (long long)d->shape.d[0] : 0LL,
				       d->name, d->shape.ndim ? (long long)d->shape.d[0] : 0LL);
	}
	/* One replica holds every row: nothing is sharded, so a pipeline
	 * split over processes runs it as any dense layer (the bits stay set
	 * elsewhere, where the sharded paths give the same result) */
	if (R == 1 && ph_config_split(c) > 1) {
		l->meta.sharded_params = 0;
		return PH_OK;
	}
	if (ph_config_split(c) > 1)
		return ph_fail(err, PH_EUNSUPPORTED,
			       "layer %s (%s) shards its parameters over the replicas, which a pipeline split over "
			       "processes does not support yet; run at least as many replicas as processes",
			       l->cfg->name, l->ops->head.name);
	l->shards = R;
	return PH_OK;
}

const char *ph_plugin_words(const char *type, const char *msg)
{
	size_t n = strlen(type);
	return !strncmp(msg, type, n) && msg[n] == ':' && msg[n + 1] == ' ' && msg[n + 2] ? msg + n + 2 : msg;
}

int ph_model_build(ph_model *m, const ph_config *c, const ph_shape *input, int max_batch, ph_err *err)
{
	memset(m, 0, sizeof *m);
	m->input = *input;
	m->max_batch = max_batch;
	m->layers = calloc((size_t)c->nlayers, sizeof *m->layers);
	if (!m->layers)
		return ph_fail(err, PH_ENOMEM, "out of memory");
	ph_shape in = *input;
	for (int i = 0; i < c->nlayers; i++) {
		ph_layer *l = &m->layers[i];
		const ph_layer_cfg *lc = &c->layers[i];
		char s_in[96];
		ph_shape_str(&in, s_in, sizeof s_in);
		l->cfg = lc;
		l->ops = lc->ops;
		l->in = in;
		ph_err e2 = { { 0 } };
		int rc = l->ops->create(lc->config, &in, max_batch, &l->state, &e2);
		if (rc) {
			m->n = i;
			/* the layer's reason may be its options, the shape or the
			 * micro-batch (a product past BLAS's int): its reason first,
			 * then what it was given, so that an option's refusal does
			 * not read as a shape mismatch */
			if (i == 0)
				return ph_fail(err, rc, "layer %s (%s): %s (its input: the data's samples %s, micro-batches "
					       "of %d)", lc->name, l->ops->head.name, ph_plugin_words(l->ops->head.name, e2.msg), s_in,
					       max_batch);
			return ph_fail(err, rc, "layer %s (%s): %s (its input: layer %s's (%s) output %s, micro-batches "
				       "of %d)", lc->name, l->ops->head.name, ph_plugin_words(l->ops->head.name, e2.msg),
				       c->layers[i - 1].name,
				       c->layers[i - 1].ops->head.name, s_in, max_batch);
		}
		m->n = i + 1;
		memset(&l->meta, 0, sizeof l->meta);
		if ((rc = l->ops->meta(l->state, &l->meta, &e2)))
			return ph_fail(err, rc, "layer %s (%s): %s", lc->name, l->ops->head.name,
				       ph_plugin_words(l->ops->head.name, e2.msg));
		if ((rc = check_meta(l, max_batch, err)))
			return rc;
		l->gpu_saved_bytes = gpu_saved_bytes(l, c);
		if ((rc = shard_rows(l, c, err)))
			return rc;
		for (int p = 0; p < l->meta.nparams; p++)
			l->param_numel += ph_param_local_numel(l, p);
		int is_loss = (l->ops->flags & PH_LAYER_LOSS) != 0;
		if (is_loss && i != c->nlayers - 1)
			return ph_fail(err, PH_EINVAL, "layer %s (%s) is a loss and must be the last layer; move it to the end",
				       lc->name, l->ops->head.name);
		if (!is_loss && i == c->nlayers - 1)
			return ph_fail(err, PH_EINVAL,
				       "the last layer %s (%s) is not a loss; end the model with a loss layer such as softmax_xent",
				       lc->name, l->ops->head.name);
		if (is_loss) {
			m->targets_per_sample = l->meta.targets_per_sample;
			if (l->meta.targets_per_sample < 1 || ph_shape_numel(&l->meta.out) != 2)
				return ph_fail(err, PH_EINTERNAL, "loss layer %s (%s) must output [2] and read >= 1 target",
					       lc->name, l->ops->head.name);
		}
		in = l->meta.out;
	}
	return resolve_ties(m, err);
}

void ph_model_free(ph_model *m)
{
	for (int i = 0; i < m->n; i++)
		if (m->layers[i].state)
			ph_layer_destroy(m->layers[i].ops, m->layers[i].state);
	free(m->layers);
	free(m->ties);
	memset(m, 0, sizeof *m);
}

void ph_model_mark_ties(const ph_model *m, ph_tensor_ref *t, int n)
{
	for (int i = 0; i < m->nties; i++) {
		const ph_tie *tie = &m->ties[i];
		int src = -1, dst = -1;
		for (int l = 0, at = 0; l < m->n; at += m->layers[l].meta.nparams, l++) {
			if (l == tie->src_layer)
				src = at + tie->src_param;
			if (l == tie->dst_layer)
				dst = at + tie->dst_param;
		}
		if (src >= 0 && dst >= 0 && src < n && dst < n && src != dst)
			t[dst].tied_to = t[src].name;
	}
}
