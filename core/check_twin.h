/* SPDX-License-Identifier: MIT */
/* pipehost --check-plugin, a layer's CUDA twin: the twin on cuda:0 against
 * the layer's own CPU code, as tests/test-cuda-layers checks the project's
 * twins (check_twin.c). */
#ifndef PH_CORE_CHECK_TWIN_H
#define PH_CORE_CHECK_TWIN_H

#include <stddef.h>

#include <pipehost/plugin.h>

#include "layer_inst.h"

/* Bounds of the comparison, per precision (the CPU result is the
 * reference; max is the largest |cpu| of the tensor):
 *   element i passes when |gpu_i - cpu_i| <= rtol |cpu_i| + atol max
 *   the tensor passes when ||gpu - cpu||_2 <= ntol ||cpu||_2 */
typedef struct {
	double rtol, atol, ntol;
} ph_twin_tol;

extern const ph_twin_tol ph_twin_tol_fp32, ph_twin_tol_bf16;

/* A NaN no arithmetic produces: the layer checks start y and dx as it, so
 * a float still holding it was never written (check_layer.c on the CPU,
 * check_twin.c on the GPU). */
#define PH_CHECK_UNWRITTEN 0x7fa5a5a5u

/* Whether cuda:0 can run twins here: PH_OK, or a reason in err (no
 * CUDA backend in this build, no GPU visible) for a SKIP line. */
int ph_check_twin_available(ph_err *err);

/*
 * The twin of cpu->ops at `precision` (PH_PREC_*), on cuda:0, against
 * `cpu`, an instance whose forward and backward (into cpu->dx) have run:
 * a second instance of the layer (create with cpu's config, input and
 * batch) gets cpu's parameters, x, dy (cpu->r) and targets on the GPU,
 * runs forward and backward with the same ctx as the CPU's, and must give
 * y (a loss layer's losses), dx and every parameter gradient within the
 * precision's bounds, write nothing past a buffer (y, dx, a gradient,
 * scratch, saved), and give the same bits on a second run.  PH_OK with a
 * summary in `detail`, or the first difference in err.
 */
int ph_check_twin(const ph_layer_inst *cpu, int precision, char *detail, size_t len, ph_err *err);

#endif
