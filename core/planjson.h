/* SPDX-License-Identifier: MIT */
/* The plan as JSON (pipehost --plan=json): the same facts as ph_plan_print's
 * table, per chunk and per layer, for scripts and benchmarks.  The schema is
 * docs/plan-json.md ("format": "pipehost-plan", "version": 1). */
#ifndef PH_CORE_PLANJSON_H
#define PH_CORE_PLANJSON_H

#include <stdio.h>

#include "plan.h"

#define PH_PLAN_JSON_VERSION 1

/* Write one JSON object and a newline to f.  PH_ENOMEM, or PH_EIO when f
 * reports a write error; nothing else is printed. */
int ph_plan_write_json(FILE *f, const ph_plan *p, const ph_model *m, const ph_config *c, ph_err *err);

/* The same, with the measured per-layer seconds of [partition] cost =
 * profile (the arrays given to ph_plan_build), added as fwd_s/bwd_s per layer
 * and per chunk.  fwd_s and bwd_s may be NULL: then it is ph_plan_write_json. */
int ph_plan_write_json_costs(FILE *f, const ph_plan *p, const ph_model *m, const ph_config *c,
			     const double *fwd_s, const double *bwd_s, ph_err *err);

/* Write it to path ("-": stdout) through a temp file and a rename, so a
 * reader never sees half a plan.  fwd_s/bwd_s as above (may be NULL). */
int ph_plan_write_json_file(const char *path, const ph_plan *p, const ph_model *m, const ph_config *c,
			    const double *fwd_s, const double *bwd_s, ph_err *err);

/* The same object as a string (free() it), or NULL when out of memory. */
char *ph_plan_json_string(const ph_plan *p, const ph_model *m, const ph_config *c, const double *fwd_s,
			  const double *bwd_s);

#endif
