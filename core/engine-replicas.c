/* The training step over this process's replicas (data parallelism,
 * `[run] replicas`), and what the step does between the replicas' backward
 * passes and their updates; creating and destroying the replicas.
 * engine.c runs each replica's pipeline.
 *
 * Replica r of R trains on samples [r B/R, (r+1) B/R) of each batch, its
 * micro-batches numbered r m .. r m + m - 1 for the RNG, and its loss scaled
 * by 1/B as one pipeline's would be.  Before every update the replicas'
 * gradients are summed, left to right in replica order, and every replica
 * gets the sum: the same update keeps their weights bitwise equal.  The sum
 * is the same for every schedule, partition and placement of the replicas
 * over processes; it differs from R = 1 in the last bits only, because
 * float addition does not associate.
 *
 * In one process the sum is plain memory (CPU) or peer copies and a kernel
 * (GPU).  Across processes (mpirun): on the CPU every process gathers every
 * replica's gradient (MPI) and sums them in the same order; on GPUs one NCCL
 * communicator per pipeline rank sums each process's share.
 *
 * Then each replica gets ready for its update (prepare_update): tied copies
 * of a tensor get the sum of their gradients, and the clip norm is taken
 * over every tensor, across processes when the pipeline is split over
 * them. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine-impl.h"
#include "optim.h"

/* Failures under mpirun: a process that fails returns its error to main(),
 * which prints it and aborts every process (core/main.c).  Nothing here
 * waits for the others to agree: a process stuck in a collective or a
 * link receive could not answer. */

/* Is tensor q of layer l a tied copy (`tie =`)?  The clip norm counts each
 * tied tensor once, at its source. */
static int tied_copy(const ph_model *m, int l, int q)
{
	for (int k = 0; k < m->nties; k++)
		if (m->ties[k].dst_layer == l && m->ties[k].dst_param == q)
			return 1;
	return 0;
}

/* Clipping: scale the gradients down when their norm, sqrt(total), passes
 * [optimizer] clip. */
static void set_clip_scale(ph_engine *e, double total)
{
	double norm = sqrt(total);
	if (norm > e->cfg->optim.clip)
		e->clip_scale = e->cfg->optim.clip / (norm + 1e-6);
}

/* ---- Sums over the replicas: losses and gradients --------------------- */

/* The step's loss over every replica, summed in replica order. */
static int replica_stats(ph_engine *e, ph_stats *st, ph_err *err)
{
	const ph_comm *cm = &e->cfg->comm;
	int R = e->nrep, total = R * cm->size;
	double *mine = calloc((size_t)R * 3, sizeof *mine), *all = calloc((size_t)total * 3, sizeof *all);
	int rc = PH_OK;
	if (!mine || !all) {
		rc = ph_fail(err, PH_ENOMEM, "out of memory");
		goto out;
	}
	for (int r = 0; r < R; r++) {
		ph_stats one;
		memset(&one, 0, sizeof one);
		ph_eng_collect(e->rep[r], e->m, &one);
		mine[3 * r] = one.loss_sum;
		mine[3 * r + 1] = one.correct;
		mine[3 * r + 2] = (double)one.targets;
	}
	if (cm->size > 1)
		rc = cm->ops->allgather(mine, all, (size_t)R * 3 * sizeof *mine, err);
	else
		memcpy(all, mine, (size_t)R * 3 * sizeof *mine);
	memset(st, 0, sizeof *st);
	for (int r = 0; !rc && r < total; r++) {
		st->loss_sum += all[3 * r];
		st->correct += all[3 * r + 1];
		st->targets += (int64_t)all[3 * r + 2];
	}
out:
	free(mine);
	free(all);
	return rc;
}

static int64_t largest_layer(const ph_engine *e)
{
	int64_t n = 0;
	for (int l = 0; l < e->model->n; l++)
		if (e->model->layers[l].param_numel > n)
			n = e->model->layers[l].param_numel;
	return n;
}

/* CPU: g = g_0 + g_1 + ... + g_{R-1}, element by element, into every
 * replica of this process. */
static int reduce_cpu(ph_engine *e, ph_err *err)
{
	const ph_comm *cm = &e->cfg->comm;
	int R = e->nrep, total = (int)e->cfg->run.replicas, from = R * cm->size;
	const float **src = calloc((size_t)total, sizeof *src);
	if (!src)
		return ph_fail(err, PH_ENOMEM, "out of memory");
	float *pack = NULL;
	int rc = PH_OK;
	if (cm->size > 1 && !e->gathered) {
		/* room for the largest layer: every replica's, and this
		 * process's packed for sending */
		e->gathered_n = (size_t)largest_layer(e);
		e->gathered = malloc(((size_t)from + (size_t)R) * (e->gathered_n ? e->gathered_n : 1) * sizeof(float));
		if (!e->gathered) {
			free(src);
			return ph_fail(err, PH_ENOMEM, "out of memory for the gradients of %d replicas", total);
		}
	}
	if (cm->size > 1)
		pack = e->gathered + (size_t)from * e->gathered_n;
	for (int l = 0; l < e->model->n && !rc; l++) {
		size_t n = (size_t)e->model->layers[l].param_numel;
		if (!n)
			continue;
		if (cm->size == 1) {
			for (int r = 0; r < R; r++)
				src[r] = e->rep[r]->params[l].g;
		} else {
			for (int r = 0; r < R; r++)
				memcpy(pack + (size_t)r * n, e->rep[r]->params[l].g, n * sizeof(float));
			if ((rc = cm->ops->allgather(pack, e->gathered, (size_t)R * n * sizeof(float), err)))
				break;
			/* whole pipelines: process-major is replica order; split
			 * ones: replica r's part that runs layer l */
			for (int r = 0; r < total; r++)
				src[r] = e->gathered +
					 (size_t)(e->span > 1 ? r * e->span + owner0(e, layer_rank(e, l)) : r) * n;
		}
		float *dst = e->params[l].g;
		if (dst != src[0])
			memcpy(dst, src[0], n * sizeof(float));
		for (int r = 1; r < total; r++) {
			const float *g = src[r];
			for (size_t i = 0; i < n; i++)
				dst[i] = dst[i] + g[i];
		}
		for (int r = 1; r < R; r++)
			memcpy(e->rep[r]->params[l].g, dst, n * sizeof(float));
	}
	free(src);
	return rc;
}

/* GPU: the same sum, queued on replica 0's stream of each rank: another
 * replica's gradient is copied over (a peer copy when it is on another
 * GPU) and added; across processes NCCL adds the processes' sums; then
 * every replica gets the result back. */
static int reduce_gpu(ph_engine *e, ph_err *err)
{
	int rc;
	for (int l = 0; l < e->model->n; l++) {
		int64_t n = e->model->layers[l].param_numel;
		if (!n)
			continue;
		int k = layer_rank(e, l);
		void *rs = e->rs[k];
		float *g0 = e->params[l].g;
		size_t bytes = (size_t)n * sizeof(float);
		for (int r = 1; r < e->nrep; r++)
			if ((rc = e->dev->copy(rs, e->red_tmp[k], e->rep[r]->params[l].g, bytes, PH_COPY_D2D, err)) ||
			    (rc = e->dev->tie_sum(rs, g0, e->red_tmp[k], n, err)))
				return rc;
		if (e->nccl && (rc = e->dev->nccl_sum(rs, e->nccl[k], g0, n, err)))
			return rc;
		for (int r = 1; r < e->nrep; r++)
			if ((rc = e->dev->copy(rs, e->rep[r]->params[l].g, g0, bytes, PH_COPY_D2D, err)))
				return rc;
	}
	/* the other replicas' update jobs run on their own streams */
	for (int k = 0; k < e->plan->ranks; k++)
		if ((rc = e->dev->sync(e->rs[k], err)))
			return rc;
	return PH_OK;
}

/* ---- Before the update: tied copies and the clip norm ----------------- */

/* Is tie k's source tied to another copy too?  Then the running sum left
 * tie k's copy with a partial sum, and it gets the whole one after. */
static int shares_source(const ph_model *m, int k)
{
	for (int j = 0; j < m->nties; j++)
		if (j != k && m->ties[j].src_layer == m->ties[k].src_layer && m->ties[j].src_param == m->ties[k].src_param)
			return 1;
	return 0;
}

/* The device slots of gpu_sumsq_batched: one double per tensor a rank
 * holds (a tied copy has none), and their host copies; made once. */
static int alloc_sumsq_slots(ph_engine *e, ph_err *err)
{
	const int P = e->plan->ranks;
	e->ss_dev = calloc((size_t)P, sizeof *e->ss_dev);
	e->ss_host = calloc((size_t)P, sizeof *e->ss_host);
	if (!e->ss_dev || !e->ss_host)
		return ph_fail(err, PH_ENOMEM, "out of memory");
	for (int r = 0; r < P; r++) {
		size_t k = 0;
		for (int l = 0; l < e->model->n; l++)
			for (int q = 0; layer_rank(e, l) == r && q < e->model->layers[l].meta.nparams; q++)
				k += !tied_copy(e->model, l, q);
		if (!k)
			continue;
		if (!(e->ss_host[r] = malloc(k * sizeof(double))))
			return ph_fail(err, PH_ENOMEM, "out of memory");
		if (!(e->ss_dev[r] = ph_eng_balloc(e, r, k * sizeof(double))))
			return ph_fail(err, PH_ENOMEM, "GPU memory for the clip norm: %s", e->err.msg);
	}
	return PH_OK;
}

/* Rank r's tensors for the clip norm, in layer order, a tied copy not at
 * all, into one sumsq_many call: the slots sumsq_to would fill one by one. */
static int sumsq_many_rank(ph_engine *e, int r, int *used, ph_err *err)
{
	int count = 0, rc = PH_OK;
	for (int l = 0; l < e->model->n; l++)
		if (layer_rank(e, l) == r)
			for (int q = 0; q < e->model->layers[l].meta.nparams; q++)
				count += !tied_copy(e->model, l, q);
	if (!count)
		return PH_OK;
	const float **g = calloc((size_t)count, sizeof *g);
	int64_t *n = calloc((size_t)count, sizeof *n);
	if (!g || !n)
		rc = ph_fail(err, PH_ENOMEM, "out of memory");
	for (int l = 0, k = 0; !rc && l < e->model->n; l++)
		if (layer_rank(e, l) == r)
			for (int q = 0; q < e->model->layers[l].meta.nparams; q++)
				if (!tied_copy(e->model, l, q)) {
					g[k] = e->params[l].pg[q];
					n[k++] = ph_shape_numel(&e->model->layers[l].meta.params[q].shape);
				}
	if (!rc)
		rc = e->dev->sumsq_many(e->rs[r], g, n, count, e->ss_dev[r], err);
	used[r] = count;
	free(g);
	free(n);
	return rc;
}

/* The clip norm's sum over every tensor on GPUs: each tensor's sum of
 * squares queued into the next slot of its rank's device array (all of a
 * rank's in one sumsq_many where the backend has it), one copy back per
 * rank, then the host adds them in layer order (a tied copy not at all):
 * the order and the numbers of one sumsq() per tensor, without a round
 * trip per tensor. */
static int gpu_sumsq_batched(ph_engine *e, double *total, ph_err *err)
{
	const int P = e->plan->ranks;
	int rc = PH_OK;
	if (!e->ss_dev && (rc = alloc_sumsq_slots(e, err)))
		return rc;
	int *used = calloc((size_t)P, sizeof *used); /* slots filled, then read, per rank */
	if (!used)
		return ph_fail(err, PH_ENOMEM, "out of memory");
	if (ph_eng_step_end_batched(e)) {
		for (int r = 0; r < P && !rc; r++)
			rc = sumsq_many_rank(e, r, used, err);
	} else {
		for (int l = 0; l < e->model->n && !rc; l++) {
			const ph_layer *L = &e->model->layers[l];
			const int r = layer_rank(e, l);
			for (int q = 0; q < L->meta.nparams && !rc; q++)
				if (!tied_copy(e->model, l, q))
					rc = e->dev->sumsq_to(e->rs[r], e->params[l].pg[q],
							      ph_shape_numel(&L->meta.params[q].shape),
							      &e->ss_dev[r][used[r]++], err);
		}
	}
	for (int r = 0; r < P && !rc; r++)
		if (used[r])
			rc = e->dev->copy(e->rs[r], e->ss_host[r], e->ss_dev[r], (size_t)used[r] * sizeof(double),
					  PH_COPY_D2H, err);
	if (!rc) {
		memset(used, 0, (size_t)P * sizeof *used);
		double t = 0;
		for (int l = 0; l < e->model->n; l++) {
			const int r = layer_rank(e, l);
			for (int q = 0; q < e->model->layers[l].meta.nparams; q++)
				t += tied_copy(e->model, l, q) ? 0.0 : e->ss_host[r][used[r]++];
		}
		*total = t;
	}
	free(used);
	return rc;
}

/* After a GPU step: tied gradients summed, and the clip norm (per tensor
 * in layer order, a tied copy once, as on the CPU). */
static int prepare_update_gpu(ph_engine *e, ph_err *err)
{
	int rc;
	for (int k = 0; k < e->model->nties; k++) {
		const ph_tie *t = &e->model->ties[k];
		int64_t n = ph_shape_numel(&e->model->layers[t->src_layer].meta.params[t->src_param].shape);
		void *rs = e->rs[layer_rank(e, t->src_layer)];
		float *gs = e->params[t->src_layer].pg[t->src_param], *gd = e->params[t->dst_layer].pg[t->dst_param];
		if (e->tie_tmp && e->tie_tmp[k]) {
			/* the copy on another GPU: bring it over, sum, send it back */
			size_t bytes = (size_t)n * sizeof(float);
			if ((rc = e->dev->copy(rs, e->tie_tmp[k], gd, bytes, PH_COPY_D2D, err)) ||
			    (rc = e->dev->tie_sum(rs, gs, e->tie_tmp[k], n, err)) ||
			    (rc = e->dev->copy(rs, gd, e->tie_tmp[k], bytes, PH_COPY_D2D, err)))
				return rc;
		} else if ((rc = e->dev->tie_sum(rs, gs, gd, n, err))) {
			return rc;
		}
	}
	for (int k = 0; k < e->model->nties; k++) {
		const ph_tie *t = &e->model->ties[k];
		int64_t n = ph_shape_numel(&e->model->layers[t->src_layer].meta.params[t->src_param].shape);
		if (shares_source(e->model, k) &&
		    (rc = e->dev->copy(e->rs[layer_rank(e, t->src_layer)], e->params[t->dst_layer].pg[t->dst_param],
				       e->params[t->src_layer].pg[t->src_param], (size_t)n * sizeof(float), PH_COPY_D2D,
				       err)))
			return rc;
	}
	e->clip_scale = 1.0;
	if (e->cfg->optim.clip > 0) {
		double total = 0;
		if (e->dev->sumsq_to) {
			if ((rc = gpu_sumsq_batched(e, &total, err)))
				return rc;
		} else {
			for (int l = 0; l < e->model->n; l++) {
				const ph_layer *L = &e->model->layers[l];
				for (int q = 0; q < L->meta.nparams; q++) {
					double ss = 0;
					if (!tied_copy(e->model, l, q) &&
					    (rc = e->dev->sumsq(e->rs[layer_rank(e, l)], e->params[l].pg[q],
								ph_shape_numel(&L->meta.params[q].shape), &ss, err)))
						return rc;
					total += ss;
				}
			}
		}
		set_clip_scale(e, total);
	}
	/* the tie sums ran on the main thread's queue of one rank; the
	 * update runs on every rank's own stream */
	for (int r = 0; r < e->plan->ranks; r++)
		if ((rc = e->dev->sync(e->rs[r], err)))
			return rc;
	return PH_OK;
}

/* The clip norm's sum of squares when the pipeline is split over
 * processes: each tensor's from the process of replica 0 that runs it,
 * added in layer order as one process would. */
static int split_sumsq(ph_engine *e, double *total, ph_err *err)
{
	int T = 0, N = e->cfg->comm.size;
	for (int l = 0; l < e->model->n; l++)
		T += e->model->layers[l].meta.nparams;
	double *mine = calloc((size_t)(T ? T : 1), sizeof *mine), *all = calloc((size_t)N * (T ? T : 1), sizeof *all);
	int rc = PH_OK;
	if (!mine || !all) {
		rc = ph_fail(err, PH_ENOMEM, "out of memory");
		goto out;
	}
	for (int l = 0, t = 0; l < e->model->n; l++) {
		const ph_layer *L = &e->model->layers[l];
		for (int q = 0; q < L->meta.nparams; q++, t++)
			if (owns(e, layer_rank(e, l)))
				mine[t] = ph_sumsq(e->params[l].pg[q], ph_shape_numel(&L->meta.params[q].shape));
	}
	if ((rc = e->cfg->comm.ops->allgather(mine, all, (size_t)T * sizeof *mine, err)))
		goto out;
	*total = 0;
	for (int l = 0, t = 0; l < e->model->n; l++) {
		const ph_layer *L = &e->model->layers[l];
		for (int q = 0; q < L->meta.nparams; q++, t++) {
			int copy = tied_copy(e->model, l, q);
			if (!copy)
				*total += all[(size_t)owner0(e, layer_rank(e, l)) * T + t];
		}
	}
out:
	free(mine);
	free(all);
	return rc;
}

/* Everything the update job needs: tied copies summed, the clip scale. */
static int prepare_update(ph_engine *e, ph_err *err)
{
	if (e->dev)
		return prepare_update_gpu(e, err);
	/* Tied copies: all get the sum of their gradients (in one fixed order),
	 * so the same update keeps them bitwise equal. */
	for (int k = 0; k < e->model->nties; k++) {
		const ph_tie *t = &e->model->ties[k];
		float *gs = e->params[t->src_layer].pg[t->src_param], *gd = e->params[t->dst_layer].pg[t->dst_param];
		int64_t n = ph_shape_numel(&e->model->layers[t->src_layer].meta.params[t->src_param].shape);
		int ps = owner0(e, layer_rank(e, t->src_layer)), pd = owner0(e, layer_rank(e, t->dst_layer)), rc;
		if (e->span > 1 && ps != pd &&
		    /* copies in two processes: every process gets both (the
		     * replicas' sums are equal, so replica 0's will do) and sums
		     * them alike */
		    ((rc = e->cfg->comm.ops->bcast(gd, (size_t)n * sizeof(float), pd, err)) ||
		     (rc = e->cfg->comm.ops->bcast(gs, (size_t)n * sizeof(float), ps, err))))
			return rc;
		for (int64_t i = 0; i < n; i++) {
			gs[i] = gs[i] + gd[i];
			gd[i] = gs[i];
		}
	}
	/* with several copies of one tensor, the earlier ones hold a partial sum */
	for (int k = 0; k < e->model->nties; k++) {
		const ph_tie *t = &e->model->ties[k];
		if (shares_source(e->model, k))
			memcpy(e->params[t->dst_layer].pg[t->dst_param], e->params[t->src_layer].pg[t->src_param],
			       (size_t)ph_shape_numel(&e->model->layers[t->src_layer].meta.params[t->src_param].shape) *
				       sizeof(float));
	}
	e->clip_scale = 1.0;
	if (e->cfg->optim.clip > 0) {
		/* tensor by tensor in layer order (the same sum for every
		 * partition); a tied copy counts once */
		double total = 0;
		if (e->span > 1) {
			int rc = split_sumsq(e, &total, err);
			if (rc)
				return rc;
		}
		for (int l = 0; l < e->model->n && e->span == 1; l++) {
			const ph_layer *L = &e->model->layers[l];
			for (int q = 0; q < L->meta.nparams; q++) {
				int copy = tied_copy(e->model, l, q);
				if (!copy)
					total += ph_sumsq(e->params[l].pg[q], ph_shape_numel(&L->meta.params[q].shape));
			}
		}
		set_clip_scale(e, total);
	}
	return PH_OK;
}

/* ---- The step, and the replicas' lives -------------------------------- */

int ph_engine_train_step(ph_engine *e, int64_t step, const float *x, const int32_t *y, double lr, ph_stats *st,
			 ph_err *err)
{
	int R = e->nrep, started = 0, rc = PH_OK;
	size_t per = (size_t)e->mbsize * e->m; /* samples per replica */
	ph_err later = { { 0 } };
	for (; started < R && !rc; started++) {
		ph_engine *q = e->rep[started];
		size_t off = (size_t)q->replica * per;
		if ((rc = ph_eng_train_begin(q, step, x + off * e->in_numel, y + off * e->tps, err)))
			break;
	}
	for (int r = 0; r < started; r++) {
		int rc2 = ph_eng_train_wait(e->rep[r], rc ? &later : err);
		if (!rc)
			rc = rc2;
	}
	if (rc || (rc = replica_stats(e, st, err)))
		return rc;
	if (e->cfg->run.replicas > 1 && (rc = e->dev ? reduce_gpu(e, err) : reduce_cpu(e, err)))
		return rc;
	for (int r = 0; r < R; r++) {
		ph_engine *q = e->rep[r];
		if ((rc = prepare_update(q, err)))
			return rc;
		q->lr = lr;
		q->t = step + 1;
	}
	for (int r = 0; r < R; r++)
		ph_eng_dispatch_start(e->rep[r], JOB_UPDATE);
	for (int r = 0; r < R; r++) {
		int rc2 = ph_eng_dispatch_wait(e->rep[r], rc ? &later : err);
		if (!rc)
			rc = rc2;
	}
	return rc;
}

int ph_engine_upload_tensors(ph_engine *e, ph_err *err)
{
	/* the weights and state were written into replica 0's host copies:
	 * the other replicas start from the same */
	int spp = ph_optim_state_per_param(&e->cfg->optim);
	for (int r = 1; r < e->nrep; r++)
		for (int l = 0; l < e->model->n; l++) {
			size_t n = (size_t)e->model->layers[l].param_numel;
			memcpy(e->rep[r]->params[l].hw, e->params[l].hw, n * sizeof(float));
			memcpy(e->rep[r]->params[l].hs, e->params[l].hs, n * spp * sizeof(float));
		}
	for (int r = 0; r < e->nrep; r++) {
		int rc = ph_eng_upload_one(e->rep[r], err);
		if (rc)
			return rc;
	}
	return PH_OK;
}

/* Split pipelines: each layer's weights and optimizer state from the
 * process of replica 0 that runs it, to every process (engine.h). */
int ph_engine_gather(ph_engine *e, ph_err *err)
{
	if (e->span == 1)
		return PH_OK;
	int spp = ph_optim_state_per_param(&e->cfg->optim);
	for (int l = 0; l < e->model->n; l++) {
		size_t n = (size_t)e->model->layers[l].param_numel;
		int root = owner0(e, layer_rank(e, l)), rc;
		if ((rc = e->cfg->comm.ops->bcast(e->params[l].hw, n * sizeof(float), root, err)) ||
		    (rc = e->cfg->comm.ops->bcast(e->params[l].hs, n * spp * sizeof(float), root, err)))
			return rc;
	}
	return PH_OK;
}

/* GPUs with replicas: room on replica 0's GPU of each rank for another
 * replica's gradient; under mpirun, one NCCL communicator per rank. */
static int open_reduction(ph_engine *e, ph_err *err)
{
	const ph_comm *cm = &e->cfg->comm;
	int P = e->plan->ranks, rc;
	if (e->nrep > 1) {
		if (!(e->red_tmp = calloc((size_t)P, sizeof *e->red_tmp)))
			return ph_fail(err, PH_ENOMEM, "out of memory");
		for (int k = 0; k < P; k++) {
			int64_t n = 0;
			for (int l = 0; l < e->model->n; l++)
				if (layer_rank(e, l) == k && e->model->layers[l].param_numel > n)
					n = e->model->layers[l].param_numel;
			if (n && !(e->red_tmp[k] = ph_eng_balloc(e, k, (size_t)n * sizeof(float))))
				return ph_fail(err, PH_ENOMEM, "out of GPU memory for summing the replicas' gradients%s%s",
					       e->err_set ? ": " : "", e->err_set ? e->err.msg : "");
		}
	}
	if (cm->size == 1)
		return PH_OK;
	if (!e->dev->nccl_open)
		return ph_fail(err, PH_EUNSUPPORTED,
			       "mpirun with GPUs sums gradients over NCCL, and this pipehost's CUDA backend was built "
			       "without it; install NCCL and rebuild (configure prints NCCL yes)");
	if (!(e->nccl = calloc((size_t)P, sizeof *e->nccl)))
		return ph_fail(err, PH_ENOMEM, "out of memory");
	for (int k = 0; k < P; k++) {
		unsigned char id[PH_NCCL_ID_BYTES] = { 0 };
		if ((cm->rank == 0 && (rc = e->dev->nccl_unique_id(id, err))) || (rc = cm->ops->bcast(id, sizeof id, 0, err)) ||
		    (rc = e->dev->nccl_open(e->rs[k], id, cm->size, cm->rank, &e->nccl[k], err)))
			return rc;
	}
	return PH_OK;
}

int ph_engine_create(ph_engine **out, ph_model *m, ph_plan *p, const ph_config *c, ph_err *err)
{
	int R = ph_config_local_replicas(c);
	*out = NULL;
	int rc = ph_eng_create_one(out, m, p, c, 0, err);
	ph_engine *e = *out;
	if (!e)
		return rc;
	if (!(e->rep = calloc((size_t)R, sizeof *e->rep)))
		return rc ? rc : ph_fail(err, PH_ENOMEM, "out of memory");
	e->rep[0] = e;
	e->nrep = 1;
	if (rc)
		return rc;
	for (int r = 1; r < R; r++) {
		/* layer states of its own: a layer may keep per-call state
		 * (cuDNN descriptors made on first use), and replicas run at
		 * the same time */
		ph_model *own = calloc(1, sizeof *own);
		if (!own)
			return ph_fail(err, PH_ENOMEM, "out of memory");
		if ((rc = ph_model_build(own, c, &m->input, m->max_batch, err))) {
			ph_model_free(own);
			free(own);
			return rc;
		}
		rc = ph_eng_create_one(&e->rep[r], own, p, c, r, err);
		if (e->rep[r])
			e->rep[r]->own_model = own, e->nrep++;
		else
			ph_model_free(own), free(own);
		if (rc)
			return rc;
	}
	if (e->dev && (R > 1 || c->comm.size > 1))
		return open_reduction(e, err);
	return PH_OK;
}

void ph_engine_destroy(ph_engine *e)
{
	if (!e)
		return;
	ph_engine **rep = e->rep;
	for (int r = 1; r < e->nrep; r++) {
		ph_model *own = rep[r]->own_model;
		ph_eng_destroy_one(rep[r]);
		if (own) {
			ph_model_free(own);
			free(own);
		}
	}
	ph_eng_destroy_one(e);
	free(rep);
}
