/* Links between the processes of a pipeline split over processes (mpirun,
 * replicas < processes, CPU): where chunk c runs in this process and c+1 in
 * another, or the other way round, run_op (engine.c) sends and receives
 * through the process group (core/comm.h) instead of handing pointers over
 * in memory.  Which process runs which rank: owns, owner and owner0
 * (engine-impl.h).
 *
 * The sender starts a send and goes on, so, as in-process, only receivers
 * wait; the buffers are the slots' own and stay untouched until the send
 * is done (ph_eng_take_slot, and the end of the job).  Chunk c's output goes
 * to c+1's x_own, taken with its slot at the receive; c+1's input gradient
 * leaves from its dx_own and lands in c's dy_out. */
#include <sched.h>
#include <time.h>

#include "engine-impl.h"

/* Message tags: one per link, micro-batch and direction. */
static int link_tag(const ph_engine *e, int c, int mb, int grad)
{
	return (c * e->m + mb) * 2 + grad;
}

/* Wait for one message to or from another process, as link_wait
 * (engine.c) does: polling, so that a failure on another rank of this
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

/* The slot's earlier sends must be done before it is written again. */
int ph_eng_slot_sends_done(ph_engine *e, slot_t *sl, ph_err *err)
{
	int rc = msg_wait(e, &sl->act_req, err);
	return rc ? rc : msg_wait(e, &sl->grad_req, err);
}

/* The bytes of chunk c's output for micro-batch mb. */
static size_t out_bytes(const ph_engine *e, int c, int mb)
{
	const chunk_t *ch = &e->chunks[c];
	return (size_t)ph_shape_numel(&e->model->layers[ch->b - 1].meta.out) * batch_of(e, mb) * sizeof(float);
}

int ph_eng_send_act(ph_engine *e, int c, int mb, slot_t *sl, ph_err *err)
{
	chunk_t *ch = &e->chunks[c];
	return e->cfg->comm.ops->isend(sl->y[ch->b - 1 - ch->a], out_bytes(e, c, mb), owner(e, (c + 1) % e->plan->ranks),
				       link_tag(e, c, mb, 0), &sl->act_req, err);
}

int ph_eng_recv_act(ph_engine *e, int c, int mb, ph_err *err)
{
	chunk_t *ch = &e->chunks[c];
	int s, rc = ph_eng_take_slot(e, c, mb, &s, err);
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

int ph_eng_send_grad(ph_engine *e, int c, int mb, ph_err *err)
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

int ph_eng_recv_grad(ph_engine *e, int c, int mb, ph_err *err)
{
	chunk_t *ch = &e->chunks[c];
	slot_t *sl = &ch->slots[ch->mb_slot[mb]];
	void *req = NULL;
	int rc = e->cfg->comm.ops->irecv(sl->dy_out, out_bytes(e, c, mb), owner(e, (c + 1) % e->plan->ranks),
					 link_tag(e, c, mb, 1), &req, err);
	return rc ? rc : msg_wait(e, &req, err);
}

/* The end of a job: every send of this rank's slots has finished. */
int ph_eng_rank_sends_done(ph_engine *e, int rank, ph_err *err)
{
	for (int c = rank; c < e->plan->nchunks; c += e->plan->ranks)
		for (int s = 0; s < e->chunks[c].nslots; s++) {
			int rc = ph_eng_slot_sends_done(e, &e->chunks[c].slots[s], err);
			if (rc)
				return rc;
		}
	return PH_OK;
}
