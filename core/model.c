/* Model building: create layers in order and infer shapes forward. */
#include <stdlib.h>
#include <string.h>

#include "model.h"

void ph_shape_str(const ph_shape *s, char *buf, size_t len)
{
	size_t used = (size_t)snprintf(buf, len, "[");
	for (int i = 0; i < s->ndim && used < len; i++)
		used += (size_t)snprintf(buf + used, len - used, "%s%lld", i ? "," : "", (long long)s->d[i]);
	if (used < len)
		snprintf(buf + used, len - used, "]");
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
			if (i == 0)
				return ph_fail(err, rc, "layer %s (%s) cannot take the data's samples %s: %s", lc->name,
					       l->ops->head.name, s_in, e2.msg);
			return ph_fail(err, rc, "shape mismatch: layer %s (%s) cannot take layer %s's (%s) output %s: %s",
				       lc->name, l->ops->head.name, c->layers[i - 1].name, c->layers[i - 1].ops->head.name,
				       s_in, e2.msg);
		}
		m->n = i + 1;
		memset(&l->meta, 0, sizeof l->meta);
		if ((rc = l->ops->meta(l->state, &l->meta, &e2)))
			return ph_fail(err, rc, "layer %s (%s): %s", lc->name, l->ops->head.name, e2.msg);
		if (l->meta.out.ndim < 1 || l->meta.out.ndim > PH_MAX_DIMS || ph_shape_numel(&l->meta.out) <= 0 ||
		    l->meta.nparams < 0 || l->meta.nparams > PH_MAX_PARAMS)
			return ph_fail(err, PH_EINTERNAL, "layer %s (%s) reports a broken meta (output rank %d, %d params)",
				       lc->name, l->ops->head.name, l->meta.out.ndim, l->meta.nparams);
		for (int p = 0; p < l->meta.nparams; p++)
			l->param_numel += ph_shape_numel(&l->meta.params[p].shape);
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
	return PH_OK;
}

void ph_model_free(ph_model *m)
{
	for (int i = 0; i < m->n; i++)
		if (m->layers[i].state)
			m->layers[i].ops->destroy(m->layers[i].state);
	free(m->layers);
	memset(m, 0, sizeof *m);
}
