/* SPDX-License-Identifier: MIT */
/* Test plugin: its constructor writes the file $PH_TEST_CTOR_MARK, so a
 * test sees whether the host dlopen'ed it.  It provides one schedule,
 * "marker_schedule", that no fixture names. */
#include <stdio.h>
#include <stdlib.h>

#include <pipehost/plugin.h>

__attribute__((constructor)) static void mark(void)
{
	const char *path = getenv("PH_TEST_CTOR_MARK");
	FILE *f = path ? fopen(path, "a") : NULL;
	if (f) {
		fputs("loaded\n", f);
		fclose(f);
	}
}

static int generate(const void *config, const ph_schedule_shape *sh, int rank, ph_action *out, int cap,
		    int *n, ph_err *err)
{
	(void)config, (void)sh, (void)rank, (void)out, (void)cap;
	*n = 0;
	return ph_fail(err, PH_EUNSUPPORTED, "marker_schedule: generates nothing");
}

static const ph_schedule_ops marker_ops = {
	.head = PH_HEAD_NOOPT(ph_schedule_ops, "marker_schedule", "a schedule whose constructor leaves a mark"),
	.max_chunks_per_rank = 1,
	.generate = generate,
};
static const ph_schedule_ops *const schedules[] = { &marker_ops, NULL };
PH_PLUGIN(NULL, NULL, schedules)
