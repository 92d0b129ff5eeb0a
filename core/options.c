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

static int parse_int(const ph_option *o, const char *s, int64_t *out, ph_err *err)
{
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, 0);
	while (end && isspace((unsigned char)*end))
		end++;
	if (errno == ERANGE && end != s && !*end) { /* an integer, past 64 bits */
		char r[96];
		ph_option_range_text(o, r, sizeof r);
		return ph_fail(err, PH_EINVAL, "%s = " PH_ECHO " is out of range (past 64-bit integers); allowed: %s",
			       o->name, PH_ECHO_ARG(s), r);
	}
	if (errno || end == s || *end) {
		/* accept 1e3-style integers when they are exact */
		double d = strtod(s, &end);
		while (end && isspace((unsigned char)*end))
			end++;
		if (end == s || *end || d != floor(d) || fabs(d) > 9e18)
			return ph_fail(err, PH_EINVAL, "%s = " PH_ECHO " is not an integer", o->name, PH_ECHO_ARG(s));
		v = (long long)d;
	}
	if ((double)v < o->min || (double)v > o->max)
		return range_error(o, s, (double)v, err);
	*out = v;
	return PH_OK;
}

static int parse_bool(const ph_option *o, const char *s, int *out, ph_err *err)
{
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
	case PH_OPT_FLOAT: {
		char *end;
		errno = 0;
		double d = strtod(value, &end);
		while (end && isspace((unsigned char)*end))
			end++;
		if (errno || end == value || *end || !isfinite(d))
			return ph_fail(err, PH_EINVAL, "%s = " PH_ECHO " is not a number", o->name, PH_ECHO_ARG(value));
		if (d < o->min || d > o->max)
			return range_error(o, value, d, err);
		*(double *)field = d;
		return PH_OK;
	}
	case PH_OPT_BOOL:
		return parse_bool(o, value, (int *)field, err);
	case PH_OPT_STRING:
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
			int rc = parse_int(o, item, &l->v[l->n], err);
			if (rc)
				return rc;
			l->n++;
			p += len;
			if (*p == ',')
				p++;
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
