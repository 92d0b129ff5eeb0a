/* SPDX-License-Identifier: MIT */
/*
 * type: balance the layers of one kind, the way Megatron and DeepSpeed's
 * "type:transformer" split a language model: count only the layers whose
 * type matches `regex` (weight 1 each, others 0) and give every stage the
 * same number of them (the first M mod K stages one more).
 *
 * A stage starts at its first matched layer, so unmatched layers stay with
 * the matched layer before them (a block's trailing norm or dropout), the
 * unmatched layers before the first match join the first stage and those
 * after the last match the last stage:
 *
 *     embedding, 12 x transformer, head  into 4  ->  4, 3, 3, 4 layers
 *
 * If the cut points forbid one of those starts, we take the nearest allowed
 * split (least total |boundary - wanted boundary|, then earliest) and warn.
 * The regex is POSIX extended and matches anywhere in the type name;
 * anchor it (^transformer$) to match whole names.
 */
#include <regex.h>
#include <stdlib.h>

#include <pipehost/plugin.h>

#include "cuts.h"

typedef struct {
	char regex[PH_STR_MAX];
} type_config;

static const ph_option type_options[] = {
	PH_OPT_STRING_(type_config, regex, "regex", NULL,
		       "POSIX extended regex on layer types; matched layers are balanced across stages"),
	PH_OPT_END
};

static int type_partition(const void *config, const ph_partition_problem *pb,
			  int *first, ph_err *warn, ph_err *err)
{
	const type_config *cfg = config;
	int rc = cuts_check(pb, "type", err);
	if (rc)
		return rc;
	if (!pb->types)
		return ph_fail(err, PH_EINVAL, "type: the host gave no layer types");
	if (!cfg || !cfg->regex[0])
		return ph_fail(err, PH_EINVAL, "type: set regex, e.g. regex = ^transformer$");
	regex_t re;
	int rrc = regcomp(&re, cfg->regex, REG_EXTENDED | REG_NOSUB);
	if (rrc) {
		char why[128];
		regerror(rrc, &re, why, sizeof why);
		return ph_fail(err, PH_EINVAL, "type: regex '%s' does not compile: %s", cfg->regex, why);
	}
	int n = pb->n, K = pb->stages;
	int *match = malloc(sizeof *match * (size_t)n);
	int *target = malloc(sizeof *target * (size_t)(K + 1));
	if (!match || !target) {
		rc = ph_fail(err, PH_ENOMEM, "type: out of memory");
		goto out;
	}
	int M = 0; /* match[0..M) = indices of the matched layers */
	for (int i = 0; i < n; i++)
		if (pb->types[i] && regexec(&re, pb->types[i], 0, NULL, 0) == 0)
			match[M++] = i;
	if (M < K) {
		rc = ph_fail(err, PH_EINVAL, "type: %d layer%s of type matching '%s', fewer than the %d stages; "
			     "widen regex or lower stages", M, M == 1 ? "" : "s", cfg->regex, K);
		goto out;
	}
	/* Stage s starts at its first matched layer; stage 0 at layer 0. */
	target[0] = 0;
	target[K] = n;
	for (int s = 1, seen = 0; s < K; s++) {
		seen += M / K + (s - 1 < M % K);
		target[s] = match[seen];
	}
	int banned = -1;
	for (int s = 1; s < K && banned < 0; s++)
		if (!cuts_can_end(pb, target[s]))
			banned = s;
	if (banned < 0) {
		for (int s = 0; s <= K; s++)
			first[s] = target[s];
	} else {
		rc = cuts_nearest_allowed(pb, target, first, "type", err);
		if (rc == PH_OK)
			ph_fail(warn, PH_OK, "type: the cut points forbid starting stage %d at layer %d (%s); used the nearest allowed split",
				banned, target[banned], pb->names ? pb->names[target[banned]] : "?");
	}
out:
	regfree(&re);
	free(match);
	free(target);
	return rc;
}

static const ph_partitioner_ops type_ops = {
	.head = PH_HEAD(ph_partitioner_ops, "type",
			"balance the layers whose type matches regex (e.g. transformer blocks)",
			type_options, type_config),
	.partition = type_partition,
};

static const ph_partitioner_ops *const partitioners[] = { &type_ops, NULL };
PH_PLUGIN(NULL, partitioners, NULL)
