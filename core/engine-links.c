/* SPDX-License-Identifier: MIT */
/* Stage links: how chunk c hands its output to chunk c+1 and gets its
 * gradient back, for the four link ops of the lowered lists.
 *
 * In one process a link carries pointers, not data (engine-impl.h): the
 * sender posts its slot's output and gradient buffer under the link's
 * mutex, the receiver waits for the post; on a GPU the sender also records
 * an event on its stream that the receiver's stream waits on (the CPU's
 * events are nothing: the post orders it).
 *
 * Where chunk c runs in this process and c+1 in another, or the other way
 * round (remote_link; mpirun, a pipeline split over processes), the link
 * sends and receives through the process group (core/comm.h); on GPUs by
 * way of host copies (to_host, to_device).  The
 * sender starts a send and goes on, so, as in-process, only receivers wait;
 * the buffers are the slots' own and stay untouched until the send is done
 * (ph_link_slot_sends_done, before a slot is taken again, and the end of
 * the job).  Chunk c's output goes to c+1's x_own, c+1's input gradient
 * leaves from its dx_own and lands in c's dy_out.  On GPUs with NCCL the
 * same buffers travel GPU to GPU instead, queued on the streams
 * (engine-links-nccl.c), and only the streams wait. */
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine-impl.h"

/* ---- The links' lives ------------------------------------------------- */

int ph_eng_links_create(ph_engine *e, ph_err *err)
{
	const ph_plan *p = e->plan;
	e->links = calloc((size_t)(p->nchunks > 1 ? p->nchunks - 1 : 1), sizeof *e->links);
	if (!e->links)
		return ph_fail(err, PH_ENOMEM, "out of memory");
	for (int k = 0; k + 1 < p->nchunks; k++) {
		link_t *lk = &e->links[k];
		pthread_mutex_init(&lk->mu, NULL);
		pthread_cond_init(&lk->cv, NULL);
		lk->y = calloc((size_t)e->mcap, sizeof *lk->y);
		lk->dy = calloc((size_t)e->mcap, sizeof *lk->dy);
		lk->act = calloc((size_t)e->mcap, 1);
		lk->grad = calloc((size_t)e->mcap, 1);
		lk->act_ev = calloc((size_t)e->mcap, sizeof *lk->act_ev);
		lk->grad_ev = calloc((size_t)e->mcap, sizeof *lk->grad_ev);
		if (!lk->y || !lk->dy || !lk->act || !lk->grad || !lk->act_ev || !lk->grad_ev)
			return ph_fail(err, PH_ENOMEM, "out of memory");
		/* recorded by the sender of each: chunk k sends activations, k+1 gradients */
		for (int mb = 0; mb < e->mcap; mb++) {
			int rc;
			if ((rc = e->dev->event_create(e->rs[k % p->ranks], &lk->act_ev[mb], err)) ||
			    (rc = e->dev->event_create(e->rs[(k + 1) % p->ranks], &lk->grad_ev[mb], err)))
				return rc;
		}
	}
	return PH_OK;
}

void ph_eng_links_destroy(ph_engine *e)
{
	for (int k = 0; e->links && k + 1 < e->plan->nchunks; k++) {
		link_t *lk = &e->links[k];
		for (int mb = 0; mb < e->mcap; mb++) {
			if (lk->act_ev)
				e->dev->event_destroy(lk->act_ev[mb]);
			if (lk->grad_ev)
				e->dev->event_destroy(lk->grad_ev[mb]);
		}
		free(lk->y);
		free(lk->dy);
		free(lk->act);
		free(lk->grad);
		free(lk->act_ev);
		free(lk->grad_ev);
	}
	free(e->links);
	e->links = NULL;
}

void ph_eng_links_reset(ph_engine *e)
{
	for (int c = 0; c + 1 < e->plan->nchunks; c++) {
		memset(e->links[c].act, 0, (size_t)e->mcap);
		memset(e->links[c].grad, 0, (size_t)e->mcap);
	}
}

void ph_eng_links_wake(ph_engine *e)
{
	for (int c = 0; e->links && c + 1 < e->plan->nchunks; c++) {
		pthread_mutex_lock(&e->links[c].mu);
		pthread_cond_broadcast(&e->links[c].cv);
		pthread_mutex_unlock(&e->links[c].mu);
	}
}

/* ---- In one process: posts and waits ---------------------------------- */

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

/* ---- To another process: messages ------------------------------------- */

/* Wait for one message to or from another process, as link_wait does:
 * polling, so that a failure on another rank of this
 * process stops it. */
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

int ph_link_slot_sends_done(ph_engine *e, int c, slot_t *sl, ph_err *err)
{
	if (e->link_comm) {
		/* over NCCL the host never waits: the rank's stream does */
		void *rs = e->rs[e->chunks[c].rank];
		int rc;
		if (sl->act_sending && (rc = e->dev->event_wait(rs, sl->act_sent, err)))
			return rc;
		if (sl->grad_sending && (rc = e->dev->event_wait(rs, sl->grad_sent, err)))
			return rc;
		sl->act_sending = sl->grad_sending = 0;
		return PH_OK;
	}
	int rc = msg_wait(e, &sl->act_req, err);
	return rc ? rc : msg_wait(e, &sl->grad_req, err);
}

/* The bytes of chunk c's output for micro-batch mb. */
static size_t out_bytes(const ph_engine *e, int c, int mb)
{
	const chunk_t *ch = &e->chunks[c];
	return (size_t)ph_shape_numel(&e->model->layers[ch->b - 1].meta.out) * batch_of(e, mb) * sizeof(float);
}

/* The input gradient a backward released with its slot: find the slot by
 * the buffer. */
static slot_t *slot_of_dx(chunk_t *ch, int mb)
{
	for (int s = 0; s < ch->nslots; s++)
		if (ch->slots[s].dx_own == ch->mb_dx[mb])
			return &ch->slots[s];
	return NULL;
}

int ph_link_rank_sends_done(ph_engine *e, int rank, ph_err *err)
{
	for (int c = rank; c < e->plan->nchunks; c += e->plan->ranks)
		for (int s = 0; s < e->chunks[c].nslots; s++) {
			int rc = ph_link_slot_sends_done(e, c, &e->chunks[c].slots[s], err);
			if (rc)
				return rc;
		}
	return PH_OK;
}

/* On GPUs a message leaves from and lands in the slot's host copy
 * (h_out, h_in; engine-layout.c): the device to host copy waits for the
 * kernels that wrote the buffer, the host to device one is queued on the
 * rank's stream before the kernels that read it. */
static int to_host(ph_engine *e, const chunk_t *ch, void *dst, const void *src, size_t bytes, ph_err *err)
{
	return e->dev->copy(e->rs[ch->rank], dst, src, bytes, PH_COPY_D2H, err);
}

static int to_device(ph_engine *e, const chunk_t *ch, void *dst, const void *src, size_t bytes, ph_err *err)
{
	return e->dev->copy(e->rs[ch->rank], dst, src, bytes, PH_COPY_H2D, err);
}

/* ---- The four link ops ------------------------------------------------ */

int ph_link_send_act(ph_engine *e, int c, int mb, slot_t *sl, ph_err *err)
{
	chunk_t *ch = &e->chunks[c];
	if (remote_link(e, c)) {
		const void *buf = sl->y[ch->b - 1 - ch->a];
		int rc;
		if (e->link_comm) { /* chunk c is member 0 of link c's communicators */
			sl->act_sending = 1;
			return e->dev->nccl_send(e->rs[ch->rank], e->link_comm[2 * c], buf, out_bytes(e, c, mb), 1,
						 sl->act_sent, err);
		}
		if (sl->h_out && (rc = to_host(e, ch, sl->h_out, buf, out_bytes(e, c, mb), err)))
			return rc;
		return e->cfg->comm.ops->isend(sl->h_out ? sl->h_out : buf, out_bytes(e, c, mb),
					       owner(e, (c + 1) % e->plan->ranks), link_tag(e, c, mb, 0), &sl->act_req, err);
	}
	link_t *lk = &e->links[c];
	lk->y[mb] = sl->y[ch->b - 1 - ch->a];
	lk->dy[mb] = sl->dy_out;
	int rc = e->dev->event_record(e->rs[ch->rank], lk->act_ev[mb], err);
	if (rc)
		return rc;
	link_post(lk, lk->act, mb);
	return PH_OK;
}

int ph_link_recv_act(ph_engine *e, int c, int mb, slot_t *sl, ph_err *err)
{
	chunk_t *ch = &e->chunks[c];
	if (remote_link(e, c - 1)) {
		void *req = NULL;
		size_t bytes = out_bytes(e, c - 1, mb);
		int rc;
		if (e->link_comm) { /* chunk c is member 1 of link c - 1's */
			if ((rc = e->dev->nccl_recv(e->rs[ch->rank], e->link_comm[2 * (c - 1)], sl->x_own, bytes, 0, err)))
				return rc;
		} else if ((rc = e->cfg->comm.ops->irecv(sl->h_in ? sl->h_in : (void *)sl->x_own, bytes,
						  owner(e, (c - 1) % e->plan->ranks), link_tag(e, c - 1, mb, 0), &req, err)) ||
		    (rc = msg_wait(e, &req, err)) || (sl->h_in && (rc = to_device(e, ch, sl->x_own, sl->h_in, bytes, err))))
			return rc;
		ch->mb_x[mb] = sl->x_own;
		ch->mb_dx[mb] = sl->dx_own; /* the backward writes the gradient there */
		return PH_OK;
	}
	link_t *lk = &e->links[c - 1];
	if (link_wait(e, lk, lk->act, mb))
		return PH_EINTERNAL;
	ch->mb_x[mb] = lk->y[mb];
	ch->mb_dx[mb] = lk->dy[mb];
	return e->dev->event_wait(e->rs[ch->rank], lk->act_ev[mb], err);
}

int ph_link_send_grad(ph_engine *e, int c, int mb, ph_err *err)
{
	chunk_t *ch = &e->chunks[c];
	if (remote_link(e, c - 1)) {
		slot_t *sl = slot_of_dx(ch, mb);
		if (!sl)
			return ph_fail(err, PH_EINTERNAL, "chunk %d: no slot holds the input gradient of micro-batch %d", c,
				       mb);
		size_t bytes = out_bytes(e, c - 1, mb);
		int rc;
		if (e->link_comm) {
			sl->grad_sending = 1;
			return e->dev->nccl_send(e->rs[ch->rank], e->link_comm[2 * (c - 1) + 1], sl->dx_own, bytes, 0,
						 sl->grad_sent, err);
		}
		if (sl->h_in && (rc = to_host(e, ch, sl->h_in, sl->dx_own, bytes, err)))
			return rc;
		return e->cfg->comm.ops->isend(sl->h_in ? sl->h_in : (void *)sl->dx_own, bytes,
					       owner(e, (c - 1) % e->plan->ranks), link_tag(e, c - 1, mb, 1), &sl->grad_req, err);
	}
	link_t *lk = &e->links[c - 1];
	int rc = e->dev->event_record(e->rs[ch->rank], lk->grad_ev[mb], err);
	if (rc)
		return rc;
	link_post(lk, lk->grad, mb);
	return PH_OK;
}

int ph_link_recv_grad(ph_engine *e, int c, int mb, ph_err *err)
{
	chunk_t *ch = &e->chunks[c];
	if (remote_link(e, c)) {
		slot_t *sl = &ch->slots[ch->mb_slot[mb]];
		void *req = NULL;
		size_t bytes = out_bytes(e, c, mb);
		int rc;
		if (e->link_comm)
			return e->dev->nccl_recv(e->rs[ch->rank], e->link_comm[2 * c + 1], sl->dy_out, bytes, 1, err);
		/* h_out carried this slot's output: that send must be over
		 * before the gradient lands there (the receiver has it, but MPI
		 * owns the buffer until the request completes) */
		if (sl->h_out && (rc = msg_wait(e, &sl->act_req, err)))
			return rc;
		if ((rc = e->cfg->comm.ops->irecv(sl->h_out ? sl->h_out : (void *)sl->dy_out, bytes,
						  owner(e, (c + 1) % e->plan->ranks), link_tag(e, c, mb, 1), &req, err)) ||
		    (rc = msg_wait(e, &req, err)))
			return rc;
		return sl->h_out ? to_device(e, ch, sl->dy_out, sl->h_out, bytes, err) : PH_OK;
	}
	link_t *lk = &e->links[c];
	if (link_wait(e, lk, lk->grad, mb))
		return PH_EINTERNAL;
	return e->dev->event_wait(e->rs[ch->rank], lk->grad_ev[mb], err);
}
