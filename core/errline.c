/* SPDX-License-Identifier: MIT */
/* See errline.h. */
#include "errline.h"

#include <stdlib.h>
#include <string.h>

/* msg escaped into out (room for 4 bytes per byte of msg); its length. */
static size_t escape(const char *msg, char *out)
{
	static const char hex[] = "0123456789abcdef";
	size_t o = 0;
	for (const unsigned char *p = (const unsigned char *)msg; *p; p++) {
		switch (*p) {
		case '\n': out[o++] = '\\', out[o++] = 'n'; break;
		case '\r': out[o++] = '\\', out[o++] = 'r'; break;
		case '\t': out[o++] = '\\', out[o++] = 't'; break;
		default:
			if (*p < 0x20 || *p == 0x7f) {
				out[o++] = '\\', out[o++] = 'x';
				out[o++] = hex[*p >> 4], out[o++] = hex[*p & 15];
			} else {
				out[o++] = (char)*p;
			}
		}
	}
	return o;
}

void ph_err_line(FILE *f, const char *prefix, const char *msg)
{
	/* One write: stderr is unbuffered, so byte by byte each byte was a
	 * write(2) of its own, and under mpirun the lines of two processes
	 * (or mpirun's own) could land inside each other. */
	size_t plen = strlen(prefix), mlen = strlen(msg);
	char stack[4096], *buf = plen + 4 * mlen + 1 <= sizeof stack ? stack : malloc(plen + 4 * mlen + 1);
	if (!buf) { /* out of memory: the line all the same, in pieces */
		char piece[4 * 64 + 1], chunk[65];
		fputs(prefix, f);
		for (size_t i = 0; i < mlen; i += 64) {
			snprintf(chunk, sizeof chunk, "%s", msg + i);
			fwrite(piece, 1, escape(chunk, piece), f);
		}
		fputc('\n', f);
		return;
	}
	memcpy(buf, prefix, plen);
	size_t n = plen + escape(msg, buf + plen);
	buf[n++] = '\n';
	fwrite(buf, 1, n, f);
	if (buf != stack)
		free(buf);
}
