/* SPDX-License-Identifier: MIT */
/* Test plugin with no ops: when the host loads it, it writes the [gpu]
 * switches' environment variables as it sees them into the file
 * $PH_ENV_PROBE, so a test can check that the host set them from the INI
 * before loading any plugin (the CUDA code reads them at first use). */
#include <stdio.h>
#include <stdlib.h>

#include <pipehost/plugin.h>

__attribute__((visibility("default"))) const ph_plugin *pipehost_plugin(void);
const ph_plugin *pipehost_plugin(void)
{
	static const char *const vars[] = { "PIPEHOST_GEMM_LT", "PIPEHOST_GEMM_CAST", "PIPEHOST_OPTIM_MANY",
					    "PIPEHOST_LN_WARP", "PIPEHOST_ATTN_FLASH", "PIPEHOST_GELU_FUSE",
					    "PIPEHOST_BF16_ACT", NULL };
	static const ph_plugin d = { PH_ABI_MAJOR, PH_ABI_MINOR, NULL, NULL, NULL };
	const char *path = getenv("PH_ENV_PROBE");
	FILE *f = path ? fopen(path, "w") : NULL;
	if (f) {
		for (int i = 0; vars[i]; i++) {
			const char *v = getenv(vars[i]);
			fprintf(f, "%s=%s\n", vars[i], v ? v : "(unset)");
		}
		fclose(f);
	}
	return &d;
}
