/* SPDX-License-Identifier: MIT */
/* The memory layout of a chunk: the table of its buffers, sizes first
 * (ph_chunk_layout_make, read by the engine and by the plan's estimate),
 * and the engine's chunks carved from it, one allocation each on their
 * rank's device (ph_eng_alloc_chunks).  What each buffer is for:
 * engine-layout.h. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "engine-impl.h"

/* Every region starts on this boundary: what cudaMalloc gives a buffer of
 * its own, so the kernels' vector loads see the alignment they always had. */
#define REGION_ALIGN 256

static int plan_splits_backward(const ph_plan *p)
{
	for (int r = 0; p->ops && p->nops && r < p->ranks; r++)
		for (int j = 0; j < p->nops[r]; j++)
			if (p->ops[r][j].kind == PH_OP_I)
				return 1;
	return 0;
}

static int add(ph_chunk_layout *lay, int *cap, ph_region_kind kind, int slot, int index, int activation, size_t bytes,
	       ph_err *err)
{
	if (lay->nreg == *cap) {
		int n = *cap ? *cap * 2 : 32;
		ph_region *r = realloc(lay->reg, (size_t)n * sizeof *r);
		if (!r)
			return ph_fail(err, PH_ENOMEM, "out of memory");
		lay->reg = r;
		*cap = n;
	}
	lay->reg[lay->nreg++] = (ph_region){ kind, slot, index, activation, bytes, lay->arena_bytes };
	lay->arena_bytes += (bytes + REGION_ALIGN - 1) / REGION_ALIGN * REGION_ALIGN;
	if (activation)
		lay->activation_bytes += bytes;
	return PH_OK;
}

int ph_chunk_layout_lean(const ph_chunk_layout *lay, int s)
{
	return lay->recompute != PH_RECOMPUTE_NO && (lay->recompute == PH_RECOMPUTE_YES || s + 1 < lay->nslots);
}

int ph_chunk_layout_make(ph_chunk_layout *lay, const ph_plan *p, const ph_model *m, const ph_config *c,
			 const int *ordinal, int k, ph_err *err)
{
	memset(lay, 0, sizeof *lay);
	const int a = p->first[k], b = p->first[k + 1], R = p->ranks, last = p->nchunks - 1;
	const size_t mb = (size_t)m->max_batch, f = sizeof(float);
	const int split = plan_splits_backward(p);
	/* the input arrives from another GPU (a peer copy) or another process
	 * (a message): either way into a buffer of the chunk's own */
	const int cross_gpu_in = ordinal && k > 0 && ordinal[k % R] != ordinal[(k - 1) % R];
	const int span = ph_config_span(c), per = R / span;
	const int remote_in = k > 0 && span > 1 && (k % R) / per != ((k - 1) % R) / per;
	const int on_gpu = ordinal && ordinal[k % R] >= 0;
	const size_t in = (size_t)ph_shape_numel(&m->layers[a].in) * mb * f;
	int cap = 0, rc = PH_OK;

	lay->recompute = c->run.recompute;
	lay->in_place = !split && !env_is_zero("PIPEHOST_GRAD_IN_PLACE");
	lay->nslots = p->slots[k] > 0 ? p->slots[k] : 1;
	if (lay->recompute == PH_RECOMPUTE_EXCEPT_LAST)
		lay->nslots++; /* the lean slots plus one full one for the last micro-batch */
	if (lay->recompute != PH_RECOMPUTE_NO)
		for (int l = a; l < b && !rc; l++) {
			const ph_layer *L = &m->layers[l];
			if (!(rc = add(lay, &cap, PH_REG_WORK_Y, -1, l - a, 1, (size_t)ph_shape_numel(&L->meta.out) * mb * f, err)))
				rc = add(lay, &cap, PH_REG_WORK_SAVED, -1, l - a, 1, ph_layer_saved_bytes(L) * mb, err);
		}
	size_t scratch = 0, gmax[2] = { 0, 0 };
	for (int l = a; l < b; l++) {
		const ph_layer *L = &m->layers[l];
		/* on a GPU a layer may ask for another amount (ABI 1.2) */
		size_t need = on_gpu && L->meta.device_scratch_bytes ? L->meta.device_scratch_bytes : L->meta.scratch_bytes;
		if (need > scratch)
			scratch = need;
		/* the backward hands each inner layer's input gradient to the
		 * layer before in gbuf[0] and gbuf[1] by turns, from the last
		 * layer (engine-ops.c run_backward): each buffer as large as
		 * the inputs of its own turns.  A GPT's loss takes the logits
		 * [T, vocab], its head's input is [T, d]: one buffer would be
		 * 197 MiB at GPT-2's size, the other 3, but the loss writes the
		 * logits' gradient over the logits (ph_layout_dx_over_x) */
		if (l > a && !ph_layout_dx_over_x(lay->in_place, m, a, l) &&
		    (size_t)ph_shape_numel(&L->in) > gmax[(b - 1 - l) & 1])
			gmax[(b - 1 - l) & 1] = (size_t)ph_shape_numel(&L->in);
	}
	if (!rc && !(rc = add(lay, &cap, PH_REG_SCRATCH, -1, 0, 0, scratch, err)) &&
	    !(rc = add(lay, &cap, PH_REG_GBUF, -1, 0, 1, gmax[0] * mb * f, err)))
		rc = add(lay, &cap, PH_REG_GBUF, -1, 1, 1, gmax[1] * mb * f, err);
	for (int s = 0; s < lay->nslots && !rc; s++) {
		int lean = ph_chunk_layout_lean(lay, s);
		for (int l = a; l < b && !rc; l++) {
			const ph_layer *L = &m->layers[l];
			if (lean && l + 1 < b)
				continue; /* the work buffers */
			rc = add(lay, &cap, PH_REG_Y, s, l - a, 1, (size_t)ph_shape_numel(&L->meta.out) * mb * f, err);
			/* a lean slot's last layer keeps its output, not its saved bytes */
			if (!rc && !lean)
				rc = add(lay, &cap, PH_REG_SAVED, s, l - a, 1, ph_layer_saved_bytes(L) * mb, err);
		}
		for (int l = a; split && l + 1 < b && !rc; l++)
			rc = add(lay, &cap, PH_REG_DY, s, l - a, 1, (size_t)ph_shape_numel(&m->layers[l].meta.out) * mb * f,
				 err);
		if (!rc && ((split && k > 0) || cross_gpu_in || remote_in))
			rc = add(lay, &cap, PH_REG_X_OWN, s, 0, 1, in, err);
		if (!rc && (cross_gpu_in || remote_in))
			rc = add(lay, &cap, PH_REG_DX_OWN, s, 0, 1, in, err);
		if (!rc && k < last)
			rc = add(lay, &cap, PH_REG_DY_OUT, s, 0, 1,
				 (size_t)ph_shape_numel(&m->layers[b - 1].meta.out) * mb * f, err);
	}
	if (rc)
		ph_chunk_layout_free(lay);
	return rc;
}

void ph_chunk_layout_free(ph_chunk_layout *lay)
{
	free(lay->reg);
	memset(lay, 0, sizeof *lay);
}

/* ---- The engine's chunks, carved from their layouts ------------------- */

/* A chunk whose link to another process carries more than MPI can. */
static int check_messages(ph_engine *e, int c, ph_err *err)
{
	const ph_plan *p = e->plan;
	const ph_model *m = e->model;
	const chunk_t *ch = &e->chunks[c];
	int remote_in = c > 0 && remote_link(e, c - 1);
	if (!remote_in && !(c + 1 < p->nchunks && remote_link(e, c)))
		return PH_OK;
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
	return PH_OK;
}

/* A GPU chunk whose link to another process carries messages through the
 * host: buffers for them in each slot, since the process group (MPI) may
 * not read device memory.  The bytes go GPU -> host -> MPI -> host -> GPU:
 * two copies over PCIe per hand-off, small beside the network between
 * nodes that this link exists for.  Over NCCL (e->link_comm, decided
 * before the chunks) they leave from the slots' device buffers. */
static int alloc_staging(ph_engine *e, int c, ph_err *err)
{
	const ph_plan *p = e->plan;
	chunk_t *ch = &e->chunks[c];
	int remote_in = c > 0 && remote_link(e, c - 1), remote_out = c + 1 < p->nchunks && remote_link(e, c);
	if (e->dev->host_memory || e->link_comm || (!remote_in && !remote_out))
		return PH_OK;
	size_t in = (size_t)ph_shape_numel(&e->model->layers[ch->a].in) * e->mbsize * sizeof(float);
	size_t out = (size_t)ph_shape_numel(&e->model->layers[ch->b - 1].meta.out) * e->mbsize * sizeof(float);
	for (int s = 0; s < ch->nslots; s++) {
		slot_t *sl = &ch->slots[s];
		if ((remote_out && !(sl->h_out = malloc(out ? out : 1))) || (remote_in && !(sl->h_in = malloc(in ? in : 1))))
			return ph_fail(err, PH_ENOMEM, "out of host memory for the messages of chunk %d (%.1f MiB a slot)",
				       c, (double)(in + out) / 1048576.0);
	}
	return PH_OK;
}

/* The pointer tables of chunk c for its layout (the buffers come after). */
static int alloc_tables(ph_engine *e, chunk_t *ch, const ph_chunk_layout *lay)
{
	int nl = ch->b - ch->a;
	ch->nslots = lay->nslots;
	ch->mb_slot = malloc((size_t)e->mcap * sizeof *ch->mb_slot);
	ch->mb_x = calloc((size_t)e->mcap, sizeof *ch->mb_x);
	ch->mb_dx = calloc((size_t)e->mcap, sizeof *ch->mb_dx);
	ch->slots = calloc((size_t)ch->nslots, sizeof *ch->slots);
	if (!ch->mb_slot || !ch->mb_x || !ch->mb_dx || !ch->slots)
		return PH_ENOMEM;
	for (int mb = 0; mb < e->mcap; mb++)
		ch->mb_slot[mb] = -1;
	if (lay->recompute != PH_RECOMPUTE_NO &&
	    (!(ch->work_y = calloc((size_t)nl, sizeof *ch->work_y)) ||
	     !(ch->work_saved = calloc((size_t)nl, sizeof *ch->work_saved))))
		return PH_ENOMEM;
	for (int s = 0; s < ch->nslots; s++) {
		slot_t *sl = &ch->slots[s];
		sl->mb = -1;
		sl->lean = ph_chunk_layout_lean(lay, s);
		if (!(sl->y = calloc((size_t)nl, sizeof *sl->y)) || !(sl->saved = calloc((size_t)nl, sizeof *sl->saved)) ||
		    (e->split && !(sl->dy = calloc((size_t)nl, sizeof *sl->dy))))
			return PH_ENOMEM;
	}
	return PH_OK;
}

/* Each region of the layout at its offset in the chunk's arena. */
static void carve(chunk_t *ch, const ph_chunk_layout *lay)
{
	char *base = ch->arena;
	for (int k = 0; k < lay->nreg; k++) {
		const ph_region *r = &lay->reg[k];
		void *at = base + r->offset;
		slot_t *sl = r->slot >= 0 ? &ch->slots[r->slot] : NULL;
		switch (r->kind) {
		case PH_REG_WORK_Y: ch->work_y[r->index] = at; break;
		case PH_REG_WORK_SAVED: ch->work_saved[r->index] = at; break;
		case PH_REG_SCRATCH: ch->scratch = at; break;
		case PH_REG_GBUF: ch->gbuf[r->index] = at; break;
		case PH_REG_Y: sl->y[r->index] = at; break;
		case PH_REG_SAVED: sl->saved[r->index] = at; break;
		case PH_REG_DY: sl->dy[r->index] = at; break;
		case PH_REG_X_OWN: sl->x_own = at; break;
		case PH_REG_DX_OWN: sl->dx_own = at; break;
		case PH_REG_DY_OUT: sl->dy_out = at; break;
		}
	}
	/* a lean slot's inner layers use the work buffers, and its last layer
	 * the work copy of its saved bytes */
	int nl = ch->b - ch->a;
	for (int s = 0; s < ch->nslots; s++) {
		slot_t *sl = &ch->slots[s];
		if (!sl->lean)
			continue;
		for (int l = 0; l + 1 < nl; l++)
			sl->y[l] = ch->work_y[l];
		for (int l = 0; l < nl; l++)
			sl->saved[l] = ch->work_saved[l];
	}
}

int ph_eng_alloc_chunks(ph_engine *e, ph_err *err)
{
	const ph_plan *p = e->plan;
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
		ph_chunk_layout lay;
		int rc = check_messages(e, c, err);
		if (rc || (rc = ph_chunk_layout_make(&lay, p, e->model, e->cfg, e->ordinal, c, err)))
			return rc;
		if (alloc_tables(e, ch, &lay)) {
			ph_chunk_layout_free(&lay);
			return ph_fail(err, PH_ENOMEM, "out of memory for chunk %d", c);
		}
		if (!(ch->arena = ph_eng_balloc(e, ch->rank, lay.arena_bytes))) {
			double mib = lay.arena_bytes / 1048576.0;
			ph_chunk_layout_free(&lay);
			return ph_fail(err, PH_ENOMEM, "out of memory for the %.1f MiB of activations and buffers of chunk %d",
				       mib, c);
		}
		carve(ch, &lay);
		ch->act_bytes = lay.activation_bytes;
		ch->in_place = lay.in_place;
		ph_chunk_layout_free(&lay);
		if ((rc = alloc_staging(e, c, err)))
			return rc;
	}
	return PH_OK;
}

void ph_eng_free_chunks(ph_engine *e)
{
	for (int c = 0; e->chunks && c < e->plan->nchunks; c++) {
		chunk_t *ch = &e->chunks[c];
		for (int s = 0; ch->slots && s < ch->nslots; s++) {
			free(ch->slots[s].y);
			free(ch->slots[s].saved);
			free(ch->slots[s].dy);
			free(ch->slots[s].h_out);
			free(ch->slots[s].h_in);
		}
		free(ch->slots);
		free(ch->work_y);
		free(ch->work_saved);
		free(ch->mb_slot);
		free(ch->mb_x);
		free(ch->mb_dx);
		ph_eng_bfree(e, ch->rank, ch->arena);
	}
	free(e->chunks);
	e->chunks = NULL;
}
