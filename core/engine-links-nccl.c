/* SPDX-License-Identifier: MIT */
/* Stage links between processes over NCCL: a pipeline split over processes
 * on GPUs (mpirun, replicas < processes), where chunk c runs in one process
 * and chunk c+1 in another.
 *
 * Through host memory (engine-links.c), each message costs a device to
 * host copy that waits for the sender's kernels, an MPI message and a host
 * to device copy.  Over NCCL the bytes go from GPU to GPU, queued on the
 * streams like kernels (ph_device_ops.nccl_send, nccl_recv), and no host
 * thread waits for them.
 *
 * NCCL matches a link's messages by their order, where MPI matched them by
 * tag.  So each direction of each link gets a communicator of its own with
 * two members (chunk c's process is member 0, chunk c+1's member 1), and
 * the sender's list must name the micro-batches in the order the
 * receiver's list does.  Every built-in schedule does; a `table` schedule
 * may not.  The processes decide together, from what they all gather, so
 * that all take the same way.  The links stay on the host when:
 *   - any process has PIPEHOST_NCCL=0, or a CUDA backend without NCCL;
 *   - the two ends of a link run on one GPU (NCCL refuses a communicator
 *     whose two members share a GPU);
 *   - the lists send a link's micro-batches in another order than they
 *     receive them.
 * ph_engine_print_reduction prints which way they went and why. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine-impl.h"

/* Do the lists send link c's messages of `kind` (SEND_ACT of chunk c, or
 * SEND_GRAD of chunk c+1) in the order the other end receives them? */
static int same_order(const ph_plan *p, ph_op *const *ops, const int *nops, int c, int grad)
{
	int from = grad ? c + 1 : c, to = grad ? c : c + 1;
	int send = grad ? PH_OP_SEND_GRAD : PH_OP_SEND_ACT, recv = grad ? PH_OP_RECV_GRAD : PH_OP_RECV_ACT;
	const ph_op *a = ops[from % p->ranks], *b = ops[to % p->ranks];
	int na = nops[from % p->ranks], nb = nops[to % p->ranks], i = 0, j = 0;
	for (;;) {
		while (i < na && !(a[i].kind == send && a[i].chunk == from))
			i++;
		while (j < nb && !(b[j].kind == recv && b[j].chunk == to))
			j++;
		if (i == na || j == nb)
			return i == na && j == nb;
		if (a[i++].mb != b[j++].mb)
			return 0;
	}
}

/* Why the links must stay on the host, from every process's statement,
 * or NULL. */
static const char *host_reason(ph_engine *e, const ph_gpu_keys *g)
{
	const ph_plan *p = e->plan;
	int N = e->cfg->comm.size, P = p->ranks, per = P / e->span;
	const char *why = ph_gpu_keys_switch_reason(g);
	if (why)
		return why;
	/* every replica's links: processes base .. base + span - 1 run one */
	for (int base = 0; base + e->span <= N; base += e->span)
		for (int c = 0; c + 1 < p->nchunks; c++) {
			int k1 = c % P, k2 = (c + 1) % P, o1 = base + k1 / per, o2 = base + k2 / per;
			if (o1 != o2 && ph_gpu_keys_same(g, o1, k1, o2, k2)) {
				snprintf(e->links_why, sizeof e->links_why,
					 "processes %d and %d run ranks %d and %d on one GPU (%.*s), which NCCL refuses", o1,
					 o2, k1, k2, PH_GPU_KEY_BYTES, ph_gpu_key(g, o1, k1));
				return e->links_why;
			}
		}
	for (int c = 0; c + 1 < p->nchunks; c++)
		for (int grad = 0; grad < 2; grad++)
			if (!same_order(p, p->ops, p->nops, c, grad) ||
			    !same_order(p, e->eval_ops, e->eval_nops, c, grad)) {
				snprintf(e->links_why, sizeof e->links_why,
					 "the schedule sends the %s of link %d (chunk %d to %d) in another order than it "
					 "receives them, and NCCL matches messages by order",
					 grad ? "gradients" : "activations", c, grad ? c + 1 : c, grad ? c : c + 1);
				return e->links_why;
			}
	return NULL;
}

int ph_eng_links_nccl_decide(ph_engine *e, ph_err *err)
{
	ph_gpu_keys g;
	int rc;
	if (e->span == 1 || e->dev->host_memory)
		return PH_OK;
	if ((rc = ph_eng_gather_gpu_keys(e, &g, err)))
		return rc;
	e->links_host = host_reason(e, &g);
	ph_gpu_keys_free(&g);
	if (!e->links_host && !(e->link_comm = calloc((size_t)(2 * (e->plan->nchunks - 1)), sizeof *e->link_comm)))
		return ph_fail(err, PH_ENOMEM, "out of memory");
	return PH_OK;
}

/* Member 0 makes the communicator's id and sends it to member 1 over the
 * process group; both join.  Every process opens its links in link order,
 * so the two ends of each meet. */
static int open_comm(ph_engine *e, int c, int grad, ph_err *err)
{
	const ph_comm *cm = &e->cfg->comm;
	int P = e->plan->ranks, member = owns(e, c % P) ? 0 : 1;
	int rank = member ? (c + 1) % P : c % P, peer = owner(e, member ? c % P : (c + 1) % P);
	/* the link's own tag for micro-batch 0: no message of the link goes
	 * over MPI once it runs over NCCL */
	int tag = link_tag(e, c, 0, grad), rc;
	unsigned char id[PH_NCCL_ID_BYTES] = { 0 };
	void *req = NULL;
	if (member == 0)
		rc = e->dev->nccl_unique_id(id, err);
	else
		rc = PH_OK;
	if (!rc)
		rc = member == 0 ? cm->ops->isend(id, sizeof id, peer, tag, &req, err)
				 : cm->ops->irecv(id, sizeof id, peer, tag, &req, err);
	for (int done = 0; !rc && !done;)
		if (!(rc = cm->ops->test(req, &done, err)) && !done)
			usleep(100);
	if (rc)
		return rc;
	return e->dev->nccl_open(e->rs[rank], id, 2, member, &e->link_comm[2 * c + grad], err);
}

int ph_eng_links_nccl_open(ph_engine *e, ph_err *err)
{
	const ph_plan *p = e->plan;
	int rc;
	if (!e->link_comm)
		return PH_OK;
	for (int c = 0; c + 1 < p->nchunks; c++)
		for (int grad = 0; remote_link(e, c) && grad < 2; grad++)
			if ((rc = open_comm(e, c, grad, err)))
				return rc;
	/* the sends' events; the messages leave from the slots' device
	 * buffers (the chunks made no host copies, engine-layout.c) */
	for (int c = 0; c < p->nchunks; c++) {
		chunk_t *ch = &e->chunks[c];
		if (!owns(e, ch->rank) || !((c > 0 && remote_link(e, c - 1)) || (c + 1 < p->nchunks && remote_link(e, c))))
			continue;
		for (int s = 0; s < ch->nslots; s++) {
			slot_t *sl = &ch->slots[s];
			if ((rc = e->dev->event_create(e->rs[ch->rank], &sl->act_sent, err)) ||
			    (rc = e->dev->event_create(e->rs[ch->rank], &sl->grad_sent, err)))
				return rc;
		}
	}
	return PH_OK;
}

void ph_eng_links_nccl_close(ph_engine *e)
{
	if (!e->link_comm)
		return;
	for (int c = 0; c < e->plan->nchunks && e->chunks; c++)
		for (int s = 0; s < e->chunks[c].nslots; s++) {
			slot_t *sl = &e->chunks[c].slots[s];
			e->dev->event_destroy(sl->act_sent);
			e->dev->event_destroy(sl->grad_sent);
			sl->act_sent = sl->grad_sent = NULL;
		}
	for (int k = 0; k < 2 * (e->plan->nchunks - 1); k++)
		if (e->link_comm[k])
			e->dev->nccl_close(e->link_comm[k]);
	free(e->link_comm);
	e->link_comm = NULL;
}
