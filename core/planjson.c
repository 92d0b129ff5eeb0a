/* SPDX-License-Identifier: MIT */
/* The plan as JSON: the data of ph_plan_print (plan.c), as one object.
 * Memory estimates follow ph_plan_print exactly:
 *   params      4 B x parameters
 *   grads       4 B x parameters
 *   optimizer   4 B x parameters x state per parameter (SGD 1, AdamW 2)
 *   activations what the engine allocates for them (ph_plan_activation_bytes:
 *               the chunk's buffer table, core/engine-layout.h)
 *   scratch     the largest scratch_bytes of the chunk's layers (one shared buffer)
 * and where they apply older_versions, second_grads and shared (taken off):
 * ph_plan_chunk_mem (plan-memory.c) makes them all, for the table too. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "outputs.h"
#include "plan-memory.h"
#include "planjson.h"

/* Integers as raw text: cJSON prints numbers as doubles ("1e+15"). */
static cJSON *jint(int64_t v)
{
	char buf[32];
	snprintf(buf, sizeof buf, "%lld", (long long)v);
	return cJSON_CreateRaw(buf);
}

static int add_int(cJSON *o, const char *k, int64_t v)
{
	cJSON *n = jint(v);
	if (!n)
		return 0;
	cJSON_AddItemToObject(o, k, n);
	return 1;
}

static int add_num(cJSON *o, const char *k, double v)
{
	return cJSON_AddNumberToObject(o, k, v) != NULL;
}

static int add_str(cJSON *o, const char *k, const char *v)
{
	return cJSON_AddStringToObject(o, k, v) != NULL;
}

static cJSON *shape_array(const ph_shape *s)
{
	cJSON *a = cJSON_CreateArray();
	for (int i = 0; a && i < s->ndim; i++) {
		cJSON *n = jint(s->d[i]);
		if (!n) {
			cJSON_Delete(a);
			return NULL;
		}
		cJSON_AddItemToArray(a, n);
	}
	return a;
}

static int add_shape(cJSON *o, const char *k, const ph_shape *s)
{
	cJSON *a = shape_array(s);
	if (!a)
		return 0;
	cJSON_AddItemToObject(o, k, a);
	return 1;
}

static const char *cost_name(int cost)
{
	return cost == PH_COST_PARAMS ? "params" : cost == PH_COST_PROFILE ? "profile" : "flops";
}

static cJSON *build(const ph_plan *p, const ph_model *m, const ph_config *c, const double *fwd_s,
		    const double *bwd_s)
{
	cJSON *root = cJSON_CreateObject();
	if (!root)
		return NULL;
	int spp = ph_optim_state_per_param(&c->optim);
	double total = 0, tf = 0, tb = 0, ts = 0;
	int64_t tparams = 0;
	for (int i = 0; i < m->n; i++) {
		const ph_layer *l = &m->layers[i];
		total += l->meta.fwd_flops + l->meta.bwd_flops;
		tf += l->meta.fwd_flops;
		tb += l->meta.bwd_flops;
		tparams += l->param_numel;
		if (fwd_s && bwd_s)
			ts += fwd_s[i] + bwd_s[i];
	}
	int ok = add_str(root, "format", "pipehost-plan") && add_int(root, "version", PH_PLAN_JSON_VERSION) &&
		 add_str(root, "schedule", c->schedule ? c->schedule->head.name : "") &&
		 add_str(root, "partitioner", c->partitioner ? c->partitioner->head.name : "") &&
		 add_str(root, "cost_source", cost_name(c->part.cost)) &&
		 add_str(root, "cuts", c->part.cuts == PH_CUTS_MARKED ? "marked" : "all") &&
		 add_int(root, "p", p->ranks) && add_int(root, "v", p->v) && add_int(root, "chunks", p->nchunks) &&
		 add_int(root, "m", p->m) && add_int(root, "micro_batch", m->max_batch) &&
		 add_int(root, "batch", (int64_t)m->max_batch * p->m * (c->run.replicas > 1 ? c->run.replicas : 1)) &&
		 add_int(root, "replicas", c->run.replicas > 1 ? c->run.replicas : 1) &&
		 add_str(root, "optimizer", c->optim.type == PH_OPTIM_ADAMW ? "adamw" : c->optim.type == PH_OPTIM_LION ? "lion" : "sgd") &&
		 add_int(root, "optimizer_state_per_param", spp) &&
		 add_int(root, "memory_limit_bytes", (int64_t)(c->part.memory_gib * 1024.0 * 1024.0 * 1024.0)) &&
		 add_shape(root, "input", &m->input);
	cJSON *stages = ok ? cJSON_AddArrayToObject(root, "stages") : NULL;
	ok = ok && stages;
	double peak = 0, sum_mem = 0, max_cost = 0, max_meas = 0;
	for (int k = 0; ok && k < p->nchunks; k++) {
		int a = p->first[k], b = p->first[k + 1] - 1;
		cJSON *st = cJSON_CreateObject();
		ok = st != NULL;
		if (!ok)
			break;
		cJSON_AddItemToArray(stages, st);
		char dev[64];
		ph_placement_name(&c->place, k % p->ranks, dev, sizeof dev);
		ok = add_int(st, "chunk", k) && add_int(st, "rank", k % p->ranks) && add_str(st, "device", dev) &&
		     add_int(st, "first", a) && add_int(st, "last", b) &&
		     add_str(st, "first_name", m->layers[a].cfg->name) && add_str(st, "last_name", m->layers[b].cfg->name) &&
		     add_int(st, "nlayers", b - a + 1);
		cJSON *layers = ok ? cJSON_AddArrayToObject(st, "layers") : NULL;
		ok = ok && layers;
		int64_t params = 0;
		double f = 0, bw = 0, sf = 0, sb = 0;
		for (int i = a; ok && i <= b; i++) {
			const ph_layer *l = &m->layers[i];
			params += l->param_numel;
			f += l->meta.fwd_flops;
			bw += l->meta.bwd_flops;
			cJSON *lj = cJSON_CreateObject();
			ok = lj != NULL;
			if (!ok)
				break;
			cJSON_AddItemToArray(layers, lj);
			ok = add_int(lj, "index", i) && add_str(lj, "name", l->cfg->name) &&
			     add_str(lj, "type", l->ops->head.name) && add_shape(lj, "in", &l->in) &&
			     add_shape(lj, "out", &l->meta.out) && add_int(lj, "params", l->param_numel) &&
			     add_num(lj, "fwd_flops", l->meta.fwd_flops) && add_num(lj, "bwd_flops", l->meta.bwd_flops) &&
			     add_int(lj, "saved_bytes", (int64_t)ph_layer_saved_bytes(l)) &&
			     add_int(lj, "scratch_bytes", (int64_t)l->meta.scratch_bytes) &&
			     cJSON_AddBoolToObject(lj, "cut_after", i + 1 < m->n && ph_plan_can_cut(c, l->cfg)) != NULL;
			if (ok && fwd_s && bwd_s) {
				ok = add_num(lj, "fwd_s", fwd_s[i]) && add_num(lj, "bwd_s", bwd_s[i]);
				sf += fwd_s[i];
				sb += bwd_s[i];
			}
		}
		if (!ok)
			break;
		double share = total > 0 ? (f + bw) / total : 0;
		if (share > max_cost)
			max_cost = share;
		ph_chunk_mem mem;
		ok = !ph_plan_chunk_mem(p, m, c, k, &mem); /* else NULL: out of memory */
		if (mem.total > peak)
			peak = mem.total;
		sum_mem += mem.total;
		ok = ok && add_int(st, "params", params) && add_num(st, "fwd_flops", f) && add_num(st, "bwd_flops", bw) &&
		     add_num(st, "cost_share", share) && add_int(st, "in_flight", p->slots[k]);
		if (ts > 0 && (sf + sb) / ts > max_meas)
			max_meas = (sf + sb) / ts;
		if (ok && fwd_s && bwd_s)
			ok = add_num(st, "fwd_s", sf) && add_num(st, "bwd_s", sb) &&
			     add_num(st, "measured_share", ts > 0 ? (sf + sb) / ts : 0);
		cJSON *mj = ok ? cJSON_AddObjectToObject(st, "memory") : NULL;
		ok = ok && mj && add_int(mj, "params", (int64_t)mem.params) && add_int(mj, "grads", (int64_t)mem.grads) &&
		     add_int(mj, "optimizer", (int64_t)mem.optimizer) && add_int(mj, "activations", (int64_t)mem.activations) &&
		     add_int(mj, "scratch", (int64_t)mem.scratch) &&
		     (mem.versions < 2 || (add_int(mj, "weight_versions", mem.versions) &&
					   add_int(mj, "older_versions", (int64_t)mem.older_versions))) &&
		     (!mem.second_grads || add_int(mj, "second_grads", (int64_t)mem.second_grads)) &&
		     (!mem.shared || add_int(mj, "shared", (int64_t)mem.shared)) && add_int(mj, "total", (int64_t)mem.total);
	}
	cJSON *tot = ok ? cJSON_AddObjectToObject(root, "totals") : NULL;
	ok = ok && tot && add_int(tot, "layers", m->n) && add_int(tot, "params", tparams) &&
	     add_num(tot, "fwd_flops", tf) && add_num(tot, "bwd_flops", tb) &&
	     add_num(tot, "max_cost_share", max_cost) &&
	     add_num(tot, "max_over_mean_cost", max_cost * p->nchunks) &&
	     add_int(tot, "memory_peak_bytes", (int64_t)peak) && add_int(tot, "memory_sum_bytes", (int64_t)sum_mem);
	if (ok && fwd_s && bwd_s)
		ok = add_num(tot, "measured_s", ts) && add_num(tot, "max_over_mean_measured", max_meas * p->nchunks);
	if (!ok) {
		cJSON_Delete(root);
		return NULL;
	}
	return root;
}

char *ph_plan_json_string(const ph_plan *p, const ph_model *m, const ph_config *c, const double *fwd_s,
			  const double *bwd_s)
{
	cJSON *root = build(p, m, c, fwd_s, bwd_s);
	if (!root)
		return NULL;
	char *s = cJSON_Print(root);
	cJSON_Delete(root);
	return s;
}

int ph_plan_write_json_costs(FILE *f, const ph_plan *p, const ph_model *m, const ph_config *c,
			     const double *fwd_s, const double *bwd_s, ph_err *err)
{
	char *s = ph_plan_json_string(p, m, c, fwd_s, bwd_s);
	if (!s)
		return ph_fail(err, PH_ENOMEM, "out of memory writing the plan as JSON");
	errno = 0;
	int bad = fputs(s, f) == EOF || fputc('\n', f) == EOF || fflush(f) == EOF || ferror(f);
	int e = errno;
	free(s);
	if (bad)
		return ph_fail(err, PH_EIO, "cannot write the plan as JSON: %s",
			       e ? strerror(e) : "output closed or disk full?");
	return PH_OK;
}

int ph_plan_write_json(FILE *f, const ph_plan *p, const ph_model *m, const ph_config *c, ph_err *err)
{
	return ph_plan_write_json_costs(f, p, m, c, NULL, NULL, err);
}

int ph_plan_write_json_file(const char *path, const ph_plan *p, const ph_model *m, const ph_config *c,
			    const double *fwd_s, const double *bwd_s, ph_err *err)
{
	if (!strcmp(path, "-"))
		return ph_plan_write_json_costs(stdout, p, m, c, fwd_s, bwd_s, err);
	/* through core/outputs.h: a symlink followed, a device or FIFO
	 * written through, a file replaced atomically */
	ph_outfile o;
	FILE *f;
	int rc = ph_outstream_open(&o, &f, path, "--plan-json", err);
	if (rc)
		return rc;
	ph_err e2 = { { 0 } };
	/* a failed write is the stream's: commit says why (and removes the
	 * temporary file) */
	if ((rc = ph_plan_write_json_costs(f, p, m, c, fwd_s, bwd_s, &e2)) && rc != PH_EIO) {
		ph_outstream_abort(&o, f);
		return ph_fail(err, rc, "cannot write the plan to %s: %s", path, e2.msg);
	}
	return ph_outstream_commit(&o, f, "--plan-json", err);
}
