/* SPDX-License-Identifier: MIT */
/* Test plugin: a descriptor built for a future ABI major.  The host must
 * refuse it and tell the user to rebuild. */
#include <pipehost/plugin.h>

__attribute__((visibility("default"))) const ph_plugin *pipehost_plugin(void);
const ph_plugin *pipehost_plugin(void)
{
	static const ph_plugin d = { PH_ABI_MAJOR + 1, 0, NULL, NULL, NULL };
	return &d;
}
