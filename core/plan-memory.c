/* SPDX-License-Identifier: MIT */
/* What one chunk of a plan holds in memory: the single figure behind
 * --plan's "est. MiB", --plan=json's "memory", the memory check before a
 * run (memcheck.c) and the [partition] memory limit (plan.c), so that no
 * two of them can disagree (--plan=json once left out 2bw's second
 * gradient buffer, which the table counted). */
#include "plan-memory.h"

int ph_plan_chunk_mem(const ph_plan *p, const ph_model *m, const ph_config *c, int k, ph_chunk_mem *out)
{
	double params = 0, scratch = 0;
	for (int i = p->first[k]; i < p->first[k + 1]; i++) {
		params += (double)m->layers[i].param_numel;
		if ((double)m->layers[i].meta.scratch_bytes > scratch)
			scratch = (double)m->layers[i].meta.scratch_bytes;
	}
	/* the older weight versions an asynchronous schedule keeps (2bw: one)
	 * and, when it runs as a stream with a delayed update, the second
	 * gradient buffer its next step's backwards write into */
	ph_schedule_shape shape = { p->ranks, p->v, p->m };
	int versions = ph_schedule_weight_versions(c->schedule, c->schedule_config, &shape, k % p->ranks);
	int second = p->streams && (ph_schedule_flags(c->schedule) & PH_SCHED_DELAYED_UPDATE);
	const double pb = 4.0 * params;
	*out = (ph_chunk_mem){
		.params = pb,
		.grads = pb,
		.optimizer = pb * ph_optim_state_per_param(&c->optim),
		.versions = versions,
		.older_versions = versions > 1 ? pb * (versions - 1) : 0,
		.second_grads = second ? pb : 0,
		/* a tied copy sharing its source's memory: its gradient alone */
		.shared = ph_plan_shared_bytes(p, m, c, k),
		.activations = ph_plan_activation_bytes(p, m, c, k),
		.scratch = scratch,
	};
	if (out->activations < 0) { /* out of memory: no total rather than one short of them */
		out->total = -1;
		return PH_ENOMEM;
	}
	out->total = out->params + out->grads + out->optimizer + out->older_versions + out->second_grads - out->shared +
		     out->activations + out->scratch;
	return PH_OK;
}
