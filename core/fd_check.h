/* SPDX-License-Identifier: MIT */
/* The finite-difference gradient check of a CPU layer plugin, and the
 * contract checks that ride along (bitwise repeatable, "+=" for parameter
 * gradients and "=" for dx, dx = NULL accepted, the split backward equal
 * to backward()), on an instance of core/layer_inst.h.  Each check returns
 * PH_OK or an error whose one line names the layer and what differs.
 * Used by pipehost --check-plugin and by tests/fd-harness.h.
 *
 * L = sum(y .* r) for the instance's random r (for a loss layer, L = the
 * summed loss with loss_scale 1).  backward(dy = r) must give dL/dx and
 * dL/dparams; they are compared with central differences
 * (L(v + eps) - L(v - eps)) / (2 eps), error measured as
 * |a - n| / max(|a|, |n|, 1e-3).  Gradients start at a nonzero value to
 * catch "=" where "+=" is due, and dx starts as NaN to catch "+=" where
 * "=" is due. */
#ifndef PH_CORE_FD_CHECK_H
#define PH_CORE_FD_CHECK_H

#include "layer_inst.h"

#define PH_FD_GRAD_INIT 0.375f /* starting value of every parameter gradient */

typedef struct {
	float eps;       /* the nominal step */
	double tol;      /* the largest relative error allowed */
	/* 1: extrapolate central differences at eps and 2 eps (Richardson, error
	 * O(eps^4)), which allows a step large enough to drown the float
	 * rounding of deep layers (the gpt_block); 0: plain central difference. */
	int richardson;
	int x_ids;       /* 1: x holds ids, not differentiable: dx must be exactly 0 */
	/* 1: a layer with the split backward must give bitwise the dx and
	 * gradients of backward() from backward_input then backward_weight. */
	int split;
	/* 1, for layers nobody chose the inputs of (--check-plugin): an element
	 * whose plain central difference disagrees passes if Richardson's at
	 * 10 eps agrees (float rounding in deep layers), or if a one-sided
	 * difference does (v sits within eps of a kink: relu at 0, a max). */
	int kinks;
	/* > 0: an element's error is measured against at least this fraction
	 * of the largest analytic value in its tensor (besides 1e-3), so that
	 * float rounding in the differences of a deep layer does not fail the
	 * tiny elements of a tensor whose scale is far larger; 0: 1e-3 only. */
	double tensor_floor;
	/* > 0: at most this many elements of each tensor, evenly spread over
	 * it (first and last included), so that a large input (--shape) costs
	 * O(sample x forward), not O(n x forward); 0: every element. */
	int64_t sample;
} ph_fd_check;

/* How many of a tensor's n elements c checks. */
static inline int64_t ph_fd_probes(const ph_fd_check *c, int64_t n)
{
	return c->sample > 0 && c->sample < n ? c->sample : n;
}

/* backward()'s results, taken from GRAD_INIT gradients and a NaN dx. */
typedef struct {
	float *dx;                     /* [nx] */
	float *g[PH_MAX_PARAMS];       /* the gradients less GRAD_INIT */
	float *g_raw[PH_MAX_PARAMS];   /* the gradients as backward left them */
} ph_fd_grads;

/* Two forwards give the same bits; then backward's results into *a. */
int ph_fd_analytic(ph_layer_inst *L, ph_fd_grads *a, ph_err *err);
/* A second backward gives the same bits, and dx = NULL the same gradients. */
int ph_fd_check_repeat(ph_layer_inst *L, const ph_fd_grads *a, ph_err *err);
/* backward_input then backward_weight give backward()'s bits (when the
 * layer has them; PH_OK otherwise). */
int ph_fd_check_split(ph_layer_inst *L, const ph_fd_grads *a, ph_err *err);
/* What the layer's flags let the host do (ABI 1.7), from the same bits:
 * PH_LAYER_BACKWARD_NO_Y, backward (and its halves) with y all NaN;
 * PH_LAYER_DX_OVER_X, backward with dx = x.  PH_OK without the flags;
 * x and y are restored. */
int ph_fd_check_in_place(ph_layer_inst *L, const ph_fd_grads *a, ph_err *err);
/* Every element of dx and of each gradient (or c->sample of each) against
 * the differences; *worst: the largest error seen. */
int ph_fd_check_numeric(ph_layer_inst *L, const ph_fd_grads *a, const ph_fd_check *c, double *worst,
			ph_err *err);
void ph_fd_grads_free(ph_fd_grads *a);

/* All of the above in that order (the split only with c->split; the
 * in-place claims after the split). */
int ph_fd_gradcheck(ph_layer_inst *L, const ph_fd_check *c, double *worst, ph_err *err);

#endif
