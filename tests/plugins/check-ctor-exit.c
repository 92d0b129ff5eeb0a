/* SPDX-License-Identifier: MIT */
/* A plugin whose constructor calls exit() when $PH_TEST_CTOR_EXIT is set:
 * pipehost --check-plugin must report that as a FAIL of loading it, with
 * its own count line, not vanish with the plugin's exit status
 * (tests/test-check-plugin.sh).  Unset, it is a plain identity layer, so
 * a scan of the test plugins' folder loads it harmlessly. */
#include "test-layer-common.h"

__attribute__((constructor)) static void leave(void)
{
	if (getenv("PH_TEST_CTOR_EXIT"))
		exit(3); /* the bug */
}

static const ph_layer_ops ops = {
	TL_OPS(PH_HEAD_NOOPT(ph_layer_ops, "check_ctor_exit", "a constructor that may call exit (a test)"), tl_create,
	       tl_meta, tl_forward_identity, tl_backward_identity),
};
TL_PLUGIN(ops)
