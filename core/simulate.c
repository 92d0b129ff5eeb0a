/* SPDX-License-Identifier: MIT */
/* The schedule simulator and the SVG timeline (see simulate.h). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "outputs.h"
#include "simulate.h"

void ph_sim_free(ph_sim_result *r)
{
	if (!r)
		return;
	free(r->busy);
	free(r->bubble);
	free(r->peak_inflight);
	free(r->peak_act_bytes);
	free(r->events);
	memset(r, 0, sizeof *r);
}

static int is_compute(int kind)
{
	return kind == PH_OP_F || kind == PH_OP_B || kind == PH_OP_I || kind == PH_OP_W;
}

/* What compute op o takes: its chunk's duration, and under recompute the
 * forward it reruns first when its micro-batch kept only its output. */
static double op_cost(const ph_op *o, const double *f, const double *b, const double *i, const double *w,
		      const ph_sim_rerun *rerun)
{
	int c = o->chunk;
	double d = o->kind == PH_OP_F ? f[c] : o->kind == PH_OP_B ? b[c] : o->kind == PH_OP_I ? (i ? i[c] : b[c])
		 : o->kind == PH_OP_W ? (w ? w[c] : 0) : 0;
	if (rerun && o->kind != PH_OP_F && is_compute(o->kind) && rerun->lean[o->mb])
		d += o->kind == PH_OP_W ? rerun->before_w[c] : rerun->before_b[c];
	return d;
}

int ph_simulate_shared(const ph_plan *p, const double *f, const double *b, const double *i, const double *w,
		       const double *link, const double *act_bytes, const ph_sim_rerun *rerun, int concurrency,
		       ph_sim_result *r, ph_err *err)
{
	memset(r, 0, sizeof *r);
	int P = p->ranks, C = p->nchunks, M = p->m, rc = PH_OK;
	if (P < 1 || C < 1 || M < 1 || !p->ops || !p->nops || !f || !b)
		return ph_fail(err, PH_EINTERNAL, "simulate: the plan is not lowered or has no costs");
	size_t cm = (size_t)C * M;
	int ncompute = 0;
	for (int k = 0; k < P; k++)
		for (int j = 0; j < p->nops[k]; j++)
			ncompute += is_compute(p->ops[k][j].kind);
	r->ranks = P;
	r->busy = calloc((size_t)P, sizeof *r->busy);
	r->bubble = calloc((size_t)P, sizeof *r->bubble);
	r->peak_inflight = calloc((size_t)P, sizeof *r->peak_inflight);
	r->peak_act_bytes = calloc((size_t)P, sizeof *r->peak_act_bytes);
	r->events = calloc((size_t)(ncompute ? ncompute : 1), sizeof *r->events);
	/* act_at[c*M+mb]: when chunk c's output of mb reaches chunk c+1 (NAN: not sent yet);
	 * grad_at[c*M+mb]: when chunk c's input gradient of mb reaches chunk c-1 */
	double *act_at = malloc(cm * sizeof *act_at), *grad_at = malloc(cm * sizeof *grad_at);
	double *t = calloc((size_t)P, sizeof *t), *held = calloc((size_t)P, sizeof *held);
	int *pos = calloc((size_t)P, sizeof *pos), *live = calloc((size_t)P, sizeof *live);
	int *evbase = calloc((size_t)P, sizeof *evbase), *nev = calloc((size_t)P, sizeof *nev);
	int limited = concurrency > 0 && concurrency < P;
	double *core_free = calloc((size_t)(limited ? concurrency : 1), sizeof *core_free);
	if (!r->busy || !r->bubble || !r->peak_inflight || !r->peak_act_bytes || !r->events || !act_at || !grad_at ||
	    !t || !held || !pos || !live || !evbase || !nev || !core_free) {
		rc = ph_fail(err, PH_ENOMEM, "out of memory");
		goto out;
	}
	for (size_t k = 0; k < cm; k++)
		act_at[k] = grad_at[k] = NAN;
	/* events of rank k go to events[evbase[k] ...], in list order */
	for (int k = 1; k < P; k++) {
		int n = 0;
		for (int j = 0; j < p->nops[k - 1]; j++)
			n += is_compute(p->ops[k - 1][j].kind);
		evbase[k] = evbase[k - 1] + n;
	}
	/* Sweep the ranks, each as far as its receives allow, until all are done:
	 * a rank's times depend only on its own list and on the arrival times,
	 * so the sweep order does not change the result. */
	int moved = 1; /* the last pass moved some rank */
	for (;;) {
		int progress = 0, done = 1;
		/* With fewer cores than ranks, compute ops are granted one at a
		 * time, earliest-ready first, each to the core that frees first;
		 * a rank stops at its next compute op until it is chosen.  Grant
		 * only once every rank has moved through its sends and receives,
		 * so that the earliest-ready op is known. */
		int chosen = -1;
		if (limited && !moved) {
			double best = INFINITY;
			for (int k = 0; k < P; k++)
				if (pos[k] < p->nops[k] && is_compute(p->ops[k][pos[k]].kind) && t[k] < best)
					best = t[k], chosen = k;
		}
		for (int k = 0; k < P; k++) {
			int granted = 0;
			while (pos[k] < p->nops[k]) {
				const ph_op *o = &p->ops[k][pos[k]];
				int c = o->chunk, mb = o->mb;
				if (c < 0 || c >= C || mb < 0 || mb >= M) {
					rc = ph_fail(err, PH_EINTERNAL, "simulate: rank %d op %d names chunk %d micro-batch %d",
						     k, pos[k], c, mb);
					goto out;
				}
				double d = op_cost(o, f, b, i, w, rerun);
				if (limited && is_compute(o->kind)) {
					if (k != chosen || granted)
						goto blocked;
					granted = 1;
					int q = 0;
					for (int j = 1; j < concurrency; j++)
						if (core_free[j] < core_free[q])
							q = j;
					if (core_free[q] > t[k])
						t[k] = core_free[q];
					core_free[q] = t[k] + d;
				}
				switch (o->kind) {
				case PH_OP_RECV_ACT: {
					double at = c > 0 ? act_at[(size_t)(c - 1) * M + mb] : 0;
					if (isnan(at))
						goto blocked;
					if (at > t[k])
						t[k] = at;
					break;
				}
				case PH_OP_RECV_GRAD: {
					double at = c + 1 < C ? grad_at[(size_t)(c + 1) * M + mb] : 0;
					if (isnan(at))
						goto blocked;
					if (at > t[k])
						t[k] = at;
					break;
				}
				case PH_OP_SEND_ACT:
					act_at[(size_t)c * M + mb] = t[k] + (link ? link[c] : 0);
					break;
				case PH_OP_SEND_GRAD:
					grad_at[(size_t)c * M + mb] = t[k] + (link && c > 0 ? link[c - 1] : 0);
					break;
				case PH_OP_F:
					if (++live[k] > r->peak_inflight[k])
						r->peak_inflight[k] = live[k];
					held[k] += act_bytes ? act_bytes[c] : 0;
					if (held[k] > r->peak_act_bytes[k])
						r->peak_act_bytes[k] = held[k];
					break;
				default:
					break;
				}
				if (is_compute(o->kind)) {
					r->events[evbase[k] + nev[k]++] = (ph_trace_event){ t[k], t[k] + d, k, o->kind, c, mb, 0, 0 };
					t[k] += d;
					r->busy[k] += d;
				}
				/* the micro-batch's activations go with its last backward op */
				if (o->kind == PH_OP_B || o->kind == PH_OP_W) {
					live[k]--;
					held[k] -= act_bytes ? act_bytes[c] : 0;
				}
				pos[k]++;
				progress = 1;
			}
			continue;
		blocked:
			done = 0;
		}
		if (done)
			break;
		if (limited && !progress && chosen < 0 && moved) {
			moved = 0; /* nothing left to move: grant a compute op next */
			continue;
		}
		moved = progress;
		if (!progress) {
			int k = 0;
			while (pos[k] >= p->nops[k])
				k++;
			rc = ph_fail(err, PH_EINVAL, "simulate: the plan deadlocks: rank %d waits forever at op %d", k, pos[k]);
			goto out;
		}
	}
	r->nevents = ncompute;
	for (int k = 0; k < P; k++)
		if (t[k] > r->step_time)
			r->step_time = t[k];
	for (int k = 0; k < P; k++)
		r->bubble[k] = r->step_time > 0 ? 1.0 - r->busy[k] / r->step_time : 0.0;
out:
	free(act_at);
	free(grad_at);
	free(t);
	free(held);
	free(pos);
	free(live);
	free(evbase);
	free(nev);
	free(core_free);
	return rc;
}

int ph_simulate(const ph_plan *p, const double *f, const double *b, const double *i, const double *w,
		const double *link, const double *act_bytes, ph_sim_result *r, ph_err *err)
{
	return ph_simulate_shared(p, f, b, i, w, link, act_bytes, NULL, 0, r, err);
}

/* ------------------------------------------------------------------ */
/* Report                                                               */

/* A time in the unit that suits `scale` (the largest time shown). */
static void time_unit(double scale, const char **unit, double *mult)
{
	if (scale >= 1.0)
		*unit = "s", *mult = 1.0;
	else if (scale >= 1e-3)
		*unit = "ms", *mult = 1e3;
	else if (scale >= 1e-6)
		*unit = "us", *mult = 1e6;
	else
		*unit = "ns", *mult = 1e9;
}

/* Steps a no-flush schedule's steady state is measured over: the time of
 * STREAM_STEPS steps less that of STREAM_STEPS - 1 is one step's. */
#define STREAM_STEPS 4

/* A no-flush schedule: simulate STREAM_STEPS and STREAM_STEPS - 1 steps as
 * one stream; report the steady state's step time and bubble (one step's
 * busy time over the steady step) beside one flushed step's (`one`), and
 * leave the longer stream's events in *ev for the timeline. */
static int report_stream(const ph_plan *p, const ph_config *c, const double *f, const double *b, const double *ci,
			 const double *cw, const double *link, const ph_sim_rerun *rerun, int conc,
			 const ph_sim_result *one, double mult, const char *unit, ph_sim_result *ev, double *steady_out,
			 double *bubble_out, FILE *out, ph_err *err)
{
	ph_plan pk, pk1;
	ph_sim_result rk1;
	memset(&rk1, 0, sizeof rk1);
	int rc = ph_plan_stream(p, c, STREAM_STEPS, &pk, err);
	if (!rc)
		rc = ph_plan_stream(p, c, STREAM_STEPS - 1, &pk1, err);
	else
		memset(&pk1, 0, sizeof pk1);
	if (!rc)
		rc = ph_simulate_shared(&pk, f, b, ci, cw, link, NULL, rerun, conc, ev, err);
	if (!rc)
		rc = ph_simulate_shared(&pk1, f, b, ci, cw, link, NULL, rerun, conc, &rk1, err);
	/* one step is within PH_SIM_MAX_S; a stream of STREAM_STEPS should
	 * be within as many (and so within what a trace holds) */
	if (!rc && !(ev->step_time <= STREAM_STEPS * PH_SIM_MAX_S && rk1.step_time <= STREAM_STEPS * PH_SIM_MAX_S))
		rc = ph_fail(err, PH_EINVAL, "simulate: %d steps as one stream would take %.3g s, past the %g s a "
			     "timeline can show; raise [partition] link_bandwidth or device_tflops", STREAM_STEPS,
			     ev->step_time, STREAM_STEPS * PH_SIM_MAX_S);
	if (!rc) {
		double steady = ev->step_time - rk1.step_time, mean = 0;
		fprintf(out, "  steady state, no flush (%d steps as one stream of %d micro-batches): %.4g %s a step, "
			"%.3fx the throughput of a flush every step\n", STREAM_STEPS, pk.m, steady * mult, unit,
			steady > 0 ? one->step_time / steady : 0.0);
		fprintf(out, "  %-4s %12s %8s %15s\n", "rank", "busy", "bubble", "peak in-flight");
		for (int k = 0; k < p->ranks; k++) {
			char busy[32];
			double bub = steady > 0 ? 1.0 - one->busy[k] / steady : 0.0;
			if (bub < 0 && bub > -1e-9)
				bub = 0;
			snprintf(busy, sizeof busy, "%.4g %s", one->busy[k] * mult, unit);
			fprintf(out, "  %-4d %12s %7.1f%% %15d\n", k, busy, 100.0 * bub, ev->peak_inflight[k]);
			mean += bub / p->ranks;
		}
		fprintf(out, "  steady-state mean bubble %.1f%%\n", 100.0 * mean);
		*steady_out = steady;
		*bubble_out = mean;
		/* the stream's micro-batch n is step n / m's n % m, as a real
		 * run's trace numbers them */
		for (int k = 0; k < ev->nevents; k++) {
			ev->events[k].step = ev->events[k].mb / p->m;
			ev->events[k].mb %= p->m;
		}
	}
	ph_sim_free(&rk1);
	ph_plan_free(&pk);
	ph_plan_free(&pk1);
	return rc;
}

/* x rounded up to 2 significant digits: a least value that stays one. */
static double up2(double x)
{
	if (!(x > 0) || !isfinite(x))
		return x;
	double q = pow(10, floor(log10(x)) - 1);
	return ceil(x / q) * q;
}

/* A step longer than PH_SIM_MAX_S (or not finite): one line naming what
 * takes most of it (the links, or the layers' costs) and what to give
 * instead.  A step grows with its durations and scales with all of them
 * at once, so speeding one cause up by less than step / PH_SIM_MAX_S
 * cannot bring it within the bound: that is the least to ask for. */
static int step_too_long(const ph_config *c, double step, double link_total, double compute_total, int measured,
			 double link_bytes_per_s, ph_err *err)
{
	char where[PH_STR_MAX + 16], cause[PH_STR_MAX + 400];
	double factor = step / PH_SIM_MAX_S;
	if (link_total > compute_total) {
		ph_ini_where_key(&c->ini, "partition", "link_bandwidth", where, sizeof where);
		double gbps = link_bytes_per_s / 1e9;
		if (isfinite(factor))
			snprintf(cause, sizeof cause, "%s: the transfers at [partition] link_bandwidth = %g GB/s take most of "
				 "it; give at least %.2g GB/s, or 0 for free links", where, gbps, up2(gbps * factor));
		else
			snprintf(cause, sizeof cause, "%s: the transfers at [partition] link_bandwidth = %g GB/s take most of "
				 "it; give a higher bandwidth, or 0 for free links", where, gbps);
	} else if (measured) {
		snprintf(cause, sizeof cause, "the measured layer costs take most of it; delete the profile cache "
			 "([partition] profile_cache) to measure afresh, or set [partition] cost = flops");
	} else {
		ph_ini_where_key(&c->ini, "partition", "device_tflops", where, sizeof where);
		if (isfinite(factor))
			snprintf(cause, sizeof cause, "%s: the layers' FLOPs at [partition] device_tflops = %g take most of "
				 "it; give at least %.2g", where, c->part.device_tflops, up2(c->part.device_tflops * factor));
		else
			snprintf(cause, sizeof cause, "%s: the layers' FLOPs at [partition] device_tflops = %g take most of "
				 "it; give a higher device_tflops", where, c->part.device_tflops);
	}
	return ph_fail(err, PH_EINVAL, "simulate: a step would take %.3g s, past the %g s (about 32 years) a simulated "
		       "step may last; %s", step, PH_SIM_MAX_S, cause);
}

/* A timeline of more than PH_SVG_MAX_BOXES boxes is refused before its
 * file is opened; hint says what to lower.  The bytes are an estimate:
 * a box is about PH_SVG_BOX_BYTES of SVG (154 to 160 measured). */
#define PH_SVG_BOX_BYTES 160.0
static int svg_size_check(const char *path, long long boxes, const char *hint, ph_err *err)
{
	if (boxes <= PH_SVG_MAX_BOXES)
		return PH_OK;
	return ph_fail(err, PH_EINVAL, "--svg %s: the timeline would draw %lld boxes (about %.0f MB of SVG), past the "
		       "limit of %d; %s, or use --trace FILE (Chrome trace JSON, for Perfetto)", path, boxes,
		       boxes * PH_SVG_BOX_BYTES / 1e6, PH_SVG_MAX_BOXES, hint);
}

int ph_simulate_report(const ph_plan *p, const ph_model *m, const ph_config *c, const double *layer_fwd,
		       const double *layer_bwd, double link_bytes_per_s, const char *svg_path,
		       const char *trace_path, FILE *out, ph_err *err)
{
	int C = p->nchunks, rc = PH_OK;
	if (!p->first)
		return ph_fail(err, PH_EINTERNAL, "simulate: the plan has no partition");
	/* a timeline too big to draw: said before the simulation runs, and
	 * before anything is printed or written (one box per compute op; a
	 * schedule without a flush draws STREAM_STEPS steps) */
	if (svg_path && p->ops && p->nops) {
		long long boxes = 0;
		for (int k = 0; k < p->ranks; k++)
			for (int j = 0; j < p->nops[k]; j++)
				boxes += is_compute(p->ops[k][j].kind);
		if (ph_schedule_flags(c->schedule) & PH_SCHED_NO_FLUSH)
			boxes *= STREAM_STEPS;
		char hint[160];
		snprintf(hint, sizeof hint, "lower [run] micro_batches (%d) or stages (%d)%s", p->m, p->ranks,
			 p->v > 1 ? " or chunks" : "");
		if ((rc = svg_size_check(svg_path, boxes, hint, err)))
			return rc;
	}
	double *buf = calloc((size_t)C * 8, sizeof *buf);
	unsigned char *lean = calloc((size_t)STREAM_STEPS * p->m, 1);
	ph_sim_result r, rs;
	memset(&r, 0, sizeof r);
	memset(&rs, 0, sizeof rs);
	if (!buf || !lean) {
		free(buf);
		free(lean);
		return ph_fail(err, PH_ENOMEM, "out of memory");
	}
	double *f = buf, *b = buf + C, *ci = buf + 2 * C, *cw = buf + 3 * C, *link = buf + 4 * C, *act = buf + 5 * C;
	double *re_b = buf + 6 * C, *re_w = buf + 7 * C;
	double flops_per_s = c->part.device_tflops * 1e12, link_total = 0, compute_total = 0;
	/* Ranks on the CPU share its cores as the run's BLAS threads do: the
	 * ranks of every replica this process runs divide them (ph_config_busy),
	 * and each replica runs this plan at the same time, so one pipeline
	 * gets its replica's share.  PIPEHOST_SIM_CORES asks what another
	 * machine's cores would do with these costs (a rank's op costs what it
	 * measured here).  GPU ranks share no cores. */
	long cores = sysconf(_SC_NPROCESSORS_ONLN);
	const char *sim_cores = getenv("PIPEHOST_SIM_CORES");
	if (sim_cores && *sim_cores) { /* empty: unset, as a script clears it */
		char *end;
		errno = 0;
		long v = strtol(sim_cores, &end, 10);
		if (*end || errno || v < 1 || v > 65536) {
			rc = ph_fail(err, PH_EINVAL, "PIPEHOST_SIM_CORES=%.40s%s: not a count of cores from 1 to 65536; unset it "
				     "to simulate this machine's %ld", sim_cores, strlen(sim_cores) > 40 ? "..." : "", cores);
			goto done;
		}
		cores = v;
	}
	long busy = ph_config_busy(c, p->ranks);
	int threads = ph_config_blas_threads(c, cores, busy), reps = ph_config_local_replicas(c);
	/* compute units for this pipeline's ranks (in this process) */
	double units = (double)(cores / threads > 0 ? cores / threads : 1) / reps, stretch = 1.0;
	int conc = 0, ranks_here = (int)(busy / reps);
	if (!c->place.cuda && units < 1)
		stretch = 1.0 / units, conc = 1; /* less than a core a replica: every op takes longer */
	else if (!c->place.cuda && units < ranks_here)
		conc = (int)units;
	if (conc && ph_config_span(c) > 1)
		conc *= ph_config_span(c); /* each process's cores: pooled, an approximation */
	for (int k = 0; k < C; k++) {
		int split = 0;
		for (int l = p->first[k]; l < p->first[k + 1]; l++) {
			const ph_layer *L = &m->layers[l];
			double lf = layer_fwd ? layer_fwd[l] : L->meta.fwd_flops * m->max_batch / flops_per_s;
			double lb = layer_bwd ? layer_bwd[l] : L->meta.bwd_flops * m->max_batch / flops_per_s;
			if (!(lf >= 0 && lf <= PH_SIM_MAX_S) || !(lb >= 0 && lb <= PH_SIM_MAX_S)) {
				char how[PH_STR_MAX + 80];
				if (layer_fwd)
					snprintf(how, sizeof how, "measured");
				else {
					char where[PH_STR_MAX + 16];
					ph_ini_where_key(&c->ini, "partition", "device_tflops", where, sizeof where);
					snprintf(how, sizeof how, "its FLOPs at [partition] device_tflops = %g, %s",
						 c->part.device_tflops, where);
				}
				rc = ph_fail(err, PH_EINVAL, "simulate: layer %s costs %g s forward and %g s backward a "
					     "micro-batch (%s), outside the 0 to %g s a simulated step may last; %s",
					     L->cfg ? L->cfg->name : "?", lf, lb, how, PH_SIM_MAX_S,
					     layer_fwd ? "delete the profile cache ([partition] profile_cache) to measure afresh, "
							 "or set [partition] cost = flops"
						       : "raise device_tflops, or lower [run] batch");
				goto done;
			}
			lf *= stretch;
			lb *= stretch;
			compute_total += lf + lb;
			f[k] += lf;
			b[k] += lb;
			if (L->param_numel > 0 && ph_layer_has_split_backward(L->ops)) {
				ci[k] += lb / 2;
				cw[k] += lb / 2;
			} else {
				ci[k] += lb;
			}
			split |= ph_layer_has_split_backward(L->ops);
		}
		re_b[k] = f[k];
		re_w[k] = split ? f[k] : 0;
		act[k] = ph_plan_activation_bytes(p, m, c, k);
		if (k + 1 < C && link_bytes_per_s > 0) {
			const ph_layer *L = &m->layers[p->first[k + 1] - 1];
			link[k] = 4.0 * (double)ph_shape_numel(&L->meta.out) * m->max_batch / link_bytes_per_s;
			link_total += 2 * link[k]; /* there and back */
		}
	}
	/* [run] recompute: which micro-batches of a step keep only their
	 * output (engine-ops.c recomputed: except_last keeps the last whole) */
	for (int n = 0; n < STREAM_STEPS * p->m; n++)
		lean[n] = c->run.recompute == PH_RECOMPUTE_YES ||
			  (c->run.recompute == PH_RECOMPUTE_EXCEPT_LAST && n % p->m != p->m - 1);
	const ph_sim_rerun rerun = { lean, re_b, re_w }, *rr = c->run.recompute ? &rerun : NULL;
	if ((rc = ph_simulate_shared(p, f, b, ci, cw, link, NULL, rr, conc, &r, err)))
		goto done;
	/* before anything is printed or written: a step no report, bubble
	 * or trace can show (inf s, -nan%, an int64 overflow in the trace) */
	if (!(r.step_time <= PH_SIM_MAX_S)) {
		rc = step_too_long(c, r.step_time, link_total, compute_total, layer_fwd != NULL, link_bytes_per_s, err);
		goto done;
	}

	double ideal = 0, busy_max = 0;
	for (int k = 0; k < p->ranks; k++)
		if (r.busy[k] > busy_max)
			busy_max = r.busy[k];
	ideal = busy_max;
	const char *unit;
	double mult;
	time_unit(r.step_time, &unit, &mult);
	fprintf(out, "simulate: schedule %s, %d rank(s) x %d chunk(s), %d micro-batches of %d; costs: %s",
		c->schedule->head.name, p->ranks, p->v, p->m, m->max_batch,
		layer_fwd ? "measured" : "meta FLOPs");
	if (!layer_fwd)
		fprintf(out, " at %g TFLOP/s", c->part.device_tflops);
	if (conc) {
		fprintf(out, "; %ld ranks share %ld cores (%d BLAS thread(s) each", busy, cores, threads);
		if (reps > 1)
			fprintf(out, "; %d replicas of this pipeline, so %.3g core(s) a replica", reps, units);
		fprintf(out, ")");
	}
	if (link_bytes_per_s > 0)
		fprintf(out, ", links %g GB/s\n", link_bytes_per_s / 1e9);
	else
		fprintf(out, ", links free\n");
	fprintf(out, "  step time %.4g %s (busiest rank computes %.4g %s: %.1f%% of the step)\n", r.step_time * mult,
		unit, ideal * mult, unit, r.step_time > 0 ? 100.0 * ideal / r.step_time : 100.0);
	/* the activation memory is what the engine allocates for the plan's
	 * in-flight micro-batches (each chunk's slots, recompute's lean ones
	 * included): the figure the run prints, not a separate model */
	fprintf(out, "  %-4s %12s %8s %15s %15s\n", "rank", "busy", "bubble", "peak in-flight", "act. MiB");
	double mean_bubble = 0;
	for (int k = 0; k < p->ranks; k++) {
		char busy_s[32], act_s[32];
		double a = 0;
		for (int q = k; q < C && a >= 0; q += p->ranks)
			a = act[q] < 0 ? -1 : a + act[q];
		snprintf(busy_s, sizeof busy_s, "%.4g %s", r.busy[k] * mult, unit);
		if (a < 0)
			snprintf(act_s, sizeof act_s, "?");
		else
			snprintf(act_s, sizeof act_s, "%.2f", a / (1024.0 * 1024.0));
		fprintf(out, "  %-4d %12s %7.1f%% %15d %15s\n", k, busy_s, 100.0 * r.bubble[k], r.peak_inflight[k], act_s);
		mean_bubble += r.bubble[k] / p->ranks;
	}
	fprintf(out, "  mean bubble %.1f%%%s\n", 100.0 * mean_bubble,
		c->run.recompute ? " (recompute on: each recomputed backward reruns its forward)" : "");
	char title[256];
	snprintf(title, sizeof title, "%s: %d rank(s) x %d chunk(s), %d micro-batches; step %.4g %s, mean bubble %.1f%%",
		 c->schedule->head.name, p->ranks, p->v, p->m, r.step_time * mult, unit, 100.0 * mean_bubble);
	/* a schedule that runs across steps: its steady state, and the
	 * timeline of several steps */
	if (ph_schedule_flags(c->schedule) & PH_SCHED_NO_FLUSH) {
		double steady = 0, steady_bubble = 0;
		if ((rc = report_stream(p, c, f, b, ci, cw, link, rr, conc, &r, mult, unit, &rs, &steady, &steady_bubble,
					out, err)))
			goto done;
		ph_sim_free(&r);
		r = rs;
		memset(&rs, 0, sizeof rs);
		snprintf(title, sizeof title, "%s: %d rank(s) x %d chunk(s), %d steps of %d micro-batches as one stream; "
			 "steady state %.4g %s a step, mean bubble %.1f%%", c->schedule->head.name, p->ranks, p->v,
			 STREAM_STEPS, p->m, steady * mult, unit, 100.0 * steady_bubble);
	}
	if (svg_path) {
		if ((rc = ph_svg_write(svg_path, r.events, r.nevents, p->ranks, p->v, title, err)))
			goto done;
		fprintf(out, "  timeline written to %s\n", svg_path);
	}
	if (trace_path) {
		if ((rc = ph_trace_write_chrome(trace_path, r.events, r.nevents, p->ranks, p->v, err)))
			goto done;
		fprintf(out, "  trace written to %s (open in https://ui.perfetto.dev)\n", trace_path);
	}
done:
	ph_sim_free(&rs);
	ph_sim_free(&r);
	free(buf);
	free(lean);
	return rc;
}

/* ------------------------------------------------------------------ */
/* SVG timeline                                                         */


static const char *const kind_name[] = { "F", "B", "I", "W" };
static const char *const kind_fill[] = { "#4e79a7", "#59a14f", "#f28e2b", "#b07aa1" };
static const char *const kind_long[] = { "forward", "backward", "input gradient (backward, 1st half)",
					 "weight gradient (backward, 2nd half)" };

/* Text that is safe inside an SVG element. */
static void xml_text(FILE *f, const char *s)
{
	for (; *s; s++)
		switch (*s) {
		case '<': fputs("&lt;", f); break;
		case '>': fputs("&gt;", f); break;
		case '&': fputs("&amp;", f); break;
		case '"': fputs("&quot;", f); break;
		default: fputc(*s, f);
		}
}

/* A "nice" tick spacing: 1, 2 or 5 times a power of ten, giving <= max ticks. */
static double tick_step(double span, int max)
{
	double raw = span / max, p10 = pow(10, floor(log10(raw)));
	static const double steps[] = { 1, 2, 5, 10 };
	for (int k = 0; k < 4; k++)
		if (steps[k] * p10 >= raw)
			return steps[k] * p10;
	return 10 * p10;
}

int ph_svg_write(const char *path, const ph_trace_event *ev, int n, int ranks, int v, const char *title,
		 ph_err *err)
{
	double tmin = INFINITY, tmax = -INFINITY, dmin = INFINITY;
	int used[4] = { 0 };
	for (int k = 0; k < n; k++) {
		if (!is_compute(ev[k].kind))
			continue;
		if (ev[k].t0 < tmin)
			tmin = ev[k].t0;
		if (ev[k].t1 > tmax)
			tmax = ev[k].t1;
		if (ev[k].t1 - ev[k].t0 > 0 && ev[k].t1 - ev[k].t0 < dmin)
			dmin = ev[k].t1 - ev[k].t0;
		used[ev[k].kind] = 1;
	}
	if (!(tmax > tmin)) /* nothing, or nothing with a duration */
		tmin = 0, tmax = 1, dmin = 1;
	if (tmin > 0 && tmin < 0.05 * (tmax - tmin))
		tmin = 0; /* a step that starts near 0 gets an axis from 0 */
	double span = tmax - tmin;
	if (!isfinite(dmin))
		dmin = span;
	/* Wide enough that the shortest box holds a label, within sane bounds. */
	double width = span / dmin * 30.0;
	if (width < 900)
		width = 900;
	if (width > 2400) /* narrower boxes go unlabelled; their tooltips remain */
		width = 2400;
	/* the boxes drawn (a caller with other events than a plan's) */
	long long boxes = 0;
	for (int k = 0; k < n; k++)
		boxes += is_compute(ev[k].kind) && ev[k].rank >= 0 && ev[k].rank < ranks;
	int rc = svg_size_check(path, boxes, "draw fewer ops (fewer micro-batches or ranks)", err);
	if (rc)
		return rc;
	const double left = 70, right = 20, top = title ? 46 : 20, row_h = 28, gap = 6;
	double plot_bottom = top + ranks * (row_h + gap);
	double height = plot_bottom + 30 + 30;
	double xs = width / span;
	const char *unit;
	double mult;
	time_unit(span, &unit, &mult);

	/* through core/outputs.h, as the trace: a symlink followed, a device
	 * or FIFO written through (a rename over /dev/null, as root, once
	 * replaced the device with the drawing), a file replaced atomically */
	ph_outfile o;
	FILE *f;
	if ((rc = ph_outstream_open(&o, &f, path, "--svg", err)))
		return rc;
	fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
		   "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"%.0f\" height=\"%.0f\" "
		   "viewBox=\"0 0 %.0f %.0f\" font-family=\"Helvetica, Arial, sans-serif\">\n",
		left + width + right, height, left + width + right, height);
	fprintf(f, "<rect x=\"0\" y=\"0\" width=\"%.0f\" height=\"%.0f\" fill=\"#ffffff\"/>\n", left + width + right, height);
	if (title) {
		fprintf(f, "<text x=\"%.0f\" y=\"22\" font-size=\"15\" font-weight=\"bold\">", left);
		xml_text(f, title);
		fprintf(f, "</text>\n");
	}
	/* rows */
	for (int r = 0; r < ranks; r++) {
		double y = top + r * (row_h + gap);
		fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.0f\" fill=\"#eeeeee\"/>\n", left, y, width,
			row_h);
		fprintf(f, "<text x=\"%.0f\" y=\"%.1f\" font-size=\"13\" text-anchor=\"end\">rank %d</text>\n", left - 8,
			y + row_h / 2 + 4.5, r);
	}
	/* time axis with grid lines */
	double step = tick_step(span, (int)(width / 90) > 2 ? (int)(width / 90) : 2);
	fprintf(f, "<g font-size=\"11\" fill=\"#333333\">\n");
	fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#333333\"/>\n", left, plot_bottom,
		left + width, plot_bottom);
	for (double tk = ceil(tmin / step - 1e-9) * step; tk <= tmax + 1e-9 * span; tk += step) {
		double x = left + (tk - tmin) * xs;
		fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#bbbbbb\" stroke-dasharray=\"2,3\"/>\n",
			x, top - 3, x, plot_bottom + 4);
		fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%g</text>\n", x, plot_bottom + 16,
			(fabs(tk) < 1e-12 * span ? 0 : tk) * mult);
	}
	fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">time (%s)</text>\n", left - 8, plot_bottom + 16, unit);
	fprintf(f, "</g>\n");
	/* boxes; over several steps (a no-flush stream) each names its step */
	int steps = 0;
	for (int k = 0; k < n && !steps; k++)
		steps = ev[k].step != ev[0].step;
	fprintf(f, "<g font-size=\"11\" text-anchor=\"middle\">\n");
	for (int k = 0; k < n; k++) {
		const ph_trace_event *e = &ev[k];
		if (!is_compute(e->kind) || e->rank < 0 || e->rank >= ranks)
			continue;
		double x = left + (e->t0 - tmin) * xs, w = (e->t1 - e->t0) * xs;
		double y = top + e->rank * (row_h + gap);
		char label[32];
		if (v > 1)
			snprintf(label, sizeof label, "%d%s%d", e->chunk, kind_name[e->kind], e->mb);
		else
			snprintf(label, sizeof label, "%s%d", kind_name[e->kind], e->mb);
		char of_step[40] = "";
		if (steps)
			snprintf(of_step, sizeof of_step, " of step %lld", (long long)e->step);
		fprintf(f, "<g><title>%s: %s, chunk %d, micro-batch %d%s, %.6g..%.6g %s</title>", label, kind_long[e->kind],
			e->chunk, e->mb, of_step, (e->t0 - tmin) * mult, (e->t1 - tmin) * mult, unit);
		/* a white edge separates neighbours; a sliver gets none, or it would vanish */
		fprintf(f, "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.0f\" fill=\"%s\"%s/>", x, y,
			w > 0.5 ? w : 0.5, row_h, kind_fill[e->kind], w >= 4 ? " stroke=\"#ffffff\" stroke-width=\"1\"" : "");
		/* a label only where it fits: ~0.6 em per character */
		double fs = 11;
		double need = 0.6 * fs * strlen(label) + 4;
		if (need > w) {
			fs = (w - 4) / (0.6 * strlen(label));
			fs = fs > 7 ? floor(fs * 2) / 2 : 0;
		}
		if (fs > 0) {
			fprintf(f, "<text x=\"%.2f\" y=\"%.1f\" fill=\"#ffffff\"", x + w / 2, y + row_h / 2 + fs * 0.36);
			if (fs != 11)
				fprintf(f, " font-size=\"%g\"", fs);
			fprintf(f, ">%s</text>", label);
		}
		fprintf(f, "</g>\n");
	}
	fprintf(f, "</g>\n");
	/* legend */
	double lx = left, ly = plot_bottom + 34;
	fprintf(f, "<g font-size=\"12\">\n");
	for (int k = 0; k < 4; k++) {
		if (!used[k] && (used[0] | used[1] | used[2] | used[3])) /* the kinds shown */
			continue;
		fprintf(f, "<rect x=\"%.0f\" y=\"%.0f\" width=\"14\" height=\"14\" fill=\"%s\"/>", lx, ly, kind_fill[k]);
		fprintf(f, "<text x=\"%.0f\" y=\"%.0f\">%s  %s</text>\n", lx + 19, ly + 11.5, kind_name[k], kind_long[k]);
		lx += 44 + 6.2 * strlen(kind_long[k]);
	}
	fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" fill=\"#555555\">%s; grey = idle</text>\n", lx + 10, ly + 11.5,
		v > 1 ? "labels: chunk, kind, micro-batch" : "labels: kind, micro-batch");
	fprintf(f, "</g>\n</svg>\n");
	return ph_outstream_commit(&o, f, "--svg", err);
}
