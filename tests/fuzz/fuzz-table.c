/* SPDX-License-Identifier: MIT */
/* libFuzzer: a schedule table ([schedule] type = table, a CSV file the
 * user writes) through the table plugin (plugins/schedules/table.c,
 * compiled in) and the host's checks of any schedule's output
 * (ph_plan_set_actions: the rules, the lowering, the deadlock search).
 * Input: three bytes for the shape (ranks p 1..4, chunks per rank v 1..3,
 * micro-batches m 1..8), then the CSV.  A table is either refused with a
 * message, or accepted; an accepted one must hold, counted here again,
 * every forward exactly once, every backward once as B or as I and W,
 * each on the rank that holds its chunk, and a peak in flight per chunk
 * within 1..m. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz-util.h"
#include "engine.h"
#include "plan.h"

const ph_plugin *pipehost_plugin(void);

/* plan.c's memory estimates reach the engine's allocator; the checks
 * fuzzed here never do. */
void *ph_eng_balloc(ph_engine *e, int rank, size_t bytes)
{
	(void)e, (void)rank, (void)bytes;
	abort();
}

void ph_eng_bfree(ph_engine *e, int rank, void *p)
{
	(void)e, (void)rank, (void)p;
	abort();
}

static const ph_schedule_ops *table_ops(void)
{
	const ph_plugin *pl = pipehost_plugin();
	for (int i = 0; pl->schedules && pl->schedules[i]; i++)
		if (!strcmp(pl->schedules[i]->head.name, "table"))
			return pl->schedules[i];
	abort();
}

/* The accepted lists, counted independently of check_lists. */
static void check_accepted(const ph_plan *p)
{
	const int C = p->nchunks, M = p->m;
	int *n = calloc((size_t)C * M * 4, sizeof *n);
	if (!n)
		abort();
	for (int r = 0; r < p->ranks; r++)
		for (int k = 0; k < p->nactions[r]; k++) {
			const ph_action *a = &p->actions[r][k];
			if (a->kind > PH_ACT_W || a->chunk >= C || a->mb < 0 || a->mb >= M || a->chunk % p->ranks != r)
				abort();
			n[((size_t)a->chunk * M + a->mb) * 4 + a->kind]++;
		}
	for (int i = 0; i < C * M; i++) {
		const int *e = n + (size_t)i * 4;
		const int split = e[PH_ACT_I] == 1 && e[PH_ACT_W] == 1 && e[PH_ACT_B] == 0;
		const int whole = e[PH_ACT_B] == 1 && e[PH_ACT_I] == 0 && e[PH_ACT_W] == 0;
		if (e[PH_ACT_F] != 1 || !(split || whole))
			abort();
	}
	for (int c = 0; c < C; c++)
		if (p->slots[c] < 1 || p->slots[c] > M)
			abort();
	free(n);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 3)
		return 0;
	const int P = 1 + data[0] % 4, V = 1 + data[1] % 3, M = 1 + data[2] % 8;
	const char *file = fuzz_file(0, "sched.csv", data + 3, size - 3);
	const ph_schedule_ops *o = table_ops();
	char cfg[PH_STR_MAX]; /* table_cfg: the file's path, first and only */
	memset(cfg, 0, sizeof cfg);
	snprintf(cfg, sizeof cfg, "%s", file);
	if (o->head.config_size != sizeof cfg)
		abort();
	const ph_schedule_shape sh = { P, V, M };
	ph_err err = { { 0 } };
	ph_plan p = { .ranks = P, .v = V, .nchunks = P * V, .m = M };
	int rc = o->check(cfg, &sh, &err);
	const int cap = 4 * V * M;
	p.actions = calloc((size_t)P, sizeof *p.actions);
	p.nactions = calloc((size_t)P, sizeof *p.nactions);
	if (!p.actions || !p.nactions)
		abort();
	for (int r = 0; r < P && !rc; r++) {
		if (!(p.actions[r] = calloc((size_t)cap, sizeof(ph_action))))
			abort();
		rc = o->generate(cfg, &sh, r, p.actions[r], cap, &p.nactions[r], &err);
		if (!rc && (p.nactions[r] < 0 || p.nactions[r] > cap))
			abort();
	}
	if (!rc)
		rc = ph_plan_set_actions(&p, p.actions, p.nactions, &err);
	if (rc && !err.msg[0])
		abort();
	if (!rc)
		check_accepted(&p);
	ph_plan_free(&p);
	return 0;
}
