/* SPDX-License-Identifier: MIT */
/* Test plugin: a layer list 2000 entries long with no NULL inside the
 * first 1024 (a list that lost its terminator reads like this). */
#include <pipehost/plugin.h>

static const ph_schedule_ops none = {
	.head = PH_HEAD_NOOPT(ph_schedule_ops, "endless", "never registered"),
};
#define X4(x) x, x, x, x
#define X16(x) X4(x), X4(x), X4(x), X4(x)
#define X256(x) X16(x), X16(x), X16(x), X16(x), X16(x), X16(x), X16(x), X16(x), \
	X16(x), X16(x), X16(x), X16(x), X16(x), X16(x), X16(x), X16(x)
static const ph_schedule_ops *const schedules[] = { X256(&none), X256(&none), X256(&none), X256(&none),
						    X256(&none), NULL };
PH_PLUGIN(NULL, NULL, schedules)
