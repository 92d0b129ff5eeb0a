/* SPDX-License-Identifier: MIT */
/* Option tables -> config structs: parsing, defaults, ranges, suggestions. */
#ifndef PH_CORE_OPTIONS_H
#define PH_CORE_OPTIONS_H

#include <string.h>

#include <pipehost/plugin.h>

/* A user's text inside an error message: at most PH_ECHO_MAX characters
 * and "..." after a cut, so that the reason after it still fits the
 * message (PH_ERR_MAX).  printf("value " PH_ECHO " is ...", PH_ECHO_ARG(v)) */
#define PH_ECHO_MAX 40
#define PH_ECHO "%.*s%s"
#define PH_ECHO_ARG(s) PH_ECHO_MAX, (s), (strlen(s) > PH_ECHO_MAX ? "..." : "")

/* Where the first byte of s lies that is not well-formed UTF-8 (an
 * overlong form, a surrogate or a code point past U+10FFFF is not), or
 * -1 when all of s is.  Names and values that end up in JSON files (the
 * safetensors header, --plan-json, a checkpoint's state.json) must be. */
long ph_utf8_invalid_at(const char *s);

/* s for a message, like PH_ECHO: at most PH_ECHO_MAX characters and "..."
 * after a cut, with every byte that is not printable UTF-8 (a control
 * character, a stray byte) written as \xNN.  Returns buf. */
#define PH_ECHO_BYTES_MAX (PH_ECHO_MAX * 4 + 4)
const char *ph_echo_bytes(const char *s, char *buf, size_t len);

/* Fill every option of `table` in `cfg` from its default text.  A required
 * option (def == NULL) is left zeroed; ph_options_check_required reports it. */
int ph_options_defaults(const ph_option *table, void *cfg, ph_err *err);

/* Parse `value` for `key`.  Unknown key: PH_EUNSUPPORTED (err says so).
 * Bad value: PH_EINVAL with the key, the value and what is accepted. */
int ph_options_set(const ph_option *table, void *cfg, const char *key,
		   const char *value, ph_err *err);

/* The option named `key`, or NULL. */
const ph_option *ph_options_find(const ph_option *table, const char *key);

/* The closest name among the tables (NULL-terminated array of tables) to
 * `key`, or NULL when nothing is close. */
const char *ph_options_suggest(const ph_option *const *tables, const char *key);

/* Levenshtein distance, for "did you mean". */
int ph_edit_distance(const char *a, const char *b);

/* Print the table (name, type, default, range or choices, help), indented. */
void ph_options_print(FILE *f, const ph_option *table, const char *indent);

/* "int", "float", ... and the range or choices as text, for docs. */
const char *ph_opt_type_name(ph_opt_type t);
void ph_option_range_text(const ph_option *o, char *buf, size_t len);

#endif
