/* SPDX-License-Identifier: MIT */
/* Parsing JSON with cJSON so that a failure for want of memory is told
 * from a malformed file: cJSON returns NULL for both, and a checkpoint
 * or weights file called corrupt for a failed malloc was once set aside
 * as damaged (docs/changes.md). */
#ifndef PH_CORE_JSON_H
#define PH_CORE_JSON_H

#include <stddef.h>

#include <cjson/cJSON.h>

/* cJSON_ParseWithLengthOpts(text, len, end, 0); *oom (may be NULL) is 1
 * when it returned NULL because an allocation failed, else 0.  *end (may
 * be NULL): past the value, or where the syntax error is. */
cJSON *ph_json_parse(const char *text, size_t len, const char **end, int *oom);

#endif
