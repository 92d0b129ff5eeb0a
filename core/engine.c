/* SPDX-License-Identifier: MIT */
/* One pipeline's life: its device (every rank's: the CPU's ops or CUDA's),
 * its parameters (made by the counter-based RNG, so the same for every
 * partition), the batch and loss buffers, its chunks (engine-layout.c), its
 * links and its worker threads; and their end.  What the other engine
 * files do: engine-impl.h. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cblas.h>

#include "blas_gate.h"
#include "engine-impl.h"
#include "optim.h"

void *ph_eng_balloc(ph_engine *e, int rank, size_t bytes)
{
	void *p = NULL;
	ph_err err = { { 0 } };
	const int rc = e->dev->alloc(e->rs[rank], bytes, &p, &err);
	if (rc) {
		/* a replica group's worker allocates too (engine-group.c),
		 * beside ph_eng_set_error */
		pthread_mutex_lock(&e->mu);
		if (!e->err_set) {
			e->err = err; /* the device's own words and code, for the caller to pass on */
			e->err_code = rc;
			e->err_set = 1;
		}
		pthread_mutex_unlock(&e->mu);
		return NULL;
	}
	return p;
}

void ph_eng_bfree(ph_engine *e, int rank, void *p)
{
	if (p)
		e->dev->free(e->rs[rank], p);
}

/* The host copy of `bytes` at p on a device: p itself where the device
 * computes in host memory. */
static void *host_copy(const ph_engine *e, void *p, size_t bytes)
{
	return e->dev->host_memory ? p : calloc(1, bytes ? bytes : 1);
}

static void free_host_copy(void *h, void *p)
{
	if (h != p)
		free(h);
}

/* e->err's words after a message, where a device said why. */
static const char *why(const ph_engine *e)
{
	return e->err_set ? e->err.msg : "";
}

static const char *why_sep(const ph_engine *e)
{
	return e->err_set ? ": " : "";
}

/* Every rank's device: the CPU, or CUDA (whose backend is loaded now) with
 * a CUDA twin for every layer; each rank's stream and handles opened. */
static int open_device(ph_engine *e, ph_err *err)
{
	const ph_config *c = e->cfg;
	const ph_device_ops *dev = c->place.cuda ? ph_cuda_backend(err) : ph_cpu_device();
	/* (every rank on one kind: ph_placement_parse refuses a mix) */
	if (!dev)
		return PH_EUNSUPPORTED;
	for (int l = 0; dev->kind == PH_DEV_CUDA && l < e->model->n; l++) {
		const ph_layer *L = &e->model->layers[l];
		if (!(L->ops->devices & PH_DEV_CUDA))
			return ph_fail(err, PH_EUNSUPPORTED,
				       "layer %s (%s) has no CUDA implementation, and [run] devices = %s puts it on a GPU; "
				       "use devices = cpu, or a layer plugin built with CUDA",
				       L->cfg->name, L->ops->head.name, c->run.devices);
	}
	e->dev = dev;
	if (!(e->rs = calloc((size_t)e->plan->ranks, sizeof *e->rs)))
		return ph_fail(err, PH_ENOMEM, "out of memory");
	for (int r = 0; r < e->plan->ranks; r++) {
		int rc = dev->open(e->ordinal ? e->ordinal[r] : -1, c->run.precision, &e->rs[r], err);
		if (rc)
			return rc;
	}
	return PH_OK;
}

/* Elements [first, first + n) of the tensor (a sharded tensor's replica
 * draws its own rows of the whole tensor's values: every R starts the
 * same). */
static void init_tensor(float *w, int64_t first, int64_t n, const ph_param_desc *d, uint64_t seed, int layer, int p)
{
	uint64_t key = ph_rng_key(seed, 0x494E4954 /* "INIT" */, (uint64_t)layer, (uint64_t)p);
	w -= first;
	for (int64_t i = first; i < first + n; i++) {
		switch (d->init) {
		case PH_INIT_ZEROS: w[i] = 0; break;
		case PH_INIT_ONES: w[i] = 1; break;
		case PH_INIT_UNIFORM: w[i] = (2.0f * ph_rng_uniform(key, (uint64_t)i) - 1.0f) * d->init_arg; break;
		case PH_INIT_NORMAL: {
			double u1 = ph_rng_uniform(key, 2 * (uint64_t)i), u2 = ph_rng_uniform(key, 2 * (uint64_t)i + 1);
			w[i] = (float)(sqrt(-2.0 * log(1.0 - u1)) * cos(6.283185307179586 * u2) * d->init_arg);
			break;
		}
		}
	}
}

/* Layer l as tie k's copy: the source tensor's weights, state and host
 * copies, a gradient of its own. */
static int alias_params(ph_engine *e, int l, int k, ph_err *err)
{
	const ph_tie *t = &e->model->ties[k];
	const ph_layer *L = &e->model->layers[l];
	lparams_t *P = &e->params[l], *S = &e->params[t->src_layer];
	int spp = ph_optim_state_per_param(&e->cfg->optim);
	int64_t off = param_off(e, t->src_layer, t->src_param);
	P->alias = 1;
	P->hw = S->hw + off;
	P->hs = S->hs + off * spp;
	if (!here(e, P->rank))
		return PH_OK; /* another process runs it: the host copies alone */
	P->w = S->w + off;
	P->s = S->s + off * spp;
	P->g = ph_eng_balloc(e, P->rank, (size_t)L->param_numel * sizeof(float));
	if (!P->g)
		return ph_fail(err, PH_ENOMEM, "out of memory for the gradient of layer %s (%.1f MiB asked)%s%s",
			       L->cfg->name, (double)L->param_numel * sizeof(float) / (1024.0 * 1024.0), why_sep(e),
			       why(e));
	P->pw[0] = P->w;
	P->pg[0] = P->g;
	return PH_OK;
}

/* Every layer's parameters, gradients and optimizer state on its rank's
 * device, initialised in the host copies and uploaded; tied copies start
 * equal (a copy on its source's rank is the source's memory), and a copy
 * on another GPU than its source gets room there for the gradient sum. */
static int alloc_params(ph_engine *e, ph_err *err)
{
	const ph_config *c = e->cfg;
	ph_model *m = e->model;
	int spp = ph_optim_state_per_param(&c->optim), rc;
	e->params = calloc((size_t)m->n, sizeof *e->params);
	if (!e->params)
		return ph_fail(err, PH_ENOMEM, "out of memory");
	/* a tensor tied to several copies sums them into partial sums on its
	 * source's device: across processes on GPUs, where each holds its
	 * own ranks' tensors alone, only one copy is summed that way */
	for (int k = 0; k < m->nties; k++)
		for (int j = 0; j < k; j++) {
			const ph_tie *a = &m->ties[j], *b = &m->ties[k];
			if (a->src_layer != b->src_layer || a->src_param != b->src_param)
				continue;
			int rs = layer_rank(e, b->src_layer);
			if (here(e, rs) != here(e, layer_rank(e, a->dst_layer)) || here(e, rs) != here(e, layer_rank(e, b->dst_layer)))
				return ph_fail(err, PH_EUNSUPPORTED,
					       "layers %s and %s both tie %s.%s, and a pipeline split over processes on GPUs "
					       "sums one copy in another process only; keep those layers in the source's "
					       "process (partition) or tie one of them",
					       m->layers[a->dst_layer].cfg->name, m->layers[b->dst_layer].cfg->name,
					       m->layers[b->src_layer].cfg->name,
					       m->layers[b->src_layer].meta.params[b->src_param].name);
		}
	for (int l = 0; l < m->n; l++) {
		ph_layer *L = &m->layers[l];
		lparams_t *P = &e->params[l];
		size_t n = (size_t)L->param_numel;
		int r = layer_rank(e, l), k = ph_plan_shared_tie(e->plan, m, l);
		P->rank = r;
		if (k >= 0 && !env_is_zero("PIPEHOST_TIE_SHARE")) {
			if ((rc = alias_params(e, l, k, err)))
				return rc;
			continue;
		}
		if (!here(e, r)) {
			/* another process runs it (a split pipeline on GPUs):
			 * host copies alone, for saving */
			P->hw = calloc(n ? n : 1, sizeof(float));
			P->hs = calloc(n * spp > 0 ? n * spp : 1, sizeof(float));
			if (!P->hw || !P->hs)
				return ph_fail(err, PH_ENOMEM, "out of memory for the host copy of layer %s", L->cfg->name);
			for (int q = 0; q < L->meta.nparams; q++)
				init_tensor(P->hw + param_off(e, l, q), 0, ph_param_local_numel(L, q), &L->meta.params[q],
					    (uint64_t)c->run.seed, l, q);
			continue;
		}
		P->w = ph_eng_balloc(e, r, n * sizeof(float));
		P->g = ph_eng_balloc(e, r, n * sizeof(float));
		P->s = ph_eng_balloc(e, r, n * spp * sizeof(float));
		if (P->w && P->s) {
			P->hw = host_copy(e, P->w, n * sizeof(float));
			P->hs = host_copy(e, P->s, n * spp * sizeof(float));
		}
		if (!P->w || !P->g || !P->s || !P->hw || !P->hs)
			return ph_fail(err, PH_ENOMEM, "out of memory for the parameters of layer %s (%.1f MiB asked)%s%s",
				       L->cfg->name,
				       (double)n * (2 + spp + (e->dev->host_memory ? 0 : 1 + spp)) * sizeof(float) /
					       (1024.0 * 1024.0),
				       why_sep(e), why(e));
		if (e->dev->param_block && n && (rc = e->dev->param_block(e->rs[r], P->w, (int64_t)n, err)))
			return rc;
		int64_t off = 0;
		for (int q = 0; q < L->meta.nparams; q++) {
			int64_t k = ph_param_local_numel(L, q), first = L->meta.sharded_params >> q & 1u ? e->replica * k : 0;
			P->pw[q] = P->w + off;
			P->pg[q] = P->g + off;
			init_tensor(P->hw + off, first, k, &L->meta.params[q], (uint64_t)c->run.seed, l, q);
			off += k;
		}
	}
	for (int k = 0; k < m->nties; k++) {
		const ph_tie *t = &m->ties[k];
		lparams_t *S = &e->params[t->src_layer], *D = &e->params[t->dst_layer];
		if (D->alias)
			continue; /* the same memory */
		memcpy(D->hw + param_off(e, t->dst_layer, t->dst_param), S->hw + param_off(e, t->src_layer, t->src_param),
		       (size_t)ph_shape_numel(&m->layers[t->src_layer].meta.params[t->src_param].shape) * sizeof(float));
	}
	if ((rc = ph_eng_upload_one(e, err)))
		return rc;
	if (m->nties && !(e->tie_tmp = calloc((size_t)m->nties, sizeof *e->tie_tmp)))
		return ph_fail(err, PH_ENOMEM, "out of memory");
	for (int k = 0; k < m->nties; k++) {
		const ph_tie *t = &m->ties[k];
		int rs = layer_rank(e, t->src_layer), rd = layer_rank(e, t->dst_layer);
		if (!e->ordinal || e->ordinal[rs] == e->ordinal[rd] || !here(e, rs) || !here(e, rd))
			continue; /* tie_sum works in place, or across processes (engine-split.c) */
		size_t n = (size_t)ph_shape_numel(&m->layers[t->src_layer].meta.params[t->src_param].shape);
		if (!(e->tie_tmp[k] = ph_eng_balloc(e, rs, n * sizeof(float))))
			return ph_fail(err, PH_ENOMEM, "out of GPU memory for the tied copy in layer %s%s%s",
				       m->layers[t->dst_layer].cfg->name, why_sep(e), why(e));
	}
	return PH_OK;
}

static void free_params(ph_engine *e)
{
	for (int l = 0; e->params && l < e->model->n; l++) {
		lparams_t *P = &e->params[l];
		int r = layer_rank(e, l);
		ph_eng_bfree(e, r, P->g);
		if (P->alias)
			continue; /* the source's */
		free_host_copy(P->hw, P->w);
		free_host_copy(P->hs, P->s);
		ph_eng_bfree(e, r, P->w);
		ph_eng_bfree(e, r, P->s);
	}
	free(e->params);
	for (int k = 0; e->tie_tmp && k < e->model->nties; k++) {
		const ph_tie *t = &e->model->ties[k];
		/* on the source's rank, or the copy's where only it is here */
		int r = layer_rank(e, t->src_layer);
		ph_eng_bfree(e, here(e, r) ? r : layer_rank(e, t->dst_layer), e->tie_tmp[k]);
	}
	free(e->tie_tmp);
}

/* The batch (inputs on the first rank's device, targets on the last's),
 * the loss layer's outputs, and their host copies. */
static int alloc_batch(ph_engine *e, ph_err *err)
{
	const ph_plan *p = e->plan;
	size_t B = (size_t)e->mbsize * e->mcap;
	int last = (p->nchunks - 1) % p->ranks;
	e->loss_mb = calloc((size_t)e->mcap, sizeof(double));
	e->correct_mb = calloc((size_t)e->mcap, sizeof(double));
	e->d_data_x = ph_eng_balloc(e, 0, B * e->in_numel * sizeof(float));
	e->d_data_y = ph_eng_balloc(e, last, B * e->tps * sizeof(int32_t));
	e->d_loss = ph_eng_balloc(e, last, B * 2 * sizeof(float));
	if (e->d_data_x && e->d_data_y && e->d_loss) {
		e->data_x = host_copy(e, e->d_data_x, B * e->in_numel * sizeof(float));
		e->data_y = host_copy(e, e->d_data_y, B * e->tps * sizeof(int32_t));
		e->h_loss = host_copy(e, e->d_loss, B * 2 * sizeof(float));
	}
	if (!e->loss_mb || !e->correct_mb || !e->data_x || !e->data_y || !e->h_loss)
		return ph_fail(err, PH_ENOMEM, "out of memory for the input batch%s%s", why_sep(e), why(e));
	return PH_OK;
}

static void free_batch(ph_engine *e)
{
	int last = (e->plan->nchunks - 1) % e->plan->ranks;
	free_host_copy(e->data_x, e->d_data_x);
	free_host_copy(e->data_y, e->d_data_y);
	free_host_copy(e->h_loss, e->d_loss);
	ph_eng_bfree(e, 0, e->d_data_x);
	ph_eng_bfree(e, last, e->d_data_y);
	ph_eng_bfree(e, last, e->d_loss);
	free(e->loss_mb);
	free(e->correct_mb);
}

/* The device memory held on each of this process's ranks' GPUs after
 * phase `ph` of creation (0: ranks opened, 1: parameters and optimizer
 * state, 2: activations, links and batch): where a GPU's memory goes,
 * for the peak line (ph_engine_gpu_memory). */
static int note_memory(ph_engine *e, int ph, ph_err *err)
{
	if (!e->dev->mem_held || e->dev->struct_size < sizeof(ph_device_ops))
		return PH_OK;
	if (!e->mem_phase && !(e->mem_phase = calloc((size_t)e->plan->ranks, sizeof *e->mem_phase)))
		return ph_fail(err, PH_ENOMEM, "out of memory");
	for (int r = 0; r < e->plan->ranks; r++) {
		int o, rc;
		if (owns(e, r) && e->rs[r] && (rc = e->dev->mem_held(e->rs[r], &o, &e->mem_phase[r][ph], err)))
			return rc;
	}
	return PH_OK;
}

int ph_eng_create_one(ph_engine **out, ph_model *m, ph_plan *p, const ph_config *c, int local, ph_err *err)
{
	ph_engine *e = calloc(1, sizeof *e);
	if (!e)
		return ph_fail(err, PH_ENOMEM, "out of memory");
	*out = e;
	e->model = m;
	e->plan = p;
	e->cfg = c;
	/* the CPU's ops until open_device picks the device: nothing lives on
	 * a device before, so ph_eng_destroy_one frees nothing with them */
	e->dev = ph_cpu_device();
	ph_eng_split_init(e, local);
	e->ordinal = c->place.ordinal ? c->place.ordinal + (size_t)local * p->ranks : NULL;
	e->m = p->m;
	e->mbsize = m->max_batch;
	e->in_numel = (int)ph_shape_numel(&m->input);
	e->tps = m->targets_per_sample;
	e->clip_scale = 1.0;
	for (int r = 0; r < p->ranks; r++)
		for (int k = 0; k < p->nops[r]; k++)
			e->split |= p->ops[r][k].kind == PH_OP_I;
	pthread_mutex_init(&e->mu, NULL);
	pthread_cond_init(&e->cv_job, NULL);
	pthread_cond_init(&e->cv_done, NULL);
	pthread_cond_init(&e->cv_prep, NULL);
	e->mcap = e->m;
	int rc;
	if ((rc = open_device(e, err)))
		return rc;
	ph_eng_stream_mode(e);

	/* BLAS threads: share the cores among the ranks of every replica; more
	 * ranks than the BLAS has buffers for take turns (blas_gate.h). */
	long busy = ph_config_busy(c, p->ranks);
	openblas_set_num_threads(ph_config_blas_threads(c, sysconf(_SC_NPROCESSORS_ONLN), busy));
	ph_blas_gate_setup(busy);

	if ((rc = note_memory(e, 0, err)) || (rc = alloc_params(e, err)) || (rc = ph_eng_versions_alloc(e, err)) ||
	    (rc = ph_eng_stream_alloc(e, err)) || (rc = note_memory(e, 1, err)))
		return rc;
	/* the links' way first: the chunks' slots need host buffers for
	 * the messages only where the links go through the host */
	if ((rc = ph_eng_eval_lists(e, err)) || (rc = ph_eng_links_nccl_decide(e, err)))
		return rc;
	if ((rc = ph_eng_alloc_chunks(e, err))) {
		if (e->err_set) {
			/* err->msg cannot be both the format's argument and its output */
			char what[sizeof err->msg];
			snprintf(what, sizeof what, "%s", err->msg);
			ph_fail(err, rc, "%s: %s", what, e->err.msg);
		}
		return rc;
	}
	if ((rc = ph_eng_links_create(e, err)) || (rc = alloc_batch(e, err)) || (rc = ph_eng_links_nccl_open(e, err)) ||
	    (rc = note_memory(e, 2, err)))
		return rc;
	return ph_eng_start_workers(e, err);
}

void ph_eng_destroy_one(ph_engine *e)
{
	free(e->mem_phase);
	ph_eng_stop_workers(e);
	ph_eng_trace_free(e);
	ph_eng_links_nccl_close(e);
	ph_eng_free_chunks(e);
	ph_eng_links_destroy(e);
	ph_eng_stream_free(e);
	ph_eng_versions_free(e);
	free_params(e);
	free_batch(e);
	for (int k = 0; e->red_tmp && k < e->plan->ranks; k++)
		ph_eng_bfree(e, k, e->red_tmp[k]);
	for (int k = 0; e->ss_dev && k < e->plan->ranks; k++)
		ph_eng_bfree(e, k, e->ss_dev[k]);
	for (int k = 0; e->nccl && k < e->plan->ranks; k++)
		if (e->nccl[k])
			e->dev->nccl_close(e->nccl[k]);
	for (int r = 0; e->rs && r < e->plan->ranks; r++)
		e->dev->close(e->rs[r]);
	free(e->red_tmp);
	free(e->ss_dev);
	for (int k = 0; e->ss_host && k < e->plan->ranks; k++)
		free(e->ss_host[k]);
	free(e->ss_host);
	free(e->nccl);
	free(e->rs);
	ph_eng_eval_lists_free(e);
	free(e->gathered);
	free(e);
}
