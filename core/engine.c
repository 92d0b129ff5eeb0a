/* CPU engine.  Memory layout (all owned here):
 *   per layer:  parameters, gradients, optimizer state (one arena each)
 *   per chunk:  `slots` activation slots (the plan's peak in-flight count);
 *               a slot holds every layer's output and saved bytes for one
 *               micro-batch, plus the gradient of the chunk's output;
 *               one scratch buffer and two ping-pong gradient buffers.
 * A link between chunk c and c+1 carries pointers, not data: the receiver
 * reads the sender's output in place and writes its input gradient straight
 * into the sender's slot.  Both stay valid until the sender's backward of
 * that micro-batch, which the schedule orders after the receiver's.  The one
 * exception is a split backward: the receiver's W may run after the sender's,
 * so there the receiver copies its input into its own slot at the forward.
 *
 * On CUDA (core/device.h) the same layout lives in GPU memory; each rank
 * queues its work on its own stream, a link also carries an event per
 * micro-batch (recorded by the sender, waited on by the receiver's stream),
 * and every rank waits for its stream at the end of a job.  Parameters and
 * optimizer state keep a host mirror for init, checkpoints and weights.
 *
 * Recomputation (`[run] recompute`): a lean slot keeps only the chunk's last
 * output and its saved bytes; the inner layers write shared work buffers,
 * which are rebuilt by rerunning the forward just before the backward (and
 * again before W).  The counter-based RNG makes it bitwise the same. */
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cblas.h>

#include "device.h"
#include "engine.h"
#include "trace.h"
#include "optim.h"

typedef struct {
	int mb;              /* micro-batch held, -1 when free */
	float **y;           /* [layers in chunk] outputs */
	void **saved;        /* [layers in chunk] */
	float *dy_out;       /* gradient of the chunk's output (not the last chunk) */
	float **dy;          /* split backward only: each inner layer's output
			      * gradient, kept from I to W */
	float *x_own;        /* split backward, chunks > 0: a copy of the input,
			      * since W may run after the sender freed its slot;
			      * and the input received from another GPU */
	float *dx_own;       /* input gradient computed here before it is copied
			      * to a sender on another GPU */
	int lean;            /* recompute: inner layers' y and saved are the
			      * chunk's shared work buffers, rebuilt before backward */
	void *act_req, *grad_req; /* a pipeline split over processes: the
			      * sends of this slot's output and input gradient,
			      * finished before the slot is taken again */
} slot_t;

typedef struct {
	int a, b;            /* layers a..b-1 */
	int rank;
	int nslots;
	slot_t *slots;
	void *scratch;
	float *gbuf[2];
	int *mb_slot;        /* [m] */
	const float **mb_x;  /* [m] input of the chunk for each micro-batch */
	float **mb_dx;       /* [m] where the chunk's input gradient goes */
	float **work_y;      /* recompute: inner layers' outputs, shared by lean slots */
	void **work_saved;
	size_t act_bytes;    /* activation memory this chunk holds (slots + work) */
} chunk_t;

typedef struct {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	const float **y;     /* [m] sender output */
	float **dy;          /* [m] sender's slot for the gradient */
	uint8_t *act, *grad; /* [m] posted flags */
	void **act_ev, **grad_ev; /* CUDA: [m] events the receiver's stream waits on */
} link_t;

typedef struct {
	float *w, *g, *s;    /* where the layer computes (GPU memory on CUDA) */
	float *hw, *hs;      /* host mirrors of w and s (the same arrays on the CPU) */
	float *pw[PH_MAX_PARAMS], *pg[PH_MAX_PARAMS];
} lparams_t;

enum { JOB_NONE, JOB_TRAIN, JOB_EVAL, JOB_UPDATE, JOB_EXIT };

typedef struct worker worker_t;

struct ph_engine {
	ph_model *model;
	ph_plan *plan;
	const ph_config *cfg;
	int mbsize, m, in_numel, tps;
	chunk_t *chunks;
	link_t *links;       /* [nchunks - 1] */
	lparams_t *params;   /* [layers] */
	float *data_x;       /* [batch, in] */
	int32_t *data_y;
	double *loss_mb, *correct_mb;
	/* CUDA: NULL dev means every rank is on the CPU */
	const ph_device_ops *dev;
	void **rs;           /* [ranks] rank states */
	float *d_data_x;     /* the batch on the GPU */
	int32_t *d_data_y;
	float *d_loss;       /* [m][mbsize][2]: each micro-batch's loss-layer output */
	float **tie_tmp;     /* [nties]: room on the first copy's GPU for a copy on another */
	float *h_loss;
	/* eval lists: F only, R micro-batches per round */
	ph_op **eval_ops;
	int *eval_nops;
	int eval_R;
	/* current job */
	pthread_mutex_t mu;
	pthread_cond_t cv_job, cv_done;
	int job, generation, pending;
	int active_mbs;      /* micro-batches in this job */
	int last_batch;      /* samples in the last active micro-batch */
	int training;
	int64_t step, t;
	double lr, clip_scale;
	int abort;
	int split;           /* the plan has I/W ops */
	/* --trace: one event per op, per rank */
	int tracing;
	double t_origin;
	ph_trace_event **ev;
	int *nev, *ev_cap;
	ph_err err;
	int err_set;
	/* Data parallelism (`[run] replicas`): this process's copies of the
	 * pipeline, each a whole engine with its own threads, layer states and
	 * weights.  The first one, the handle callers hold, drives the rest and
	 * sums their gradients before every step (see "Replicas" below). */
	ph_engine **rep;     /* [nrep] (rep[0] is this one); NULL in the others */
	int nrep;
	int replica;         /* this copy's index among all R replicas */
	const int *ordinal;  /* [ranks] this copy's devices, from cfg->place */
	/* A pipeline split over processes (mpirun, replicas < processes): this
	 * process runs ranks [rank_lo, rank_hi) of its replica; the others
	 * are in processes proc_base + rank / (ranks / span). */
	int span;            /* processes per pipeline; 1 = whole pipelines */
	int rank_lo, rank_hi;
	int proc_base;
	ph_model *own_model; /* replicas > 0: layer states of their own */
	float **red_tmp;     /* rep[0] on GPUs: [ranks] room for another copy's gradient */
	void **nccl;         /* rep[0] under mpirun on GPUs: [ranks] communicators */
	float *gathered;     /* rep[0] under mpirun on the CPU: every process's gradients */
	size_t gathered_n;
	pthread_t *threads;
	worker_t *workers;
	int nthreads_started;
};

struct worker {
	ph_engine *e;
	int rank;
};

static void set_error(ph_engine *e, int rank, const ph_err *err)
{
	pthread_mutex_lock(&e->mu);
	if (!e->err_set) {
		e->err = *err;
		e->err_set = 1;
	}
	__atomic_store_n(&e->abort, 1, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&e->mu);
	/* wake anyone waiting on a link so they see the abort */
	for (int c = 0; c + 1 < e->plan->nchunks; c++) {
		pthread_mutex_lock(&e->links[c].mu);
		pthread_cond_broadcast(&e->links[c].cv);
		pthread_mutex_unlock(&e->links[c].mu);
	}
	(void)rank;
}

static int batch_of(const ph_engine *e, int mb)
{
	return mb == e->active_mbs - 1 ? e->last_batch : e->mbsize;
}

static void fill_ctx(const ph_engine *e, ph_ctx *ctx, int mb, int layer, const chunk_t *ch, void *saved)
{
	memset(ctx, 0, sizeof *ctx);
	ctx->batch = batch_of(e, mb);
	ctx->training = e->training;
	ctx->seed = (uint64_t)e->cfg->run.seed;
	ctx->step = (uint64_t)e->step;
	/* replicas draw different dropout masks: their micro-batches are
	 * numbered on after each other's, as one long pipeline's would be */
	ctx->microbatch = (uint64_t)e->replica * (uint64_t)e->m + (uint64_t)mb;
	ctx->layer = (uint64_t)layer;
	ctx->scratch = ch->scratch;
	ctx->saved = saved;
	ctx->device = PH_DEV_CPU;
	if (e->dev)
		e->dev->fill_ctx(e->rs[ch->rank], ctx);
	if (layer == e->model->n - 1) {
		ctx->targets = (e->dev ? e->d_data_y : e->data_y) + (size_t)mb * e->mbsize * e->tps;
		ctx->loss_scale = (float)(1.0 / ((double)e->mbsize * e->m * e->cfg->run.replicas * e->tps));
	}
}

/* Is chunk c's predecessor on another GPU?  Then the link copies (peer
 * copies on the copy engines) instead of handing buffers over in place. */
static int cross_gpu_in(const ph_engine *e, int c)
{
	if (!e->dev || c == 0)
		return 0;
	const int *ord = e->ordinal;
	return ord[c % e->plan->ranks] != ord[(c - 1) % e->plan->ranks];
}

/* A pipeline split over processes: does this process run rank r?  Which
 * process of this replica runs it, and which of replica 0? */
static int owns(const ph_engine *e, int rank)
{
	return rank >= e->rank_lo && rank < e->rank_hi;
}

static int owner(const ph_engine *e, int rank)
{
	return e->proc_base + rank / (e->plan->ranks / e->span);
}

static int owner0(const ph_engine *e, int rank)
{
	return rank / (e->plan->ranks / e->span);
}

/* Does the link after chunk c cross to another process? */
static int remote_link(const ph_engine *e, int c)
{
	return e->span > 1 && owns(e, c % e->plan->ranks) != owns(e, (c + 1) % e->plan->ranks);
}

/* Message tags: one per link, micro-batch and direction. */
static int link_tag(const ph_engine *e, int c, int mb, int grad)
{
	return (c * e->m + mb) * 2 + grad;
}

/* Wait for one message to or from another process, as link_wait does:
 * polling, so that a failure on another rank of this process stops it. */
static int msg_wait(ph_engine *e, void **req, ph_err *err)
{
	const ph_comm_ops *cm = e->cfg->comm.ops;
	for (long spins = 0; *req; spins++) {
		int done = 0, rc = cm->test(*req, &done, err);
		if (rc)
			return rc;
		if (done) {
			*req = NULL;
			break;
		}
		if (__atomic_load_n(&e->abort, __ATOMIC_ACQUIRE))
			return PH_EINTERNAL;
		/* a short wait spins; a long one (a pipeline bubble) sleeps in
		 * 50 us naps, leaving the core to the ranks that compute */
		if (spins < 2000) {
			sched_yield();
		} else {
			struct timespec nap = { 0, 50000 };
			nanosleep(&nap, NULL);
		}
	}
	return PH_OK;
}

/* The slot's earlier sends must be done before it is written again. */
static int slot_sends_done(ph_engine *e, slot_t *sl, ph_err *err)
{
	int rc = msg_wait(e, &sl->act_req, err);
	return rc ? rc : msg_wait(e, &sl->grad_req, err);
}

/* Micro-batch mb's loss-layer output x, [loss, correct] per sample, summed
 * in sample order (the same sum for every schedule). */
static void sum_loss(ph_engine *e, int mb, const float *x)
{
	double loss = 0, correct = 0;
	for (int i = 0; i < batch_of(e, mb); i++) {
		loss += x[2 * i];
		correct += x[2 * i + 1];
	}
	e->loss_mb[mb] = loss;
	e->correct_mb[mb] = correct;
}

/* Does micro-batch mb drop its inner activations after the forward? */
static int recomputed(const ph_engine *e, int mb)
{
	int mode = e->cfg->run.recompute;
	return mode == PH_RECOMPUTE_YES || (mode == PH_RECOMPUTE_EXCEPT_LAST && mb != e->m - 1);
}

/* Forward through layers [a, upto) of chunk c into slot sl's buffers. */
static int forward_layers(ph_engine *e, int c, int mb, slot_t *sl, float *last_out, ph_err *err)
{
	chunk_t *ch = &e->chunks[c];
	const float *x = ch->mb_x[mb];
	int upto = ch->b;
	for (int l = ch->a; l < upto; l++) {
		ph_layer *L = &e->model->layers[l];
		ph_ctx ctx;
		fill_ctx(e, &ctx, mb, l, ch, sl->saved[l - ch->a]);
		ph_err e2 = { { 0 } };
		float *y = l == upto - 1 && last_out ? last_out : sl->y[l - ch->a];
		int rc = L->ops->forward(L->state, &ctx, e->params[l].pw, x, y, &e2);
		if (rc)
			return ph_fail(err, rc, "layer %s (%s) forward, micro-batch %d: %s", L->cfg->name, L->ops->head.name, mb,
				       e2.msg);
		x = y;
	}
	return PH_OK;
}

/* Recomputation: rebuild a lean slot's activations and saved bytes in the
 * chunk's work buffers.  The last layer's output stays the slot's own (the
 * next chunk reads it in place), so its rerun writes a work copy instead.
 * The counter-based RNG makes dropout draw the same masks again. */
static int rematerialize(ph_engine *e, int c, int mb, slot_t *sl, ph_err *err)
{
	if (!sl->lean)
		return PH_OK;
	chunk_t *ch = &e->chunks[c];
	return forward_layers(e, c, mb, sl, ch->work_y[ch->b - 1 - ch->a], err);
}

/* A free activation slot for micro-batch mb of chunk c: at its forward,
 * or at its receive when the input comes from another process. */
static int take_slot(ph_engine *e, int c, int mb, int *out, ph_err *err)
{
	chunk_t *ch = &e->chunks[c];
	/* training: a lean slot exactly when this micro-batch is recomputed;
	 * evaluation keeps nothing for a backward, so any free slot will do */
	int want_lean = recomputed(e, mb) && ch->work_y, s;
	for (s = 0; s < ch->nslots; s++)
		if (ch->slots[s].mb < 0 && (!e->training || ch->slots[s].lean == want_lean))
			break;
	if (s == ch->nslots)
		return ph_fail(err, PH_EINTERNAL, "chunk %d has no free activation slot for micro-batch %d", c, mb);
	slot_t *sl = &ch->slots[s];
	int rc = e->span > 1 ? slot_sends_done(e, sl, err) : PH_OK;
	if (rc)
		return rc;
	sl->mb = mb;
	ch->mb_slot[mb] = s;
	*out = s;
	return PH_OK;
}

static int run_forward(ph_engine *e, int c, int mb, ph_err *err)
{
	chunk_t *ch = &e->chunks[c];
	int s = ch->mb_slot[mb], rc0;
	if (s < 0 && (rc0 = take_slot(e, c, mb, &s, err)))
		return rc0;
	slot_t *sl = &ch->slots[s];
	if (c == 0) {
		ch->mb_x[mb] = (e->dev ? e->d_data_x : e->data_x) + (size_t)mb * e->mbsize * e->in_numel;
	} else if (sl->x_own && ch->mb_x[mb] != sl->x_own) { /* (received from another process: in place) */
		size_t bytes = (size_t)ph_shape_numel(&e->model->layers[ch->a].in) * batch_of(e, mb) * sizeof(float);
		if (e->dev) {
			int rc = e->dev->copy(e->rs[ch->rank], sl->x_own, ch->mb_x[mb], bytes, PH_COPY_D2D, err);
			if (rc)
				return rc;
		} else {
			memcpy(sl->x_own, ch->mb_x[mb], bytes);
		}
		ch->mb_x[mb] = sl->x_own;
	}
	int rc = forward_layers(e, c, mb, sl, NULL, err);
	if (rc)
		return rc;
	const float *x = sl->y[ch->b - 1 - ch->a];
	if (ch->b == e->model->n) {
		/* the loss layer's [loss, correct] per sample, summed in sample
		 * order; on the GPU, kept aside and summed after the job */
		int n = batch_of(e, mb);
		if (e->dev) {
			int rc2 = e->dev->copy(e->rs[ch->rank], e->d_loss + (size_t)mb * e->mbsize * 2, x,
					       (size_t)n * 2 * sizeof(float), PH_COPY_D2D, err);
			if (rc2)
				return rc2;
		} else {
			sum_loss(e, mb, x);
		}
		if (!e->training) {
			sl->mb = -1; /* nothing downstream reads the last chunk in evaluation */
			ch->mb_slot[mb] = -1;
		}
	}
	return PH_OK;
}

/* The gradient a layer receives: the chunk's output gradient for its last
 * layer (none for the loss), else the next layer's input gradient. */
static const float *layer_dy(const ph_engine *e, const chunk_t *ch, const slot_t *sl, int l, const float *inner)
{
	if (l == ch->b - 1)
		return l == e->model->n - 1 ? NULL : sl->dy_out;
	return inner;
}

/* Full backward (B), or its input half (I) when `split`: then each layer's
 * output gradient stays in the slot for W, and the slot stays taken. */
static int run_backward(ph_engine *e, int c, int mb, int split, ph_err *err)
{
	chunk_t *ch = &e->chunks[c];
	int s = ch->mb_slot[mb];
	if (s < 0)
		return ph_fail(err, PH_EINTERNAL, "chunk %d backward of micro-batch %d without its forward", c, mb);
	slot_t *sl = &ch->slots[s];
	int rc0 = rematerialize(e, c, mb, sl, err);
	if (rc0)
		return rc0;
	const float *dy = NULL;
	int t = 0;
	for (int l = ch->b - 1; l >= ch->a; l--) {
		ph_layer *L = &e->model->layers[l];
		const float *x = l == ch->a ? ch->mb_x[mb] : sl->y[l - 1 - ch->a];
		dy = layer_dy(e, ch, sl, l, dy);
		float *dx = l == ch->a ? (sl->dx_own && ch->mb_dx[mb] ? sl->dx_own : ch->mb_dx[mb])
				       : split ? sl->dy[l - 1 - ch->a] : ch->gbuf[t];
		ph_ctx ctx;
		fill_ctx(e, &ctx, mb, l, ch, sl->saved[l - ch->a]);
		ph_err e2 = { { 0 } };
		int rc;
		if (split && ph_layer_has_split_backward(L->ops))
			rc = L->ops->backward_input(L->state, &ctx, e->params[l].pw, x, sl->y[l - ch->a], dy, dx, &e2);
		else
			rc = L->ops->backward(L->state, &ctx, e->params[l].pw, e->params[l].pg, x, sl->y[l - ch->a], dy,
					      dx, &e2);
		if (rc)
			return ph_fail(err, rc, "layer %s (%s) backward, micro-batch %d: %s", L->cfg->name, L->ops->head.name,
				       mb, e2.msg);
		dy = dx;
		t ^= 1;
	}
	if (sl->dx_own && ch->mb_dx[mb] && ch->mb_dx[mb] != sl->dx_own) {
		/* to the sender's GPU; SEND_GRAD's event follows on this stream */
		size_t bytes = (size_t)ph_shape_numel(&e->model->layers[ch->a].in) * batch_of(e, mb) * sizeof(float);
		int rc = e->dev->copy(e->rs[ch->rank], ch->mb_dx[mb], sl->dx_own, bytes, PH_COPY_D2D, err);
		if (rc)
			return rc;
	}
	if (!split) {
		sl->mb = -1;
		ch->mb_slot[mb] = -1;
	}
	return PH_OK;
}

/* W: the weight half for layers that split their backward, then free the slot. */
static int run_weight(ph_engine *e, int c, int mb, ph_err *err)
{
	chunk_t *ch = &e->chunks[c];
	int s = ch->mb_slot[mb];
	if (s < 0)
		return ph_fail(err, PH_EINTERNAL, "chunk %d W of micro-batch %d without its forward", c, mb);
	slot_t *sl = &ch->slots[s];
	/* another micro-batch may have used the work buffers since I */
	int rc0 = rematerialize(e, c, mb, sl, err);
	if (rc0)
		return rc0;
	for (int l = ch->b - 1; l >= ch->a; l--) {
		ph_layer *L = &e->model->layers[l];
		if (!ph_layer_has_split_backward(L->ops))
			continue;
		const float *x = l == ch->a ? ch->mb_x[mb] : sl->y[l - 1 - ch->a];
		const float *dy = layer_dy(e, ch, sl, l, l + 1 < ch->b ? sl->dy[l - ch->a] : NULL);
		ph_ctx ctx;
		fill_ctx(e, &ctx, mb, l, ch, sl->saved[l - ch->a]);
		ph_err e2 = { { 0 } };
		int rc = L->ops->backward_weight(L->state, &ctx, e->params[l].pw, e->params[l].pg, x, sl->y[l - ch->a], dy,
						 &e2);
		if (rc)
			return ph_fail(err, rc, "layer %s (%s) weight gradient, micro-batch %d: %s", L->cfg->name,
				       L->ops->head.name, mb, e2.msg);
	}
	sl->mb = -1;
	ch->mb_slot[mb] = -1;
	return PH_OK;
}

static int link_wait(ph_engine *e, link_t *lk, uint8_t *flags, int mb)
{
	pthread_mutex_lock(&lk->mu);
	while (!flags[mb] && !__atomic_load_n(&e->abort, __ATOMIC_ACQUIRE))
		pthread_cond_wait(&lk->cv, &lk->mu);
	int ok = flags[mb];
	pthread_mutex_unlock(&lk->mu);
	return ok ? PH_OK : PH_EINTERNAL;
}

static void link_post(link_t *lk, uint8_t *flags, int mb)
{
	pthread_mutex_lock(&lk->mu);
	flags[mb] = 1;
	pthread_cond_broadcast(&lk->cv);
	pthread_mutex_unlock(&lk->mu);
}

/* Links to another process (a pipeline split over processes, CPU): the
 * sender starts a send and goes on, so, as in-process, only receivers
 * wait; the buffers are the slots' own and stay untouched until the send
 * is done (take_slot, and the end of the job).  Chunk c's output goes to
 * c+1's x_own, taken with its slot at the receive; c+1's input gradient
 * leaves from its dx_own and lands in c's dy_out. */
static size_t out_bytes(const ph_engine *e, int c, int mb)
{
	const chunk_t *ch = &e->chunks[c];
	return (size_t)ph_shape_numel(&e->model->layers[ch->b - 1].meta.out) * batch_of(e, mb) * sizeof(float);
}

static int send_act(ph_engine *e, int c, int mb, slot_t *sl, ph_err *err)
{
	chunk_t *ch = &e->chunks[c];
	return e->cfg->comm.ops->isend(sl->y[ch->b - 1 - ch->a], out_bytes(e, c, mb), owner(e, (c + 1) % e->plan->ranks),
				       link_tag(e, c, mb, 0), &sl->act_req, err);
}

static int recv_act(ph_engine *e, int c, int mb, ph_err *err)
{
	chunk_t *ch = &e->chunks[c];
	int s, rc = take_slot(e, c, mb, &s, err);
	if (rc)
		return rc;
	slot_t *sl = &ch->slots[s];
	void *req = NULL;
	if ((rc = e->cfg->comm.ops->irecv(sl->x_own, out_bytes(e, c - 1, mb), owner(e, (c - 1) % e->plan->ranks),
					  link_tag(e, c - 1, mb, 0), &req, err)) ||
	    (rc = msg_wait(e, &req, err)))
		return rc;
	ch->mb_x[mb] = sl->x_own;
	ch->mb_dx[mb] = sl->dx_own; /* run_backward writes the gradient there */
	return PH_OK;
}

static int send_grad(ph_engine *e, int c, int mb, ph_err *err)
{
	chunk_t *ch = &e->chunks[c];
	/* the backward has released its slot: find it by the buffer */
	slot_t *sl = NULL;
	for (int s = 0; s < ch->nslots && !sl; s++)
		if (ch->slots[s].dx_own == ch->mb_dx[mb])
			sl = &ch->slots[s];
	if (!sl)
		return ph_fail(err, PH_EINTERNAL, "chunk %d: no slot holds the input gradient of micro-batch %d", c, mb);
	return e->cfg->comm.ops->isend(sl->dx_own, out_bytes(e, c - 1, mb), owner(e, (c - 1) % e->plan->ranks),
				       link_tag(e, c - 1, mb, 1), &sl->grad_req, err);
}

static int recv_grad(ph_engine *e, int c, int mb, ph_err *err)
{
	chunk_t *ch = &e->chunks[c];
	slot_t *sl = &ch->slots[ch->mb_slot[mb]];
	void *req = NULL;
	int rc = e->cfg->comm.ops->irecv(sl->dy_out, out_bytes(e, c, mb), owner(e, (c + 1) % e->plan->ranks),
					 link_tag(e, c, mb, 1), &req, err);
	return rc ? rc : msg_wait(e, &req, err);
}

/* The end of a job: every send of this rank's slots has finished. */
static int rank_sends_done(ph_engine *e, int rank, ph_err *err)
{
	for (int c = rank; c < e->plan->nchunks; c += e->plan->ranks)
		for (int s = 0; s < e->chunks[c].nslots; s++) {
			int rc = slot_sends_done(e, &e->chunks[c].slots[s], err);
			if (rc)
				return rc;
		}
	return PH_OK;
}

static int run_op(ph_engine *e, const ph_op *o, ph_err *err)
{
	int c = o->chunk, mb = o->mb;
	if (mb >= e->active_mbs)
		return PH_OK; /* a short final evaluation round */
	chunk_t *ch = &e->chunks[c];
	switch (o->kind) {
	case PH_OP_F:
		return run_forward(e, c, mb, err);
	case PH_OP_B:
		return run_backward(e, c, mb, 0, err);
	case PH_OP_I:
		return run_backward(e, c, mb, 1, err);
	case PH_OP_W:
		return run_weight(e, c, mb, err);
	case PH_OP_SEND_ACT: {
		link_t *lk = &e->links[c];
		slot_t *sl = &ch->slots[ch->mb_slot[mb]];
		if (remote_link(e, c))
			return send_act(e, c, mb, sl, err);
		lk->y[mb] = sl->y[ch->b - 1 - ch->a];
		lk->dy[mb] = sl->dy_out;
		if (e->dev) {
			int rc = e->dev->event_record(e->rs[ch->rank], lk->act_ev[mb], err);
			if (rc)
				return rc;
		}
		link_post(lk, lk->act, mb);
		return PH_OK;
	}
	case PH_OP_RECV_ACT: {
		link_t *lk = &e->links[c - 1];
		if (remote_link(e, c - 1))
			return recv_act(e, c, mb, err);
		if (link_wait(e, lk, lk->act, mb))
			return PH_EINTERNAL;
		ch->mb_x[mb] = lk->y[mb];
		ch->mb_dx[mb] = lk->dy[mb];
		return e->dev ? e->dev->event_wait(e->rs[ch->rank], lk->act_ev[mb], err) : PH_OK;
	}
	case PH_OP_SEND_GRAD: {
		link_t *lk = &e->links[c - 1];
		if (remote_link(e, c - 1))
			return send_grad(e, c, mb, err);
		if (e->dev) {
			int rc = e->dev->event_record(e->rs[ch->rank], lk->grad_ev[mb], err);
			if (rc)
				return rc;
		}
		link_post(lk, lk->grad, mb);
		return PH_OK;
	}
	case PH_OP_RECV_GRAD: {
		link_t *lk = &e->links[c];
		if (remote_link(e, c))
			return recv_grad(e, c, mb, err);
		if (link_wait(e, lk, lk->grad, mb))
			return PH_EINTERNAL;
		return e->dev ? e->dev->event_wait(e->rs[ch->rank], lk->grad_ev[mb], err) : PH_OK;
	}
	}
	return ph_fail(err, PH_EINTERNAL, "unknown op %d", o->kind);
}

static int do_update(ph_engine *e, int rank)
{
	const ph_optim_config *oc = &e->cfg->optim;
	for (int c = rank; c < e->plan->nchunks; c += e->plan->ranks) {
		chunk_t *ch = &e->chunks[c];
		for (int l = ch->a; l < ch->b; l++) {
			ph_layer *L = &e->model->layers[l];
			lparams_t *P = &e->params[l];
			int spp = ph_optim_state_per_param(oc);
			int64_t off = 0;
			if (e->dev) {
				ph_err err = { { 0 } };
				for (int p = 0, rc = 0; p < L->meta.nparams; p++) {
					int64_t n = ph_shape_numel(&L->meta.params[p].shape);
					if ((e->clip_scale != 1.0 && (rc = e->dev->scale(e->rs[rank], P->pg[p], n, e->clip_scale, &err))) ||
					    (rc = e->dev->optim_update(e->rs[rank], oc, e->t, e->lr, P->pw[p], P->pg[p],
								       P->s + off * spp, n, !L->meta.params[p].no_decay, &err))) {
						set_error(e, rank, &err);
						return rc;
					}
					off += n;
				}
				continue; /* optim_update zeroed the gradients */
			}
			for (int p = 0; p < L->meta.nparams; p++) {
				int64_t n = ph_shape_numel(&L->meta.params[p].shape);
				float *g = P->pg[p];
				if (e->clip_scale != 1.0)
					for (int64_t i = 0; i < n; i++)
						g[i] = (float)(g[i] * e->clip_scale);
				ph_optim_update(oc, e->t, e->lr, P->pw[p], g, P->s + off * spp, n,
						!L->meta.params[p].no_decay);
				off += n;
			}
			if (L->param_numel)
				memset(P->g, 0, (size_t)L->param_numel * sizeof(float));
		}
	}
	return PH_OK;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

#define PH_TRACE_MAX_EVENTS (1 << 20) /* per rank; later events are dropped */

static void record(ph_engine *e, int rank, const ph_op *o, double t0, double t1)
{
	if (e->nev[rank] == e->ev_cap[rank]) {
		int cap = e->ev_cap[rank] ? e->ev_cap[rank] * 2 : 1024;
		if (cap > PH_TRACE_MAX_EVENTS)
			return;
		ph_trace_event *n = realloc(e->ev[rank], (size_t)cap * sizeof *n);
		if (!n)
			return;
		e->ev[rank] = n;
		e->ev_cap[rank] = cap;
	}
	e->ev[rank][e->nev[rank]++] = (ph_trace_event){ t0 - e->t_origin, t1 - e->t_origin, rank, o->kind, o->chunk, o->mb,
							e->training ? e->step : -1 };
}

static void *worker_main(void *arg)
{
	worker_t *w = arg;
	ph_engine *e = w->e;
	int seen = 0;
	for (;;) {
		pthread_mutex_lock(&e->mu);
		while (e->generation == seen)
			pthread_cond_wait(&e->cv_job, &e->mu);
		seen = e->generation;
		int job = e->job;
		pthread_mutex_unlock(&e->mu);
		if (job == JOB_EXIT)
			break;
		ph_err err = { { 0 } };
		int rc = e->dev ? e->dev->bind(e->rs[w->rank], &err) : PH_OK;
		if (rc) {
			/* reported below */
		} else if (job == JOB_TRAIN || job == JOB_EVAL) {
			const ph_op *ops = job == JOB_TRAIN ? e->plan->ops[w->rank] : e->eval_ops[w->rank];
			int n = job == JOB_TRAIN ? e->plan->nops[w->rank] : e->eval_nops[w->rank];
			for (int k = 0; k < n && !rc && !__atomic_load_n(&e->abort, __ATOMIC_ACQUIRE); k++) {
				double t0 = e->tracing ? now_s() : 0;
				rc = run_op(e, &ops[k], &err);
				if (e->tracing && ops[k].mb < e->active_mbs)
					record(e, w->rank, &ops[k], t0, now_s());
			}
		} else if (job == JOB_UPDATE) {
			rc = do_update(e, w->rank);
		}
		if (!rc && e->span > 1 && (job == JOB_TRAIN || job == JOB_EVAL))
			rc = rank_sends_done(e, w->rank, &err);
		/* a job ends when the GPU has done it: the next job may reuse
		 * any buffer, and the host reads losses and weights; after a
		 * failure too, so nothing is left in flight (the first error
		 * is the one reported) */
		if (e->dev) {
			ph_err e3 = { { 0 } };
			int rc3 = e->dev->sync(e->rs[w->rank], &e3);
			if (!rc && rc3) {
				rc = rc3;
				err = e3;
			}
		}
		if (rc && err.msg[0])
			set_error(e, w->rank, &err);
		else if (rc)
			__atomic_store_n(&e->abort, 1, __ATOMIC_RELEASE);
		pthread_mutex_lock(&e->mu);
		if (--e->pending == 0)
			pthread_cond_signal(&e->cv_done);
		pthread_mutex_unlock(&e->mu);
	}
	return NULL;
}

/* Start a job on every rank; dispatch_wait waits for it.  Replicas run
 * their jobs at the same time: start all, then wait for all. */
static void dispatch_start(ph_engine *e, int job)
{
	for (int c = 0; c + 1 < e->plan->nchunks; c++) {
		memset(e->links[c].act, 0, (size_t)e->m);
		memset(e->links[c].grad, 0, (size_t)e->m);
	}
	pthread_mutex_lock(&e->mu);
	e->job = job;
	e->pending = e->rank_hi - e->rank_lo; /* this process's ranks */
	e->abort = 0;
	e->err_set = 0;
	e->generation++;
	pthread_cond_broadcast(&e->cv_job);
	pthread_mutex_unlock(&e->mu);
}

static int dispatch_wait(ph_engine *e, ph_err *err)
{
	pthread_mutex_lock(&e->mu);
	while (e->pending > 0)
		pthread_cond_wait(&e->cv_done, &e->mu);
	pthread_mutex_unlock(&e->mu);
	if (e->abort) {
		if (e->err_set)
			*err = e->err;
		else
			ph_fail(err, PH_EINTERNAL, "a pipeline rank stopped without saying why");
		return PH_EINTERNAL;
	}
	return PH_OK;
}

static int dispatch(ph_engine *e, int job, ph_err *err)
{
	dispatch_start(e, job);
	return dispatch_wait(e, err);
}

static void init_tensor(float *w, int64_t n, const ph_param_desc *d, uint64_t seed, int layer, int p)
{
	uint64_t key = ph_rng_key(seed, 0x494E4954 /* "INIT" */, (uint64_t)layer, (uint64_t)p);
	for (int64_t i = 0; i < n; i++) {
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

static void *zalloc(size_t bytes)
{
	return calloc(1, bytes ? bytes : 1);
}

/* Zeroed memory where rank computes: host memory, or its GPU's. */
static void *balloc(ph_engine *e, int rank, size_t bytes)
{
	if (!e->dev)
		return zalloc(bytes);
	void *p = NULL;
	ph_err err = { { 0 } };
	if (e->dev->alloc(e->rs[rank], bytes, &p, &err)) {
		if (!e->err_set) {
			e->err = err; /* the GPU's own words, for the caller to pass on */
			e->err_set = 1;
		}
		return NULL;
	}
	return p;
}

static void bfree(ph_engine *e, int rank, void *p)
{
	if (!p)
		return;
	if (e->dev)
		e->dev->free(e->rs[rank], p);
	else
		free(p);
}

/* Evaluation runs forward only, R micro-batches a round, chunks in order
 * on each rank; R is bounded by the slots training already sized. */
static int make_eval_lists(ph_engine *e, ph_err *err)
{
	ph_plan *p = e->plan;
	int R = e->m;
	for (int c = 0; c + 1 < p->nchunks; c++)
		if (p->slots[c] < R)
			R = p->slots[c];
	e->eval_R = R;
	e->eval_ops = calloc((size_t)p->ranks, sizeof *e->eval_ops);
	e->eval_nops = calloc((size_t)p->ranks, sizeof *e->eval_nops);
	if (!e->eval_ops || !e->eval_nops)
		return ph_fail(err, PH_ENOMEM, "out of memory");
	for (int r = 0; r < p->ranks; r++) {
		e->eval_ops[r] = calloc((size_t)p->v * R * 3, sizeof(ph_op));
		if (!e->eval_ops[r])
			return ph_fail(err, PH_ENOMEM, "out of memory");
		int n = 0;
		for (int c = r; c < p->nchunks; c += p->ranks)
			for (int mb = 0; mb < R; mb++) {
				if (c > 0)
					e->eval_ops[r][n++] = (ph_op){ PH_OP_RECV_ACT, c, mb };
				e->eval_ops[r][n++] = (ph_op){ PH_OP_F, c, mb };
				if (c + 1 < p->nchunks)
					e->eval_ops[r][n++] = (ph_op){ PH_OP_SEND_ACT, c, mb };
			}
		e->eval_nops[r] = n;
	}
	return PH_OK;
}

static int alloc_chunks(ph_engine *e, ph_err *err)
{
	ph_plan *p = e->plan;
	ph_model *m = e->model;
	e->chunks = calloc((size_t)p->nchunks, sizeof *e->chunks);
	if (!e->chunks)
		return ph_fail(err, PH_ENOMEM, "out of memory");
	for (int c = 0; c < p->nchunks; c++) {
		chunk_t *ch = &e->chunks[c];
		ch->a = p->first[c];
		ch->b = p->first[c + 1];
		ch->rank = c % p->ranks;
		if (!owns(e, ch->rank))
			continue; /* another process runs it: no memory here */
		ch->nslots = p->slots[c] > 0 ? p->slots[c] : 1;
		int nl = ch->b - ch->a;
		if (e->cfg->run.recompute == PH_RECOMPUTE_EXCEPT_LAST)
			ch->nslots++; /* the lean slots plus one full one for the last micro-batch */
		size_t scratch = 0, gmax = 0;
		for (int l = ch->a; l < ch->b; l++) {
			ph_layer *L = &m->layers[l];
			/* on a GPU a layer may ask for another amount (ABI 1.2) */
			size_t need = e->dev && L->meta.device_scratch_bytes ? L->meta.device_scratch_bytes
									    : L->meta.scratch_bytes;
			if (need > scratch)
				scratch = need;
			size_t in = (size_t)ph_shape_numel(&L->in);
			if (in > gmax)
				gmax = in;
		}
		ch->scratch = balloc(e, ch->rank, scratch);
		ch->gbuf[0] = balloc(e, ch->rank, gmax * e->mbsize * sizeof(float));
		ch->gbuf[1] = balloc(e, ch->rank, gmax * e->mbsize * sizeof(float));
		ch->mb_slot = malloc((size_t)e->m * sizeof *ch->mb_slot);
		ch->mb_x = calloc((size_t)e->m, sizeof *ch->mb_x);
		ch->mb_dx = calloc((size_t)e->m, sizeof *ch->mb_dx);
		ch->slots = calloc((size_t)ch->nslots, sizeof *ch->slots);
		if (!ch->scratch || !ch->gbuf[0] || !ch->gbuf[1] || !ch->mb_slot || !ch->mb_x || !ch->mb_dx || !ch->slots)
			return ph_fail(err, PH_ENOMEM, "out of memory for chunk %d", c);
		for (int mb = 0; mb < e->m; mb++)
			ch->mb_slot[mb] = -1;
		int mode = e->cfg->run.recompute;
		if (mode != PH_RECOMPUTE_NO) {
			/* one set of activations and saved bytes, shared by the lean slots */
			ch->work_y = calloc((size_t)nl, sizeof *ch->work_y);
			ch->work_saved = calloc((size_t)nl, sizeof *ch->work_saved);
			if (!ch->work_y || !ch->work_saved)
				return ph_fail(err, PH_ENOMEM, "out of memory");
			for (int l = ch->a; l < ch->b; l++) {
				ph_layer *L = &m->layers[l];
				size_t yb = (size_t)ph_shape_numel(&L->meta.out) * e->mbsize * sizeof(float);
				size_t sb = L->meta.saved_bytes * e->mbsize;
				ch->work_y[l - ch->a] = balloc(e, ch->rank, yb);
				ch->work_saved[l - ch->a] = balloc(e, ch->rank, sb);
				if (!ch->work_y[l - ch->a] || !ch->work_saved[l - ch->a])
					return ph_fail(err, PH_ENOMEM, "out of memory for activations of layer %s", L->cfg->name);
				ch->act_bytes += yb + sb;
			}
		}
		for (int s = 0; s < ch->nslots; s++) {
			slot_t *sl = &ch->slots[s];
			sl->mb = -1;
			/* except_last: the last slot keeps everything, for micro-batch m-1 */
			sl->lean = ch->work_y && (mode == PH_RECOMPUTE_YES || s + 1 < ch->nslots);
			sl->y = calloc((size_t)nl, sizeof *sl->y);
			sl->saved = calloc((size_t)nl, sizeof *sl->saved);
			if (!sl->y || !sl->saved)
				return ph_fail(err, PH_ENOMEM, "out of memory");
			for (int l = ch->a; l < ch->b; l++) {
				ph_layer *L = &m->layers[l];
				if (sl->lean && l + 1 < ch->b) {
					sl->y[l - ch->a] = ch->work_y[l - ch->a];
					sl->saved[l - ch->a] = ch->work_saved[l - ch->a];
					continue;
				}
				size_t yb = (size_t)ph_shape_numel(&L->meta.out) * e->mbsize * sizeof(float);
				size_t sb = sl->lean ? 0 : L->meta.saved_bytes * e->mbsize;
				sl->y[l - ch->a] = balloc(e, ch->rank, yb);
				/* a lean slot's last layer keeps its output, not its saved bytes */
				sl->saved[l - ch->a] = sl->lean ? ch->work_saved[l - ch->a] : balloc(e, ch->rank, sb);
				if (!sl->y[l - ch->a] || !sl->saved[l - ch->a])
					return ph_fail(err, PH_ENOMEM, "out of memory for activations of layer %s",
						       L->cfg->name);
				ch->act_bytes += yb + sb;
			}
			if (e->split) {
				if (!(sl->dy = calloc((size_t)nl, sizeof *sl->dy)))
					return ph_fail(err, PH_ENOMEM, "out of memory");
				for (int l = ch->a; l + 1 < ch->b; l++) {
					size_t out = (size_t)ph_shape_numel(&m->layers[l].meta.out) * e->mbsize;
					if (!(sl->dy[l - ch->a] = balloc(e, ch->rank, out * sizeof(float))))
						return ph_fail(err, PH_ENOMEM, "out of memory for gradients of layer %s",
							       m->layers[l].cfg->name);
					ch->act_bytes += out * sizeof(float);
				}
			}
			int remote_in = c > 0 && remote_link(e, c - 1);
			if ((remote_in || (c + 1 < p->nchunks && remote_link(e, c))) && s == 0) {
				/* one MPI message per micro-batch and direction */
				size_t in = (size_t)ph_shape_numel(&m->layers[ch->a].in) * e->mbsize * sizeof(float);
				size_t out = (size_t)ph_shape_numel(&m->layers[ch->b - 1].meta.out) * e->mbsize * sizeof(float);
				size_t big = remote_in && in > out ? in : out;
				int64_t tags = (int64_t)p->nchunks * e->m * 2;
				if (big > INT_MAX)
					return ph_fail(err, PH_EUNSUPPORTED,
						       "the activations between chunks %d and %d are %.2f GiB per micro-batch, "
						       "more than one MPI message carries (2 GiB); use more micro-batches",
						       remote_in ? c - 1 : c, remote_in ? c : c + 1, big / 1073741824.0);
				if (tags - 1 > e->cfg->comm.tag_ub)
					return ph_fail(err, PH_EUNSUPPORTED,
						       "the plan's links need MPI tags up to %lld and this MPI allows %d; "
						       "use fewer micro-batches or chunks",
						       (long long)(tags - 1), e->cfg->comm.tag_ub);
			}
			if ((e->split && c > 0) || cross_gpu_in(e, c) || remote_in) {
				size_t in = (size_t)ph_shape_numel(&m->layers[ch->a].in) * e->mbsize * sizeof(float);
				if (!(sl->x_own = balloc(e, ch->rank, in)))
					return ph_fail(err, PH_ENOMEM, "out of memory");
				ch->act_bytes += in;
			}
			if (cross_gpu_in(e, c) || remote_in) {
				size_t in = (size_t)ph_shape_numel(&m->layers[ch->a].in) * e->mbsize * sizeof(float);
				if (!(sl->dx_own = balloc(e, ch->rank, in)))
					return ph_fail(err, PH_ENOMEM, "out of memory");
				ch->act_bytes += in;
			}
			if (c + 1 < p->nchunks) {
				size_t out = (size_t)ph_shape_numel(&m->layers[ch->b - 1].meta.out) * e->mbsize;
				if (!(sl->dy_out = balloc(e, ch->rank, out * sizeof(float))))
					return ph_fail(err, PH_ENOMEM, "out of memory");
				ch->act_bytes += out * sizeof(float);
			}
		}
	}
	return PH_OK;
}

/* The rank that computes layer l. */
static int layer_rank(const ph_engine *e, int l)
{
	for (int c = 0; c < e->plan->nchunks; c++)
		if (l >= e->plan->first[c] && l < e->plan->first[c + 1])
			return c % e->plan->ranks;
	return 0;
}

/* The host copy of parameter tensor q of layer l. */
static float *host_param(ph_engine *e, int l, int q)
{
	lparams_t *P = &e->params[l];
	return P->hw + (P->pw[q] - P->w);
}

/* Every rank on a GPU: load the backend, check that each layer has a CUDA
 * twin, and open each rank's stream and handles. */
static int open_devices(ph_engine *e, ph_err *err)
{
	const ph_config *c = e->cfg;
	if (!(e->dev = ph_cuda_backend(err)))
		return PH_EUNSUPPORTED;
	for (int l = 0; l < e->model->n; l++) {
		const ph_layer *L = &e->model->layers[l];
		if (!(L->ops->devices & PH_DEV_CUDA))
			return ph_fail(err, PH_EUNSUPPORTED,
				       "layer %s (%s) has no CUDA implementation, and [run] devices = %s puts it on a GPU; "
				       "use devices = cpu, or a layer plugin built with CUDA",
				       L->cfg->name, L->ops->head.name, c->run.devices);
	}
	if (!(e->rs = calloc((size_t)e->plan->ranks, sizeof *e->rs)))
		return ph_fail(err, PH_ENOMEM, "out of memory");
	for (int r = 0; r < e->plan->ranks; r++) {
		int rc = e->dev->open(e->ordinal[r], c->run.precision, &e->rs[r], err);
		if (rc)
			return rc;
	}
	return PH_OK;
}

static int upload_one(ph_engine *e, ph_err *err)
{
	if (!e->dev)
		return PH_OK;
	int spp = ph_optim_state_per_param(&e->cfg->optim);
	for (int l = 0; l < e->model->n; l++) {
		lparams_t *P = &e->params[l];
		size_t n = (size_t)e->model->layers[l].param_numel;
		void *rs = e->rs[layer_rank(e, l)];
		int rc;
		if ((rc = e->dev->copy(rs, P->w, P->hw, n * sizeof(float), PH_COPY_H2D, err)) ||
		    (rc = e->dev->copy(rs, P->s, P->hs, n * spp * sizeof(float), PH_COPY_H2D, err)))
			return rc;
	}
	return PH_OK;
}

/* Bring the host mirrors up to date (weights, or optimizer state too). */
static int download_tensors(ph_engine *e, int state, ph_err *err)
{
	if (!e->dev)
		return PH_OK;
	int spp = ph_optim_state_per_param(&e->cfg->optim);
	for (int l = 0; l < e->model->n; l++) {
		lparams_t *P = &e->params[l];
		size_t n = (size_t)e->model->layers[l].param_numel;
		void *rs = e->rs[layer_rank(e, l)];
		int rc = state ? e->dev->copy(rs, P->hs, P->s, n * spp * sizeof(float), PH_COPY_D2H, err)
			       : e->dev->copy(rs, P->hw, P->w, n * sizeof(float), PH_COPY_D2H, err);
		if (rc)
			return rc;
	}
	return PH_OK;
}

/* One pipeline: this process's replica `local`. */
static int create_one(ph_engine **out, ph_model *m, ph_plan *p, const ph_config *c, int local, ph_err *err)
{
	ph_engine *e = calloc(1, sizeof *e);
	if (!e)
		return ph_fail(err, PH_ENOMEM, "out of memory");
	*out = e;
	e->model = m;
	e->plan = p;
	e->cfg = c;
	e->span = ph_config_split(c);
	if (e->span > 1) {
		/* this process's share of its replica's ranks */
		int per = p->ranks / e->span, part = c->comm.rank % e->span;
		e->replica = c->comm.rank / e->span;
		e->proc_base = e->replica * e->span;
		e->rank_lo = part * per;
		e->rank_hi = e->rank_lo + per;
	} else {
		e->replica = c->comm.rank * ph_config_local_replicas(c) + local;
		e->rank_lo = 0;
		e->rank_hi = p->ranks;
	}
	e->ordinal = c->place.ordinal + (size_t)local * p->ranks;
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
	int rc0;

	if (c->place.cuda && (rc0 = open_devices(e, err)))
		return rc0;

	/* BLAS threads: share the cores among the ranks of every replica. */
	long cores = sysconf(_SC_NPROCESSORS_ONLN),
	     busy = (long)(e->rank_hi - e->rank_lo) * ph_config_local_replicas(c); /* this process's ranks */
	int threads = (int)c->run.threads;
	if (threads <= 0)
		threads = (int)(cores / busy) > 0 ? (int)(cores / busy) : 1;
	openblas_set_num_threads(threads);

	int spp = ph_optim_state_per_param(&c->optim);
	e->params = calloc((size_t)m->n, sizeof *e->params);
	if (!e->params)
		return ph_fail(err, PH_ENOMEM, "out of memory");
	for (int l = 0; l < m->n; l++) {
		ph_layer *L = &m->layers[l];
		lparams_t *P = &e->params[l];
		size_t n = (size_t)L->param_numel;
		int r = layer_rank(e, l);
		P->w = balloc(e, r, n * sizeof(float));
		P->g = balloc(e, r, n * sizeof(float));
		P->s = balloc(e, r, n * spp * sizeof(float));
		P->hw = e->dev ? zalloc(n * sizeof(float)) : P->w;
		P->hs = e->dev ? zalloc(n * spp * sizeof(float)) : P->s;
		if (!P->w || !P->g || !P->s || !P->hw || !P->hs)
			return ph_fail(err, PH_ENOMEM, "out of memory for the parameters of layer %s%s%s", L->cfg->name,
				       e->err_set ? ": " : "", e->err_set ? e->err.msg : "");
		int64_t off = 0;
		for (int q = 0; q < L->meta.nparams; q++) {
			int64_t k = ph_shape_numel(&L->meta.params[q].shape);
			P->pw[q] = P->w + off;
			P->pg[q] = P->g + off;
			init_tensor(P->hw + off, k, &L->meta.params[q], (uint64_t)c->run.seed, l, q);
			off += k;
		}
	}
	for (int k = 0; k < m->nties; k++) {
		const ph_tie *t = &m->ties[k];
		memcpy(host_param(e, t->dst_layer, t->dst_param), host_param(e, t->src_layer, t->src_param),
		       (size_t)ph_shape_numel(&m->layers[t->src_layer].meta.params[t->src_param].shape) * sizeof(float));
	}
	if ((rc0 = upload_one(e, err)))
		return rc0;
	if (e->dev && m->nties) {
		if (!(e->tie_tmp = calloc((size_t)m->nties, sizeof *e->tie_tmp)))
			return ph_fail(err, PH_ENOMEM, "out of memory");
		for (int k = 0; k < m->nties; k++) {
			const ph_tie *t = &m->ties[k];
			int rs = layer_rank(e, t->src_layer), rd = layer_rank(e, t->dst_layer);
			if (e->ordinal[rs] == e->ordinal[rd])
				continue;
			size_t n = (size_t)ph_shape_numel(&m->layers[t->src_layer].meta.params[t->src_param].shape);
			if (!(e->tie_tmp[k] = balloc(e, rs, n * sizeof(float))))
				return ph_fail(err, PH_ENOMEM, "out of GPU memory for the tied copy in layer %s%s%s",
					       m->layers[t->dst_layer].cfg->name, e->err_set ? ": " : "", e->err_set ? e->err.msg : "");
		}
	}
	int rc = alloc_chunks(e, err);
	if (rc) {
		if (e->err_set) {
			/* err->msg cannot be both the format's argument and its output */
			char what[sizeof err->msg];
			snprintf(what, sizeof what, "%s", err->msg);
			ph_fail(err, rc, "%s: %s", what, e->err.msg);
		}
		return rc;
	}
	e->links = calloc((size_t)(p->nchunks > 1 ? p->nchunks - 1 : 1), sizeof *e->links);
	if (!e->links)
		return ph_fail(err, PH_ENOMEM, "out of memory");
	for (int k = 0; k + 1 < p->nchunks; k++) {
		link_t *lk = &e->links[k];
		pthread_mutex_init(&lk->mu, NULL);
		pthread_cond_init(&lk->cv, NULL);
		lk->y = calloc((size_t)e->m, sizeof *lk->y);
		lk->dy = calloc((size_t)e->m, sizeof *lk->dy);
		lk->act = calloc((size_t)e->m, 1);
		lk->grad = calloc((size_t)e->m, 1);
		lk->act_ev = calloc((size_t)e->m, sizeof *lk->act_ev);
		lk->grad_ev = calloc((size_t)e->m, sizeof *lk->grad_ev);
		if (!lk->y || !lk->dy || !lk->act || !lk->grad || !lk->act_ev || !lk->grad_ev)
			return ph_fail(err, PH_ENOMEM, "out of memory");
		/* recorded by the sender of each: chunk k sends activations, k+1 gradients */
		for (int mb = 0; e->dev && mb < e->m; mb++)
			if ((rc = e->dev->event_create(e->rs[k % p->ranks], &lk->act_ev[mb], err)) ||
			    (rc = e->dev->event_create(e->rs[(k + 1) % p->ranks], &lk->grad_ev[mb], err)))
				return rc;
	}
	size_t B = (size_t)e->mbsize * e->m;
	e->data_x = zalloc(B * e->in_numel * sizeof(float));
	e->data_y = zalloc(B * e->tps * sizeof(int32_t));
	e->loss_mb = calloc((size_t)e->m, sizeof(double));
	e->correct_mb = calloc((size_t)e->m, sizeof(double));
	if (!e->data_x || !e->data_y || !e->loss_mb || !e->correct_mb)
		return ph_fail(err, PH_ENOMEM, "out of memory for the input batch");
	if (e->dev) {
		int last = (p->nchunks - 1) % p->ranks;
		e->d_data_x = balloc(e, 0, B * e->in_numel * sizeof(float));
		e->d_data_y = balloc(e, last, B * e->tps * sizeof(int32_t));
		e->d_loss = balloc(e, last, B * 2 * sizeof(float));
		e->h_loss = zalloc(B * 2 * sizeof(float));
		if (!e->d_data_x || !e->d_data_y || !e->d_loss || !e->h_loss)
			return ph_fail(err, PH_ENOMEM, "out of GPU memory for the input batch%s%s", e->err_set ? ": " : "",
				       e->err_set ? e->err.msg : "");
	}
	if ((rc = make_eval_lists(e, err)))
		return rc;
	e->threads = calloc((size_t)p->ranks, sizeof *e->threads);
	e->workers = calloc((size_t)p->ranks, sizeof *e->workers);
	if (!e->threads || !e->workers)
		return ph_fail(err, PH_ENOMEM, "out of memory");
	for (int r = e->rank_lo; r < e->rank_hi; r++) {
		int k = r - e->rank_lo;
		e->workers[k] = (worker_t){ e, r };
		if (pthread_create(&e->threads[k], NULL, worker_main, &e->workers[k]))
			return ph_fail(err, PH_ENOMEM, "cannot start the worker thread of rank %d", r);
		e->nthreads_started++;
	}
	return PH_OK;
}

/* GPU: the loss layer's outputs of nmb micro-batches, summed per
 * micro-batch in sample order, as the CPU path does in run_forward. */
static int gather_losses(ph_engine *e, int nmb, ph_err *err)
{
	if (!e->dev)
		return PH_OK;
	int last = (e->plan->nchunks - 1) % e->plan->ranks;
	int rc = e->dev->copy(e->rs[last], e->h_loss, e->d_loss, (size_t)nmb * e->mbsize * 2 * sizeof(float),
			      PH_COPY_D2H, err);
	if (rc)
		return rc;
	for (int mb = 0; mb < nmb; mb++)
		sum_loss(e, mb, e->h_loss + (size_t)mb * e->mbsize * 2);
	return PH_OK;
}

/* GPU: the batch in host memory goes to the first rank (inputs) and the
 * last (targets). */
static int upload_batch(ph_engine *e, size_t samples, ph_err *err)
{
	if (!e->dev)
		return PH_OK;
	int last = (e->plan->nchunks - 1) % e->plan->ranks, rc;
	if ((rc = e->dev->copy(e->rs[0], e->d_data_x, e->data_x, samples * e->in_numel * sizeof(float), PH_COPY_H2D,
			       err)) ||
	    (rc = e->dev->copy(e->rs[last], e->d_data_y, e->data_y, samples * e->tps * sizeof(int32_t), PH_COPY_H2D,
			       err)))
		return rc;
	return PH_OK;
}

static void collect(ph_engine *e, int nmb, ph_stats *st)
{
	if (!owns(e, (e->plan->nchunks - 1) % e->plan->ranks))
		return; /* the loss layer runs in another process */
	/* micro-batch order, so the sum is the same for every schedule */
	for (int mb = 0; mb < nmb; mb++) {
		st->loss_sum += e->loss_mb[mb];
		st->correct += e->correct_mb[mb];
		st->targets += (int64_t)batch_of(e, mb) * e->tps;
	}
}

/* Is tie k's source tied to another copy too?  Then the running sum left
 * tie k's copy with a partial sum, and it gets the whole one after. */
static int shares_source(const ph_model *m, int k)
{
	for (int j = 0; j < m->nties; j++)
		if (j != k && m->ties[j].src_layer == m->ties[k].src_layer && m->ties[j].src_param == m->ties[k].src_param)
			return 1;
	return 0;
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
		for (int l = 0; l < e->model->n; l++) {
			const ph_layer *L = &e->model->layers[l];
			for (int q = 0; q < L->meta.nparams; q++) {
				int copy = 0;
				for (int k = 0; k < e->model->nties; k++)
					copy |= e->model->ties[k].dst_layer == l && e->model->ties[k].dst_param == q;
				double ss = 0;
				if (!copy && (rc = e->dev->sumsq(e->rs[layer_rank(e, l)], e->params[l].pg[q],
								 ph_shape_numel(&L->meta.params[q].shape), &ss, err)))
					return rc;
				total += ss;
			}
		}
		double norm = sqrt(total);
		if (norm > e->cfg->optim.clip)
			e->clip_scale = e->cfg->optim.clip / (norm + 1e-6);
	}
	/* the tie sums ran on the main thread's queue of one rank; the
	 * update runs on every rank's own stream */
	for (int r = 0; r < e->plan->ranks; r++)
		if ((rc = e->dev->sync(e->rs[r], err)))
			return rc;
	return PH_OK;
}

/* One replica's share of the batch in, and its forward and backward
 * passes started; train_wait waits for them and sums the losses. */
static int train_begin(ph_engine *e, int64_t step, const float *x, const int32_t *y, ph_err *err)
{
	size_t B = (size_t)e->mbsize * e->m;
	memcpy(e->data_x, x, B * e->in_numel * sizeof(float));
	memcpy(e->data_y, y, B * e->tps * sizeof(int32_t));
	e->training = 1;
	e->step = step;
	e->active_mbs = e->m;
	e->last_batch = e->mbsize;
	int rc = upload_batch(e, B, err);
	if (rc)
		return rc;
	dispatch_start(e, JOB_TRAIN);
	return PH_OK;
}

static int train_wait(ph_engine *e, ph_err *err)
{
	int rc = dispatch_wait(e, err);
	return rc ? rc : gather_losses(e, e->m, err);
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
			int copy = 0;
			for (int k = 0; k < e->model->nties; k++)
				copy |= e->model->ties[k].dst_layer == l && e->model->ties[k].dst_param == q;
			if (!copy)
				*total += all[(size_t)owner0(e, layer_rank(e, l)) * T + t];
		}
	}
out:
	free(mine);
	free(all);
	return rc;
}

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
				int copy = 0;
				for (int k = 0; k < e->model->nties; k++)
					copy |= e->model->ties[k].dst_layer == l && e->model->ties[k].dst_param == q;
				if (!copy)
					total += ph_sumsq(e->params[l].pg[q], ph_shape_numel(&L->meta.params[q].shape));
			}
		}
		double norm = sqrt(total);
		if (norm > e->cfg->optim.clip)
			e->clip_scale = e->cfg->optim.clip / (norm + 1e-6);
	}
	return PH_OK;
}

/* ---- Replicas: data parallelism over R copies of the pipeline ----------
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
 * communicator per pipeline rank sums each process's share. */

/* Failures under mpirun: a process that fails returns its error to main(),
 * which prints it and aborts every process (core/main.c).  Nothing here
 * waits for the others to agree: a process stuck in a collective or a
 * link receive could not answer. */

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
		collect(e->rep[r], e->m, &one);
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

int ph_engine_train_step(ph_engine *e, int64_t step, const float *x, const int32_t *y, double lr, ph_stats *st,
			 ph_err *err)
{
	int R = e->nrep, started = 0, rc = PH_OK;
	size_t per = (size_t)e->mbsize * e->m; /* samples per replica */
	ph_err later = { { 0 } };
	for (; started < R && !rc; started++) {
		ph_engine *q = e->rep[started];
		size_t off = (size_t)q->replica * per;
		if ((rc = train_begin(q, step, x + off * e->in_numel, y + off * e->tps, err)))
			break;
	}
	for (int r = 0; r < started; r++) {
		int rc2 = train_wait(e->rep[r], rc ? &later : err);
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
		dispatch_start(e->rep[r], JOB_UPDATE);
	for (int r = 0; r < R; r++) {
		int rc2 = dispatch_wait(e->rep[r], rc ? &later : err);
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
		int rc = upload_one(e->rep[r], err);
		if (rc)
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
			if (n && !(e->red_tmp[k] = balloc(e, k, (size_t)n * sizeof(float))))
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
	int rc = create_one(out, m, p, c, 0, err);
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
		rc = create_one(&e->rep[r], own, p, c, r, err);
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

int ph_engine_eval(ph_engine *e, const ph_dataset *ds, int64_t count, ph_stats *st, ph_err *err)
{
	memset(st, 0, sizeof *st);
	if (count > ds->n)
		count = ds->n;
	int64_t round = (int64_t)e->eval_R * e->mbsize;
	e->training = 0;
	e->step = 0;
	int64_t *idx = malloc((size_t)round * sizeof *idx);
	if (!idx)
		return ph_fail(err, PH_ENOMEM, "out of memory");
	int rc = PH_OK;
	for (int64_t start = 0; start < count && !rc; start += round) {
		int64_t n = count - start < round ? count - start : round;
		for (int64_t i = 0; i < n; i++)
			idx[i] = start + i;
		ph_data_gather(ds, idx, (int)n, e->data_x, e->data_y);
		e->active_mbs = (int)((n + e->mbsize - 1) / e->mbsize);
		e->last_batch = (int)(n - (int64_t)(e->active_mbs - 1) * e->mbsize);
		if (!(rc = upload_batch(e, (size_t)n, err)) && !(rc = dispatch(e, JOB_EVAL, err)))
			rc = gather_losses(e, e->active_mbs, err);
		for (int c = 0; c < e->plan->nchunks; c++) {
			chunk_t *ch = &e->chunks[c];
			for (int s = 0; s < ch->nslots; s++)
				ch->slots[s].mb = -1;
			for (int mb = 0; ch->mb_slot && mb < e->m; mb++)
				ch->mb_slot[mb] = -1;
		}
		if (!rc)
			collect(e, e->active_mbs, st);
	}
	free(idx);
	/* split over processes: the loss layer's process has the figures */
	if (!rc && e->span > 1) {
		double mine[3] = { st->loss_sum, st->correct, (double)st->targets }, *all;
		int N = e->cfg->comm.size;
		if (!(all = calloc((size_t)N * 3, sizeof *all)))
			return ph_fail(err, PH_ENOMEM, "out of memory");
		if (!(rc = e->cfg->comm.ops->allgather(mine, all, sizeof mine, err))) {
			memset(st, 0, sizeof *st);
			for (int q = 0; q < e->span; q++) { /* replica 0's processes: one evaluated */
				st->loss_sum += all[3 * q];
				st->correct += all[3 * q + 1];
				st->targets += (int64_t)all[3 * q + 2];
			}
		}
		free(all);
	}
	return rc;
}

int ph_engine_tensors(ph_engine *e, ph_tensor_ref **refs, int *n, ph_err *err)
{
	int total = 0, rc = download_tensors(e, 0, err);
	if (rc)
		return rc;
	for (int l = 0; l < e->model->n; l++)
		total += e->model->layers[l].meta.nparams;
	ph_tensor_ref *t = calloc((size_t)(total ? total : 1), sizeof *t);
	if (!t)
		return ph_fail(err, PH_ENOMEM, "out of memory");
	int k = 0;
	for (int l = 0; l < e->model->n; l++) {
		ph_layer *L = &e->model->layers[l];
		for (int q = 0; q < L->meta.nparams; q++, k++) {
			snprintf(t[k].name, sizeof t[k].name, "%s.%s", L->cfg->name, L->meta.params[q].name);
			t[k].shape = L->meta.params[q].shape;
			t[k].data = host_param(e, l, q);
		}
	}
	*refs = t;
	*n = total;
	return PH_OK;
}

int ph_engine_state_tensors(ph_engine *e, ph_tensor_ref **refs, int *n, ph_err *err)
{
	int spp = ph_optim_state_per_param(&e->cfg->optim), total = 0, rc = download_tensors(e, 1, err);
	if (rc)
		return rc;
	for (int l = 0; l < e->model->n; l++)
		total += e->model->layers[l].meta.nparams * spp;
	ph_tensor_ref *t = calloc((size_t)(total ? total : 1), sizeof *t);
	if (!t)
		return ph_fail(err, PH_ENOMEM, "out of memory");
	int k = 0;
	for (int l = 0; l < e->model->n; l++) {
		ph_layer *L = &e->model->layers[l];
		int64_t off = 0;
		for (int q = 0; q < L->meta.nparams; q++) {
			int64_t numel = ph_shape_numel(&L->meta.params[q].shape);
			for (int j = 0; j < spp; j++, k++) {
				/* state j of tensor q lives at s + off*spp + j*numel (optim.h layout) */
				snprintf(t[k].name, sizeof t[k].name, "%s.%s.%s", L->cfg->name, L->meta.params[q].name,
					 spp == 1 ? "momentum" : j == 0 ? "adam_m" : "adam_v");
				t[k].shape = L->meta.params[q].shape;
				t[k].data = e->params[l].hs + off * spp + (int64_t)j * numel;
			}
			off += numel;
		}
	}
	*refs = t;
	*n = total;
	return PH_OK;
}

double ph_engine_activation_bytes(const ph_engine *e, int rank)
{
	if (!owns(e, rank))
		return -1; /* another process runs it */
	double total = 0;
	for (int c = rank; c < e->plan->nchunks; c += e->plan->ranks)
		total += (double)e->chunks[c].act_bytes;
	return total;
}

int ph_engine_trace(ph_engine *e, ph_err *err)
{
	int P = e->plan->ranks;
	e->ev = calloc((size_t)P, sizeof *e->ev);
	e->nev = calloc((size_t)P, sizeof *e->nev);
	e->ev_cap = calloc((size_t)P, sizeof *e->ev_cap);
	if (!e->ev || !e->nev || !e->ev_cap)
		return ph_fail(err, PH_ENOMEM, "out of memory");
	e->t_origin = now_s();
	e->tracing = 1;
	return PH_OK;
}

int ph_engine_write_trace(ph_engine *e, const char *path, ph_err *err)
{
	int total = 0;
	for (int r = 0; r < e->plan->ranks; r++)
		total += e->nev[r];
	ph_trace_event *all = malloc((size_t)(total ? total : 1) * sizeof *all);
	if (!all)
		return ph_fail(err, PH_ENOMEM, "out of memory");
	int k = 0;
	for (int r = 0; r < e->plan->ranks; r++)
		for (int i = 0; i < e->nev[r]; i++)
			all[k++] = e->ev[r][i];
	int rc = ph_trace_write_chrome(path, all, total, e->plan->ranks, e->plan->v, err);
	free(all);
	return rc;
}

static void destroy_one(ph_engine *e)
{
	if (e->ev)
		for (int r = 0; r < e->plan->ranks; r++)
			free(e->ev[r]);
	free(e->ev);
	free(e->nev);
	free(e->ev_cap);
	if (e->nthreads_started) {
		pthread_mutex_lock(&e->mu);
		e->job = JOB_EXIT;
		e->generation++;
		pthread_cond_broadcast(&e->cv_job);
		pthread_mutex_unlock(&e->mu);
		for (int r = 0; r < e->nthreads_started; r++)
			pthread_join(e->threads[r], NULL);
	}
	if (e->chunks)
		for (int c = 0; c < e->plan->nchunks; c++) {
			chunk_t *ch = &e->chunks[c];
			for (int s = 0; ch->slots && s < ch->nslots; s++) {
				for (int l = 0; l < ch->b - ch->a; l++) {
					if (ch->slots[s].lean && l + 1 < ch->b - ch->a)
						continue; /* the chunk's work buffers */
					if (ch->slots[s].y)
						bfree(e, ch->rank, ch->slots[s].y[l]);
					if (ch->slots[s].saved && !ch->slots[s].lean)
						bfree(e, ch->rank, ch->slots[s].saved[l]);
				}
				for (int l = 0; ch->slots[s].dy && l < ch->b - ch->a; l++)
					bfree(e, ch->rank, ch->slots[s].dy[l]);
				free(ch->slots[s].dy);
				free(ch->slots[s].y);
				free(ch->slots[s].saved);
				bfree(e, ch->rank, ch->slots[s].dy_out);
				bfree(e, ch->rank, ch->slots[s].x_own);
				bfree(e, ch->rank, ch->slots[s].dx_own);
			}
			for (int l = 0; ch->work_y && l < ch->b - ch->a; l++) {
				bfree(e, ch->rank, ch->work_y[l]);
				if (ch->work_saved) /* NULL when its calloc failed */
					bfree(e, ch->rank, ch->work_saved[l]);
			}
			free(ch->work_y);
			free(ch->work_saved);
			free(ch->slots);
			bfree(e, ch->rank, ch->scratch);
			bfree(e, ch->rank, ch->gbuf[0]);
			bfree(e, ch->rank, ch->gbuf[1]);
			free(ch->mb_slot);
			free(ch->mb_x);
			free(ch->mb_dx);
		}
	free(e->chunks);
	if (e->links)
		for (int k = 0; k + 1 < e->plan->nchunks; k++) {
			free(e->links[k].y);
			free(e->links[k].dy);
			free(e->links[k].act);
			free(e->links[k].grad);
			for (int mb = 0; e->dev && mb < e->m; mb++) {
				if (e->links[k].act_ev)
					e->dev->event_destroy(e->links[k].act_ev[mb]);
				if (e->links[k].grad_ev)
					e->dev->event_destroy(e->links[k].grad_ev[mb]);
			}
			free(e->links[k].act_ev);
			free(e->links[k].grad_ev);
		}
	free(e->links);
	if (e->params)
		for (int l = 0; l < e->model->n; l++) {
			int r = e->plan ? layer_rank(e, l) : 0;
			if (e->dev) {
				free(e->params[l].hw);
				free(e->params[l].hs);
			}
			bfree(e, r, e->params[l].w);
			bfree(e, r, e->params[l].g);
			bfree(e, r, e->params[l].s);
		}
	free(e->params);
	if (e->eval_ops)
		for (int r = 0; r < e->plan->ranks; r++)
			free(e->eval_ops[r]);
	free(e->eval_ops);
	free(e->eval_nops);
	free(e->data_x);
	free(e->data_y);
	free(e->loss_mb);
	free(e->correct_mb);
	if (e->dev) {
		int last = (e->plan->nchunks - 1) % e->plan->ranks;
		bfree(e, 0, e->d_data_x);
		bfree(e, last, e->d_data_y);
		bfree(e, last, e->d_loss);
		free(e->h_loss);
		for (int k = 0; e->tie_tmp && k < e->model->nties; k++)
			bfree(e, layer_rank(e, e->model->ties[k].src_layer), e->tie_tmp[k]);
		free(e->tie_tmp);
		for (int k = 0; e->red_tmp && k < e->plan->ranks; k++)
			bfree(e, k, e->red_tmp[k]);
		free(e->red_tmp);
		for (int k = 0; e->nccl && k < e->plan->ranks; k++)
			if (e->nccl[k])
				e->dev->nccl_close(e->nccl[k]);
		free(e->nccl);
		for (int r = 0; e->rs && r < e->plan->ranks; r++)
			e->dev->close(e->rs[r]);
		free(e->rs);
	}
	free(e->gathered);
	free(e->threads);
	free(e->workers);
	free(e);
}

void ph_engine_destroy(ph_engine *e)
{
	if (!e)
		return;
	ph_engine **rep = e->rep;
	for (int r = 1; r < e->nrep; r++) {
		ph_model *own = rep[r]->own_model;
		destroy_one(rep[r]);
		if (own) {
			ph_model_free(own);
			free(own);
		}
	}
	destroy_one(e);
	free(rep);
}
