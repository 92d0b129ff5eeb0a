/* SPDX-License-Identifier: MIT */
/* What the files of pipehost --check-plugin share (not installed):
 * check_plugin.c, the driver (reporting, options, a child per entry),
 * check_layer.c (a layer's checks) and check_sched.c (a schedule's and a
 * partitioner's).  check_plugin.h is the interface. */
#ifndef PH_CORE_CHECK_IMPL_H
#define PH_CORE_CHECK_IMPL_H

#include <stddef.h>

#include <pipehost/plugin.h>

#include "check_plugin.h"

/* The check under way, as printf would format it: "layer linear:
 * gradients (batch 4)".  Its verdict line starts with it. */
void ph_chk_begin(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* "PASS <the check under way>: message" (FAIL, SKIP), counted. */
void ph_chk_verdict(const char *v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The plugin hook about to run ("forward", "backward (dx = NULL)",
 * "partition"), NULL once it returned: a child that crashes, hangs or
 * exits is then reported as that hook's doing, not only the check's (the
 * checks reach most hooks through layer_inst.c and fd_check.c, so a check's
 * name alone does not say which ran).  A static string: it is copied. */
void ph_chk_hook(const char *name);

#define PASS(...) ph_chk_verdict("PASS", __VA_ARGS__)
#define FAIL(...) ph_chk_verdict("FAIL", __VA_ARGS__)
/* FAIL for a check that ended with status rc; PH_ENOMEM is a SKIP instead */
void ph_chk_failed(int rc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define FAIL_RC(rc, ...) ph_chk_failed((rc), __VA_ARGS__)
#define SKIP(...) ph_chk_verdict("SKIP", __VA_ARGS__)

/* A config for the plugin `h`: its defaults, the --set given for it, and
 * the checker's choice for a required number or choice (*notes says
 * which); malloc'd into *cfg_out. */
int ph_chk_build_config(const ph_ops_head *h, const ph_check_opts *o, void **cfg_out, char *notes, size_t nlen,
			ph_err *err);
/* --shape's text: 1 to 4 sizes joined by x. */
int ph_chk_parse_shape(const char *text, ph_shape *s, ph_err *err);

/* One entry's checks, run in a child process (check_plugin.c). */
void ph_chk_layer(const ph_layer_ops *ops, const ph_check_opts *o);
void ph_chk_schedule(const ph_schedule_ops *s, const ph_check_opts *o);
void ph_chk_partitioner(const ph_partitioner_ops *pt, const ph_check_opts *o);

#endif
