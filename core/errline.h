/* SPDX-License-Identifier: MIT */
/* An error's one line on a stream: "pipehost: MESSAGE\n", with every
 * control character of the message written as an escape (\n, \r, \t,
 * \x1b, ...).  A message quotes what the user gave (a path, an INI value,
 * a --set); a newline or an escape sequence there must not split the line
 * or drive the terminal. */
#ifndef PH_CORE_ERRLINE_H
#define PH_CORE_ERRLINE_H

#include <stdio.h>

/* prefix before the message, e.g. "pipehost: " or "pipehost: process 1 of 2: " */
void ph_err_line(FILE *f, const char *prefix, const char *msg);

#endif
