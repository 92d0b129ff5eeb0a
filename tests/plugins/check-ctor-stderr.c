/* SPDX-License-Identifier: MIT */
/* A plugin whose constructor, when $PH_TEST_CTOR_CRASH is set, says what
 * is wrong on stderr and then crashes: pipehost --check-plugin must fold
 * those words into its one FAIL line, and print nothing else
 * (tests/test-check-plugin.sh).  Unset, it is a plain identity layer, so
 * a scan of the test plugins' folder loads it harmlessly. */
#include <signal.h>
#include <stdio.h>

#include "test-layer-common.h"

__attribute__((constructor)) static void complain(void)
{
	if (getenv("PH_TEST_CTOR_CRASH")) {
		fprintf(stderr, "check_ctor_stderr: no licence file\n");
		raise(SIGSEGV); /* the bug */
	}
}

static const ph_layer_ops ops = {
	TL_OPS(PH_HEAD_NOOPT(ph_layer_ops, "check_ctor_stderr", "a constructor that may complain and crash (a test)"),
	       tl_create, tl_meta, tl_forward_identity, tl_backward_identity),
};
TL_PLUGIN(ops)
