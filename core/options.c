/* SPDX-License-Identifier: MIT */
/* Option tables -> config structs.  One parser serves INI values, --set
 * overrides and defaults, so a default can never be something the user
 * could not have typed. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "options.h"

const char *ph_opt_type_name(ph_opt_type t)
{
	switch (t) {
	case PH_OPT_INT: return "int";
	case PH_OPT_FLOAT: return "float";
	case PH_OPT_BOOL: return "bool";
	case PH_OPT_STRING: return "string";
	case PH_OPT_CHOICE: return "choice";
	case PH_OPT_INTLIST: return "int list";
	}
	return "?";
}

static int has_range(const ph_option *o)
{
	return o->min > PH_NO_MIN || o->max < PH_NO_MAX;
}

void ph_option_range_text(const ph_option *o, char *buf, size_t len)
{
	buf[0] = 0;
	if (o->type == PH_OPT_CHOICE && o->choices) {
		snprintf(buf, len, "%s", o->choices);
	} else if (o->type == PH_OPT_BOOL) {
		snprintf(buf, len, "yes|no");
	} else if (has_range(o) && (o->type == PH_OPT_INT || o->type == PH_OPT_INTLIST)) {
		if (o->max >= PH_NO_MAX)
			snprintf(buf, len, ">= %.0f", o->min);
		else if (o->min <= PH_NO_MIN)
			snprintf(buf, len, "<= %.0f", o->max);
		else
			snprintf(buf, len, "%.0f..%.0f", o->min, o->max);
	} else if (has_range(o) && o->type == PH_OPT_FLOAT) {
		if (o->max >= PH_NO_MAX)
			snprintf(buf, len, ">= %g", o->min);
		else if (o->min <= PH_NO_MIN)
			snprintf(buf, len, "<= %g", o->max);
		else
			snprintf(buf, len, "%g..%g", o->min, o->max);
	}
}

const ph_option *ph_options_find(const ph_option *table, const char *key)
{
	for (const ph_option *o = table; o && o->name; o++)
		if (strcmp(o->name, key) == 0)
			return o;
	return NULL;
}

static int range_error(const ph_option *o, const char *value, double v, ph_err *err)
{
	char r[96];
	ph_option_range_text(o, r, sizeof r);
	/* past the "no bound" sentinels: the range text alone ("allowed: >= 0")
	 * would not say why the value was refused */
	if (v > o->max && o->max >= PH_NO_MAX)
		return ph_fail(err, PH_EINVAL, "%s = " PH_ECHO " is out of range; allowed: %s, at most %g", o->name, PH_ECHO_ARG(value), r,
			       o->max);
	if (v < o->min && o->min <= PH_NO_MIN)
		return ph_fail(err, PH_EINVAL, "%s = " PH_ECHO " is out of range; allowed: %s, at least %g", o->name, PH_ECHO_ARG(value), r,
			       o->min);
	return ph_fail(err, PH_EINVAL, "%s = " PH_ECHO " is out of range; allowed: %s", o->name, PH_ECHO_ARG(value), r);
}

/* Nothing but white space: a --set "key= " is as empty as "key=" (inih
 * strips an INI file's values). */
static int blank(const char *s)
{
	while (isspace((unsigned char)*s))
		s++;
	return !*s;
}

static int empty_error(const ph_option *o, ph_err *err)
{
	char r[96];
	ph_option_range_text(o, r, sizeof r);
	switch (o->type) {
	case PH_OPT_INT:
		return ph_fail(err, PH_EINVAL, "%s is empty; give an integer%s%s%s", o->name, r[0] ? " (" : "", r,
			       r[0] ? ")" : "");
	case PH_OPT_FLOAT:
		return ph_fail(err, PH_EINVAL, "%s is empty; give a number%s%s%s", o->name, r[0] ? " (" : "", r,
			       r[0] ? ")" : "");
	case PH_OPT_BOOL:
		return ph_fail(err, PH_EINVAL, "%s is empty; give yes or no", o->name);
	default:
		return ph_fail(err, PH_EINVAL, "%s is empty; give one of %s", o->name, r);
	}
}

/* strtod over the whole text (white space after it allowed): 1 when all
 * of s is one number, with *erange whether strtod said ERANGE. */
static int read_double(const char *s, double *d, int *erange)
{
	char *end;
	errno = 0;
	*d = strtod(s, &end);
	*erange = errno == ERANGE;
	while (isspace((unsigned char)*end))
		end++;
	return end != s && !*end;
}

/* C's hexadecimal ("0x10", "-0X1p-3"), which strtod reads (and strtoll
 * with base 0 did): numbers are decimal, so it is refused, not read. */
static int hex_text(const char *s)
{
	while (isspace((unsigned char)*s))
		s++;
	if (*s == '+' || *s == '-')
		s++;
	return s[0] == '0' && (s[1] == 'x' || s[1] == 'X');
}

static int hex_error(const ph_option *o, const char *s, ph_err *err)
{
	double d;
	int erange;
	if (read_double(s, &d, &erange) && !erange && isfinite(d)) {
		char dec[40];
		for (int prec = 15; prec <= 17; prec++) { /* the shortest that reads back */
			snprintf(dec, sizeof dec, "%.*g", prec, d);
			if (strtod(dec, NULL) == d)
				break;
		}
		return ph_fail(err, PH_EINVAL, "%s = " PH_ECHO " is hexadecimal; write it in decimal: %s", o->name,
			       PH_ECHO_ARG(s), dec);
	}
	return ph_fail(err, PH_EINVAL, "%s = " PH_ECHO " is hexadecimal; write it in decimal", o->name, PH_ECHO_ARG(s));
}

/* A number past what its type holds: "(past 64-bit integers)". */
static int beyond_error(const ph_option *o, const char *s, const char *why, ph_err *err)
{
	char r[96];
	ph_option_range_text(o, r, sizeof r);
	return ph_fail(err, PH_EINVAL, "%s = " PH_ECHO " is out of range (%s)%s%s", o->name, PH_ECHO_ARG(s), why,
		       r[0] ? "; allowed: " : "", r);
}

/* Decimal only: a leading zero is not octal (032 is 32) and 0x is refused. */
static int parse_int(const ph_option *o, const char *s, int64_t *out, ph_err *err)
{
	if (blank(s))
		return empty_error(o, err);
	if (hex_text(s))
		return hex_error(o, s, err);
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	while (end && isspace((unsigned char)*end))
		end++;
	if (errno == ERANGE && end != s && !*end) /* an integer, past 64 bits */
		return beyond_error(o, s, "past 64-bit integers", err);
	if (errno || end == s || *end) {
		/* accept 1e3-style integers when they are exact */
		double d;
		int erange;
		/* 1e-400: ERANGE, read as 0, not an integer */
		if (!read_double(s, &d, &erange) || (isinf(d) && !erange) || (erange && fabs(d) < 1) || d != floor(d))
			return ph_fail(err, PH_EINVAL, "%s = " PH_ECHO " is not an integer", o->name, PH_ECHO_ARG(s));
		if (erange || d >= 9223372036854775808.0 || d < -9223372036854775808.0)
			return beyond_error(o, s, "past 64-bit integers", err);
		v = (long long)d;
	}
	if ((double)v < o->min || (double)v > o->max)
		return range_error(o, s, (double)v, err);
	*out = v;
	return PH_OK;
}

static int parse_float(const ph_option *o, const char *s, double *out, ph_err *err)
{
	if (blank(s))
		return empty_error(o, err);
	if (hex_text(s))
		return hex_error(o, s, err);
	double d;
	int erange;
	if (!read_double(s, &d, &erange) || isnan(d) || (isinf(d) && !erange))
		return ph_fail(err, PH_EINVAL, "%s = " PH_ECHO " is not a number", o->name, PH_ECHO_ARG(s));
	/* ERANGE: past DBL_MAX (read as an infinity), or so near 0 that it
	 * reads as 0; a subnormal (1e-310) reads as itself and goes on */
	if (erange && isinf(d))
		return beyond_error(o, s, "beyond what a double holds, 1.8e308", err);
	if (erange && d == 0)
		return beyond_error(o, s, "nearer 0 than a double holds: it would read as 0", err);
	if (d < o->min || d > o->max)
		return range_error(o, s, d, err);
	*out = d;
	return PH_OK;
}

static int parse_bool(const ph_option *o, const char *s, int *out, ph_err *err)
{
	if (blank(s))
		return empty_error(o, err);
	static const char *yes[] = { "yes", "true", "on", "1" };
	static const char *no[] = { "no", "false", "off", "0" };
	for (int i = 0; i < 4; i++) {
		if (strcasecmp(s, yes[i]) == 0) {
			*out = 1;
			return PH_OK;
		}
		if (strcasecmp(s, no[i]) == 0) {
			*out = 0;
			return PH_OK;
		}
	}
	return ph_fail(err, PH_EINVAL, "%s = " PH_ECHO " is not a boolean; use yes or no", o->name, PH_ECHO_ARG(s));
}

static int parse_choice(const ph_option *o, const char *s, int *out, ph_err *err)
{
	if (blank(s))
		return empty_error(o, err);
	const char *c = o->choices ? o->choices : "";
	size_t n = strlen(s);
	for (int idx = 0; *c; idx++) {
		const char *bar = strchr(c, '|');
		size_t len = bar ? (size_t)(bar - c) : strlen(c);
		if (len == n && strncmp(c, s, n) == 0) {
			*out = idx;
			return PH_OK;
		}
		if (!bar)
			break;
		c = bar + 1;
	}
	return ph_fail(err, PH_EINVAL, "%s = " PH_ECHO " is not one of %s", o->name, PH_ECHO_ARG(s), o->choices);
}

int ph_options_set(const ph_option *table, void *cfg, const char *key,
		   const char *value, ph_err *err)
{
	const ph_option *o = ph_options_find(table, key);
	if (!o)
		return ph_fail(err, PH_EUNSUPPORTED, "unknown key %s", key);
	char *field = (char *)cfg + o->offset;
	switch (o->type) {
	case PH_OPT_INT:
		return parse_int(o, value, (int64_t *)field, err);
	case PH_OPT_FLOAT:
		return parse_float(o, value, (double *)field, err);
	case PH_OPT_BOOL:
		return parse_bool(o, value, (int *)field, err);
	case PH_OPT_STRING:
		if (blank(value))
			value = "";
		if (strlen(value) >= PH_STR_MAX)
			return ph_fail(err, PH_EINVAL, "%s is longer than %d characters", o->name,
				       PH_STR_MAX - 1);
		strcpy(field, value);
		return PH_OK;
	case PH_OPT_CHOICE:
		return parse_choice(o, value, (int *)field, err);
	case PH_OPT_INTLIST: {
		ph_intlist *l = (ph_intlist *)field;
		l->n = 0;
		const char *p = value;
		while (*p) {
			while (isspace((unsigned char)*p))
				p++;
			if (!*p)
				break;
			if (l->n == PH_INTLIST_MAX)
				return ph_fail(err, PH_EINVAL, "%s has more than %d values", o->name,
					       PH_INTLIST_MAX);
			char item[64];
			size_t len = strcspn(p, ",");
			if (len >= sizeof item)
				return ph_fail(err, PH_EINVAL, "%s: value too long", o->name);
			memcpy(item, p, len);
			item[len] = 0;
			if (blank(item))
				return ph_fail(err, PH_EINVAL, "%s = " PH_ECHO " has an empty value between commas; remove the "
					       "extra comma", o->name, PH_ECHO_ARG(value));
			int rc = parse_int(o, item, &l->v[l->n], err);
			if (rc)
				return rc;
			l->n++;
			p += len;
			if (*p == ',' && blank(++p)) /* "0,4," was taken as "0,4" while "0,,4" was refused */
				return ph_fail(err, PH_EINVAL, "%s = " PH_ECHO " ends with a comma; remove it, or give the "
					       "missing value", o->name, PH_ECHO_ARG(value));
		}
		return PH_OK;
	}
	}
	return ph_fail(err, PH_EINTERNAL, "%s: unknown option type", o->name);
}

int ph_options_defaults(const ph_option *table, void *cfg, ph_err *err)
{
	for (const ph_option *o = table; o && o->name; o++) {
		if (!o->def)
			continue;
		int rc = ph_options_set(table, cfg, o->name, o->def, err);
		if (rc) {
			char msg[PH_ERR_MAX];
			snprintf(msg, sizeof msg, "%s", err->msg);
			return ph_fail(err, PH_EINTERNAL, "bad default in option table: %s", msg);
		}
	}
	return PH_OK;
}

/* The bytes of the well-formed UTF-8 sequence at s (RFC 3629: no overlong
 * form, no surrogate, nothing past U+10FFFF), or 0 where none starts. */
static int utf8_seq(const unsigned char *s)
{
	if (s[0] < 0x80)
		return 1;
	int n = s[0] >= 0xc2 && s[0] <= 0xdf ? 2 : s[0] >= 0xe0 && s[0] <= 0xef ? 3 : s[0] >= 0xf0 && s[0] <= 0xf4 ? 4 : 0;
	if (!n)
		return 0;
	unsigned char lo = 0x80, hi = 0xbf; /* the second byte's bounds */
	if (s[0] == 0xe0)
		lo = 0xa0; /* overlong */
	else if (s[0] == 0xed)
		hi = 0x9f; /* surrogates */
	else if (s[0] == 0xf0)
		lo = 0x90; /* overlong */
	else if (s[0] == 0xf4)
		hi = 0x8f; /* past U+10FFFF */
	if (s[1] < lo || s[1] > hi)
		return 0;
	for (int i = 2; i < n; i++)
		if (s[i] < 0x80 || s[i] > 0xbf)
			return 0;
	return n;
}

long ph_utf8_invalid_at(const char *s)
{
	const unsigned char *p = (const unsigned char *)s;
	for (size_t i = 0; p[i];) {
		int n = utf8_seq(p + i);
		if (!n)
			return (long)i;
		i += (size_t)n;
	}
	return -1;
}

const char *ph_echo_bytes(const char *s, char *buf, size_t len)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t used = 0, i = 0;
	buf[0] = 0;
	for (int shown = 0; p[i] && shown < PH_ECHO_MAX; shown++) {
		int n = utf8_seq(p + i);
		char piece[8];
		if (n == 1 && p[i] >= 0x20 && p[i] != 0x7f)
			snprintf(piece, sizeof piece, "%c", p[i]);
		else if (n > 1)
			snprintf(piece, sizeof piece, "%.*s", n, (const char *)p + i);
		else
			snprintf(piece, sizeof piece, "\\x%02x", p[i]);
		size_t k = strlen(piece);
		if (used + k + 4 > len) /* room for "..." */
			break;
		memcpy(buf + used, piece, k + 1);
		used += k;
		i += n ? (size_t)n : 1;
	}
	if (p[i] && used + 4 <= len)
		memcpy(buf + used, "...", 4);
	return buf;
}

int ph_edit_distance(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	if (la > 63 || lb > 63)
		return 99;
	int row[64];
	for (size_t j = 0; j <= lb; j++)
		row[j] = (int)j;
	for (size_t i = 1; i <= la; i++) {
		int diag = row[0];
		row[0] = (int)i;
		for (size_t j = 1; j <= lb; j++) {
			int up = row[j];
			int cost = a[i - 1] == b[j - 1] ? 0 : 1;
			int best = diag + cost;
			if (up + 1 < best)
				best = up + 1;
			if (row[j - 1] + 1 < best)
				best = row[j - 1] + 1;
			row[j] = best;
			diag = up;
		}
	}
	return row[lb];
}

const char *ph_options_suggest(const ph_option *const *tables, const char *key)
{
	const char *best = NULL;
	int best_d = 1 << 30;
	for (int t = 0; tables && tables[t]; t++)
		for (const ph_option *o = tables[t]; o->name; o++) {
			int d = ph_edit_distance(key, o->name);
			if (d < best_d) {
				best_d = d;
				best = o->name;
			}
		}
	/* close enough to be a typo: at most a third of the word, at least 1 */
	size_t len = strlen(key);
	int limit = len < 3 ? 1 : (int)(len / 3 + 1);
	return best_d <= limit ? best : NULL;
}

void ph_options_print(FILE *f, const ph_option *table, const char *indent)
{
	for (const ph_option *o = table; o && o->name; o++) {
		char r[96];
		ph_option_range_text(o, r, sizeof r);
		fprintf(f, "%s%-16s %-8s default %-10s %-16s %s\n", indent, o->name,
			ph_opt_type_name(o->type), o->def ? (o->def[0] ? o->def : "\"\"") : "(required)",
			r, o->help ? o->help : "");
	}
}
