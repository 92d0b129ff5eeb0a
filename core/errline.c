/* SPDX-License-Identifier: MIT */
/* See errline.h. */
#include "errline.h"

void ph_err_line(FILE *f, const char *prefix, const char *msg)
{
	fputs(prefix, f);
	for (const unsigned char *p = (const unsigned char *)msg; *p; p++) {
		switch (*p) {
		case '\n': fputs("\\n", f); break;
		case '\r': fputs("\\r", f); break;
		case '\t': fputs("\\t", f); break;
		default:
			if (*p < 0x20 || *p == 0x7f)
				fprintf(f, "\\x%02x", *p);
			else
				fputc(*p, f);
		}
	}
	fputc('\n', f);
}
