/* SPDX-License-Identifier: MIT */
/* Checkpoints: a growing string, for the identity lines and state.json. */
#include "checkpoint-impl.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

void ph_ck_printf(ph_ck_sbuf *b, const char *fmt, ...)
{
	if (b->oom)
		return;
	for (;;) {
		va_list ap;
		va_start(ap, fmt);
		int k = vsnprintf(b->s ? b->s + b->len : NULL, b->s ? b->cap - b->len : 0, fmt, ap);
		va_end(ap);
		if (k < 0) {
			b->oom = 1;
			return;
		}
		if (b->s && b->len + (size_t)k < b->cap) {
			b->len += (size_t)k;
			return;
		}
		size_t nc = b->cap ? b->cap * 2 : 1024;
		while (nc < b->len + (size_t)k + 1)
			nc *= 2;
		char *ns = realloc(b->s, nc);
		if (!ns) {
			b->oom = 1;
			return;
		}
		b->s = ns;
		b->cap = nc;
	}
}
