/* SPDX-License-Identifier: MIT */
/* [gpu] -> the PIPEHOST_* environment variables the CUDA code reads. */
#ifndef PH_CORE_GPU_SWITCHES_H
#define PH_CORE_GPU_SWITCHES_H

#include <stddef.h>

#include "config.h"

/* "PIPEHOST_GEMM_CAST" for the key gemm_cast of ph_gpu_options. */
void ph_gpu_switch_env(const char *key, char *buf, size_t len);

/* Every [gpu] key set to on or off becomes its variable ("1" or "0"),
 * overriding the environment; auto leaves the variable as it is.  Call
 * once, before any CUDA code runs (the .cu files read each variable once). */
int ph_gpu_switches_apply(const ph_gpu_cfg *g, ph_err *err);

#endif
