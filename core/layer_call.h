/* SPDX-License-Identifier: MIT */
/* The host's one way into a layer's compute hooks: pick the hooks of the
 * device the call runs on (the layer's own, or its CUDA twin's,
 * ph_layer_device_ops) and check the micro-batch against the size the
 * layer was created for, so that no layer repeats either. */
#ifndef PH_CORE_LAYER_CALL_H
#define PH_CORE_LAYER_CALL_H

#include <stddef.h>

#include <pipehost/plugin.h>

/* Each runs the hook of ctx->device's table with the layer's arguments
 * (plugin.h).  max_batch is what create() was given.  A ctx->batch outside
 * [0, max_batch] is refused with PH_EINTERNAL before the layer runs; so is
 * a call on a device the layer has no hooks for (PH_EUNSUPPORTED). */
int ph_layer_forward(const ph_layer_ops *ops, void *state, int max_batch, const ph_ctx *ctx, float *const *params,
		     const float *x, float *y, ph_err *err);
int ph_layer_backward(const ph_layer_ops *ops, void *state, int max_batch, const ph_ctx *ctx, float *const *params,
		      float *const *grads, const float *x, const float *y, const float *dy, float *dx, ph_err *err);
/* The split halves, for a layer with ph_layer_has_split_backward(ops) (its
 * device hooks split too: the loader sees to it). */
int ph_layer_backward_input(const ph_layer_ops *ops, void *state, int max_batch, const ph_ctx *ctx,
			    float *const *params, const float *x, const float *y, const float *dy, float *dx,
			    ph_err *err);
int ph_layer_backward_weight(const ph_layer_ops *ops, void *state, int max_batch, const ph_ctx *ctx,
			     float *const *params, float *const *grads, const float *x, const float *y,
			     const float *dy, ph_err *err);

/* ctx->group for layer calls outside the engine (generation, checks,
 * profiling; the engine gives every stage a group, of one replica too):
 * size 1, all_to_all copies, all_reduce_sum leaves the buffer, report and
 * report_device drop the figure. */
const ph_group *ph_group_solo(void);

/* Bytes a sample the layer's CUDA twin keeps on a GPU at `precision`, where
 * its saved_bytes hook (ABI 1.6) says; 0: meta's saved_bytes. */
size_t ph_layer_device_saved_bytes(const ph_layer_ops *ops, const void *state, int precision);

/* The device twins' release(), then the layer's destroy(); state may be NULL. */
void ph_layer_destroy(const ph_layer_ops *ops, void *state);

#endif
