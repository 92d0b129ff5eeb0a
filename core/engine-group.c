/* SPDX-License-Identifier: MIT */
/* Replica groups (plugin ABI 1.5, ph_group): the collectives a layer runs
 * over the R replicas of its stage (expert parallelism's token exchange,
 * tensor parallelism's sums), and the figures layers report.
 *
 * One group per stage (pipeline rank k): the stage-k workers of the R
 * replicas.  Groups of different stages never mix: each has its own
 * rendezvous and its own message tags.
 *
 * In one process the replicas are threads: each call publishes its
 * buffers, waits at the stage's barrier for the other local replicas, and
 * then every replica copies what it receives itself (the device's copy:
 * memcpy on the CPU, a peer copy between GPUs), and waits again before
 * anyone reuses a buffer.  A replica in another process (mpirun) gets its
 * blocks as messages (isend/irecv from the worker thread, one tag per
 * stage and ordered pair of replicas, so calls pair up in order).
 *
 * all_reduce_sum gathers every replica's buffer and adds them in replica
 * order 0..R-1, so every replica, and every placement of the R replicas
 * over threads and processes, gets the same bits.
 *
 * Why calls cannot deadlock: every replica runs the same plan on the same
 * number of micro-batches, so the stage-k worker of every replica makes
 * the same collective calls in the same order (the ABI asks layers to);
 * a call waits only for the same call of the other replicas' stage-k
 * workers, which depend on nothing but their own replica's pipeline.  The
 * replicas' jobs run at the same time (ph_engine_train_step starts all
 * before waiting for any; evaluation runs every replica when any layer
 * shards its parameters).  A replica that fails stops the others' waits.
 *
 * Figures (report, and report_device's from device memory, ABI 1.8) go
 * into one table per process; a GPU's are first copied into a ring on
 * that GPU and read back at the step's reports. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "blas_gate.h"
#include "engine-impl.h"
#include "layer_call.h"

/* What the local replicas of one stage share. */
typedef struct {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int nloc;            /* replicas of this process */
	int arrived;
	unsigned gen;
	const float **sp;    /* [nloc] published send buffers (or sum inputs) */
	ph_engine **reps;    /* [nloc] */
} stage_t;

/* One replica's group of one stage. */
struct ph_eng_group {
	ph_group g;
	ph_engine *e;
	int stage, local;    /* the pipeline rank; this process's replica index */
	stage_t *sh;
	float *tmp;          /* host: R blocks for all_reduce_sum; device: 2 buffers */
	size_t tmp_n;
	int tmp_dev;         /* tmp is device memory (ph_eng_balloc) */
	/* ABI 1.8, report_device on a GPU: each figure copied on the rank's
	 * stream into a slot of ring (device memory, made on first use) and
	 * read back at the step's reports, so the layer never waits */
	float *ring;         /* [RING] */
	float *ring_h;       /* [RING] the host's copy, read by flush_ring */
	int *ring_rep;       /* [RING] the slot's entry in shared_t.rep */
	int ring_n;          /* slots used */
};

/* Figures a group holds on its GPU before it reads them back: a flush
 * waits for the rank's stream, so rarely within a step (MoE layers report
 * 3 figures a micro-batch and layer). */
enum { RING = 1024 };

/* rep[0]'s: one stage_t per rank, and the reports. */
typedef struct {
	stage_t *stages;     /* [ranks] */
	pthread_mutex_t mu;  /* reports */
	ph_report *rep;      /* the names; their sums are made at ph_engine_reports */
	int nrep, cap;
	/* [cap][nloc]: each local replica's sum and count of an entry, added in
	 * replica order at ph_engine_reports, so that the figures do not take
	 * the order in which the replicas' threads came (a layer reports from
	 * one rank of a replica, in its micro-batches' order) */
	int nloc;
	double *lsum, *lcount;
} shared_t;

/* ---- Where the replicas are ------------------------------------------- */

static int nlocal(const ph_engine *e)
{
	return ph_config_local_replicas(e->cfg);
}

/* Is replica j in this process?  Its index here, else -1. */
static int local_index(const ph_engine *e, int j)
{
	if (e->span > 1)
		return j == e->replica ? 0 : -1;
	int first = e->cfg->comm.rank * nlocal(e);
	return j >= first && j < first + nlocal(e) ? j - first : -1;
}

/* The process running stage k of replica j. */
static int proc_of(const ph_engine *e, int j, int k)
{
	if (e->span > 1)
		return j * e->span + owner0(e, k);
	return j / nlocal(e);
}

/* One tag per stage and ordered pair of replicas, at the top of the tag
 * range (the links' tags count up from 0). */
static int group_tag(const ph_engine *e, int k, int from, int to)
{
	int R = (int)e->cfg->run.replicas;
	return e->cfg->comm.tag_ub - 1 - ((k * R + from) * R + to);
}

/* ---- Waiting ---------------------------------------------------------- */

static int any_abort(const stage_t *sh)
{
	for (int i = 0; i < sh->nloc; i++)
		if (__atomic_load_n(&sh->reps[i]->abort, __ATOMIC_ACQUIRE))
			return 1;
	return 0;
}

static int stopped(ph_err *err)
{
	return ph_fail(err, PH_EINTERNAL, PH_ENG_ECHO_GROUP);
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}

/* Every local replica of the stage gets here before any goes on. */
static int barrier(stage_t *sh, ph_err *err)
{
	if (sh->nloc == 1)
		return PH_OK;
	int rc = PH_OK;
	pthread_mutex_lock(&sh->mu);
	unsigned gen = sh->gen;
	if (++sh->arrived == sh->nloc) {
		sh->arrived = 0;
		__atomic_store_n(&sh->gen, gen + 1, __ATOMIC_RELEASE);
		pthread_cond_broadcast(&sh->cv);
	} else {
		/* the others are usually a few microseconds away: spin a
		 * little before sleeping, which costs a wake-up each */
		pthread_mutex_unlock(&sh->mu);
		for (int spin = 0; spin < 4000 && __atomic_load_n(&sh->gen, __ATOMIC_ACQUIRE) == gen; spin++)
			cpu_relax();
		pthread_mutex_lock(&sh->mu);
		while (sh->gen == gen) {
			ph_eng_wait_ms(&sh->cv, &sh->mu, 20);
			if (sh->gen == gen && any_abort(sh)) {
				rc = stopped(err);
				break;
			}
		}
	}
	pthread_mutex_unlock(&sh->mu);
	return rc;
}

/* Messages to and from the replicas in other processes: wait for all. */
static int wait_all(struct ph_eng_group *G, void **req, int n, ph_err *err)
{
	const ph_comm_ops *cm = G->e->cfg->comm.ops;
	for (int i = 0; i < n; i++)
		while (req[i]) {
			int done = 0, rc = cm->test(req[i], &done, err);
			if (rc)
				return rc;
			if (done) {
				req[i] = NULL;
				break;
			}
			if (any_abort(G->sh))
				return stopped(err);
			struct timespec ts = { 0, 20000 };
			nanosleep(&ts, NULL);
		}
	return PH_OK;
}

/* Start sending send(j) to and receiving recv(j) from every replica j in
 * another process; req gets 2 R requests (NULL where none). */
static int post_remote(struct ph_eng_group *G, const float *send, size_t stride_s, float *recv, size_t stride_r,
		       size_t count, void **req, ph_err *err)
{
	ph_engine *e = G->e;
	const ph_comm_ops *cm = e->cfg->comm.ops;
	int R = G->g.size, me = G->g.rank, k = G->stage, rc;
	size_t bytes = count * sizeof(float);
	for (int j = 0; j < R; j++) {
		if (local_index(e, j) >= 0)
			continue;
		int peer = proc_of(e, j, k);
		if ((rc = cm->irecv(recv + (size_t)j * stride_r, bytes, peer, group_tag(e, k, j, me), &req[2 * j], err)) ||
		    (rc = cm->isend(send + (size_t)j * stride_s, bytes, peer, group_tag(e, k, me, j), &req[2 * j + 1], err)))
			return rc;
	}
	return PH_OK;
}

/* Between processes on GPUs: NCCL on the communicator the gradient sum
 * opened for this stage (engine-replicas.c), whose member j is replica j
 * when every process runs one replica. */
static void *nccl_comm_of(const struct ph_eng_group *G)
{
	const ph_engine *e = G->e, *e0 = e->rep0;
	if (e->cfg->comm.size == 1 || e->dev->host_memory || e->span > 1 || nlocal(e) != 1 || !e0 || !e0->nccl ||
	    !e->dev->nccl_all_to_all || !e->dev->nccl_all_gather)
		return NULL;
	return e0->nccl[G->stage];
}

static int remote_ok(const struct ph_eng_group *G, ph_err *err)
{
	const ph_engine *e = G->e;
	if (e->cfg->comm.size == 1 || (e->span == 1 && nlocal(e) == G->g.size))
		return PH_OK; /* every replica of the stage is a thread here */
	if (!e->dev->host_memory && !nccl_comm_of(G))
		return ph_fail(err, PH_EUNSUPPORTED,
			       "replica-group collectives between processes on GPUs run over NCCL with one replica a "
			       "process: set [run] replicas to the process count, build with NCCL (configure "
			       "prints NCCL yes), and leave PIPEHOST_NCCL unset");
	if (e->dev->host_memory && !e->cfg->comm.threads)
		return ph_fail(err, PH_EUNSUPPORTED,
			       "replica-group collectives between processes need an MPI with MPI_THREAD_MULTIPLE");
	return PH_OK;
}

/* ---- The collectives -------------------------------------------------- */

static int all_to_all(const ph_group *g, const ph_ctx *ctx, const float *send, float *recv, size_t count,
		      ph_err *err)
{
	struct ph_eng_group *G = g->host;
	ph_engine *e = G->e;
	stage_t *sh = G->sh;
	void *rs = e->rs[G->stage];
	int R = g->size, me = g->rank, rc;
	size_t bytes = count * sizeof(float);
	(void)ctx;
	if (!count)
		return PH_OK;
	if ((rc = remote_ok(G, err)))
		return rc;
	void *nc = nccl_comm_of(G);
	if (nc) /* GPUs, a replica a process */
		return e->dev->nccl_all_to_all(rs, nc, send, recv, count, err);
	void **req = calloc((size_t)2 * R, sizeof *req);
	if (!req)
		return ph_fail(err, PH_ENOMEM, "out of memory");
	/* the layer's work on its stream is done before another replica reads */
	if ((rc = e->dev->sync(rs, err)) ||
	    (e->cfg->comm.size > 1 && (rc = post_remote(G, send, count, recv, count, count, req, err))))
		goto out;
	sh->sp[G->local] = send;
	if ((rc = barrier(sh, err)))
		goto out;
	for (int j = 0; j < R && !rc; j++) {
		int lj = local_index(e, j);
		if (lj >= 0)
			rc = e->dev->copy(rs, recv + (size_t)j * count, sh->sp[lj] + (size_t)me * count, bytes, PH_COPY_D2D,
					  err);
	}
	if (!rc)
		rc = e->dev->sync(rs, err);
	if (!rc && e->cfg->comm.size > 1)
		rc = wait_all(G, req, 2 * R, err);
	/* nobody reuses its send buffer before every local replica has read it */
	if (!rc)
		rc = barrier(sh, err);
out:
	free(req);
	return rc;
}

/* Room for the sum: host memory for R blocks, or two device buffers. */
static int room(struct ph_eng_group *G, size_t n, ph_err *err)
{
	ph_engine *e = G->e;
	if (G->tmp_n >= n)
		return PH_OK;
	if (G->tmp_dev)
		ph_eng_bfree(e, G->stage, G->tmp);
	else
		free(G->tmp);
	G->tmp_n = 0;
	G->tmp_dev = !e->dev->host_memory;
	G->tmp = G->tmp_dev ? ph_eng_balloc(e, G->stage, n * sizeof(float)) : malloc(n * sizeof(float));
	if (!G->tmp)
		return ph_fail(err, PH_ENOMEM, "out of memory for a replica-group sum of %zu floats", n);
	G->tmp_n = n;
	return PH_OK;
}

static int all_reduce_sum(const ph_group *g, const ph_ctx *ctx, float *buf, size_t count, ph_err *err)
{
	struct ph_eng_group *G = g->host;
	ph_engine *e = G->e;
	stage_t *sh = G->sh;
	void *rs = e->rs[G->stage];
	int R = g->size, me = g->rank, rc;
	(void)ctx;
	if (!count || R == 1)
		return PH_OK;
	if ((rc = remote_ok(G, err)))
		return rc;
	void *nc = nccl_comm_of(G);
	if (nc) {
		/* GPUs, a replica a process: every replica's buffer gathered
		 * ([R][count]), then added in replica order on the device */
		size_t bytes = count * sizeof(float);
		if ((rc = room(G, (size_t)(R + 1) * count, err)) ||
		    (rc = e->dev->nccl_all_gather(rs, nc, buf, G->tmp, count, err)))
			return rc;
		float *acc = G->tmp + (size_t)R * count;
		if ((rc = e->dev->copy(rs, acc, G->tmp, bytes, PH_COPY_D2D, err)))
			return rc;
		for (int j = 1; j < R; j++)
			if ((rc = e->dev->tie_sum(rs, acc, G->tmp + (size_t)j * count, (int64_t)count, err)))
				return rc;
		return e->dev->copy(rs, buf, acc, bytes, PH_COPY_D2D, err);
	}
	void **req = calloc((size_t)2 * R, sizeof *req);
	if (!req)
		return ph_fail(err, PH_ENOMEM, "out of memory");
	if (e->dev->host_memory) {
		/* tmp: [R + 1][count], block j from replica j in another
		 * process, block R the sum */
		if ((rc = room(G, (size_t)(R + 1) * count, err)))
			goto out;
		float *acc = G->tmp + (size_t)R * count;
		if (e->cfg->comm.size > 1 && (rc = post_remote(G, buf, 0, G->tmp, count, count, req, err)))
			goto out;
		sh->sp[G->local] = buf;
		if ((rc = barrier(sh, err)) || (e->cfg->comm.size > 1 && (rc = wait_all(G, req, 2 * R, err))))
			goto out;
		for (int j = 0; j < R; j++) {
			int lj = local_index(e, j);
			const float *src = lj >= 0 ? sh->sp[lj] : G->tmp + (size_t)j * count;
			if (j == 0)
				memcpy(acc, src, count * sizeof(float));
			else
				for (size_t i = 0; i < count; i++)
					acc[i] = acc[i] + src[i];
		}
		/* every local replica has read every buffer before any changes */
		if ((rc = barrier(sh, err)))
			goto out;
		memcpy(buf, acc, count * sizeof(float));
	} else {
		/* one process of GPUs: acc = buf_0, then acc += buf_j through a
		 * copy (tie_sum: a = a + b; b = a), in replica order */
		if ((rc = room(G, 2 * count, err)) || (rc = e->dev->sync(rs, err)))
			goto out;
		float *acc = G->tmp, *in = G->tmp + count;
		size_t bytes = count * sizeof(float);
		sh->sp[G->local] = buf;
		if ((rc = barrier(sh, err)))
			goto out;
		for (int j = 0; j < R && !rc; j++) {
			const float *src = sh->sp[local_index(e, j)];
			if (j == 0)
				rc = e->dev->copy(rs, acc, src, bytes, PH_COPY_D2D, err);
			else if (!(rc = e->dev->copy(rs, in, src, bytes, PH_COPY_D2D, err)))
				rc = e->dev->tie_sum(rs, acc, in, (int64_t)count, err);
		}
		if (!rc)
			rc = e->dev->sync(rs, err);
		if (!rc)
			rc = barrier(sh, err);
		if (!rc)
			rc = e->dev->copy(rs, buf, acc, bytes, PH_COPY_D2D, err);
	}
	(void)me;
out:
	free(req);
	return rc;
}

/* What a layer calls.  It holds a BLAS seat (blas_gate.h) while it runs;
 * the wait for its peers gives the seat back, or a peer still waiting for
 * one would never arrive. */
static int g_all_to_all(const ph_group *g, const ph_ctx *ctx, const float *send, float *recv, size_t count,
			ph_err *err)
{
	int held = ph_blas_gate_pause();
	int rc = all_to_all(g, ctx, send, recv, count, err);
	ph_blas_gate_resume(held);
	return rc;
}

static int g_all_reduce_sum(const ph_group *g, const ph_ctx *ctx, float *buf, size_t count, ph_err *err)
{
	int held = ph_blas_gate_pause();
	int rc = all_reduce_sum(g, ctx, buf, count, err);
	ph_blas_gate_resume(held);
	return rc;
}

/* ---- Reports ---------------------------------------------------------- */

/* The process's table of figures where ctx's figure counts (a training
 * forward's), else NULL: the figure is dropped. */
static shared_t *reports_for(const ph_engine *e, const ph_ctx *ctx, const char *key)
{
	const ph_engine *e0 = e->rep0;
	if (!ctx || !ctx->training || !key || !e0)
		return NULL;
	return e0->grp;
}

/* What the figure is printed as: LAYER.KEY. */
static void report_name(const ph_engine *e, const ph_ctx *ctx, const char *key, char *name, size_t n)
{
	int l = (int)ctx->layer;
	snprintf(name, n, "%s.%s", l >= 0 && l < e->model->n ? e->model->layers[l].cfg->name : "?", key);
}

/* name's entry in S->rep, made (sum and count 0) if new; -1 where there
 * is no room.  Under S->mu.  Entries stay where they are until
 * ph_engine_reports empties the table, so a ring's slots may keep the
 * index. */
static int report_entry(shared_t *S, const char *name)
{
	int i;
	for (i = 0; i < S->nrep && strcmp(S->rep[i].name, name); i++)
		;
	if (i < S->nrep)
		return i;
	if (S->nrep == S->cap) {
		int cap = S->cap ? 2 * S->cap : 8;
		ph_report *n = realloc(S->rep, (size_t)cap * sizeof *n);
		if (n)
			S->rep = n;
		double *ls = n ? realloc(S->lsum, (size_t)cap * S->nloc * sizeof *ls) : NULL;
		if (ls)
			S->lsum = ls;
		double *lc = ls ? realloc(S->lcount, (size_t)cap * S->nloc * sizeof *lc) : NULL;
		if (!lc)
			return -1; /* what grew stays, the larger for next time; cap says the room of all three */
		S->lcount = lc;
		S->cap = cap;
	}
	memset(&S->rep[i], 0, sizeof S->rep[i]);
	memset(S->lsum + (size_t)i * S->nloc, 0, (size_t)S->nloc * sizeof *S->lsum);
	memset(S->lcount + (size_t)i * S->nloc, 0, (size_t)S->nloc * sizeof *S->lcount);
	snprintf(S->rep[i].name, sizeof S->rep[i].name, "%s", name);
	S->nrep++;
	return i;
}

static void g_report(const ph_group *g, const ph_ctx *ctx, const char *key, double value)
{
	struct ph_eng_group *G = g->host;
	shared_t *S = reports_for(G->e, ctx, key);
	if (!S)
		return;
	char name[sizeof S->rep[0].name];
	report_name(G->e, ctx, key, name, sizeof name);
	pthread_mutex_lock(&S->mu);
	int i = report_entry(S, name);
	if (i >= 0) { /* else a figure lost, never a failure */
		S->lsum[(size_t)i * S->nloc + G->local] += value;
		S->lcount[(size_t)i * S->nloc + G->local] += 1;
	}
	pthread_mutex_unlock(&S->mu);
}

/* The ring's figures into the table, in the order they were given, and
 * the ring emptied.  The copy waits for the rank's stream, so for the
 * work that wrote them.  A failed copy loses them (the device's error
 * stops the step anyway): a figure lost, never a failure. */
static void flush_ring(struct ph_eng_group *G)
{
	ph_engine *e = G->e;
	shared_t *S = e->rep0->grp;
	int n = G->ring_n;
	ph_err err = { { 0 } };
	G->ring_n = 0;
	if (!n || e->dev->copy(e->rs[G->stage], G->ring_h, G->ring, (size_t)n * sizeof(float), PH_COPY_D2H, &err))
		return;
	pthread_mutex_lock(&S->mu);
	for (int j = 0; j < n; j++) {
		S->lsum[(size_t)G->ring_rep[j] * S->nloc + G->local] += G->ring_h[j];
		S->lcount[(size_t)G->ring_rep[j] * S->nloc + G->local] += 1;
	}
	pthread_mutex_unlock(&S->mu);
}

/* The ring on the rank's GPU and its host side.  The device's own alloc,
 * not ph_eng_balloc: a failure here is no error of the job's. */
static int make_ring(struct ph_eng_group *G)
{
	ph_engine *e = G->e;
	ph_err err = { { 0 } };
	void *p = NULL;
	G->ring_h = malloc(RING * sizeof *G->ring_h);
	G->ring_rep = malloc(RING * sizeof *G->ring_rep);
	if (!G->ring_h || !G->ring_rep || e->dev->alloc(e->rs[G->stage], RING * sizeof(float), &p, &err)) {
		free(G->ring_h);
		free(G->ring_rep);
		G->ring_h = NULL;
		G->ring_rep = NULL;
		return PH_ENOMEM;
	}
	G->ring = p;
	return PH_OK;
}

/* Without a ring: the figure read now, which waits for the stream (the
 * host's wait, not the layer's), rather than lost. */
static void report_now(const ph_group *g, const ph_ctx *ctx, const char *key, const float *value)
{
	struct ph_eng_group *G = g->host;
	ph_engine *e = G->e;
	ph_err err = { { 0 } };
	float v;
	if (!e->dev->copy(e->rs[G->stage], &v, value, sizeof v, PH_COPY_D2H, &err))
		g_report(g, ctx, key, v);
}

/* ABI 1.8.  On the CPU the figure is there: report()'s path, the same
 * sums in the same order.  On a GPU a device copy queued behind the work
 * that writes it, read at the step's reports (ph_engine_reports) or when
 * the ring is full. */
static void g_report_device(const ph_group *g, const ph_ctx *ctx, const char *key, const float *value)
{
	struct ph_eng_group *G = g->host;
	ph_engine *e = G->e;
	shared_t *S = reports_for(e, ctx, key);
	if (!S || !value)
		return;
	if (e->dev->host_memory) {
		g_report(g, ctx, key, *value);
		return;
	}
	if (!G->ring && make_ring(G)) {
		report_now(g, ctx, key, value);
		return;
	}
	if (G->ring_n == RING)
		flush_ring(G);
	char name[sizeof S->rep[0].name];
	report_name(e, ctx, key, name, sizeof name);
	pthread_mutex_lock(&S->mu);
	int i = report_entry(S, name);
	pthread_mutex_unlock(&S->mu);
	ph_err err = { { 0 } };
	if (i < 0 || e->dev->copy(e->rs[G->stage], G->ring + G->ring_n, value, sizeof(float), PH_COPY_D2D, &err))
		return; /* a figure lost, never a failure */
	G->ring_rep[G->ring_n++] = i;
}

/* Every local replica's rings read into the table (the workers are idle). */
static void flush_rings(ph_engine *e)
{
	for (int r = 0; r < e->nrep; r++)
		for (int k = 0; e->rep[r]->groups && k < e->plan->ranks; k++)
			if (e->rep[r]->groups[k].ring_n)
				flush_ring(&e->rep[r]->groups[k]);
}

/* Entries no figure reached (their ring's copy failed): dropped, not
 * printed as 0 / 0. */
static int drop_empty(ph_report *r, int k)
{
	int n = 0;
	for (int i = 0; i < k; i++)
		if (r[i].count > 0)
			r[n++] = r[i];
	return n;
}

static int by_name(const void *a, const void *b)
{
	return strcmp(((const ph_report *)a)->name, ((const ph_report *)b)->name);
}

/* The figures of every process, by name: replicas in several processes
 * report the same keys (their sums and counts add, in process order), the
 * stages of a pipeline split over processes each their own layers' (the
 * union).  *r (k entries, sorted by name) is replaced. */
static int merge_processes(const ph_comm *cm, ph_report **r, int *k, ph_err *err)
{
	int most = *k;
	int rc = cm->ops->max_int(&most, err);
	if (rc || !most)
		return rc;
	const int P = cm->size;
	ph_report *mine = calloc((size_t)most, sizeof *mine), *all = calloc((size_t)most * P, sizeof *all),
		  *out = calloc((size_t)most * P, sizeof *out);
	if (!mine || !all || !out) {
		free(mine), free(all), free(out);
		return ph_fail(err, PH_ENOMEM, "out of memory");
	}
	if (*k)
		memcpy(mine, *r, (size_t)*k * sizeof *mine); /* the rest: empty names, count 0 */
	rc = cm->ops->allgather(mine, all, (size_t)most * sizeof *mine, err);
	int n = 0;
	for (int p = 0; !rc && p < P; p++)
		for (int i = 0; i < most; i++) {
			const ph_report *a = &all[(size_t)most * p + i];
			if (!a->name[0])
				continue;
			int j = 0;
			while (j < n && strcmp(out[j].name, a->name))
				j++;
			if (j == n)
				memcpy(out[n++].name, a->name, sizeof a->name); /* out is calloc'd: sum, count 0 */
			out[j].sum += a->sum;
			out[j].count += a->count;
		}
	free(mine);
	free(all);
	if (rc) {
		free(out);
		return rc;
	}
	qsort(out, (size_t)n, sizeof *out, by_name);
	free(*r);
	*r = out;
	*k = n;
	return PH_OK;
}

int ph_engine_reports(ph_engine *e, ph_report **out, int *n, ph_err *err)
{
	shared_t *S = e->grp;
	*out = NULL;
	*n = 0;
	if (!S)
		return PH_OK;
	flush_rings(e);
	pthread_mutex_lock(&S->mu);
	int k = S->nrep;
	ph_report *r = k ? malloc((size_t)k * sizeof *r) : NULL;
	if (r)
		for (int i = 0; i < k; i++) {
			r[i] = S->rep[i];
			r[i].sum = r[i].count = 0;
			for (int q = 0; q < S->nloc; q++) { /* replica order */
				r[i].sum += S->lsum[(size_t)i * S->nloc + q];
				r[i].count += S->lcount[(size_t)i * S->nloc + q];
			}
		}
	S->nrep = 0;
	pthread_mutex_unlock(&S->mu);
	if (k && !r)
		return ph_fail(err, PH_ENOMEM, "out of memory");
	k = drop_empty(r, k);
	if (k)
		qsort(r, (size_t)k, sizeof *r, by_name);
	const ph_comm *cm = &e->cfg->comm;
	if (cm->size > 1) {
		int rc = merge_processes(cm, &r, &k, err);
		if (rc) {
			free(r);
			return rc;
		}
	}
	*out = r;
	*n = k;
	return PH_OK;
}

/* ---- Lives ------------------------------------------------------------ */

int ph_eng_groups_create(ph_engine *e, ph_err *err)
{
	int P = e->plan->ranks, nl = e->nrep;
	shared_t *S = calloc(1, sizeof *S);
	if (!S || !(S->stages = calloc((size_t)P, sizeof *S->stages))) {
		free(S);
		return ph_fail(err, PH_ENOMEM, "out of memory");
	}
	pthread_mutex_init(&S->mu, NULL);
	S->nloc = nl;
	e->grp = S;
	for (int k = 0; k < P; k++) {
		stage_t *sh = &S->stages[k];
		pthread_mutex_init(&sh->mu, NULL);
		pthread_cond_init(&sh->cv, NULL);
		sh->nloc = nl;
		sh->sp = calloc((size_t)nl, sizeof *sh->sp);
		sh->reps = calloc((size_t)nl, sizeof *sh->reps);
		if (!sh->sp || !sh->reps)
			return ph_fail(err, PH_ENOMEM, "out of memory");
		for (int r = 0; r < nl; r++)
			sh->reps[r] = e->rep[r];
	}
	for (int r = 0; r < nl; r++) {
		ph_engine *q = e->rep[r];
		q->rep0 = e;
		if (!(q->groups = calloc((size_t)P, sizeof *q->groups)))
			return ph_fail(err, PH_ENOMEM, "out of memory");
		for (int k = 0; k < P; k++) {
			struct ph_eng_group *G = &q->groups[k];
			G->e = q;
			G->stage = k;
			G->local = r;
			G->sh = &S->stages[k];
			G->g = (ph_group){ sizeof(ph_group), (int)e->cfg->run.replicas, q->replica, g_all_to_all,
					   g_all_reduce_sum, g_report, G, g_report_device };
		}
	}
	return PH_OK;
}

const ph_group *ph_eng_group_of(const ph_engine *e, int rank)
{
	return e->groups ? &e->groups[rank].g : ph_group_solo(); /* (layer_call.c) */
}

void ph_eng_groups_destroy(ph_engine *e)
{
	shared_t *S = e->grp;
	for (int r = 0; r < e->nrep; r++) {
		ph_engine *q = e->rep[r];
		for (int k = 0; q->groups && k < e->plan->ranks; k++) {
			struct ph_eng_group *G = &q->groups[k];
			if (G->tmp_dev)
				ph_eng_bfree(q, k, G->tmp);
			else
				free(G->tmp);
			ph_eng_bfree(q, k, G->ring);
			free(G->ring_h);
			free(G->ring_rep);
		}
		free(q->groups);
		q->groups = NULL;
	}
	if (!S)
		return;
	for (int k = 0; k < e->plan->ranks; k++) {
		pthread_mutex_destroy(&S->stages[k].mu);
		pthread_cond_destroy(&S->stages[k].cv);
		free(S->stages[k].sp);
		free(S->stages[k].reps);
	}
	pthread_mutex_destroy(&S->mu);
	free(S->stages);
	free(S->rep);
	free(S->lsum);
	free(S->lcount);
	free(S);
	e->grp = NULL;
}
