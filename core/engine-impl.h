/* SPDX-License-Identifier: MIT */
/* The engine's insides, shared by its files (internal, not installed;
 * callers use engine.h).  One job a file:
 *   engine.c           one pipeline's life: its device, parameters, batch
 *                      and chunks made, and freed
 *   engine-layout.c    a chunk's buffers: the table of regions (sizes
 *                      first, also read by the plan) and the arena carved
 *                      from it
 *   engine-workers.c   the worker threads: jobs started and waited for, a
 *                      training pass's batch in and losses out
 *   engine-ops.c       the op interpreter: F, B, I, W and the link ops of
 *                      one rank's lowered list
 *   engine-links.c     stage links: in process (pointers and events) and
 *                      to another process (messages)
 *   engine-update.c    the optimizer update: tied gradients, the clip
 *                      norm, each rank's update
 *   engine-split.c     a pipeline split over processes (mpirun): who runs
 *                      what, and the collectives the split needs
 *   engine-replicas.c  data-parallel replicas: the training step over
 *                      them, their gradient sums, their lives
 *   engine-group.c     replica groups (ph_group): collectives over the
 *                      replicas of a stage, and the layers' reports
 *   engine-shard.c     sharded parameters: their clip norm, and their
 *                      whole tensors for checkpoints
 *   engine-eval.c      evaluation, and the weights and optimizer state as
 *                      named tensors (checkpoints, --save-weights)
 *   engine-trace.c     --trace: every op's times, as Chrome trace JSON
 *   engine-versions.c  weight versions of an asynchronous schedule (2bw)
 *   engine-stream.c    a no-flush schedule's steps run as one stream: its
 *                      lists, each rank's delayed update inside them
 *
 * Every rank runs on a device (core/device.h): the CPU's ops are host
 * memory and plain loops, CUDA's a stream per rank.  The engine calls the
 * ops and never asks which device it has; where the device computes in
 * host memory (host_memory) the host copies below are the arrays
 * themselves and the copies between them cost nothing.
 *
 * Memory (all owned by the engine):
 *   per layer:  parameters, gradients, optimizer state (one block each),
 *               with host copies of the parameters and state
 *   per chunk:  one arena holding its activation slots, work, scratch and
 *               gradient buffers (engine-layout.h)
 * A link between chunk c and c+1 carries pointers, not data: the receiver
 * reads the sender's output in place and writes its input gradient straight
 * into the sender's slot.  Both stay valid until the sender's backward of
 * that micro-batch, which the schedule orders after the receiver's.  The
 * exceptions copy into the receiver's own slot: a split backward (the
 * receiver's W may run after the sender's), a sender on another GPU (a peer
 * copy) or in another process (a message).  On a GPU each rank queues its
 * work on its own stream; a link also carries an event per micro-batch
 * (recorded by the sender, waited on by the receiver's stream), and every
 * rank waits for its stream at the end of a job.
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
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "device.h"
#include "engine-layout.h"
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
			      * and the input received from another GPU or process */
	float *dx_own;       /* input gradient computed here before it goes to a
			      * sender on another GPU or in another process */
	int lean;            /* recompute: inner layers' y and saved are the
			      * chunk's shared work buffers, rebuilt before backward */
	void *act_req, *grad_req; /* a pipeline split over processes: the
			      * sends of this slot's output and input gradient,
			      * finished before the slot is taken again */
	void *h_out, *h_in;  /* ... on GPUs: host copies the messages carry,
			      * of the output and its gradient (h_out), and of
			      * the input and its gradient (h_in) */
	void *act_sent, *grad_sent; /* ... over NCCL instead: events recorded
			      * once those sends have left (engine-links-nccl.c) */
	uint8_t act_sending, grad_sending; /* ... and not yet waited for */
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
	void *arena;         /* every buffer above, carved from one allocation */
	size_t act_bytes;    /* activation memory this chunk holds (slots + work) */
	int in_place;        /* its layout's: dx over x (ph_layout_dx_over_x) */
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
	float *w, *g, *s;    /* on the device of the layer's rank */
	float *hw, *hs;      /* host copies of w and s (w and s in host memory) */
	float *pw[PH_MAX_PARAMS], *pg[PH_MAX_PARAMS];
	/* Weight versions (engine-versions.c): fw[] is what a training
	 * forward and backward read: pw[] for a synchronous schedule, the
	 * previous version v (host copy hv) under a delayed update. */
	float *fw[PH_MAX_PARAMS];
	float *v, *hv;
	/* Per-micro-batch updates (pipedream): a ring of nring versions,
	 * version u in slot u mod nring (host copy hring); rw[k] points
	 * slot k's tensors */
	int nring;
	float *ring, *hring;
	float *(*rw)[PH_MAX_PARAMS];
	/* The stream of a delayed update (engine-stream.c): odd steps'
	 * gradients go to g2, so that step t+1's backwards run while step
	 * t's gradients wait for the rank's update */
	float *g2;
	float *pg2[PH_MAX_PARAMS];
	int rank;            /* the rank that computes the layer */
	/* A tied copy on its source's rank (ph_plan_shared_tie): w, s and their
	 * host copies are the source tensor's own, so the copy costs no
	 * weights or optimizer state and gets no update of its own; g stays
	 * its own, summed into the source's as for any tie. */
	int alias;
} lparams_t;

enum { JOB_NONE, JOB_TRAIN, JOB_EVAL, JOB_UPDATE, JOB_STREAM, JOB_EXIT };

typedef struct worker worker_t;

struct ph_engine {
	/* What it runs: the model, the plan's lists, the run's settings */
	ph_model *model;
	ph_plan *plan;
	const ph_config *cfg;
	int mbsize, m, in_numel, tps; /* micro-batch size and count, input
			      * floats and targets per sample */
	int split;           /* the plan has I/W ops */
	ph_op **eval_ops;    /* [ranks] evaluation's lists: F only, */
	int *eval_nops;      /* eval_R micro-batches a round */
	int eval_R;

	/* Where: every rank's device (the CPU's ops, or CUDA's) */
	const ph_device_ops *dev;
	void **rs;           /* [ranks] rank states */
	const int *ordinal;  /* [ranks] this copy's devices, from cfg->place;
			      * NULL = every rank on the CPU */
	/* [ranks][PH_ENG_MEM_PHASES] the device's mem_held on the rank's GPU
	 * after each phase of ph_eng_create_one; NULL on the CPU */
	size_t (*mem_phase)[3];

	/* Memory (engine.c, engine-layout.c) */
	chunk_t *chunks;     /* [nchunks] */
	link_t *links;       /* [nchunks - 1] */
	lparams_t *params;   /* [layers] */
	float **tie_tmp;     /* [nties]: room on the first copy's GPU for a copy on another */
	float *d_data_x;     /* the batch on the first rank's device */
	int32_t *d_data_y;   /* its targets on the last rank's */
	float *d_loss;       /* [m][mbsize][2]: each micro-batch's loss-layer output */
	float *data_x;       /* host copies of the three */
	int32_t *data_y;
	float *h_loss;
	double *loss_mb, *correct_mb; /* [m] the losses summed (ph_eng_gather_losses) */

	/* The current job (engine-workers.c) */
	pthread_mutex_t mu;
	pthread_cond_t cv_job, cv_done;
	int job, generation, pending;
	int active_mbs;      /* micro-batches in this job */
	int last_batch;      /* samples in the last active micro-batch */
	int training;
	int64_t step, t;     /* the step (0-based), and the update's count */
	double lr, clip_scale;
	int abort;           /* a rank failed: every rank stops */
	ph_err err;          /* the first failure's words */
	int err_code;        /* and its status code (PH_ENOMEM stays PH_ENOMEM) */
	int err_set;
	pthread_t *threads;  /* one per rank this process runs */
	worker_t *workers;
	int nthreads_started;

	/* --trace: one event per op, per rank (engine-trace.c) */
	int tracing;
	double t_origin;
	ph_trace_event **ev;
	int *nev, *ev_cap;
	int64_t *ev_dropped;         /* per rank: events past ev_max (or a failed realloc) */
	int ev_max;                  /* events kept per rank (PIPEHOST_TRACE_EVENTS, else 2^20) */

	/* Data parallelism (`[run] replicas`): this process's copies of the
	 * pipeline, each a whole engine with its own threads, layer states and
	 * weights.  The first one, the handle callers hold, drives the rest and
	 * sums their gradients before every step (engine-replicas.c). */
	ph_engine **rep;     /* [nrep] (rep[0] is this one); NULL in the others */
	int nrep;
	int replica;         /* this copy's index among all R replicas */
	ph_model *own_model; /* replicas > 0: layer states of their own */
	float **red_tmp;     /* rep[0]: [ranks] room for another copy's gradient */
	void **nccl;         /* rep[0] under mpirun on GPUs: [ranks] communicators */
	const char *red_host; /* rep[0] under mpirun on GPUs: why the replicas'
			      * gradients go through the host (no NCCL), or NULL */
	char red_why[192];   /* a reason made at run time, red_host points here */
	float *gathered;     /* rep[0] under mpirun in host memory: every process's gradients */
	size_t gathered_n;

	/* A pipeline split over processes (mpirun, replicas < processes): this
	 * process runs ranks [rank_lo, rank_hi) of its replica; the others
	 * are in processes proc_base + rank / (ranks / span) (engine-split.c). */
	int span;            /* processes per pipeline; 1 = whole pipelines */
	int rank_lo, rank_hi;
	int proc_base;
	/* ... on GPUs: the stage links' NCCL communicators
	 * (engine-links-nccl.c), [2c] link c's activations, [2c + 1] its
	 * gradients, NULL where link c stays in this process.  Allocated
	 * when the processes decide on NCCL, before the chunks, and filled
	 * after them.  link_comm NULL: the links go through host memory over
	 * MPI, for the reason in links_host. */
	void **link_comm;
	const char *links_host;
	char links_why[192];

	/* Replica groups (plugin ABI 1.5; engine-group.c) and sharded
	 * parameters (engine-shard.c) */
	struct ph_eng_group *groups; /* [ranks] this replica's group of each stage */
	ph_engine *rep0;     /* the replica that drives this process's others */
	void *grp;           /* rep0: the stages' rendezvous and the reports */
	void *shard;         /* rep0: whole copies of the sharded tensors */
	double clip_total, clip_shard; /* the clip norm's sums: of the tensors
			      * every replica holds, of this replica's shards */

	/* Weight versions (engine-versions.c) */
	int delayed;         /* the schedule's PH_SCHED_DELAYED_UPDATE */
	int per_mb;          /* the schedule's PH_SCHED_UPDATE_PER_MB */
	int versions_follow; /* the next upload sets .prev = the weights
			      * (weights read from a file, no state) */
	int64_t *updated;    /* [ranks] under a delayed update: the rank's
			      * weights w are W(updated), v is W(updated - 1) */

	/* The stream of a no-flush schedule (engine-stream.c) */
	int stream;          /* steps run as one stream (the plan's streams) */
	int mcap;            /* micro-batches the per-micro-batch arrays hold:
			      * m, or m * [run] window under a stream */
	int sk;              /* steps of the stream the lists below run */
	ph_op **sops;        /* [ranks] the stream's lists */
	int *snops;
	double *lrs;         /* [window] each step's learning rate */
	int arrived[2];      /* ranks done with step t's backwards, by t's parity */
	int64_t prepared;    /* steps whose gradients are ready: tie sums, clip */
	double clip_scales[2]; /* by the step's parity */
	pthread_cond_t cv_prep;

	/* The batched clip norm (engine-update.c) */
	double **ss_dev;     /* [ranks] each tensor's sum of squares, on the device */
	double **ss_host;    /* the same read back, [ranks] */
};

struct worker {
	ph_engine *e;
	int rank;
};

/* Wait on cv (mu held) for at most ms milliseconds: for a waiter that
 * must also look at flags nobody signals it for (another replica's
 * abort). */
static inline void ph_eng_wait_ms(pthread_cond_t *cv, pthread_mutex_t *mu, long ms)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_nsec += ms * 1000 * 1000;
	if (ts.tv_nsec >= 1000000000L)
		ts.tv_sec += ts.tv_nsec / 1000000000L, ts.tv_nsec %= 1000000000L;
	pthread_cond_timedwait(cv, mu, &ts);
}

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

/* Does this process keep rank r's tensors on its device?  Every rank's,
 * except on GPUs in a pipeline split over processes: there its own ranks'
 * alone, and the others' weights and state live in their host copies
 * (hw, hs), which ph_engine_gather fills before a save. */
static inline int here(const ph_engine *e, int rank)
{
	return e->span == 1 || e->dev->host_memory || owns(e, rank);
}

/* Floats before tensor q in layer l's block (w, g; s has spp times). */
static inline int64_t param_off(const ph_engine *e, int l, int q)
{
	int64_t o = 0;
	for (int i = 0; i < q; i++)
		o += ph_param_local_numel(&e->model->layers[l], i);
	return o;
}

/* Does the link after chunk c cross to another process? */
static inline int remote_link(const ph_engine *e, int c)
{
	return e->span > 1 && owns(e, c % e->plan->ranks) != owns(e, (c + 1) % e->plan->ranks);
}

/* The process group's message tag of link c's micro-batch mb, activation
 * (grad 0) or gradient (grad 1): one per link, micro-batch and direction. */
static inline int link_tag(const ph_engine *e, int c, int mb, int grad)
{
	return (c * e->m + mb) * 2 + grad;
}

/* $NAME=0: a switch for comparisons (PIPEHOST_OPTIM_MANY, PIPEHOST_TIE_SHARE). */
static inline int env_is_zero(const char *name)
{
	const char *v = getenv(name);
	return v && !strcmp(v, "0");
}

/* The rank that computes layer l. */
static inline int layer_rank(const ph_engine *e, int l)
{
	return ph_plan_layer_rank(e->plan, l);
}

/* Is tensor q of layer l a tied copy (`tie =`)?  The clip norm counts each
 * tied tensor once, at its source. */
static inline int tied_copy(const ph_model *m, int l, int q)
{
	for (int k = 0; k < m->nties; k++)
		if (m->ties[k].dst_layer == l && m->ties[k].dst_param == q)
			return 1;
	return 0;
}

/* ---- engine.c: one pipeline's life ----------------------------------- */

/* One pipeline: this process's replica `local`; and its end. */
int ph_eng_create_one(ph_engine **out, ph_model *m, ph_plan *p, const ph_config *c, int local, ph_err *err);
void ph_eng_destroy_one(ph_engine *e);

/* Zeroed memory on rank's device; NULL with the device's words in e->err.
 * ph_eng_bfree takes NULL. */
void *ph_eng_balloc(ph_engine *e, int rank, size_t bytes);
void ph_eng_bfree(ph_engine *e, int rank, void *p);

/* ---- engine-layout.c: the chunks' buffers ----------------------------- */

/* Every chunk this process runs, carved from its layout; and their end. */
int ph_eng_alloc_chunks(ph_engine *e, ph_err *err);
void ph_eng_free_chunks(ph_engine *e);

/* ---- engine-workers.c: the worker threads ----------------------------- */

/* One thread per rank this process runs; ph_eng_stop_workers ends them. */
int ph_eng_start_workers(ph_engine *e, ph_err *err);
void ph_eng_stop_workers(ph_engine *e);

/* The first error of a job wins; every rank waiting on a link wakes. */
void ph_eng_set_error(ph_engine *e, int code, const ph_err *err);

/* Start a job on every rank; ph_eng_dispatch_wait waits for it.  Replicas
 * run their jobs at the same time: start all, then wait for all. */
void ph_eng_dispatch_start(ph_engine *e, int job);
int ph_eng_dispatch_wait(ph_engine *e, ph_err *err);

/* Words a replica stops with when another replica failed first: an echo,
 * never the failure to tell (ph_eng_tell). */
#define PH_ENG_ECHO_GROUP "another replica of this stage stopped"
#define PH_ENG_ECHO_STREAM "another replica's pipeline stopped"

/* Replicas waited for in order: keeps in (*rc, *err) the first failure
 * that is not an echo of another's, so that the replica that ran out of
 * memory is the one told (and its PH_ENOMEM), not replica 0 saying that
 * another stopped.  *echo: whether the failure kept is an echo (start
 * with it 0, or with what a failure before the waits says). */
static inline void ph_eng_tell(int *rc, ph_err *err, int *echo, int rc2, const ph_err *one)
{
	if (!rc2 || (*rc && !*echo))
		return;
	const int is_echo = strstr(one->msg, PH_ENG_ECHO_GROUP) || strstr(one->msg, PH_ENG_ECHO_STREAM); /* a layer may name itself first */
	if (*rc && is_echo)
		return;
	*rc = rc2;
	*err = *one;
	*echo = is_echo;
}

/* The first `samples` of the host batch to the devices of the first rank
 * (inputs) and the last (targets). */
int ph_eng_upload_batch(ph_engine *e, size_t samples, ph_err *err);

/* The loss layer's outputs of nmb micro-batches, summed per micro-batch
 * in sample order (the same sum for every schedule). */
int ph_eng_gather_losses(ph_engine *e, int nmb, ph_err *err);

/* One replica's share of the batch in, and its forward and backward
 * passes started; ph_eng_train_wait waits for them and sums the losses. */
int ph_eng_train_begin(ph_engine *e, int64_t step, const float *x, const int32_t *y, ph_err *err);
int ph_eng_train_wait(ph_engine *e, ph_err *err);

/* The losses of the first nmb micro-batches added to st, in micro-batch
 * order (nothing when the loss layer runs in another process). */
void ph_eng_collect(ph_engine *e, int nmb, ph_stats *st);

/* ---- engine-ops.c: the op interpreter --------------------------------- */

/* One op of a rank's lowered list. */
int ph_eng_run_op(ph_engine *e, const ph_op *o, ph_err *err);

/* ---- engine-links.c: stage links -------------------------------------- */

/* The links between chunks, with their events; and their end. */
int ph_eng_links_create(ph_engine *e, ph_err *err);
void ph_eng_links_destroy(ph_engine *e);
/* A new job: nothing posted yet. */
void ph_eng_links_reset(ph_engine *e);
/* A job aborts: wake every rank waiting on a link. */
void ph_eng_links_wake(ph_engine *e);

/* The ops SEND_ACT, RECV_ACT, SEND_GRAD and RECV_GRAD of chunk c for
 * micro-batch mb.  sl: the slot that sends (SEND_ACT), or that receives
 * (RECV_ACT; taken by the caller). */
int ph_link_send_act(ph_engine *e, int c, int mb, slot_t *sl, ph_err *err);
int ph_link_recv_act(ph_engine *e, int c, int mb, slot_t *sl, ph_err *err);
int ph_link_send_grad(ph_engine *e, int c, int mb, ph_err *err);
int ph_link_recv_grad(ph_engine *e, int c, int mb, ph_err *err);

/* The earlier sends to another process of chunk c's slot sl are done,
 * before it is written again; at the end of a job, every slot of the
 * rank's.  Over NCCL: the rank's stream waits for them. */
int ph_link_slot_sends_done(ph_engine *e, int c, slot_t *sl, ph_err *err);
int ph_link_rank_sends_done(ph_engine *e, int rank, ph_err *err);

/* ---- engine-gpu-keys.c: what each process has for NCCL --------------- */

#define PH_GPU_KEY_BYTES 96

/* Every process's statement, gathered: its two flags (no NCCL in this
 * build, PIPEHOST_NCCL=0) and, for each rank it runs, "host GPU". */
typedef struct {
	unsigned char *all; /* [n][rec] */
	size_t rec;
	int n, ranks;
} ph_gpu_keys;

/* Collective: every process of the job calls it at the same point. */
int ph_eng_gather_gpu_keys(ph_engine *e, ph_gpu_keys *g, ph_err *err);
/* PIPEHOST_NCCL=0 in any process, else a build without NCCL in any, or
 * NULL. */
const char *ph_gpu_keys_switch_reason(const ph_gpu_keys *g);
/* Rank k's key in process i ("" where i does not run k). */
const char *ph_gpu_key(const ph_gpu_keys *g, int i, int k);
/* Do process p1's rank k1 and process p2's rank k2 sit on one GPU? */
int ph_gpu_keys_same(const ph_gpu_keys *g, int p1, int k1, int p2, int k2);
void ph_gpu_keys_free(ph_gpu_keys *g);

/* ---- engine-links-nccl.c: stage links between processes over NCCL ----- */

/* A pipeline split over processes on GPUs: decide, with every other
 * process, whether the links between processes go over NCCL (e->link_comm
 * allocated, or e->links_host says why not).  Before the chunks, whose
 * slots need host buffers for the messages only on the host's way; after
 * the device and the evaluation lists. */
int ph_eng_links_nccl_decide(ph_engine *e, ph_err *err);
/* Open the communicators decided on, and the slots' send events; after
 * the chunks. */
int ph_eng_links_nccl_open(ph_engine *e, ph_err *err);
void ph_eng_links_nccl_close(ph_engine *e);

/* ---- engine-update.c: the optimizer update ---------------------------- */

/* Whether a step's end takes all of a rank's tensors per launch (the clip
 * norm's sums of squares and the update; core/cuda/optimizer.h): where the
 * device can, unless PIPEHOST_OPTIM_MANY=0 asks for one launch per tensor
 * (the same bits; test-gpu.sh compares them). */
int ph_eng_step_end_batched(const ph_engine *e);

/* Everything the update job needs: tied copies summed, the clip scale. */
int ph_eng_prepare_update(ph_engine *e, ph_err *err);

/* The clip scale for a sum of squares `total` of every gradient: set, or
 * returned. */
void ph_eng_set_clip_scale(ph_engine *e, double total);
double ph_eng_clip_scale_of(const ph_engine *e, double total);

/* The update job of one rank: its tensors' optimizer step. */
int ph_eng_update_rank(ph_engine *e, int rank, ph_err *err);

/* The same with the gradients in g (par 0) or g2 (par 1), optimizer step
 * count t, and the given rate and clip scale (a stream's update). */
int ph_eng_update_rank_at(ph_engine *e, int rank, int par, int64_t t, double lr, double clip_scale, ph_err *err);

/* ph_eng_prepare_update on the gradients in g (par 0) or g2 (par 1),
 * the clip scale into *clip_scale. */
int ph_eng_prepare_grads(ph_engine *e, int par, double *clip_scale, ph_err *err);

/* ---- engine-split.c: a pipeline split over processes ------------------ */

/* This process's ranks of its replica, and the replica's number. */
void ph_eng_split_init(ph_engine *e, int local);

/* The clip norm's sum of squares over the processes of the pipeline. */
int ph_eng_split_sumsq(ph_engine *e, double *total, ph_err *err);

/* Tie k with its copies in two processes: both gradients to every one. */
int ph_eng_split_tie(ph_engine *e, int k, int *done, ph_err *err);

/* Evaluation figures: the loss layer's process has them, all get them. */
int ph_eng_split_eval_stats(ph_engine *e, ph_stats *st, ph_err *err);

/* One tensor of rank k (device copy dev, host copy host, bytes long) from
 * the process of replica 0 that runs k to every process: on GPUs the
 * owner downloads it first, and other processes that run k (other
 * replicas) upload what they received. */
int ph_eng_split_bcast_owner(ph_engine *e, int k, void *dev, void *host, size_t bytes, ph_err *err);

/* ---- engine-eval.c: evaluation and the named tensors ------------------ */

/* The forward-only lists evaluation runs. */
int ph_eng_eval_lists(ph_engine *e, ph_err *err);
void ph_eng_eval_lists_free(ph_engine *e);

/* The host copies of the weights and optimizer state to the devices. */
int ph_eng_upload_one(ph_engine *e, ph_err *err);

/* ---- engine-replicas.c: replicas ------------------------------------- */

/* The replicas' gradient sum (e is replica 0; across processes too), over
 * the gradients in g (par 0) or g2 (par 1): the step's end, a stream's
 * and ph_engine_train_step's. */
int ph_eng_replicas_sum(ph_engine *e, int par, ph_err *err);

/* ---- engine-group.c: replica groups ----------------------------------- */

/* Every local replica's group of every stage (after the replicas exist;
 * e is replica 0); and their end. */
int ph_eng_groups_create(ph_engine *e, ph_err *err);
void ph_eng_groups_destroy(ph_engine *e);
/* What ctx->group points to for a layer on rank `rank`. */
const ph_group *ph_eng_group_of(const ph_engine *e, int rank);

/* ---- engine-shard.c: sharded parameters ------------------------------- */

/* Do any of the model's layers shard a parameter? */
int ph_eng_has_shards(const ph_engine *e);
/* Clip norm with shards: every replica's shard sums added in replica
 * order to the rest, and the clip scale set (e is replica 0). */
int ph_eng_shard_clip(ph_engine *e, ph_err *err);
/* The whole sharded tensors from every replica's rows (e is replica 0;
 * state: the optimizer state, else the weights); and back. */
int ph_eng_shard_gather(ph_engine *e, int state, ph_err *err);
void ph_eng_shard_scatter(ph_engine *e);
/* Under mpirun, every process's rows to every process (ph_engine_gather). */
int ph_eng_shard_gather_all(ph_engine *e, ph_err *err);
/* The stretches of layer l's parameter block the replicas' gradient sum
 * adds: the i-th run of tensors that are not sharded, as [*off, *off + *n)
 * floats; 0 when there is none. */
int ph_eng_summed_run(const ph_layer *L, int i, int64_t *off, int64_t *n);
/* The host copy of tensor q of layer l as the named tensors show it: the
 * whole tensor when sharded (NULL when not), weights or state j. */
float *ph_eng_shard_whole(ph_engine *e, int l, int q, int state, int j);
void ph_eng_shard_free(ph_engine *e);

/* ---- engine-versions.c: weight versions -------------------------------- */

/* Micro-batch mb of the current job: its step, and its index in the step
 * (a stream's micro-batches count on over its steps). */
static inline int64_t mb_step(const ph_engine *e, int mb)
{
	return e->step + mb / e->m;
}

static inline int mb_in_step(const ph_engine *e, int mb)
{
	return mb % e->m;
}

/* The parameters a layer's forward and backward read: under a delayed
 * update, in training, W(t-1) for a micro-batch of step t: the previous
 * version v once the rank holds W(t), the weights w while it still holds
 * W(t-1) (a stream, before the rank's update of step t-1); pipedream's
 * stash; else the weights. */
float *const *ph_eng_versions_stashed(const ph_engine *e, int l, int mb);
static inline float *const *compute_params(const ph_engine *e, int l, int mb)
{
	const lparams_t *P = &e->params[l];
	if (!e->training)
		return P->pw;
	if (e->per_mb)
		return ph_eng_versions_stashed(e, l, mb);
	if (e->delayed && e->updated[P->rank] < mb_step(e, mb))
		return P->pw;
	return P->fw;
}

/* Layer l's gradients in g (par 0) or in a stream's g2 (par 1): the
 * block, and each tensor's pointer. */
static inline float *grad_block(const ph_engine *e, int l, int par)
{
	return par ? e->params[l].g2 : e->params[l].g;
}

static inline float *const *grad_tensors(const ph_engine *e, int l, int par)
{
	return par ? e->params[l].pg2 : e->params[l].pg;
}

/* Where a layer's backward adds micro-batch mb's gradient: under a
 * stream with a delayed update, g for even steps and g2 for odd ones. */
static inline float *const *grad_params(const ph_engine *e, int l, int mb)
{
	return grad_tensors(e, l, e->params[l].g2 && (mb_step(e, mb) & 1));
}

/* The versions the schedule declares (after the parameters are made);
 * their end. */
int ph_eng_versions_alloc(ph_engine *e, ph_err *err);
void ph_eng_versions_free(ph_engine *e);
/* Before rank's optimizer step: its previous version becomes the weights. */
int ph_eng_versions_advance(ph_engine *e, int rank, ph_err *err);
/* Per-micro-batch updates: after chunk c's backward of micro-batch mb,
 * its layers' update with that gradient, and the new version stashed. */
int ph_eng_versions_update_mb(ph_engine *e, int c, int mb, ph_err *err);
/* The previous versions as named tensors LAYER.PARAM.prev (their number,
 * then into t[0..count)), pointing at the host copies. */
int ph_eng_versions_count(const ph_engine *e);
void ph_eng_versions_tensors(ph_engine *e, ph_tensor_ref *t);
/* Host copies from and to the devices; a replica's from replica 0's. */
int ph_eng_versions_download(ph_engine *e, ph_err *err);
int ph_eng_versions_upload(ph_engine *e, ph_err *err);
void ph_eng_versions_copy(ph_engine *dst, const ph_engine *src);
/* Split pipelines: every layer's W(t-1) to every process (ph_engine_gather). */
int ph_eng_versions_gather(ph_engine *e, ph_err *err);

/* ---- engine-stream.c: a no-flush schedule's stream of steps ------------ */

/* Does this engine run a no-flush schedule's steps as one stream?  Sets
 * e->stream and e->mcap (before the per-micro-batch arrays are made). */
void ph_eng_stream_mode(ph_engine *e);
/* Its arrays (after the parameters and versions); and their end. */
int ph_eng_stream_alloc(ph_engine *e, ph_err *err);
void ph_eng_stream_free(ph_engine *e);
/* The ops PH_OP_STEP_DONE and PH_OP_UPDATE of rank for the stream's step s. */
int ph_eng_stream_step_done(ph_engine *e, int rank, int s, ph_err *err);
int ph_eng_stream_update(ph_engine *e, int rank, int s, ph_err *err);

/* ---- engine-trace.c: --trace ------------------------------------------ */

double ph_eng_now(void);
/* Op o of rank ran from t0 to t1 (seconds of ph_eng_now). */
void ph_eng_trace_record(ph_engine *e, int rank, const ph_op *o, double t0, double t1);
void ph_eng_trace_free(ph_engine *e);

#endif
