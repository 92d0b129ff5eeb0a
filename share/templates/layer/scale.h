/* SPDX-License-Identifier: MIT */
/* The scale layer's config: what the host fills from the INI through the
 * option table in scale.c.  Shared with test-scale.c, which fills it itself. */
#ifndef SCALE_H
#define SCALE_H

typedef struct {
	int bias; /* PH_OPT_BOOL: 1 = add a learned bias */
} scale_config;

#endif
