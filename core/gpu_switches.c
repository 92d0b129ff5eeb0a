/* SPDX-License-Identifier: MIT */
/* [gpu] -> the PIPEHOST_* environment variables the CUDA code reads.
 *
 * The CUDA files read their switches from the environment once, at first
 * use (the bench scripts set them there); the host therefore writes the
 * [gpu] keys into the same variables before anything CUDA runs, rather
 * than threading a config through every kernel's caller. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_switches.h"

void ph_gpu_switch_env(const char *key, char *buf, size_t len)
{
	size_t n = (size_t)snprintf(buf, len, "PIPEHOST_%s", key);
	for (size_t i = 9; i < n && i < len; i++)
		buf[i] = (char)toupper((unsigned char)buf[i]);
}

int ph_gpu_switches_apply(const ph_gpu_cfg *g, ph_err *err)
{
	for (const ph_option *o = ph_gpu_options; o->name; o++) {
		int v;
		memcpy(&v, (const char *)g + o->offset, sizeof v);
		if (v == PH_GPU_AUTO)
			continue;
		char name[64];
		ph_gpu_switch_env(o->name, name, sizeof name);
		if (setenv(name, v == PH_GPU_ON ? "1" : "0", 1))
			return ph_fail(err, PH_ENOMEM, "[gpu] %s: cannot set %s in the environment", o->name, name);
	}
	return PH_OK;
}
