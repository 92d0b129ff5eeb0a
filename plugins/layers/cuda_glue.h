/* What a layer's C file needs to offer its CUDA twin (NAME_cuda.cu beside
 * it).  Built with CUDA, the Makefile defines PH_WITH_CUDA and links the
 * twin's object into the same module; without, a layer is CPU-only and the
 * host refuses to place it on a GPU before any work starts. */
#ifndef PH_LAYERS_CUDA_GLUE_H
#define PH_LAYERS_CUDA_GLUE_H

#include <pipehost/plugin.h>

#ifdef PH_WITH_CUDA
#define PH_LAYER_DEVICES (PH_DEV_CPU | PH_DEV_CUDA)
#else
#define PH_LAYER_DEVICES PH_DEV_CPU
#endif

/* Is this call for the GPU?  Always 0 in a CPU-only build, so the CUDA
 * branches fold away. */
static inline int ph_on_cuda(const ph_ctx *ctx)
{
#ifdef PH_WITH_CUDA
	return ctx->device == PH_DEV_CUDA;
#else
	(void)ctx;
	return 0;
#endif
}

/* Scratch a call may use: the device figure where the layer gave one. */
static inline size_t ph_scratch_for(const ph_layer_meta *m, int device)
{
	return device == PH_DEV_CUDA && m->device_scratch_bytes ? m->device_scratch_bytes : m->scratch_bytes;
}

#endif
