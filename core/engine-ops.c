/* SPDX-License-Identifier: MIT */
/* The op interpreter: what a worker does for each op of its rank's lowered
 * list (plan.h): the forward (F), the backward (B, or its halves I and W)
 * of one micro-batch through one chunk's layers, and the link ops, which
 * engine-links.c carries.  Buffers come from the chunk's slots
 * (engine-layout.h); the device's ops copy where a buffer must move. */
#include <string.h>

#include "engine-impl.h"
#include "layer_call.h"

static void fill_ctx(const ph_engine *e, ph_ctx *ctx, int mb, int layer, const chunk_t *ch, void *saved)
{
	memset(ctx, 0, sizeof *ctx);
	ctx->batch = batch_of(e, mb);
	ctx->training = e->training;
	ctx->seed = (uint64_t)e->cfg->run.seed;
	/* (a stream's micro-batch n is step n / m's n % m) */
	ctx->step = (uint64_t)mb_step(e, mb);
	/* replicas draw different dropout masks: their micro-batches are
	 * numbered on after each other's, as one long pipeline's would be */
	ctx->microbatch = (uint64_t)e->replica * (uint64_t)e->m + (uint64_t)mb_in_step(e, mb);
	ctx->layer = (uint64_t)layer;
	ctx->scratch = ch->scratch;
	ctx->saved = saved;
	e->dev->fill_ctx(e->rs[ch->rank], ctx);
	/* ABI 1.5: the stage's replica group, and the loss scale for every
	 * layer (an auxiliary loss scales as the objective does) */
	ctx->group = ph_eng_group_of(e, ch->rank);
	/* the step's mean loss; under per-micro-batch updates the
	 * micro-batch's own */
	ctx->loss_scale = e->per_mb ? (float)(1.0 / ((double)e->mbsize * e->tps))
				    : (float)(1.0 / ((double)e->mbsize * e->m * e->cfg->run.replicas * e->tps));
	/* ABI 1.9: the samples behind that mean (an auxiliary loss per token
	 * scales by 1 / (these x its tokens), whatever the loss's targets) */
	ctx->objective_samples = e->per_mb ? (int64_t)e->mbsize
					   : (int64_t)e->mbsize * e->m * e->cfg->run.replicas;
	if (layer == e->model->n - 1)
		ctx->targets = e->d_data_y + (size_t)mb * e->mbsize * e->tps;
}

/* Does micro-batch mb drop its inner activations after the forward? */
static int recomputed(const ph_engine *e, int mb)
{
	int mode = e->cfg->run.recompute;
	return mode == PH_RECOMPUTE_YES || (mode == PH_RECOMPUTE_EXCEPT_LAST && mb_in_step(e, mb) != e->m - 1);
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
		int rc = ph_layer_forward(L->ops, L->state, e->model->max_batch, &ctx, compute_params(e, l, mb), x, y, &e2);
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

/* A free activation slot for micro-batch mb of chunk c: at its receive
 * (chunks > 0) or its forward (chunk 0). */
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
	int rc = e->span > 1 ? ph_link_slot_sends_done(e, c, sl, err) : PH_OK;
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
		ch->mb_x[mb] = e->d_data_x + (size_t)mb * e->mbsize * e->in_numel;
	} else if (sl->x_own && ch->mb_x[mb] != sl->x_own) { /* (received from another process: in place) */
		size_t bytes = (size_t)ph_shape_numel(&e->model->layers[ch->a].in) * batch_of(e, mb) * sizeof(float);
		int rc = e->dev->copy(e->rs[ch->rank], sl->x_own, ch->mb_x[mb], bytes, PH_COPY_D2D, err);
		if (rc)
			return rc;
		ch->mb_x[mb] = sl->x_own;
	}
	int rc = forward_layers(e, c, mb, sl, NULL, err);
	if (rc)
		return rc;
	const float *x = sl->y[ch->b - 1 - ch->a];
	if (ch->b == e->model->n) {
		/* the loss layer's [loss, correct] per sample, kept aside and
		 * summed after the job (ph_eng_gather_losses) */
		int n = batch_of(e, mb);
		int rc2 = e->dev->copy(e->rs[ch->rank], e->d_loss + (size_t)mb * e->mbsize * 2, x,
				       (size_t)n * 2 * sizeof(float), PH_COPY_D2D, err);
		if (rc2)
			return rc2;
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

/* Where layer l writes its input gradient in a backward of micro-batch mb:
 * the chunk's first layer into the chunk's input gradient (its own copy
 * when the sender's lives on another GPU); under a split backward into
 * the slot, kept for W; a layer after a loss that writes the logits'
 * gradient over the logits (PH_LAYER_DX_OVER_X) over its own input,
 * which the layer before then never reads as y; else into the chunk's
 * ping-pong buffer t. */
static float *layer_dx(const ph_engine *e, const chunk_t *ch, slot_t *sl, int mb, int l, int split, int t)
{
	if (l == ch->a)
		return sl->dx_own && ch->mb_dx[mb] ? sl->dx_own : ch->mb_dx[mb];
	if (split)
		return sl->dy[l - 1 - ch->a];
	if (ph_layout_dx_over_x(ch->in_place, e->model, ch->a, l))
		return sl->y[l - 1 - ch->a];
	return ch->gbuf[t];
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
		float *dx = layer_dx(e, ch, sl, mb, l, split, t);
		ph_ctx ctx;
		fill_ctx(e, &ctx, mb, l, ch, sl->saved[l - ch->a]);
		ph_err e2 = { { 0 } };
		int rc;
		if (split && ph_layer_has_split_backward(L->ops))
			rc = ph_layer_backward_input(L->ops, L->state, e->model->max_batch, &ctx, compute_params(e, l, mb), x,
						     sl->y[l - ch->a], dy, dx, &e2);
		else
			rc = ph_layer_backward(L->ops, L->state, e->model->max_batch, &ctx, compute_params(e, l, mb),
					       grad_params(e, l, mb), x, sl->y[l - ch->a], dy, dx, &e2);
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
	/* another micro-batch may have used the work buffers since I; a
	 * chunk with no split layer has nothing to do here, so no rerun */
	int any = 0;
	for (int l = ch->a; l < ch->b && !any; l++)
		any = ph_layer_has_split_backward(e->model->layers[l].ops);
	int rc0 = any ? rematerialize(e, c, mb, sl, err) : PH_OK;
	if (rc0)
		return rc0;
	for (int l = ch->b - 1; l >= ch->a && any; l--) {
		ph_layer *L = &e->model->layers[l];
		if (!ph_layer_has_split_backward(L->ops))
			continue;
		const float *x = l == ch->a ? ch->mb_x[mb] : sl->y[l - 1 - ch->a];
		const float *dy = layer_dy(e, ch, sl, l, l + 1 < ch->b ? sl->dy[l - ch->a] : NULL);
		ph_ctx ctx;
		fill_ctx(e, &ctx, mb, l, ch, sl->saved[l - ch->a]);
		ph_err e2 = { { 0 } };
		int rc = ph_layer_backward_weight(L->ops, L->state, e->model->max_batch, &ctx, compute_params(e, l, mb),
						  grad_params(e, l, mb), x, sl->y[l - ch->a], dy, &e2);
		if (rc)
			return ph_fail(err, rc, "layer %s (%s) weight gradient, micro-batch %d: %s", L->cfg->name,
				       L->ops->head.name, mb, e2.msg);
	}
	sl->mb = -1;
	ch->mb_slot[mb] = -1;
	return PH_OK;
}

int ph_eng_run_op(ph_engine *e, const ph_op *o, ph_err *err)
{
	int c = o->chunk, mb = o->mb;
	if (mb >= e->active_mbs)
		return PH_OK; /* a short final evaluation round */
	chunk_t *ch = &e->chunks[c];
	switch (o->kind) {
	case PH_OP_F:
		return run_forward(e, c, mb, err);
	case PH_OP_B: {
		int rc = run_backward(e, c, mb, 0, err);
		/* pipedream: the update right after the backward */
		return rc || !e->per_mb ? rc : ph_eng_versions_update_mb(e, c, mb, err);
	}
	case PH_OP_I:
		return run_backward(e, c, mb, 1, err);
	case PH_OP_W:
		return run_weight(e, c, mb, err);
	case PH_OP_SEND_ACT:
		return ph_link_send_act(e, c, mb, &ch->slots[ch->mb_slot[mb]], err);
	case PH_OP_RECV_ACT: {
		/* the slot the forward right after it fills, taken now: an
		 * input from another process lands in it */
		int s, rc = take_slot(e, c, mb, &s, err);
		return rc ? rc : ph_link_recv_act(e, c, mb, &ch->slots[s], err);
	}
	case PH_OP_SEND_GRAD:
		return ph_link_send_grad(e, c, mb, err);
	case PH_OP_RECV_GRAD:
		return ph_link_recv_grad(e, c, mb, err);
	case PH_OP_STEP_DONE:
		return ph_eng_stream_step_done(e, ch->rank, mb, err);
	case PH_OP_UPDATE:
		return ph_eng_stream_update(e, ch->rank, mb, err);
	}
	return ph_fail(err, PH_EINTERNAL, "unknown op %d", o->kind);
}
