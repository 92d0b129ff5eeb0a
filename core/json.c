/* SPDX-License-Identifier: MIT */
/* cJSON's allocations go through json_malloc, which notes a failure in a
 * per-thread flag that ph_json_parse reads after a parse (json.h). */
#include <stdlib.h>

#include "json.h"

static _Thread_local int json_oom;

static void *json_malloc(size_t n)
{
	void *p = malloc(n);
	if (!p)
		json_oom = 1;
	return p;
}

/* At load, before any thread parses: cJSON's hooks are process-wide. */
__attribute__((constructor)) static void json_hooks(void)
{
	cJSON_Hooks h = { json_malloc, free };
	cJSON_InitHooks(&h);
}

cJSON *ph_json_parse(const char *text, size_t len, const char **end, int *oom)
{
	json_oom = 0;
	cJSON *root = cJSON_ParseWithLengthOpts(text, len, end, 0);
	if (oom)
		*oom = !root && json_oom;
	return root;
}
