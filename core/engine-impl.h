/* The engine's insides, shared by its three files (internal, not
 * installed; callers use engine.h):
 *   engine.c           one pipeline: its memory, its worker threads, the
 *                      ops they run, in-process links, evaluation, tensors
 *   engine-links.c     links between the processes of a pipeline split
 *                      over processes (mpirun)
 *   engine-replicas.c  the training step over data-parallel replicas:
 *                      gradient sums, tied copies, the clip norm; creating
 *                      and destroying the replicas
 *
 * Memory layout (all owned by the engine):
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
#ifndef PH_CORE_ENGINE_IMPL_H
#define PH_CORE_ENGINE_IMPL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "device.h"
#include "engine.h"
#include "trace.h"

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
	 * sums their gradients before every step (engine-replicas.c). */
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
	double **ss_dev;     /* on GPUs with clipping: [ranks] each tensor's sum of squares */
	double **ss_host;    /* the same read back, [ranks] */
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

/* ---- Where things run: short questions every file asks ---------------- */

/* Samples in micro-batch mb of the current job. */
static inline int batch_of(const ph_engine *e, int mb)
{
	return mb == e->active_mbs - 1 ? e->last_batch : e->mbsize;
}

/* A pipeline split over processes: does this process run rank r?  Which
 * process of this replica runs it, and which of replica 0? */
static inline int owns(const ph_engine *e, int rank)
{
	return rank >= e->rank_lo && rank < e->rank_hi;
}

static inline int owner(const ph_engine *e, int rank)
{
	return e->proc_base + rank / (e->plan->ranks / e->span);
}

static inline int owner0(const ph_engine *e, int rank)
{
	return rank / (e->plan->ranks / e->span);
}

/* Does the link after chunk c cross to another process? */
static inline int remote_link(const ph_engine *e, int c)
{
	return e->span > 1 && owns(e, c % e->plan->ranks) != owns(e, (c + 1) % e->plan->ranks);
}

/* The rank that computes layer l. */
static inline int layer_rank(const ph_engine *e, int l)
{
	for (int c = 0; c < e->plan->nchunks; c++)
		if (l >= e->plan->first[c] && l < e->plan->first[c + 1])
			return c % e->plan->ranks;
	return 0;
}

/* ---- engine.c: one pipeline ------------------------------------------- */

/* One pipeline: this process's replica `local`; and its end. */
int ph_eng_create_one(ph_engine **out, ph_model *m, ph_plan *p, const ph_config *c, int local, ph_err *err);
void ph_eng_destroy_one(ph_engine *e);

/* Zeroed memory where rank computes: host memory, or its GPU's. */
void *ph_eng_balloc(ph_engine *e, int rank, size_t bytes);

/* Whether a GPU step's end takes all of a rank's tensors per launch (the
 * clip norm's sums of squares and the update; core/cuda/optimizer.h):
 * where the backend can, unless PIPEHOST_OPTIM_MANY=0 asks for one launch
 * per tensor (the same bits; test-gpu.sh compares them). */
int ph_eng_step_end_batched(const ph_engine *e);

/* A free activation slot for micro-batch mb of chunk c: at its forward,
 * or at its receive when the input comes from another process. */
int ph_eng_take_slot(ph_engine *e, int c, int mb, int *out, ph_err *err);

/* Start a job on every rank; ph_eng_dispatch_wait waits for it.  Replicas
 * run their jobs at the same time: start all, then wait for all. */
void ph_eng_dispatch_start(ph_engine *e, int job);
int ph_eng_dispatch_wait(ph_engine *e, ph_err *err);

/* One replica's share of the batch in, and its forward and backward
 * passes started; ph_eng_train_wait waits for them and sums the losses. */
int ph_eng_train_begin(ph_engine *e, int64_t step, const float *x, const int32_t *y, ph_err *err);
int ph_eng_train_wait(ph_engine *e, ph_err *err);

/* The losses of the first nmb micro-batches added to st, in micro-batch
 * order (nothing when the loss layer runs in another process). */
void ph_eng_collect(ph_engine *e, int nmb, ph_stats *st);

/* The host copies of the weights and optimizer state to the GPU. */
int ph_eng_upload_one(ph_engine *e, ph_err *err);

/* ---- engine-links.c: links to other processes ------------------------- */

/* The slot's earlier sends must be done before it is written again. */
int ph_eng_slot_sends_done(ph_engine *e, slot_t *sl, ph_err *err);

/* The ops SEND_ACT, RECV_ACT, SEND_GRAD and RECV_GRAD of chunk c over a
 * link that crosses to another process (remote_link). */
int ph_eng_send_act(ph_engine *e, int c, int mb, slot_t *sl, ph_err *err);
int ph_eng_recv_act(ph_engine *e, int c, int mb, ph_err *err);
int ph_eng_send_grad(ph_engine *e, int c, int mb, ph_err *err);
int ph_eng_recv_grad(ph_engine *e, int c, int mb, ph_err *err);

/* The end of a job: every send of this rank's slots has finished. */
int ph_eng_rank_sends_done(ph_engine *e, int rank, ph_err *err);

#endif
