/* SPDX-License-Identifier: MIT */
/* Host dispatch of a layer's compute hooks by device, with the one check
 * of the micro-batch size every call gets (layer_call.h). */
#include <stddef.h>

#include "blas_gate.h"
#include "layer_call.h"
#include "layer_times.h"

/* Does a device table (as built: struct_size bytes) have hook `field`? */
#define HAS(dev, field) \
	((dev)->struct_size >= offsetof(ph_layer_device_ops, field) + sizeof(void *) && (dev)->field)

/* The device hooks for ctx->device, or NULL to call the layer's own (the
 * CPU, or a layer that looks at ctx->device itself, as ABI 1.3 ones do). */
static int pick(const ph_layer_ops *ops, int max_batch, const ph_ctx *ctx, const ph_layer_device_ops **dev,
		ph_err *err)
{
	*dev = NULL;
	if (ctx->batch < 0 || ctx->batch > max_batch)
		return ph_fail(err, PH_EINTERNAL,
			       "batch %d outside [0, %d], the micro-batch size %s was created for (a host bug: "
			       "please report it)",
			       ctx->batch, max_batch, ops->head.name);
	if (ctx->device != PH_DEV_CUDA)
		return PH_OK;
	*dev = ph_layer_cuda_ops(ops);
	if (!*dev && !(ops->devices & PH_DEV_CUDA))
		return ph_fail(err, PH_EUNSUPPORTED, "%s has no CUDA hooks (a plugin built without its CUDA twin?)",
			       ops->head.name);
	return PH_OK;
}

static int call_forward(const ph_layer_ops *ops, void *state, int max_batch, const ph_ctx *ctx, float *const *params,
		     const float *x, float *y, ph_err *err)
{
	const ph_layer_device_ops *dev;
	int rc = pick(ops, max_batch, ctx, &dev, err);
	if (rc)
		return rc;
	return dev ? dev->forward(state, ctx, params, x, y, err) : ops->forward(state, ctx, params, x, y, err);
}

static int call_backward(const ph_layer_ops *ops, void *state, int max_batch, const ph_ctx *ctx, float *const *params,
		      float *const *grads, const float *x, const float *y, const float *dy, float *dx, ph_err *err)
{
	const ph_layer_device_ops *dev;
	int rc = pick(ops, max_batch, ctx, &dev, err);
	if (rc)
		return rc;
	return dev ? dev->backward(state, ctx, params, grads, x, y, dy, dx, err)
		   : ops->backward(state, ctx, params, grads, x, y, dy, dx, err);
}

/* The loader refuses a twin that splits differently from its layer. */
static int no_split(const ph_layer_ops *ops, ph_err *err)
{
	return ph_fail(err, PH_EINTERNAL, "%s: a split backward asked of CUDA hooks without one", ops->head.name);
}

static int call_backward_input(const ph_layer_ops *ops, void *state, int max_batch, const ph_ctx *ctx,
			    float *const *params, const float *x, const float *y, const float *dy, float *dx,
			    ph_err *err)
{
	const ph_layer_device_ops *dev;
	int rc = pick(ops, max_batch, ctx, &dev, err);
	if (rc)
		return rc;
	if (!dev)
		return ops->backward_input(state, ctx, params, x, y, dy, dx, err);
	if (HAS(dev, backward_input))
		return dev->backward_input(state, ctx, params, x, y, dy, dx, err);
	return no_split(ops, err);
}

static int call_backward_weight(const ph_layer_ops *ops, void *state, int max_batch, const ph_ctx *ctx,
			     float *const *params, float *const *grads, const float *x, const float *y,
			     const float *dy, ph_err *err)
{
	const ph_layer_device_ops *dev;
	int rc = pick(ops, max_batch, ctx, &dev, err);
	if (rc)
		return rc;
	if (!dev)
		return ops->backward_weight(state, ctx, params, grads, x, y, dy, err);
	if (HAS(dev, backward_weight))
		return dev->backward_weight(state, ctx, params, grads, x, y, dy, err);
	return no_split(ops, err);
}

/* PIPEHOST_LAYER_TIMES (layer_times.h): time the hook, else just call it.
 * A CPU hook runs in one of the BLAS gate's seats (blas_gate.h), taken
 * before the clock starts so that a wait for a seat is not the layer's. */
#define TIMED(kind, call)                                                 \
	do {                                                              \
		int cpu_ = ctx->device != PH_DEV_CUDA, rc_;               \
		if (cpu_)                                                 \
			ph_blas_gate_enter();                             \
		if (!ph_layer_times_active) {                             \
			rc_ = call;                                       \
		} else {                                                  \
			double t0_ = ph_layer_times_now(), c0_ = ph_layer_times_cpu(); \
			rc_ = call;                                       \
			ph_layer_times_add(ctx, kind, ph_layer_times_now() - t0_, \
					   ph_layer_times_cpu() - c0_);   \
		}                                                         \
		if (cpu_)                                                 \
			ph_blas_gate_leave();                             \
		return rc_;                                               \
	} while (0)

int ph_layer_forward(const ph_layer_ops *ops, void *state, int max_batch, const ph_ctx *ctx, float *const *params,
		     const float *x, float *y, ph_err *err)
{
	TIMED(PH_LT_FWD, call_forward(ops, state, max_batch, ctx, params, x, y, err));
}

int ph_layer_backward(const ph_layer_ops *ops, void *state, int max_batch, const ph_ctx *ctx, float *const *params,
		      float *const *grads, const float *x, const float *y, const float *dy, float *dx, ph_err *err)
{
	TIMED(PH_LT_BWD, call_backward(ops, state, max_batch, ctx, params, grads, x, y, dy, dx, err));
}

int ph_layer_backward_input(const ph_layer_ops *ops, void *state, int max_batch, const ph_ctx *ctx,
			    float *const *params, const float *x, const float *y, const float *dy, float *dx,
			    ph_err *err)
{
	TIMED(PH_LT_BWD_I, call_backward_input(ops, state, max_batch, ctx, params, x, y, dy, dx, err));
}

int ph_layer_backward_weight(const ph_layer_ops *ops, void *state, int max_batch, const ph_ctx *ctx,
			     float *const *params, float *const *grads, const float *x, const float *y,
			     const float *dy, ph_err *err)
{
	TIMED(PH_LT_BWD_W, call_backward_weight(ops, state, max_batch, ctx, params, grads, x, y, dy, err));
}

size_t ph_layer_device_saved_bytes(const ph_layer_ops *ops, const void *state, int precision)
{
	const ph_layer_device_ops *cu = ph_layer_cuda_ops(ops);
	if (!cu || cu->struct_size < offsetof(ph_layer_device_ops, saved_bytes) + sizeof(void *) || !cu->saved_bytes)
		return 0;
	return cu->saved_bytes(state, precision);
}

void ph_layer_destroy(const ph_layer_ops *ops, void *state)
{
	const ph_layer_device_ops *dev = ph_layer_cuda_ops(ops);
	if (state && dev && HAS(dev, release))
		dev->release(state);
	ops->destroy(state);
}
