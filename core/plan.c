/* SPDX-License-Identifier: MIT */
/* Planning: schedule -> compute lists -> checks -> lowered lists with
 * communication -> deadlock simulation; partitioner -> chunk boundaries. */
#include <stdlib.h>
#include <string.h>

#include "engine-layout.h"
#include "plan.h"
#include "plan-memory.h"

static const char kind_char[] = { 'F', 'B', 'I', 'W' };

void ph_action_str(const ph_action *a, int v, char *buf, size_t len)
{
	char k = a->kind < 4 ? kind_char[a->kind] : '?';
	if (v > 1)
		snprintf(buf, len, "%d%c%d", a->chunk, k, a->mb);
	else
		snprintf(buf, len, "%c%d", k, a->mb);
}

static void op_str(const ph_op *o, char *buf, size_t len)
{
	static const char *names[] = { "F", "B", "I", "W", "recv-activation", "send-activation",
				       "recv-gradient", "send-gradient" };
	snprintf(buf, len, "%s of chunk %d, micro-batch %d", names[o->kind], o->chunk, o->mb);
}

/* Per (chunk, mb) positions of each compute kind in its rank's list. */
typedef struct {
	int f, b, i, w; /* position + 1; 0 = absent */
} seen_t;

static int check_lists(ph_plan *p, ph_action **lists, const int *counts, ph_err *err)
{
	int P = p->ranks, C = p->nchunks, M = p->m;
	seen_t *seen = calloc((size_t)C * M, sizeof *seen);
	/* per chunk: the micro-batch of the last action that added to its
	 * weight gradients (B, or W of a split backward; its position is in
	 * seen) */
	int *grad_mb = malloc((size_t)C * sizeof *grad_mb);
	if (!seen || !grad_mb) {
		free(seen);
		free(grad_mb);
		return ph_fail(err, PH_ENOMEM, "out of memory");
	}
	for (int c = 0; c < C; c++)
		grad_mb[c] = -1;
	int rc = PH_OK;
	char s[32], who[96];
	snprintf(who, sizeof who, "schedule%s%.80s", p->sched_name ? " " : "", p->sched_name ? p->sched_name : "");
	for (int r = 0; r < P && !rc; r++)
		for (int k = 0; k < counts[r] && !rc; k++) {
			const ph_action *a = &lists[r][k];
			ph_action_str(a, p->v, s, sizeof s);
			if (a->kind > PH_ACT_W || a->chunk >= C || a->mb < 0 || a->mb >= M) {
				/* every field as the plugin gave it: the short form leaves
				 * the chunk out where there is one chunk a rank */
				rc = ph_fail(err, PH_EINVAL, "%s: rank %d position %d: action %s (kind %d, chunk %d, "
					     "micro-batch %d) is out of range (kinds 0..%d, chunks 0..%d, micro-batches 0..%d)",
					     who, r, k, s, (int)a->kind, a->chunk, a->mb, PH_ACT_W, C - 1, M - 1);
				break;
			}
			if (a->chunk % P != r) {
				rc = ph_fail(err, PH_EINVAL, "%s: rank %d position %d: %s runs chunk %d, which rank %d holds",
					     who, r, k, s, a->chunk, a->chunk % P);
				break;
			}
			seen_t *e = &seen[a->chunk * M + a->mb];
			int *slot = a->kind == PH_ACT_F ? &e->f : a->kind == PH_ACT_B ? &e->b : a->kind == PH_ACT_I ? &e->i : &e->w;
			if (*slot) {
				rc = ph_fail(err, PH_EINVAL, "%s: rank %d position %d: %s runs twice (first at position %d); "
					     "rule: every action exactly once", who, r, k, s, *slot - 1);
				break;
			}
			*slot = k + 1;
			/* PipeDream's weight stashing (engine-versions.c): the update
			 * follows each full backward, and micro-batch n reads version
			 * n - K + 1, which exists once micro-batch n - K's backward
			 * has run; earlier, the engine would read another version */
			int K = p->per_mb_versions && p->per_mb_versions[r] >= 1 ? p->per_mb_versions[r] : 0;
			if (K && (a->kind == PH_ACT_I || a->kind == PH_ACT_W))
				rc = ph_fail(err, PH_EINVAL, "%s: rank %d position %d: %s splits a backward, but the schedule updates "
					     "after each micro-batch's B (PH_SCHED_UPDATE_PER_MB); rule: full backwards only", who,
					     r, k, s);
			else if (K && a->kind == PH_ACT_F && a->mb >= K && !seen[a->chunk * M + a->mb - K].b)
				rc = ph_fail(err, PH_EINVAL, "%s: rank %d position %d: %s comes before micro-batch %d's backward; "
					     "rule: updating per micro-batch with K = %d weight version(s), micro-batch n's "
					     "forward after n - K's backward", who, r, k, s, a->mb - K, K);
			else if (a->kind != PH_ACT_F && !e->f)
				rc = ph_fail(err, PH_EINVAL, "%s: rank %d position %d: %s comes before its forward; "
					     "rule: each backward after its forward", who, r, k, s);
			else if (a->kind == PH_ACT_W && !e->i)
				rc = ph_fail(err, PH_EINVAL, "%s: rank %d position %d: %s comes before its I; "
					     "rule: each W after its I", who, r, k, s);
			/* Floats summed in another order give other bits: the
			 * promise that every schedule trains the same weights
			 * holds because each chunk adds its micro-batches'
			 * weight gradients in micro-batch order. */
			else if ((a->kind == PH_ACT_B || a->kind == PH_ACT_W) && a->mb < grad_mb[a->chunk]) {
				const seen_t *last = &seen[a->chunk * M + grad_mb[a->chunk]];
				rc = ph_fail(err, PH_EINVAL, "%s: rank %d position %d: %s adds to chunk %d's weight "
					     "gradients after micro-batch %d's (position %d); rule: each chunk's B or W in "
					     "micro-batch order, so that every schedule gives the same weights",
					     who, r, k, s, a->chunk, grad_mb[a->chunk], (last->b ? last->b : last->w) - 1);
			} else if (a->kind == PH_ACT_B || a->kind == PH_ACT_W)
				grad_mb[a->chunk] = a->mb;
		}
	for (int c = 0; c < C && !rc; c++)
		for (int mb = 0; mb < M && !rc; mb++) {
			seen_t *e = &seen[c * M + mb];
			ph_action a = { PH_ACT_F, 0, (uint16_t)c, mb };
			ph_action_str(&a, p->v, s, sizeof s);
			if (!e->f)
				rc = ph_fail(err, PH_EINVAL, "%s: rank %d never runs %s; rule: every forward exactly once",
					     who, c % P, s);
			else if (!e->b && !e->i)
				rc = ph_fail(err, PH_EINVAL, "%s: rank %d never runs the backward of chunk %d micro-batch %d; "
					     "rule: every backward exactly once", who, c % P, c, mb);
			else if (e->b && (e->i || e->w))
				rc = ph_fail(err, PH_EINVAL, "%s: chunk %d micro-batch %d has both B and I/W; use one", who, c, mb);
			else if (e->i && !e->w)
				rc = ph_fail(err, PH_EINVAL, "%s: rank %d never runs W of chunk %d micro-batch %d; "
					     "rule: every I has its W", who, c % P, c, mb);
		}
	free(seen);
	free(grad_mb);
	return rc;
}

static int push(ph_plan *p, int r, int *cap, uint8_t kind, int chunk, int mb, ph_err *err)
{
	if (p->nops[r] == *cap) {
		*cap = *cap ? *cap * 2 : 64;
		ph_op *n = realloc(p->ops[r], (size_t)*cap * sizeof *n);
		if (!n)
			return ph_fail(err, PH_ENOMEM, "out of memory");
		p->ops[r] = n;
	}
	p->ops[r][p->nops[r]++] = (ph_op){ kind, chunk, mb };
	return PH_OK;
}

static int lower(ph_plan *p, ph_action **lists, const int *counts, ph_err *err)
{
	int last = p->nchunks - 1, rc = PH_OK;
	for (int r = 0; r < p->ranks && !rc; r++) {
		int cap = 0;
		for (int k = 0; k < counts[r] && !rc; k++) {
			const ph_action *a = &lists[r][k];
			int c = a->chunk, mb = a->mb;
			switch (a->kind) {
			case PH_ACT_F:
				if (c > 0 && (rc = push(p, r, &cap, PH_OP_RECV_ACT, c, mb, err)))
					break;
				if ((rc = push(p, r, &cap, PH_OP_F, c, mb, err)))
					break;
				if (c < last)
					rc = push(p, r, &cap, PH_OP_SEND_ACT, c, mb, err);
				break;
			case PH_ACT_B:
			case PH_ACT_I:
				if (c < last && (rc = push(p, r, &cap, PH_OP_RECV_GRAD, c, mb, err)))
					break;
				if ((rc = push(p, r, &cap, a->kind, c, mb, err)))
					break;
				if (c > 0)
					rc = push(p, r, &cap, PH_OP_SEND_GRAD, c, mb, err);
				break;
			case PH_ACT_W:
				rc = push(p, r, &cap, PH_OP_W, c, mb, err);
				break;
			}
		}
	}
	return rc;
}

/* Run the lowered lists with unbounded mailboxes: sends never block, a
 * receive waits for its send.  If every unfinished rank waits, the plan
 * would deadlock.  Also measures each chunk's peak in-flight micro-batches. */
static int simulate(ph_plan *p, ph_err *err)
{
	int C = p->nchunks, M = p->m, P = p->ranks;
	uint8_t *act = calloc((size_t)C * M, 1), *grad = calloc((size_t)C * M, 1);
	int *pos = calloc((size_t)P, sizeof *pos), *live = calloc((size_t)C, sizeof *live);
	int rc = PH_OK;
	if (!act || !grad || !pos || !live) {
		rc = ph_fail(err, PH_ENOMEM, "out of memory");
		goto out;
	}
	for (int c = 0; c < C; c++)
		p->slots[c] = 0;
	for (;;) {
		int progress = 0, done = 1;
		for (int r = 0; r < P; r++) {
			while (pos[r] < p->nops[r]) {
				const ph_op *o = &p->ops[r][pos[r]];
				if (o->kind == PH_OP_RECV_ACT && !act[(o->chunk - 1) * M + o->mb])
					break;
				if (o->kind == PH_OP_RECV_GRAD && !grad[(o->chunk + 1) * M + o->mb])
					break;
				if (o->kind == PH_OP_SEND_ACT)
					act[o->chunk * M + o->mb] = 1;
				if (o->kind == PH_OP_SEND_GRAD)
					grad[o->chunk * M + o->mb] = 1;
				if (o->kind == PH_OP_F && ++live[o->chunk] > p->slots[o->chunk])
					p->slots[o->chunk] = live[o->chunk];
				if (o->kind == PH_OP_B || o->kind == PH_OP_W)
					live[o->chunk]--;
				pos[r]++;
				progress = 1;
			}
			if (pos[r] < p->nops[r])
				done = 0;
		}
		if (done)
			break;
		if (!progress) {
			char what[96];
			int r = 0;
			while (pos[r] >= p->nops[r])
				r++;
			op_str(&p->ops[r][pos[r]], what, sizeof what);
			rc = ph_fail(err, PH_EINVAL, "schedule%s%.80s deadlocks: rank %d waits forever at step %d (%s) and no "
				     "rank can move; rule: the lowered plan must not deadlock", p->sched_name ? " " : "",
				     p->sched_name ? p->sched_name : "", r, pos[r], what);
			break;
		}
	}
out:
	free(act);
	free(grad);
	free(pos);
	free(live);
	return rc;
}

int ph_plan_set_actions(ph_plan *p, ph_action **lists, const int *counts, ph_err *err)
{
	int rc = check_lists(p, lists, counts, err);
	if (rc)
		return rc;
	if (!p->ops) {
		p->ops = calloc((size_t)p->ranks, sizeof *p->ops);
		p->nops = calloc((size_t)p->ranks, sizeof *p->nops);
		p->slots = calloc((size_t)p->nchunks, sizeof *p->slots);
		if (!p->ops || !p->nops || !p->slots)
			return ph_fail(err, PH_ENOMEM, "out of memory");
	}
	if ((rc = lower(p, lists, counts, err)))
		return rc;
	return simulate(p, err);
}

/* "partitioner dp: " unless the plugin's message already starts with "dp:". */
/* what a generate hook that failed without a message is said to have done */
#define SILENT_GENERATE "generate failed without saying why; a bug in the plugin"

static const char *plugin_prefix(const char *msg, const char *kind, const char *name)
{
	static __thread char buf[96];
	size_t n = strlen(name);
	if (strncmp(msg, name, n) == 0 && msg[n] == ':') {
		snprintf(buf, sizeof buf, "%s ", kind);
		return buf;
	}
	snprintf(buf, sizeof buf, "%s %s: ", kind, name);
	return buf;
}

/* [run] chunks within what the schedule runs per rank */
static int check_chunk_limit(const ph_config *c, ph_err *err)
{
	const ph_schedule_ops *s = c->schedule;
	int v = (int)c->run.chunks;
	/* Suggest interleaved only to a schedule of one chunk per rank: one
	 * that takes several already is the answer, and only its limit is. */
	if (v > s->max_chunks_per_rank && s->max_chunks_per_rank > 1)
		return ph_fail(err, PH_EINVAL, "schedule %s runs at most %d chunks per rank; [run] chunks = %d: lower it to "
			       "%d or fewer", s->head.name, s->max_chunks_per_rank, v, s->max_chunks_per_rank);
	if (v > s->max_chunks_per_rank)
		return ph_fail(err, PH_EINVAL, "schedule %s runs at most %d chunk(s) per rank; [run] chunks = %d: lower it or "
			       "use schedule = interleaved", s->head.name, s->max_chunks_per_rank, v);
	return PH_OK;
}

static int make_actions(ph_plan *p, const ph_config *c, ph_err *err)
{
	const ph_schedule_ops *s = c->schedule;
	ph_schedule_shape shape = { p->ranks, p->v, p->m };
	int rc;
	if ((rc = check_chunk_limit(c, err)))
		return rc;
	if (s->check && (rc = s->check(c->schedule_config, &shape, err)))
		return rc;
	p->actions = calloc((size_t)p->ranks, sizeof *p->actions);
	p->nactions = calloc((size_t)p->ranks, sizeof *p->nactions);
	if (!p->actions || !p->nactions)
		return ph_fail(err, PH_ENOMEM, "out of memory");
	p->sched_name = s->head.name;
	if ((rc = ph_plan_per_mb_versions(s, c->schedule_config, &shape, &p->per_mb_versions, err)))
		return rc;
	int cap = 4 * p->v * p->m;
	for (int r = 0; r < p->ranks; r++) {
		if (!(p->actions[r] = calloc((size_t)cap, sizeof(ph_action))))
			return ph_fail(err, PH_ENOMEM, "out of memory");
		ph_err e2 = { { 0 } };
		if ((rc = s->generate(c->schedule_config, &shape, r, p->actions[r], cap, &p->nactions[r], &e2)))
			return ph_fail(err, rc, "%s%s", plugin_prefix(e2.msg, "schedule", s->head.name),
				       e2.msg[0] ? e2.msg : SILENT_GENERATE);
		if (p->nactions[r] < 0 || p->nactions[r] > cap)
			return ph_fail(err, PH_EINTERNAL, "schedule %s: rank %d returned %d actions (room for %d)", s->head.name,
				       r, p->nactions[r], cap);
	}
	return ph_plan_set_actions(p, p->actions, p->nactions, err);
}

int ph_plan_can_cut(const ph_config *c, const ph_layer_cfg *l)
{
	if (c->part.cuts == PH_CUTS_MARKED)
		return l->cut == PH_CUT_YES;
	return l->cut != PH_CUT_NO;
}

int ph_plan_check_cuttable(const ph_model *m, const ph_config *c, ph_err *err)
{
	int n = m->n, ranks = (int)c->run.stages, v = (int)c->run.chunks, K = ranks * v;
	int cuts = 0, rc = c->schedule ? check_chunk_limit(c, err) : PH_OK;
	if (rc)
		return rc;
	for (int i = 0; i + 1 < n; i++)
		cuts += ph_plan_can_cut(c, m->layers[i].cfg);
	char where[PH_STR_MAX + 16];
	ph_ini_where_key(&c->ini, "run", "stages", where, sizeof where);
	if (K > n)
		return ph_fail(err, PH_EINVAL, "%s: [run] stages = %d x chunks = %d needs at least %d layers, one per "
			       "stage; the model has %d: lower stages", where, ranks, v, K, n);
	if (K > cuts + 1)
		return ph_fail(err, PH_EINVAL, "%s: %d stages need %d boundaries but the layers allow only %d (%s): lower "
			       "stages or allow more cuts", where, K, K - 1, cuts,
			       c->part.cuts == PH_CUTS_MARKED ? "[partition] cuts = marked and few layers say cut = yes"
							      : "cut = no on the others");
	return PH_OK;
}

int ph_plan_check_per_mb(const ph_model *m, const ph_config *c, ph_err *err)
{
	const uint32_t fl = c->schedule ? ph_schedule_flags(c->schedule) : 0;
	if (!(fl & PH_SCHED_UPDATE_PER_MB) || (fl & PH_SCHED_DELAYED_UPDATE))
		return PH_OK;
	const char *name = c->schedule->head.name;
	char where[PH_STR_MAX + 16];
	if (c->optim.clip > 0) {
		ph_ini_where_key(&c->ini, "optimizer", "clip", where, sizeof where);
		return ph_fail(err, PH_EINVAL, "%s: schedule %s updates after every micro-batch on its own rank: the global "
			       "clip norm cannot apply; set [optimizer] clip = 0", where, name);
	}
	if (c->run.replicas > 1) {
		ph_ini_where_key(&c->ini, "run", "replicas", where, sizeof where);
		return ph_fail(err, PH_EINVAL, "%s: schedule %s updates after every micro-batch: the replicas' gradients "
			       "cannot be summed each step; set [run] replicas = 1", where, name);
	}
	if (m->nties)
		return ph_fail(err, PH_EINVAL, "layer %s: schedule %s updates after every micro-batch on its own rank: tied "
			       "weights (tie =) would drift apart; remove the tie", m->layers[m->ties[0].dst_layer].cfg->name,
			       name);
	if (ph_config_span(c) > 1)
		return ph_fail(err, PH_EINVAL, "schedule %s runs a pipeline in one process; run it without mpirun or "
			       "with whole pipelines per process", name);
	return PH_OK;
}

static int make_partition(ph_plan *p, const ph_model *m, const ph_config *c, const double *cost_fwd,
			  const double *cost_bwd, ph_err *err)
{
	int n = m->n, K = p->nchunks, rc = PH_OK;
	if ((rc = ph_plan_check_cuttable(m, c, err)))
		return rc;
	double *buf = calloc((size_t)n * 6 + (size_t)K, sizeof(double));
	const char **names = calloc((size_t)n, sizeof *names), **types = calloc((size_t)n, sizeof *types);
	uint8_t *cut = calloc((size_t)n, 1);
	int *inflight = calloc((size_t)K, sizeof *inflight);
	p->first = calloc((size_t)K + 1, sizeof *p->first);
	if (!buf || !names || !types || !cut || !inflight || !p->first) {
		rc = ph_fail(err, PH_ENOMEM, "out of memory");
		goto out;
	}
	double *fwd = buf, *bwd = buf + n, *pb = buf + 2 * n, *ab = buf + 3 * n, *kb = buf + 4 * n, *lim = buf + 6 * n;
	for (int i = 0; i < n; i++) {
		const ph_layer *l = &m->layers[i];
		double out_bytes = 4.0 * (double)ph_shape_numel(&l->meta.out) * m->max_batch;
		fwd[i] = cost_fwd ? cost_fwd[i] : l->meta.fwd_flops;
		bwd[i] = cost_bwd ? cost_bwd[i] : l->meta.bwd_flops;
		if (c->part.cost == PH_COST_PARAMS) {
			/* dense layers cost ~2 FLOPs per parameter forward, twice that backward */
			fwd[i] = (double)l->param_numel;
			bwd[i] = 2.0 * (double)l->param_numel;
		}
		pb[i] = 4.0 * (double)l->param_numel;
		ab[i] = out_bytes;
		kb[i] = out_bytes + (double)ph_layer_saved_bytes(l) * m->max_batch;
		names[i] = l->cfg->name;
		types[i] = l->ops->head.name;
		cut[i] = i + 1 < n ? (uint8_t)ph_plan_can_cut(c, l->cfg) : 0;
	}
	/* Costs meet bandwidth only in seconds: turn FLOPs into time at the
	 * configured device speed (profiled costs are seconds already). */
	double link = c->part.link_gbps * 1e9;
	if (link > 0 && !cost_fwd && c->part.cost != PH_COST_PARAMS)
		for (int i = 0; i < n; i++) {
			fwd[i] /= c->part.device_tflops * 1e12;
			bwd[i] /= c->part.device_tflops * 1e12;
		}
	for (int k = 0; k < K; k++)
		lim[k] = c->part.memory_gib * 1024.0 * 1024.0 * 1024.0;
	{
		/* A cost model that prices every layer at 0 cannot balance anything:
		 * the partitioners would silently fall back to counting layers. */
		double total = 0;
		for (int i = 0; i < n; i++)
			total += fwd[i] + bwd[i];
		if (!(total > 0)) {
			static const char *src[] = { "flops", "params", "profile", "auto" };
			char where[PH_STR_MAX + 16];
			ph_ini_where_key(&c->ini, "partition", "cost", where, sizeof where);
			rc = ph_fail(err, PH_EINVAL, "%s: [partition] cost = %s gives every layer a cost of 0, so no split "
				     "can be balanced; use cost = flops or profile, or partition.type = explicit", where,
				     src[c->part.cost]);
			goto out;
		}
	}
	/* Under recompute a chunk keeps one micro-batch's activations whole
	 * (the one being recomputed; except_last: the last one's too) and
	 * little more per micro-batch in flight (its last output): in the
	 * partitioners' model, one or two in flight.  The plan's own figure
	 * is checked against the limit after (check_memory_limit). */
	for (int k = 0; k < K; k++)
		inflight[k] = c->run.recompute == PH_RECOMPUTE_YES	      ? 1
			      : c->run.recompute == PH_RECOMPUTE_EXCEPT_LAST ? (p->slots[k] < 2 ? p->slots[k] : 2)
									     : p->slots[k];
	ph_partition_problem pbm = {
		.n = n, .stages = K, .fwd_cost = fwd, .bwd_cost = bwd, .param_bytes = pb, .act_bytes = ab,
		.keep_bytes = kb, .names = names, .types = types, .cut_after = cut, .mem_limit = lim,
		.in_flight = inflight, .state_factor = 2.0 + ph_optim_state_per_param(&c->optim), .link_bytes_per_s = link,
	};
	ph_err warn = { { 0 } }, e2 = { { 0 } };
	/* The answer goes to a copy with a guard zone after first[K]: a
	 * partitioner writing past it once ended the run in free() with
	 * SIGABRT, naming nobody. */
	enum { GUARD = 16, SENTINEL = -0x5eed };
	int *bounds = malloc(((size_t)K + 1 + GUARD) * sizeof *bounds);
	if (!bounds) {
		rc = ph_fail(err, PH_ENOMEM, "out of memory");
		goto out;
	}
	for (int k = 0; k < K + 1 + GUARD; k++)
		bounds[k] = k <= K ? p->first[k] : SENTINEL;
	rc = c->partitioner->partition(c->partitioner_config, &pbm, bounds, &warn, &e2);
	int past = -1;
	for (int k = K + GUARD; k > K; k--)
		if (bounds[k] != SENTINEL)
			past = k;
	memcpy(p->first, bounds, ((size_t)K + 1) * sizeof *p->first);
	free(bounds);
	if (past >= 0) {
		rc = ph_fail(err, PH_EINVAL, "partitioner %s wrote past first[%d] (the bounds array has K + 1 = %d entries "
			     "for K = %d stages; it wrote first[%d]); fix the plugin", c->partitioner->head.name, K, K + 1,
			     K, past);
		goto out;
	}
	if (rc) {
		/* the partitioner's keys are [partition]'s: point at its type */
		char where[PH_STR_MAX + 16];
		ph_ini_where_key(&c->ini, "partition", "type", where, sizeof where);
		rc = ph_fail(err, rc, "%s: %s%s", where, plugin_prefix(e2.msg, "partitioner", c->partitioner->head.name),
			     e2.msg[0] ? e2.msg : "it refused without saying why; a bug in the plugin");
		goto out;
	}
	if (warn.msg[0])
		fprintf(stderr, "pipehost: partitioner %s: %s\n", c->partitioner->head.name, warn.msg);
	/* A third-party partitioner's answer is checked like any input. */
	rc = ph_plan_check_bounds(c->partitioner->head.name, &pbm, p->first, err);
out:
	free(buf);
	free(names);
	free(types);
	free(cut);
	free(inflight);
	return rc;
}

int ph_plan_check_bounds(const char *partitioner, const ph_partition_problem *pb, const int *first, ph_err *err)
{
	int n = pb->n, K = pb->stages;
	if (first[0] != 0 || first[K] != n)
		return ph_fail(err, PH_EINTERNAL, "partitioner %s returned bounds starting at %d and ending at %d; they must "
			       "cover layers 0..%d", partitioner, first[0], first[K], n - 1);
	for (int k = 0; k < K; k++) {
		if (first[k + 1] > n)
			return ph_fail(err, PH_EINTERNAL, "partitioner %s starts stage %d at layer %d, past the last layer %d",
				       partitioner, k + 1, first[k + 1], n - 1);
		if (first[k + 1] <= first[k])
			return ph_fail(err, PH_EINTERNAL, "partitioner %s left stage %d empty", partitioner, k);
		if (k > 0 && pb->cut_after && !pb->cut_after[first[k] - 1])
			return ph_fail(err, PH_EINVAL, "partitioner %s cut after layer %s, which has cut = no", partitioner,
				       pb->names ? pb->names[first[k] - 1] : "?");
	}
	return PH_OK;
}

/* Will the engine run this plan's steps as streams of [run] window steps?
 * When not, and the schedule is a no-flush one, *why says what stops it.
 * (ph_plan_stream is below; the check builds a whole window's lists.)
 * 1: a stream; 0: not, with *why; -1: out of memory, in *err. */
static int decide_stream(const ph_plan *p, const ph_model *m, const ph_config *c, const char **why, ph_err *err)
{
	uint32_t fl = ph_schedule_flags(c->schedule);
	int split = 0;
	*why = NULL;
	if (!(fl & PH_SCHED_NO_FLUSH) || !(fl & (PH_SCHED_DELAYED_UPDATE | PH_SCHED_UPDATE_PER_MB)))
		return 0;
	uint32_t shards = 0;
	for (int r = 0; r < p->ranks; r++)
		for (int k = 0; k < p->nops[r]; k++)
			split |= p->ops[r][k].kind == PH_OP_I;
	for (int l = 0; l < m->n; l++)
		shards |= m->layers[l].meta.sharded_params;
	*why = c->run.window < 2   ? "[run] window = 1"
	       : c->place.cuda	   ? "the stream is built for the CPU only"
	       : ph_config_span(c) > 1 ? "a pipeline split over processes"
	       : c->comm.size > 1 && !c->comm.threads ? "this MPI has no MPI_THREAD_MULTIPLE"
	       : p->v != 1 || split ? "chunks or a split backward"
	       : shards && c->run.replicas > 1 ? "parameters sharded over replicas (their clip norm is not in the stream)"
	       : (int64_t)p->m * c->run.window > (1 << 20) ? "micro_batches x window is over 1048576; lower [run] window"
	       /* the window's lists, built below to count their slots: about
		* 90 bytes an op (64 stages x 4096 x 256 once took 5 GB) */
	       : (int64_t)p->ranks * p->m * c->run.window > (1 << 22)
		       ? "stages x micro_batches x window is over 4194304; lower [run] window"
		       : NULL;
	if (*why)
		return 0;
	/* a whole window's lists keep no more micro-batches in flight than
	 * one step's, which the chunks' slots are made for */
	ph_plan sp;
	ph_err why_not;
	int rc = ph_plan_stream(p, c, (int)c->run.window, &sp, &why_not);
	if (rc == PH_ENOMEM) { /* no room to plan it is no answer: said, not taken for "does not fit" */
		*err = why_not;
		ph_plan_free(&sp);
		return -1;
	}
	int fits = !rc;
	for (int k = 0; fits && k < p->nchunks; k++)
		fits = sp.slots[k] <= p->slots[k];
	ph_plan_free(&sp);
	if (!fits)
		*why = "a window would keep more micro-batches in flight than a step (micro_batches < stages)";
	return fits;
}

/* [partition] memory bounds every chunk's memory as --plan prints it (est.
 * MiB).  The partitioners see a model of it (ph_partition_problem:
 * parameters, state and kept bytes per layer); this is the exact figure,
 * scratch, shared ties, weight versions and the engine's buffer table
 * included. */
static int check_memory_limit(const ph_plan *p, const ph_model *m, const ph_config *c, ph_err *err)
{
	const double limit = c->part.memory_gib * 1024.0 * 1024.0 * 1024.0;
	if (!(limit > 0))
		return PH_OK;
	for (int k = 0; k < p->nchunks; k++) {
		ph_chunk_mem mem;
		if (ph_plan_chunk_mem(p, m, c, k, &mem))
			return ph_fail(err, PH_ENOMEM, "out of memory counting chunk %d's memory for [partition] memory", k);
		if (mem.total <= limit)
			continue;
		char where[PH_STR_MAX + 16];
		ph_ini_where_key(&c->ini, "partition", "memory", where, sizeof where);
		const int a = p->first[k], b = p->first[k + 1] - 1;
		return ph_fail(err, PH_EINVAL, "%s: chunk %d (layers %d..%d, %s..%s) needs %.1f MiB (--plan's est. MiB), "
			       "over [partition] memory = %g GiB (%.1f MiB); raise it, add stages%s", where, k, a, b,
			       m->layers[a].cfg->name, m->layers[b].cfg->name, mem.total / 1048576.0, c->part.memory_gib,
			       limit / 1048576.0, c->run.recompute == PH_RECOMPUTE_YES ? "" : ", or set [run] recompute = yes");
	}
	return PH_OK;
}

int ph_plan_build(ph_plan *p, const ph_model *m, const ph_config *c, const double *cost_fwd,
		  const double *cost_bwd, ph_err *err)
{
	memset(p, 0, sizeof *p);
	p->ranks = (int)c->run.stages;
	p->v = (int)c->run.chunks;
	p->nchunks = p->ranks * p->v;
	p->m = (int)c->run.micro_batches;
	int rc = make_actions(p, c, err);
	if (rc || (rc = make_partition(p, m, c, cost_fwd, cost_bwd, err)))
		return rc;
	/* once, for --plan and for every replica's engine */
	if ((p->streams = decide_stream(p, m, c, &p->stream_why, err)) < 0) {
		p->streams = 0;
		return PH_ENOMEM;
	}
	return check_memory_limit(p, m, c, err);
}

double ph_plan_activation_bytes(const ph_plan *p, const ph_model *m, const ph_config *c, int k)
{
	/* the engine's own table of chunk k's buffers (engine-layout.h), on
	 * replica 0's devices; -1 when it cannot be made (out of memory) */
	ph_chunk_layout lay;
	ph_err err = { { 0 } };
	if (ph_chunk_layout_make(&lay, p, m, c, c->place.ordinal, k, &err))
		return -1;
	double bytes = (double)lay.activation_bytes;
	ph_chunk_layout_free(&lay);
	return bytes;
}

int ph_plan_layer_rank(const ph_plan *p, int l)
{
	for (int c = 0; c < p->nchunks; c++)
		if (l >= p->first[c] && l < p->first[c + 1])
			return c % p->ranks;
	return 0;
}

int ph_plan_shared_tie(const ph_plan *p, const ph_model *m, int l)
{
	const ph_layer *L = &m->layers[l];
	if (L->meta.nparams != 1 || L->meta.sharded_params)
		return -1;
	for (int k = 0; k < m->nties; k++) {
		const ph_tie *t = &m->ties[k];
		if (t->dst_layer == l && t->dst_param == 0 && t->src_layer < l &&
		    !(m->layers[t->src_layer].meta.sharded_params >> t->src_param & 1u) &&
		    ph_plan_layer_rank(p, t->src_layer) == ph_plan_layer_rank(p, l))
			return k;
	}
	return -1;
}

double ph_plan_shared_bytes(const ph_plan *p, const ph_model *m, const ph_config *c, int k)
{
	double n = 0;
	for (int i = p->first[k]; i < p->first[k + 1]; i++)
		if (ph_plan_shared_tie(p, m, i) >= 0)
			n += (double)m->layers[i].param_numel;
	return 4.0 * n * (1 + ph_optim_state_per_param(&c->optim));
}

void ph_plan_print(FILE *f, const ph_plan *p, const ph_model *m, const ph_config *c)
{
	double total = 0;
	for (int i = 0; i < m->n; i++)
		total += m->layers[i].meta.fwd_flops + m->layers[i].meta.bwd_flops;
	/* a stream's delayed update keeps a second gradient buffer */
	int stream_grads = p->streams && (ph_schedule_flags(c->schedule) & PH_SCHED_DELAYED_UPDATE);
	fprintf(f, "plan: %d layers, %d rank(s) x %d chunk(s), %d micro-batches of %d, schedule %s, partitioner %s\n",
		m->n, p->ranks, p->v, p->m, m->max_batch, c->schedule->head.name, c->partitioner->head.name);
	int span = ph_config_span(c);
	if (c->run.replicas > 1 && span == 1)
		fprintf(f, "data parallel: %lld replicas of this pipeline (%d per process, %d process%s), gradients summed "
			"every step\n", (long long)c->run.replicas, ph_config_local_replicas(c), c->comm.size,
			c->comm.size == 1 ? "" : "es");
	else if (span > 1)
		fprintf(f, "processes: %d (mpirun); %lld replica(s), each split over %d processes of %d rank(s)%s\n",
			c->comm.size, (long long)c->run.replicas, span, p->ranks / span,
			c->run.replicas > 1 ? "; gradients summed every step" : "");
	fprintf(f, "  %-5s %-4s %-6s %-34s %10s %6s %9s %10s\n", "chunk", "rank", "device", "layers", "params", "cost",
		"in-flight", "est. MiB");
	for (int k = 0; k < p->nchunks; k++) {
		int a = p->first[k], b = p->first[k + 1] - 1;
		int64_t params = 0;
		double cost = 0;
		for (int i = a; i <= b; i++) {
			const ph_layer *l = &m->layers[i];
			params += l->param_numel;
			cost += l->meta.fwd_flops + l->meta.bwd_flops;
		}
		char range[160];
		if (a == b)
			snprintf(range, sizeof range, "%s (%d)", m->layers[a].cfg->name, a);
		else
			snprintf(range, sizeof range, "%s..%s (%d-%d)", m->layers[a].cfg->name, m->layers[b].cfg->name, a, b);
		ph_chunk_mem mem;
		char est[32] = "?"; /* out of memory to count it: no figure rather than a wrong one */
		if (!ph_plan_chunk_mem(p, m, c, k, &mem))
			snprintf(est, sizeof est, "%.1f", mem.total / (1024.0 * 1024.0));
		char dev[16];
		ph_placement_name(&c->place, k % p->ranks, dev, sizeof dev);
		fprintf(f, "  %-5d %-4d %-6s %-34s %10lld %5.1f%% %9d %10s\n", k, k % p->ranks, dev, range,
			(long long)params, total > 0 ? 100.0 * cost / total : 0.0, p->slots[k], est);
	}
	/* an asynchronous schedule: the weight versions each rank holds */
	ph_schedule_shape shape = { p->ranks, p->v, p->m };
	int any = 0;
	for (int r = 0; r < p->ranks; r++)
		any |= ph_schedule_weight_versions(c->schedule, c->schedule_config, &shape, r) > 1;
	if (any) {
		fprintf(f, "weight versions per rank (in est. MiB):");
		for (int r = 0; r < p->ranks; r++)
			fprintf(f, " %d", ph_schedule_weight_versions(c->schedule, c->schedule_config, &shape, r));
		uint32_t fl = ph_schedule_flags(c->schedule);
		fprintf(f, "%s%s%s\n", fl & PH_SCHED_DELAYED_UPDATE ? "; update delayed one step, W(t+1) = W(t) - lr * grad f(W(t-1))" : "",
			fl & PH_SCHED_NO_FLUSH ? "; no flush between steps" : "",
			stream_grads ? " (a second gradient buffer, for the next step's backwards)" : "");
	}
}

int ph_plan_stream(const ph_plan *p, const ph_config *c, int k, ph_plan *out, ph_err *err)
{
	const ph_schedule_ops *s = c->schedule;
	memset(out, 0, sizeof *out);
	out->ranks = p->ranks;
	out->v = p->v;
	out->nchunks = p->nchunks;
	out->m = k * p->m;
	ph_schedule_shape shape = { p->ranks, p->v, out->m };
	int cap = 4 * p->v * out->m, rc;
	out->first = malloc(((size_t)p->nchunks + 1) * sizeof *out->first);
	out->actions = calloc((size_t)p->ranks, sizeof *out->actions);
	out->nactions = calloc((size_t)p->ranks, sizeof *out->nactions);
	if (!out->first || !out->actions || !out->nactions)
		return ph_fail(err, PH_ENOMEM, "out of memory");
	memcpy(out->first, p->first, ((size_t)p->nchunks + 1) * sizeof *out->first);
	out->sched_name = s->head.name;
	/* the versions the engine keeps: the one step's shape's (engine-versions.c
	 * sizes its rings so), not the stream's k * m */
	if (p->per_mb_versions) {
		if (!(out->per_mb_versions = malloc((size_t)p->ranks * sizeof *out->per_mb_versions)))
			return ph_fail(err, PH_ENOMEM, "out of memory");
		memcpy(out->per_mb_versions, p->per_mb_versions, (size_t)p->ranks * sizeof *out->per_mb_versions);
	}
	for (int r = 0; r < p->ranks; r++) {
		if (!(out->actions[r] = calloc((size_t)cap, sizeof(ph_action))))
			return ph_fail(err, PH_ENOMEM, "out of memory");
		err->msg[0] = 0;
		if ((rc = s->generate(c->schedule_config, &shape, r, out->actions[r], cap, &out->nactions[r], err)))
			return err->msg[0] ? rc : ph_fail(err, rc, "schedule %s: %s", s->head.name, SILENT_GENERATE);
		if (out->nactions[r] < 0 || out->nactions[r] > cap)
			return ph_fail(err, PH_EINTERNAL, "schedule %s: rank %d returned %d actions (room for %d)",
				       s->head.name, r, out->nactions[r], cap);
	}
	return ph_plan_set_actions(out, out->actions, out->nactions, err);
}

void ph_plan_free(ph_plan *p)
{
	for (int r = 0; r < p->ranks; r++) {
		if (p->actions)
			free(p->actions[r]);
		if (p->ops)
			free(p->ops[r]);
	}
	free(p->actions);
	free(p->nactions);
	free(p->ops);
	free(p->nops);
	free(p->slots);
	free(p->first);
	free(p->per_mb_versions);
	memset(p, 0, sizeof *p);
}

int ph_plan_per_mb_versions(const ph_schedule_ops *ops, const void *config, const ph_schedule_shape *shape,
			    int **out, ph_err *err)
{
	*out = NULL;
	uint32_t fl = ph_schedule_flags(ops);
	if (!(fl & PH_SCHED_UPDATE_PER_MB) || (fl & PH_SCHED_DELAYED_UPDATE))
		return PH_OK;
	if (!(*out = malloc((size_t)shape->ranks * sizeof **out)))
		return ph_fail(err, PH_ENOMEM, "out of memory");
	for (int r = 0; r < shape->ranks; r++)
		(*out)[r] = ph_schedule_weight_versions(ops, config, shape, r);
	return PH_OK;
}
