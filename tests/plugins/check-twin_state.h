/* SPDX-License-Identifier: MIT */
/* check_twin's state, shared by check-twin.c and its CUDA twin. */
#ifndef PH_TESTS_CHECK_TWIN_STATE_H
#define PH_TESTS_CHECK_TWIN_STATE_H

#include <pipehost/plugin.h>

typedef struct {
	ph_shape shape;
	int64_t n;  /* floats a sample */
	int bug;    /* $PH_TEST_BAD_TWIN: 0 none, 1 scale, 2 past */
} twin_state;

#endif
