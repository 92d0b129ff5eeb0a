/* SPDX-License-Identifier: MIT */
/* One layer plugin instance on the CPU with every buffer the host would hand
 * it (x, y, dL/dy, dx, parameters, gradients, targets, scratch, saved), each
 * followed by a guard zone so that a write past what meta() announced is
 * seen, and a seeded random source to fill them.  Driven through its
 * ph_layer_ops as the engine drives it: create, meta, forward, backward.
 * Used by the gradient checks (core/fd_check.h), pipehost --check-plugin
 * (core/check_plugin.c) and the layer test suites (tests/layer-harness.h). */
#ifndef PH_CORE_LAYER_INST_H
#define PH_CORE_LAYER_INST_H

#include <stdint.h>

#include <pipehost/plugin.h>

/* splitmix64: the same numbers for the same seed on every machine. */
typedef struct {
	uint64_t state;
} ph_rng64;

uint64_t ph_rng64_next(ph_rng64 *g);
/* Uniform in [lo, hi), 24 random bits. */
float ph_rng64_uniform(ph_rng64 *g, float lo, float hi);
void ph_rng64_fill(ph_rng64 *g, float *p, int64_t n, float lo, float hi);

typedef struct {
	const ph_layer_ops *ops;
	void *cfg, *state;              /* cfg: the caller's, never freed here */
	ph_layer_meta meta;
	ph_shape in;
	int batch;                      /* max_batch given to create, and ctx.batch */
	int loss;                       /* a PH_LAYER_LOSS layer */
	int64_t nx, ny;                 /* whole micro-batch */
	float *x, *y, *r, *dx;          /* r: dL/dy for the objective */
	int64_t pn[PH_MAX_PARAMS];
	float *params[PH_MAX_PARAMS], *grads[PH_MAX_PARAMS];
	int32_t *targets;               /* NULL unless the layer takes targets */
	int64_t nt;                     /* batch * meta.targets_per_sample */
	ph_ctx ctx;
} ph_layer_inst;

/*
 * Create the layer with max_batch = batch and allocate, zeroed:
 *   x, dx [batch * numel(in)], y, r [batch * numel(out)],
 *   params[p], grads[p] [numel of param p], targets [nt];
 * ctx is the context to run with, given its scratch and saved at meta's
 * sizes (uninitialised, as the host's) and the targets.  Fails, with
 * nothing left allocated, when create() or meta() fails or meta is out of
 * bounds (too many parameters, a negative dimension).
 */
int ph_layer_inst_create(ph_layer_inst *L, const ph_layer_ops *ops, void *cfg, ph_shape in, int batch, ph_ctx ctx,
			 ph_err *err);
void ph_layer_inst_close(ph_layer_inst *L);

/* After the caller's x: r U(-1, 1), parameters U(-1, 1) * pscale, targets
 * uniform in [0, classes), drawn in this order (a seed names its numbers
 * only while the order stays). */
void ph_layer_inst_draw(ph_layer_inst *L, ph_rng64 *g, float pscale, int64_t classes);

/* forward; backward with dy = r (NULL for a loss layer) into dx (may be NULL).
 * A plugin's error comes back as "NAME forward: its message". */
int ph_layer_inst_forward(ph_layer_inst *L, ph_err *err);
int ph_layer_inst_backward(ph_layer_inst *L, float *dx, ph_err *err);

/* Every byte of scratch and saved set to `byte`: what a layer finds there
 * before it writes (the host never clears them). */
void ph_layer_inst_fill_scratch(ph_layer_inst *L, unsigned char byte);

/* Did a call write past a buffer meta() sized (y, dx, a gradient, scratch,
 * saved)?  `call` names it in the message ("forward"). */
int ph_layer_inst_check_guards(const ph_layer_inst *L, const char *call, ph_err *err);

#endif
