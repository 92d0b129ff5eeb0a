/* SPDX-License-Identifier: MIT */
/* libFuzzer: the INI reader (system inih under our line-counting reader)
 * and, when PH_FUZZ_PLUGIN_PATH names the built plugin directories, the
 * whole config resolver: sections, keys, option parsing, plugin lookup.
 * Any input must give PH_OK or one error line, never a crash or a leak. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "loader.h"
#include "fuzz-util.h"

static ph_registry reg;
static int have_reg;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	const char *p = getenv("PH_FUZZ_PLUGIN_PATH");
	ph_err err = { { 0 } };
	if (p && *p) {
		if (ph_registry_load_path(&reg, p, &err) == PH_OK)
			have_reg = 1;
		else
			fprintf(stderr, "fuzz-config: no plugins (%s); fuzzing the INI reader only\n", err.msg);
	}
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *path = fuzz_file(0, "fuzz.ini", data, size);
	ph_config c;
	ph_err err = { { 0 } };
	/* Two overrides that every run could carry: they must merge safely. */
	static const char *const sets[] = { "run.steps=3", "layer fc1.units=5" };
	int rc = ph_config_read(&c, path, sets, 2, &err);
	if (rc == PH_OK && have_reg)
		rc = ph_config_resolve(&c, &reg, &err);
	if (rc != PH_OK && !err.msg[0])
		abort(); /* a failure must say why */
	ph_config_free(&c);
	return 0;
}
