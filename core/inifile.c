/* SPDX-License-Identifier: MIT */
/* INI loading on top of the system inih, with line numbers.  The file is
 * read whole first (a regular file or a pipe, at most PH_INI_MAX bytes), so
 * that bytes inih would silently drop (a NUL, lone carriage returns) are
 * reported with their line before any parsing. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <ini.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "inifile.h"
#include "options.h"
#include "readfile.h"

#define PH_INI_MAX (16 << 20) /* an INI is a page or two; this bounds a read of /dev/zero-like input */

typedef struct {
	const char *buf;    /* the whole file */
	size_t len, pos;
	ph_ini *ini;
	int line;           /* line most recently handed to inih */
	int too_long;       /* line number of an over-long line, or 0 */
	int fail_line;      /* first handler failure */
	int fail_code;      /* its code where not PH_EINVAL (PH_ENOMEM) */
	ph_err *err;
} reader_state;

static int grow(void **p, int n, int *cap, size_t size)
{
	if (n < *cap)
		return 0;
	int nc = *cap ? *cap * 2 : 32;
	void *q = realloc(*p, (size_t)nc * size);
	if (!q)
		return -1;
	*p = q;
	*cap = nc;
	return 0;
}

/* ---- sections by name, and each section's entries as a list ---- */

static unsigned name_hash(const char *s)
{
	unsigned h = 2166136261u; /* FNV-1a */
	while (*s)
		h = (h ^ (unsigned char)*s++) * 16777619u;
	return h;
}

/* The index of [name] in ini->sections, or -1. */
static int section_index(const ph_ini *ini, const char *name)
{
	if (!ini->by_name_cap)
		return -1;
	const unsigned mask = (unsigned)ini->by_name_cap - 1;
	for (unsigned k = name_hash(name) & mask;; k = (k + 1) & mask) {
		const int v = ini->by_name[k];
		if (!v)
			return -1;
		if (!strcmp(ini->sections[v - 1].name, name))
			return v - 1;
	}
}

/* Puts section idx in the table, which grows to keep it at most half full. */
static int index_section(ph_ini *ini, int idx)
{
	if (2 * (idx + 1) > ini->by_name_cap) {
		int cap = ini->by_name_cap ? 2 * ini->by_name_cap : 64;
		while (2 * (idx + 1) > cap)
			cap *= 2;
		int *t = calloc((size_t)cap, sizeof *t);
		if (!t)
			return -1;
		free(ini->by_name);
		ini->by_name = t;
		ini->by_name_cap = cap;
		for (int i = 0; i < idx; i++) /* the others again, at their places in the larger table */
			if (index_section(ini, i))
				return -1; /* cannot happen: the table has room */
	}
	const unsigned mask = (unsigned)ini->by_name_cap - 1;
	unsigned k = name_hash(ini->sections[idx].name) & mask;
	while (ini->by_name[k])
		k = (k + 1) & mask;
	ini->by_name[k] = idx + 1;
	return 0;
}

/* A new section [name] at `line` (0: --set): its index, or -1 out of memory. */
static int new_section(ph_ini *ini, const char *name, int line)
{
	if (grow((void **)&ini->sections, ini->nsections, &ini->sections_cap, sizeof *ini->sections))
		return -1;
	const int idx = ini->nsections;
	ph_ini_section *s = &ini->sections[idx];
	snprintf(s->name, sizeof s->name, "%s", name);
	s->line = line;
	s->first = s->last = -1;
	if (index_section(ini, idx))
		return -1; /* not counted: the table is the one it was */
	ini->nsections++;
	return idx;
}

/* A new, empty entry at the end of section sidx's list, or NULL out of memory. */
static ph_ini_entry *new_entry(ph_ini *ini, int sidx)
{
	if (grow((void **)&ini->entries, ini->nentries, &ini->entries_cap, sizeof *ini->entries))
		return NULL;
	const int idx = ini->nentries++;
	ph_ini_entry *e = &ini->entries[idx];
	memset(e, 0, sizeof *e);
	e->next = -1;
	ph_ini_section *s = &ini->sections[sidx];
	snprintf(e->section, sizeof e->section, "%s", s->name);
	if (s->last >= 0)
		ini->entries[s->last].next = idx;
	else
		s->first = idx;
	s->last = idx;
	return e;
}

/* Names and a layer's values end up in JSON files (the safetensors
 * header, --plan-json, a checkpoint's state.json, the metrics), which
 * must be UTF-8: a stray byte (Latin-1's \xe9) is refused where it is
 * written, not passed on to break a JSON parser.  Paths and the other
 * sections' values may hold any bytes.  `where`: "FILE:LINE" or "--set
 * ASSIGNMENT".  PH_OK, or the error. */
static int check_utf8(const char *where, const char *section, const char *key, const char *value, ph_err *err)
{
	char shown[PH_ECHO_BYTES_MAX];
	int layer = !strncmp(section, "layer ", 6);
	if (ph_utf8_invalid_at(section) >= 0) {
		if (layer)
			return ph_fail(err, PH_EINVAL, "%s: layer name '%s' is not valid UTF-8; rename it in UTF-8 (layer "
				       "names go into JSON files: the weights, the plan, checkpoints)", where,
				       ph_echo_bytes(section + 6, shown, sizeof shown));
		return ph_fail(err, PH_EINVAL, "%s: section name [%s] is not valid UTF-8; write it in UTF-8", where,
			       ph_echo_bytes(section, shown, sizeof shown));
	}
	if (key && ph_utf8_invalid_at(key) >= 0)
		return ph_fail(err, PH_EINVAL, "%s: key '%s' in [%s] is not valid UTF-8; write it in UTF-8", where,
			       ph_echo_bytes(key, shown, sizeof shown), section);
	if (key && layer && ph_utf8_invalid_at(value) >= 0)
		return ph_fail(err, PH_EINVAL, "%s: [%s] %s = %s is not valid UTF-8; write it in UTF-8 (a layer's "
			       "values go into checkpoints' state.json)", where, section, key,
			       ph_echo_bytes(value, shown, sizeof shown));
	return PH_OK;
}

static int add_section(reader_state *st, const char *name)
{
	ph_ini *ini = st->ini;
	const int i = section_index(ini, name);
	if (i >= 0) {
		st->fail_line = st->line;
		return ph_fail(st->err, PH_EINVAL,
			       "%s:%d: section [%s] appears twice (first at line %d); "
			       "give every section a unique name",
			       ini->path, st->line, name, ini->sections[i].line);
	}
	if (new_section(ini, name, st->line) < 0) {
		/* the reader then stops, and the load fails: inih takes its NULL
		 * for the end of the file, which once left a config without its
		 * last sections */
		st->fail_line = st->line;
		st->fail_code = PH_ENOMEM;
		return ph_fail(st->err, PH_ENOMEM, "%s:%d: out of memory reading it", ini->path, st->line);
	}
	return PH_OK;
}

/* fgets over the buffer with line counting; notices section headers and
 * over-long lines.  The buffer holds no NUL (checked before parsing). */
static char *reader(char *str, int num, void *stream)
{
	reader_state *st = stream;
	if (st->too_long || st->fail_line || st->pos >= st->len || num < 2)
		return NULL;
	size_t len = 0;
	while (len < (size_t)num - 1 && st->pos < st->len) {
		char ch = st->buf[st->pos++];
		str[len++] = ch;
		if (ch == '\n')
			break;
	}
	str[len] = 0;
	char *r = str;
	st->line++;
	if (len == (size_t)num - 1 && r[len - 1] != '\n' && st->pos < st->len) {
		st->too_long = st->line;
		return NULL;
	}
	const char *p = r;
	while (isspace((unsigned char)*p))
		p++;
	if (*p == '[') {
		const char *end = strchr(p, ']');
		/* inih drops what follows the ']': a key written there would
		 * vanish without a word */
		const char *after = end ? end + 1 : NULL;
		while (after && (*after == ' ' || *after == '\t' || *after == '\r' || *after == '\n'))
			after++;
		if (after && *after && *after != ';' && *after != '#') {
			char junk[48];
			snprintf(junk, sizeof junk, "%.*s", (int)strcspn(after, "\r\n"), after);
			st->fail_line = st->line;
			ph_fail(st->err, PH_EINVAL, "%s:%d: text after the section header (" PH_ECHO "); put it on a line of its "
				"own", st->ini->path, st->line, PH_ECHO_ARG(junk));
			return NULL;
		}
		if (end) {
			char name[128];
			size_t n = (size_t)(end - p - 1);
			if (n >= sizeof name)
				n = sizeof name - 1;
			memcpy(name, p + 1, n);
			name[n] = 0;
			/* trim the name (handler() trims inih's the same way) */
			char *a = name;
			while (isspace((unsigned char)*a))
				a++;
			char *z = a + strlen(a);
			while (z > a && isspace((unsigned char)z[-1]))
				*--z = 0;
			if (strlen(a) > PH_INI_SECTION_MAX) {
				st->fail_line = st->line;
				if (!strncmp(a, "layer ", 6))
					ph_fail(st->err, PH_EINVAL,
						"%s:%d: layer name '" PH_ECHO "' is longer than %d characters; shorten it",
						st->ini->path, st->line, PH_ECHO_ARG(a + 6), PH_LAYER_NAME_MAX);
				else
					ph_fail(st->err, PH_EINVAL,
						"%s:%d: section name [" PH_ECHO "] is longer than %d characters (the system "
						"inih's limit); shorten it",
						st->ini->path, st->line, PH_ECHO_ARG(a), PH_INI_SECTION_MAX);
				return NULL;
			}
			char where[PH_STR_MAX + 16];
			snprintf(where, sizeof where, "%s:%d", st->ini->path, st->line);
			if (check_utf8(where, a, NULL, NULL, st->err)) {
				st->fail_line = st->line;
				return NULL;
			}
			if (add_section(st, a))
				return NULL;
		}
	}
	return r;
}

static int handler(void *user, const char *raw_section, const char *name, const char *value)
{
	reader_state *st = user;
	ph_ini *ini = st->ini;
	if (st->fail_line)
		return 0;
	/* inih (r55) keeps the spaces inside the brackets, "[ run ]" as
	 * " run "; the reader trimmed them (add_section), and so does this:
	 * the keys of [ run ] are [run]'s (they were once dropped unread) */
	char section[sizeof ini->entries->section];
	const char *a = raw_section;
	while (isspace((unsigned char)*a))
		a++;
	snprintf(section, sizeof section, "%s", a);
	for (size_t z = strlen(section); z && isspace((unsigned char)section[z - 1]);)
		section[--z] = 0;
	const ph_ini_entry *twice = ph_ini_find(ini, section, name);
	if (twice) {
		st->fail_line = st->line;
		ph_fail(st->err, PH_EINVAL, "%s:%d: %s is set twice in [%s] (first at line %d); keep one", ini->path,
			st->line, name, section, twice->line);
		return 0;
	}
	if (!section[0]) {
		st->fail_line = st->line;
		ph_fail(st->err, PH_EINVAL, "%s:%d: %s = ... comes before any [section]; put it under [run] or the section it belongs to",
			ini->path, st->line, name);
		return 0;
	}
	char where[PH_STR_MAX + 16];
	snprintf(where, sizeof where, "%s:%d", ini->path, st->line);
	if (check_utf8(where, section, name, value, st->err)) {
		st->fail_line = st->line;
		return 0;
	}
	if (strlen(section) >= sizeof ini->entries->section || strlen(name) >= sizeof ini->entries->key ||
	    strlen(value) >= sizeof ini->entries->value) {
		st->fail_line = st->line;
		ph_fail(st->err, PH_EINVAL, "%s:%d: the key is longer than %zu characters or the value than %zu; shorten it",
			ini->path, st->line, sizeof ini->entries->key - 1, sizeof ini->entries->value - 1);
		return 0;
	}
	/* the reader saw the header first (add_section); inih's name for it,
	 * trimmed above, is the same (both keep 49 characters), but should
	 * they ever differ the entry still gets a section of its own */
	int sidx = section_index(ini, section);
	if (sidx < 0)
		sidx = new_section(ini, section, st->line);
	ph_ini_entry *e = sidx < 0 ? NULL : new_entry(ini, sidx);
	if (!e) {
		st->fail_line = st->line;
		st->fail_code = PH_ENOMEM;
		ph_fail(st->err, PH_ENOMEM, "out of memory reading %s", ini->path);
		return 0;
	}
	strcpy(e->key, name);
	strcpy(e->value, value);
	e->line = st->line;
	return 1;
}

/* The config's bytes: a regular file, or a pipe (-c /dev/stdin, -c <(cmd));
 * a directory, device or socket is refused, and a FIFO nobody writes to
 * reads as empty at once instead of blocking. */
static int read_config(const char *path, char **out, size_t *outlen, ph_err *err)
{
	*out = NULL;
	*outlen = 0;
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return ph_fail(err, PH_EIO, "cannot open config %s: %s; pass an existing file with -c",
			       path, strerror(errno));
	struct stat sb;
	if (fstat(fd, &sb) != 0 || !(S_ISREG(sb.st_mode) || S_ISFIFO(sb.st_mode))) {
		int isdir = S_ISDIR(sb.st_mode);
		close(fd);
		if (isdir)
			return ph_fail(err, PH_EIO, "cannot read config %s: %s; pass an INI file with -c", path,
				       strerror(EISDIR));
		return ph_fail(err, PH_EIO, "cannot read config %s: it is %s; pass an INI file (or a pipe) with -c",
			       path, ph_file_kind(sb.st_mode));
	}
	int fl = fcntl(fd, F_GETFL);
	if (fl >= 0)
		fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
	size_t cap = S_ISREG(sb.st_mode) && sb.st_size < PH_INI_MAX ? (size_t)sb.st_size + 1 : 65536, len = 0;
	char *buf = malloc(cap);
	int rc = buf ? PH_OK : ph_fail(err, PH_ENOMEM, "out of memory reading config %s", path);
	while (!rc) {
		if (len == cap) {
			size_t nc = cap * 2;
			char *nb = len >= PH_INI_MAX ? NULL : realloc(buf, nc);
			if (!nb) {
				rc = len >= PH_INI_MAX
					     ? ph_fail(err, PH_EINVAL, "config %s is larger than %d MiB: not an INI file; "
						       "pass the run's INI with -c", path, PH_INI_MAX >> 20)
					     : ph_fail(err, PH_ENOMEM, "out of memory reading config %s", path);
				break;
			}
			buf = nb;
			cap = nc;
		}
		ssize_t got = read(fd, buf + len, cap - len);
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0)
			rc = ph_fail(err, PH_EIO, "cannot read config %s: %s; pass an INI file with -c", path, strerror(errno));
		if (got <= 0)
			break;
		len += (size_t)got;
	}
	close(fd);
	/* a regular file read short of its size was cut while being read:
	 * its first sections alone once made the run, exit 0 */
	if (!rc && S_ISREG(sb.st_mode) && (off_t)len < sb.st_size)
		rc = ph_fail(err, PH_EIO, "config %s shrank while being read (%zu of %lld bytes); run again once nothing "
			     "writes it", path, len, (long long)sb.st_size);
	if (!rc && len == 0 && S_ISFIFO(sb.st_mode))
		rc = ph_fail(err, PH_EIO, "config %s is a named pipe that nothing was written to; start the program "
			     "that writes it first, or pass a regular file with -c", path);
	if (rc) {
		free(buf);
		return rc;
	}
	*out = buf;
	*outlen = len;
	return PH_OK;
}

/* Bytes inih would drop without a word: a NUL ends its line early, and a
 * carriage return not followed by a newline (old Mac endings) makes the
 * whole file one line. */
static int check_bytes(const char *path, const char *buf, size_t len, ph_err *err)
{
	int line = 1;
	for (size_t i = 0; i < len; i++) {
		if (buf[i] == 0)
			return ph_fail(err, PH_EINVAL, "%s:%d: line holds a NUL byte; the config must be a text file: "
				       "remove it (byte %zu; tr -d '\\000')", path, line, i);
		if (buf[i] == '\r' && i + 1 < len && buf[i + 1] != '\n')
			return ph_fail(err, PH_EINVAL, "%s:%d: line ends with a carriage return alone (old Mac line "
				       "endings); convert the file: tr '\\r' '\\n' <%s >fixed.ini", path, line, path);
		if (buf[i] == '\n')
			line++;
	}
	return PH_OK;
}

int ph_ini_load(const char *path, ph_ini *ini, ph_err *err)
{
	memset(ini, 0, sizeof *ini);
	if (strlen(path) >= sizeof ini->path)
		return ph_fail(err, PH_EINVAL, "config path " PH_ECHO " is longer than %zu characters; give -c a shorter "
			       "(e.g. relative) path", PH_ECHO_ARG(path), sizeof ini->path - 1);
	strcpy(ini->path, path);
	char *buf;
	size_t len;
	int rc = read_config(path, &buf, &len, err);
	if (rc)
		return rc;
	if ((rc = check_bytes(path, buf, len, err))) {
		free(buf);
		return rc;
	}
	/* Our format: one value per line, no continuations; stop at the first error. */
	ini_allow_multiline = false;
	ini_stop_on_first_error = true;
	reader_state st = { .buf = buf, .len = len, .ini = ini, .err = err };
	rc = ini_parse_stream(reader, &st, handler, &st);
	free(buf);
	if (st.too_long)
		return ph_fail(err, PH_EINVAL, "%s:%d: line longer than %d characters (the system inih's limit); shorten it",
			       path, st.too_long, ini_max_line - 2); /* inih's buffer: the line, its newline, a NUL */
	if (st.fail_line)
		return st.fail_code ? st.fail_code : PH_EINVAL; /* err already says what */
	if (rc > 0)
		return ph_fail(err, PH_EINVAL, "%s:%d: cannot parse this line; expected [section] or key = value",
			       path, rc);
	if (rc < 0)
		return ph_fail(err, PH_EIO, "cannot read config %s", path);
	return PH_OK;
}

ph_ini_entry *ph_ini_find(ph_ini *ini, const char *section, const char *key)
{
	for (ph_ini_entry *e = ph_ini_next_in(ini, section, NULL); e; e = ph_ini_next_in(ini, section, e))
		if (!strcmp(e->key, key))
			return e; /* one at most: a --set replaces the file's value in place */
	return NULL;
}

ph_ini_entry *ph_ini_next_in(ph_ini *ini, const char *section, const ph_ini_entry *prev)
{
	int i;
	if (prev) {
		i = prev->next;
	} else {
		const int s = section_index(ini, section);
		i = s < 0 ? -1 : ini->sections[s].first;
	}
	return i < 0 ? NULL : &ini->entries[i];
}

int ph_ini_override(ph_ini *ini, const char *a, ph_err *err)
{
	const char *eq = strchr(a, '=');
	if (!eq)
		return ph_fail(err, PH_EINVAL, "--set " PH_ECHO ": expected section.key=value", PH_ECHO_ARG(a));
	char lhs[128];
	size_t n = (size_t)(eq - a);
	if (n >= sizeof lhs)
		return ph_fail(err, PH_EINVAL, "--set " PH_ECHO ": the section.key is longer than %zu characters", PH_ECHO_ARG(a), sizeof lhs - 1);
	memcpy(lhs, a, n);
	lhs[n] = 0;
	char *dot = strrchr(lhs, '.');
	if (!dot || dot == lhs || !dot[1])
		return ph_fail(err, PH_EINVAL, "--set " PH_ECHO ": expected section.key=value, e.g. run.steps=100", PH_ECHO_ARG(a));
	*dot = 0;
	char section[128];
	if (strncmp(lhs, "layer.", 6) == 0)
		snprintf(section, sizeof section, "layer %s", lhs + 6);
	else
		snprintf(section, sizeof section, "%s", lhs);
	const char *key = dot + 1, *value = eq + 1;
	if (strlen(key) >= sizeof ini->entries->key || strlen(value) >= sizeof ini->entries->value)
		return ph_fail(err, PH_EINVAL, "--set " PH_ECHO ": the key is longer than %zu characters or the value than %zu",
			       PH_ECHO_ARG(a), sizeof ini->entries->key - 1, sizeof ini->entries->value - 1);
	char where[PH_ECHO_BYTES_MAX + 8];
	char shown[PH_ECHO_BYTES_MAX];
	snprintf(where, sizeof where, "--set %s", ph_echo_bytes(a, shown, sizeof shown));
	int rc = check_utf8(where, section, key, value, err);
	if (rc)
		return rc;
	int sidx = section_index(ini, section);
	if (sidx < 0 && (sidx = new_section(ini, section, 0)) < 0)
		return ph_fail(err, PH_ENOMEM, "out of memory");
	ph_ini_entry *e = ph_ini_find(ini, section, key);
	if (!e) {
		if (!(e = new_entry(ini, sidx)))
			return ph_fail(err, PH_ENOMEM, "out of memory");
		snprintf(e->key, sizeof e->key, "%s", key);
	}
	/* white space at either end is dropped, as inih strips an INI file's
	 * values: --set "run.metrics= m.jsonl" is m.jsonl, and spaces alone
	 * are empty */
	const char *v = value;
	while (isspace((unsigned char)*v))
		v++;
	size_t len = strlen(v);
	while (len && isspace((unsigned char)v[len - 1]))
		len--;
	snprintf(e->value, sizeof e->value, "%.*s", (int)len, v);
	e->line = 0;
	return PH_OK;
}

void ph_ini_where(const ph_ini *ini, int line, char *buf, size_t len)
{
	if (line > 0)
		snprintf(buf, len, "%s:%d", ini->path, line);
	else
		snprintf(buf, len, "--set");
}

void ph_ini_where_key(const ph_ini *ini, const char *section, const char *key, char *buf, size_t len)
{
	const ph_ini_entry *e = ph_ini_find((ph_ini *)ini, section, key); /* reads only */
	if (e) {
		ph_ini_where(ini, e->line, buf, len);
		return;
	}
	const int s = section_index(ini, section);
	if (s >= 0) {
		ph_ini_where(ini, ini->sections[s].line, buf, len);
		return;
	}
	snprintf(buf, len, "%s", ini->path[0] ? ini->path : "the config");
}

void ph_ini_free(ph_ini *ini)
{
	free(ini->sections);
	free(ini->entries);
	free(ini->by_name);
	memset(ini, 0, sizeof *ini);
}
