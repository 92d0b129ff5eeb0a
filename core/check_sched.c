/* SPDX-License-Identifier: MIT */
/* pipehost --check-plugin, a schedule's and a partitioner's checks
 * (check_impl.h): the host's own validation of what they produce. */
#include <stdlib.h>
#include <string.h>

#include "check_impl.h"
#include "plan.h"

/* A refusal's message, or what its absence means: a plugin that refuses
 * says why (plugin.h), and a blank after "refused:" reads as the
 * checker's slip.  Schedules and partitioners alike. */
static const char *reason(const char *msg)
{
	return msg[0] ? msg : "(it gave no reason; a bug in the plugin)";
}

/* ------------------------------------------------------------------ */
/* Schedules: the host's own checks (core/plan.c) on a few shapes.      */

static const ph_schedule_shape sched_shapes[] = {
	{ 1, 1, 1 }, { 1, 1, 4 }, { 2, 1, 4 }, { 3, 1, 7 }, { 4, 1, 8 }, { 2, 2, 4 }, { 4, 2, 8 }, { 2, 3, 6 },
};

void ph_chk_schedule(const ph_schedule_ops *s, const ph_check_opts *o)
{
	const char *name = s->head.name;
	ph_err e = { { 0 } };
	void *cfg;
	char notes[256];
	int rc0;
	ph_chk_begin("schedule %s: options", name);
	if ((rc0 = ph_chk_build_config(&s->head, o, &cfg, notes, sizeof notes, &e))) {
		FAIL_RC(rc0, "%s", e.msg);
		return;
	}
	PASS("defaults%s%s", notes[0] ? "; the checker's choice for the required: " : "", notes);
	if (s->max_chunks_per_rank < 1) {
		ph_chk_begin("schedule %s: max_chunks_per_rank", name);
		FAIL("is %d; 1 for a schedule without virtual chunks", s->max_chunks_per_rank);
		free(cfg);
		return;
	}
	int accepted = 0, oomed = 0; /* oomed: checks out of memory, not judged */
	for (size_t i = 0; i < sizeof sched_shapes / sizeof sched_shapes[0]; i++) {
		ph_schedule_shape sh = sched_shapes[i];
		if (sh.chunks_per_rank > s->max_chunks_per_rank)
			continue;
		ph_chk_begin("schedule %s: p=%d v=%d m=%d", name, sh.ranks, sh.chunks_per_rank, sh.microbatches);
		e.msg[0] = 0;
		ph_chk_hook("check");
		int refused = s->check ? s->check(cfg, &sh, &e) : PH_OK;
		ph_chk_hook(NULL);
		if (refused == PH_ENOMEM) { /* no memory: not a refusal, and not judged */
			FAIL_RC(PH_ENOMEM, "%s", e.msg);
			oomed++;
			continue;
		}
		if (refused) {
			SKIP("refused by its check: %s", reason(e.msg));
			continue;
		}
		accepted++;
		ph_plan p;
		memset(&p, 0, sizeof p);
		p.ranks = sh.ranks;
		p.v = sh.chunks_per_rank;
		p.nchunks = p.ranks * p.v;
		p.m = sh.microbatches;
		int cap = 4 * p.v * p.m, rc = PH_OK; /* the room the host gives (core/plan.c) */
		p.actions = calloc((size_t)p.ranks, sizeof *p.actions);
		p.nactions = calloc((size_t)p.ranks, sizeof *p.nactions);
		if (!p.actions || !p.nactions)
			rc = ph_fail(&e, PH_ENOMEM, "out of memory");
		for (int r = 0; r < p.ranks && !rc; r++) {
			ph_err e2 = { { 0 } };
			if (!(p.actions[r] = calloc((size_t)cap, sizeof(ph_action)))) {
				rc = ph_fail(&e, PH_ENOMEM, "out of memory");
				break;
			}
			ph_chk_hook("generate");
			rc = s->generate(cfg, &sh, r, p.actions[r], cap, &p.nactions[r], &e2);
			ph_chk_hook(NULL);
			if (rc)
				ph_fail(&e, rc, "generate for rank %d failed after its check accepted the shape: %s", r,
					e2.msg[0] ? e2.msg : "it failed without saying why; a bug in the plugin");
			else if (p.nactions[r] < 0 || p.nactions[r] > cap)
				rc = ph_fail(&e, PH_EINVAL, "rank %d returned %d actions (room for %d)", r, p.nactions[r], cap);
		}
		/* a run's own rule for an update per micro-batch (core/plan.c):
		 * the plan needs each rank's weight versions to check it */
		if (!rc) {
			ph_chk_hook("weight_versions");
			rc = ph_plan_per_mb_versions(s, cfg, &sh, &p.per_mb_versions, &e);
			ph_chk_hook(NULL);
		}
		if (!rc)
			rc = ph_plan_set_actions(&p, p.actions, p.nactions, &e);
		/* what the engine asks of its flags (core/engine-versions.c):
		 * a delayed update keeps 2 weight versions at least, an update
		 * per micro-batch 1 to 4096 */
		const uint32_t flags = ph_schedule_flags(s);
		for (int r = 0; r < p.ranks && !rc; r++) {
			ph_chk_hook("weight_versions");
			int nv = ph_schedule_weight_versions(s, cfg, &sh, r);
			ph_chk_hook(NULL);
			if ((flags & PH_SCHED_DELAYED_UPDATE) && nv < 2)
				rc = ph_fail(&e, PH_EINVAL, "asks for a delayed update (PH_SCHED_DELAYED_UPDATE) but keeps %d "
					     "weight version(s) on rank %d; it needs 2: give it a weight_versions hook that says so",
					     nv, r);
			else if (!(flags & PH_SCHED_DELAYED_UPDATE) && (flags & PH_SCHED_UPDATE_PER_MB) &&
				 (nv < 1 || nv > 4096))
				rc = ph_fail(&e, PH_EINVAL, "updates per micro-batch (PH_SCHED_UPDATE_PER_MB) but keeps %d "
					     "weight versions on rank %d; 1 to 4096 make sense", nv, r);
		}
		if (rc) {
			FAIL_RC(rc, "%s", e.msg);
		} else {
			int peak = 0;
			for (int c = 0; c < p.nchunks; c++)
				peak = p.slots[c] > peak ? p.slots[c] : peak;
			PASS("every action once, each backward after its forward, no deadlock (at most %d micro-batch(es) in "
			     "flight on a chunk)", peak);
		}
		ph_plan_free(&p);
	}
	if (!accepted && !oomed) {
		ph_chk_begin("schedule %s: shapes", name);
		FAIL("its check refused every shape tried; it must accept some (1 rank, 1 micro-batch at least)");
	}
	free(cfg);
}

/* ------------------------------------------------------------------ */
/* Partitioners: a few synthetic models' costs; the cut must be valid.  */

typedef struct {
	const char *what;
	int n, stages;
	int cuts_every;   /* 0: a cut after every layer; k: after every k-th only */
	int heavy;        /* index of one layer 20x the others' cost, or -1 */
	int rising;       /* costs 1, 2, 3, ... */
} profile;

/* Entries after first[K] that the checker fills with BOUNDS_SENTINEL: a
 * partitioner writing past the K + 1 it is given (a run gives it exactly
 * that many, core/plan.c) is named for it, instead of its stray writes
 * reading as wrong bounds or landing on the checker's stack. */
#define BOUNDS_GUARD 16
#define BOUNDS_SENTINEL (-0x5eed)

static const profile profiles[] = {
	{ "8 equal layers into 2 stages", 8, 2, 0, -1, 0 },
	{ "12 layers of rising cost into 3 stages", 12, 3, 0, -1, 1 },
	{ "10 layers, layer 3 twenty times the others, into 4 stages", 10, 4, 0, 3, 0 },
	{ "8 layers cut only after every second, into 2 stages", 8, 2, 2, -1, 0 },
	{ "4 layers into 4 stages", 4, 4, 0, -1, 0 },
};

/* pt->partition into b[0..K] (K = pb->stages), the guard zone after b[K]
 * filled before and read after.  PH_OK: *refused is its answer (PH_OK,
 * or its refusal with the message in err).  PH_EINVAL: it wrote past
 * b[K], whatever it answered; err says so. */
static int partition_guarded(const ph_partitioner_ops *pt, const void *cfg, const ph_partition_problem *pb, int *b,
			     ph_err *warn, int *refused, ph_err *err)
{
	const int K = pb->stages;
	for (int k = 0; k <= K + BOUNDS_GUARD; k++)
		b[k] = k <= K ? -1 : BOUNDS_SENTINEL;
	err->msg[0] = 0;
	ph_chk_hook("partition");
	*refused = pt->partition(cfg, pb, b, warn, err);
	ph_chk_hook(NULL);
	for (int k = K + 1; k <= K + BOUNDS_GUARD; k++)
		if (b[k] != BOUNDS_SENTINEL)
			return ph_fail(err, PH_EINVAL, "partition wrote past first[%d] (the array has K + 1 = %d entries for "
				       "K = %d stages; it wrote first[%d])", K, K + 1, K, k);
	return PH_OK;
}

void ph_chk_partitioner(const ph_partitioner_ops *pt, const ph_check_opts *o)
{
	const char *name = pt->head.name;
	ph_err e = { { 0 } };
	void *cfg;
	char notes[256];
	int rc0;
	ph_chk_begin("partitioner %s: options", name);
	if ((rc0 = ph_chk_build_config(&pt->head, o, &cfg, notes, sizeof notes, &e))) {
		FAIL_RC(rc0, "%s", e.msg);
		return;
	}
	PASS("defaults%s%s", notes[0] ? "; the checker's choice for the required: " : "", notes);
	int accepted = 0, oomed = 0; /* oomed: checks out of memory, not judged */
	for (size_t i = 0; i < sizeof profiles / sizeof profiles[0]; i++) {
		const profile *pf = &profiles[i];
		int n = pf->n, K = pf->stages;
		double fwd[16], bwd[16], pbytes[16], act[16], keep[16], lim[16];
		const char *names[16], *types[16];
		char namebuf[16][16]; /* room for "l%d" of any int */
		uint8_t cut[16];
		int inflight[16], first[16 + 1 + BOUNDS_GUARD], again[16 + 1 + BOUNDS_GUARD];
		for (int l = 0; l < n; l++) {
			double c = pf->rising ? l + 1 : l == pf->heavy ? 20 : 1;
			fwd[l] = c;
			bwd[l] = 2 * c;
			pbytes[l] = 4096 * c;
			act[l] = keep[l] = 1024;
			snprintf(namebuf[l], sizeof namebuf[l], "l%d", l);
			names[l] = namebuf[l];
			/* a language model's types: embedding, blocks, a loss */
			types[l] = l == 0 ? "embedding" : l == n - 1 ? "seq_xent" : "gpt_block";
			cut[l] = l + 1 < n && (!pf->cuts_every || (l + 1) % pf->cuts_every == 0);
		}
		for (int k = 0; k < K; k++) {
			lim[k] = 0;
			inflight[k] = K - k;
		}
		ph_partition_problem pb = {
			.n = n, .stages = K, .fwd_cost = fwd, .bwd_cost = bwd, .param_bytes = pbytes, .act_bytes = act,
			.keep_bytes = keep, .names = names, .types = types, .cut_after = cut, .mem_limit = lim,
			.in_flight = inflight, .state_factor = 4, .link_bytes_per_s = 0,
		};
		ph_chk_begin("partitioner %s: %s", name, pf->what);
		ph_err warn = { { 0 } }, warn2 = { { 0 } };
		int refused = 0, rc = partition_guarded(pt, cfg, &pb, first, &warn, &refused, &e);
		if (!rc && refused == PH_ENOMEM) { /* no memory: not a refusal, and not judged */
			FAIL_RC(PH_ENOMEM, "%s", e.msg);
			oomed++;
			continue;
		}
		if (!rc && refused) {
			SKIP("refused: %s", reason(e.msg));
			continue;
		}
		accepted += !refused;
		if (!rc)
			rc = ph_plan_check_bounds(name, &pb, first, &e);
		if (!rc && !(rc = partition_guarded(pt, cfg, &pb, again, &warn2, &refused, &e)) && refused == PH_ENOMEM)
			rc = PH_ENOMEM; /* e says so */
		else if (!rc && refused) {
			char why[sizeof e.msg];
			snprintf(why, sizeof why, "%s", reason(e.msg)); /* e.msg is ph_fail's destination */
			rc = ph_fail(&e, PH_EINVAL, "the same problem a second time is refused: %s", why);
		}
		if (!rc && memcmp(first, again, (size_t)(K + 1) * sizeof(int)))
			rc = ph_fail(&e, PH_EINVAL, "the same problem a second time gives other bounds");
		if (rc) {
			FAIL_RC(rc, "%s", e.msg);
			continue;
		}
		char b[128] = "";
		for (int k = 0; k <= K; k++) {
			size_t used = strlen(b);
			snprintf(b + used, sizeof b - used, "%s%d", k ? "," : "", first[k]);
		}
		PASS("bounds %s: cover the layers, no stage empty, cuts where allowed, the same twice%s%s", b,
		     warn.msg[0] ? "; its note: " : "", warn.msg);
	}
	if (!accepted && !oomed) {
		ph_chk_begin("partitioner %s: profiles", name);
		FAIL("refused every profile tried; it must split some");
	}
	free(cfg);
}

