/* SPDX-License-Identifier: MIT */
/* The windowed schedule's config: what the host fills from the INI through
 * the option table in windowed.c.  Shared with test-windowed.c. */
#ifndef WINDOWED_H
#define WINDOWED_H

#include <stdint.h>

typedef struct {
	int64_t window; /* PH_OPT_INT: micro-batches forward before their backwards */
} windowed_config;

#endif
