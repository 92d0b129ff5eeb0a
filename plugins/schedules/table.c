/* SPDX-License-Identifier: MIT */
/*
 * table: a schedule written by hand in a CSV file, one row per rank.
 *
 *     [schedule]
 *     type = table
 *     file = my-schedule.csv     ; relative to the working directory
 *
 * Row r (counting only rows with actions) is rank r's order.  Actions are
 * separated by commas and/or blanks; '#' starts a comment that runs to the
 * end of the line; blank and comment-only lines are skipped.  (Semicolons
 * separate too, for spreadsheets that export them.)  An action is a
 * kind and a micro-batch, F3, B3, I3 or W3 (I and W: the two halves of a
 * split backward), with the global chunk in front when [run] chunks > 1:
 * 1F3 is the forward of micro-batch 3 on chunk 1 (rank r holds chunks
 * r, r+p, r+2p, ...).  For p = 2, m = 4, 1F1B is
 *
 *     # rank 0
 *     F0, F1, B0, F2, B1, F3, B2, B3
 *     # rank 1
 *     F0, B0, F1, B1, F2, B2, F3, B3
 *
 * This plugin checks only the file's syntax and its row count.  The host
 * checks the rest like any schedule's output, and names the first broken
 * rule with its rank and position: every forward and backward exactly once,
 * each backward after its forward, each W after its I, chunks on the rank
 * that holds them, micro-batches in range, no deadlock.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <pipehost/plugin.h>

#define MAX_CHUNKS 16

typedef struct {
	char file[PH_STR_MAX];
} table_cfg;

static const ph_option table_options[] = {
	PH_OPT_STRING_(table_cfg, file, "file", NULL,
		       "CSV file, one row of actions per rank (F3, B3, I3, W3; 1F3 = chunk 1 when chunks > 1)"),
	PH_OPT_END
};

static int is_sep(int ch)
{
	return ch == ',' || ch == ' ' || ch == '\t' || ch == '\r' || ch == '\n' || ch == '\v' || ch == '\f' || ch == ';';
}

/* Parse one token [CHUNK]KIND MB; 0 on success, else 1 (not an action) or 2 (number too large). */
static int parse_action(const char *s, size_t len, ph_action *a, int *has_chunk)
{
	size_t k = 0;
	long chunk = 0, mb = 0;
	*has_chunk = 0;
	while (k < len && s[k] >= '0' && s[k] <= '9') {
		if (k >= 5)
			return 2;
		chunk = chunk * 10 + (s[k++] - '0');
		*has_chunk = 1;
	}
	if (k >= len)
		return 1;
	int kind;
	switch (s[k++]) {
	case 'F': case 'f': kind = PH_ACT_F; break;
	case 'B': case 'b': kind = PH_ACT_B; break;
	case 'I': case 'i': kind = PH_ACT_I; break;
	case 'W': case 'w': kind = PH_ACT_W; break;
	default: return 1;
	}
	size_t d0 = k;
	while (k < len && s[k] >= '0' && s[k] <= '9') {
		if (k - d0 >= 9)
			return 2;
		mb = mb * 10 + (s[k++] - '0');
	}
	if (k == d0 || k != len)
		return 1;
	if (chunk > 65535)
		return 2;
	*a = (ph_action){ .kind = (uint8_t)kind, .chunk = (uint16_t)chunk, .mb = (int32_t)mb };
	return 0;
}

/* ------------------------------------------------------------------ */
/* The file, parsed once.
 *
 * A plan asks for the table once to check it and once per rank, and the
 * host's search for a micro-batch count the schedule takes asks once per
 * count it tries: read and parsed each time, a 64-rank plan of a table of
 * 4096 micro-batches (35 MB) spent 3.3 of its 7.6 s here, and a typo in
 * it took 14 s to report.  The file is parsed once, into its rows and what
 * ended the reading (all that does not depend on the shape); each call
 * then checks its shape against that and copies its rank's row, and finds
 * the same first fault, in the same words, as a read that stopped there.
 *
 * The parse is kept for the next call (one file: the last one read) and
 * taken again when the file is the same one (path, device, inode, size,
 * modification and change times) and either
 *   - the call is the next of a plan: generate() for rank r of the shape
 *     that the last call asked for, check() when r = 0, else generate()
 *     for rank r - 1; a plan reads its table once, and every rank's row
 *     comes from that reading;
 *   - or the file had not changed for SETTLED_S seconds when it was read:
 *     a file written again within the clock's tick can keep its size and
 *     times (a test writes one table after another under the same name),
 *     but not one written after we read it, once its times are older.
 * A read that failed (EIO, out of memory) or came back shorter than the
 * file is kept for no other call.  The parse holds 8 bytes an action (33 MB
 * for that table) until another file is read or the module is unloaded. */

#define SETTLED_S 2

enum { STOP_END, STOP_NOT_ACTION, STOP_TOO_LARGE, STOP_NUL, STOP_NOMEM, STOP_EIO };

typedef struct {
	ph_action *act;        /* every row's actions, in the file's order; chunk = the row where none is written */
	size_t nact, act_cap;
	size_t *start;         /* row k's actions are act[start[k] .. start[k + 1]) */
	int *line;             /* row k's line */
	int rows, rows_cap;    /* rows with actions, one that `stop` cut short included */
	int whole;             /* rows that ran to their line's end */
	int lines;             /* lines read */
	/* the first action written without its chunk (refused when chunks > 1) */
	int bare, bare_row, bare_line, bare_len;
	size_t bare_at;
	char bare_tok[16];
	/* what ended the reading: at line stop_line, in row stop_row */
	int stop, stop_line, stop_row, stop_errno, stop_len;
	char stop_tok[41];
	size_t bytes;          /* bytes read */
} table_text;

static void text_free(table_text *t)
{
	free(t->act);
	free(t->start);
	free(t->line);
	memset(t, 0, sizeof *t);
}

/* Room for one more row (and the end of the last); 0, or -1 out of memory. */
static int text_row(table_text *t, int lineno)
{
	if (t->rows + 2 > t->rows_cap) {
		int cap = t->rows_cap ? 2 * t->rows_cap : 64;
		size_t *s = realloc(t->start, (size_t)cap * sizeof *s);
		if (s)
			t->start = s;
		int *l = realloc(t->line, (size_t)cap * sizeof *l);
		if (l)
			t->line = l;
		if (!s || !l)
			return -1;
		t->rows_cap = cap;
	}
	t->start[t->rows] = t->nact;
	t->line[t->rows] = lineno;
	t->rows++;
	return 0;
}

static int text_action(table_text *t, ph_action a)
{
	if (t->nact == t->act_cap) {
		size_t cap = t->act_cap ? 2 * t->act_cap : 1024;
		ph_action *n = realloc(t->act, cap * sizeof *n);
		if (!n)
			return -1;
		t->act = n;
		t->act_cap = cap;
	}
	t->act[t->nact++] = a;
	return 0;
}

/* Parse f to its end, or to the first fault the shape plays no part in. */
static void text_read(table_text *t, FILE *f)
{
	char *line = NULL;
	size_t linecap = 0;
	ssize_t got;
	int lineno = 0;
	t->stop = STOP_END;
	while ((errno = 0, got = getline(&line, &linecap, f)) >= 0) {
		lineno++;
		t->bytes += (size_t)got;
		if ((size_t)got != strlen(line)) {
			t->stop = STOP_NUL, t->stop_line = lineno;
			goto out;
		}
		char *hash = strchr(line, '#');
		if (hash)
			*hash = 0;
		int actions = 0;
		char *s = line;
		for (;;) {
			while (*s && is_sep((unsigned char)*s))
				s++;
			if (!*s)
				break;
			char *tok = s;
			while (*s && !is_sep((unsigned char)*s))
				s++;
			size_t len = (size_t)(s - tok);
			ph_action a;
			int has_chunk;
			int bad = parse_action(tok, len, &a, &has_chunk);
			if (bad) {
				t->stop = bad == 1 ? STOP_NOT_ACTION : STOP_TOO_LARGE;
				t->stop_line = lineno, t->stop_row = t->whole;
				t->stop_len = len > 40 ? 40 : (int)len;
				memcpy(t->stop_tok, tok, (size_t)t->stop_len);
				goto out;
			}
			if (!actions && text_row(t, lineno)) {
				t->stop = STOP_NOMEM, t->stop_line = lineno;
				goto out;
			}
			if (!has_chunk) {
				a.chunk = (uint16_t)t->whole;
				if (!t->bare) { /* at most a kind and 9 digits: parse_action */
					t->bare = 1, t->bare_at = t->nact, t->bare_row = t->whole, t->bare_line = lineno;
					t->bare_len = len < sizeof t->bare_tok ? (int)len : (int)sizeof t->bare_tok - 1;
					memcpy(t->bare_tok, tok, (size_t)t->bare_len);
				}
			}
			if (text_action(t, a)) {
				t->stop = STOP_NOMEM, t->stop_line = lineno;
				goto out;
			}
			actions++;
		}
		if (actions)
			t->whole++;
	}
	/* getline's -1 short of the end: glibc's ENOMEM sets no error flag,
	 * and a table read as far as memory went was once taken as whole */
	int read_errno = errno;
	if (got < 0 && !feof(f) && read_errno == ENOMEM)
		t->stop = STOP_NOMEM, t->stop_line = lineno + 1;
	else if (ferror(f) || (got < 0 && !feof(f)))
		t->stop = STOP_EIO, t->stop_errno = read_errno;
out:
	t->lines = lineno;
	if (t->start)
		t->start[t->rows] = t->nact;
	free(line);
}

/* The shape against the parsed file: its first fault in the file's order,
 * in the words of a read that stops there. */
static int text_check(const table_text *t, const char *file, const ph_schedule_shape *sh, ph_err *err)
{
	int R = sh->ranks;
	/* the first action of a row past the last rank, the action that
	 * stopped the reading included (it came after the check of its row) */
	size_t row_at = SIZE_MAX;
	int row_line = 0;
	if (t->rows > R)
		row_at = t->start[R], row_line = t->line[R];
	else if ((t->stop == STOP_NOT_ACTION || t->stop == STOP_TOO_LARGE) && t->stop_row >= R)
		row_at = t->nact, row_line = t->stop_line;
	if (sh->chunks_per_rank > 1 && t->bare && t->bare_at < row_at) {
		int row = t->bare_row;
		return ph_fail(err, PH_EINVAL, "%s:%d: '%.*s' needs its chunk in front when chunks > 1: rank %d holds chunks "
			       "%d..%d in steps of %d (e.g. %d%.*s)", file, t->bare_line, t->bare_len, t->bare_tok, row, row,
			       row + (sh->chunks_per_rank - 1) * R, R, row, t->bare_len, t->bare_tok);
	}
	if (row_at != SIZE_MAX)
		return ph_fail(err, PH_EINVAL, "%s:%d: a row for rank %d, but [run] stages = %d; write one row per rank, %d "
			       "in all", file, row_line, R, R, R);
	switch (t->stop) {
	case STOP_NOT_ACTION:
		return ph_fail(err, PH_EINVAL, "%s:%d: '%.*s' is not an action; write F3, B3, I3 or W3 (chunk-prefixed "
			       "like 1F3 when chunks > 1)", file, t->stop_line, t->stop_len, t->stop_tok);
	case STOP_TOO_LARGE:
		return ph_fail(err, PH_EINVAL, "%s:%d: '%.*s': the number is too large (chunks 0..%d, micro-batches 0..%d)",
			       file, t->stop_line, t->stop_len, t->stop_tok, R * sh->chunks_per_rank - 1,
			       sh->microbatches - 1);
	case STOP_NUL:
		return ph_fail(err, PH_EINVAL, "%s:%d: a NUL byte; a schedule table is a text file", file, t->stop_line);
	case STOP_NOMEM:
		return ph_fail(err, PH_ENOMEM, "out of memory reading schedule table %s at line %d", file, t->stop_line);
	case STOP_EIO:
		return ph_fail(err, PH_EIO, "cannot read schedule table %s: %s; check [schedule] file", file,
			       strerror(t->stop_errno));
	}
	if (t->whole == 0)
		return ph_fail(err, PH_EINVAL, "%s: the file holds no row of actions, but [run] stages = %d; write one "
			       "row per rank, rank 0 first", file, R);
	if (t->whole < R)
		return ph_fail(err, PH_EINVAL, "%s:%d: the file ends after %d row(s) of actions, but [run] stages = %d; "
			       "write one row per rank, rank 0 first", file, t->lines, t->whole, R);
	return PH_OK;
}

/* The last file parsed (see above). */
static struct {
	pthread_mutex_t lock;
	int valid;
	char path[PH_STR_MAX];
	struct stat id;            /* the file's when read */
	int settled;               /* unchanged for SETTLED_S s before it was read */
	table_text text;
	ph_schedule_shape shape;   /* of the last call */
	int next_rank;             /* the generate() that continues it: the last one's rank + 1, 0 after check() */
} cache = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* The module unloaded (dlclose, exit): no parse outlives it. */
__attribute__((destructor)) static void cache_unload(void)
{
	text_free(&cache.text);
	cache.valid = 0;
}

static int same_file(const struct stat *a, const struct stat *b)
{
	return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
	       a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec &&
	       a->st_ctim.tv_sec == b->st_ctim.tv_sec && a->st_ctim.tv_nsec == b->st_ctim.tv_nsec;
}

static int older(const struct timespec *t, const struct timespec *than)
{
	return t->tv_sec < than->tv_sec || (t->tv_sec == than->tv_sec && t->tv_nsec < than->tv_nsec);
}

/* Check the file's syntax and row count against the shape.  When rank >= 0,
 * put that rank's actions in out[0..cap) and their number in *n (counted
 * past cap, so that the caller learns the size it needs). */
static int read_table(const table_cfg *cfg, const ph_schedule_shape *sh, int rank, ph_action *out, int cap, int *n,
		      ph_err *err)
{
	const char *file = cfg->file;
	if (!file[0])
		return ph_fail(err, PH_EINVAL, "table: no file given; set [schedule] file = my-schedule.csv");
	if (sh->ranks < 1 || sh->chunks_per_rank < 1 || sh->microbatches < 1)
		return ph_fail(err, PH_EINVAL, "table: need at least 1 rank, 1 chunk and 1 micro-batch (got %d, %d, %d)",
			       sh->ranks, sh->chunks_per_rank, sh->microbatches);
	if (sh->chunks_per_rank > MAX_CHUNKS)
		return ph_fail(err, PH_EINVAL, "table: %d chunks per rank is more than the %d supported", sh->chunks_per_rank,
			       MAX_CHUNKS);
	/* O_NONBLOCK and fstat first: a FIFO would block fopen forever */
	int fd = open(file, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return ph_fail(err, PH_EIO, "cannot open schedule table %s: %s; check [schedule] file", file, strerror(errno));
	struct stat sb;
	if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
		close(fd);
		return ph_fail(err, PH_EIO, "schedule table %s is not a regular file (a pipe, directory or device); "
			       "set [schedule] file to a CSV file", file);
	}
	pthread_mutex_lock(&cache.lock);
	int same = cache.valid && strcmp(cache.path, file) == 0 && same_file(&cache.id, &sb);
	int next = rank >= 0 && rank == cache.next_rank && cache.shape.ranks == sh->ranks &&
		   cache.shape.chunks_per_rank == sh->chunks_per_rank && cache.shape.microbatches == sh->microbatches;
	table_text fresh, *t = &cache.text;
	memset(&fresh, 0, sizeof fresh);
	if (same && (cache.settled || next)) {
		close(fd);
	} else {
		struct timespec now;
		clock_gettime(CLOCK_REALTIME, &now); /* before the first byte is read */
		fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
		FILE *f = fdopen(fd, "r");
		if (!f) {
			pthread_mutex_unlock(&cache.lock);
			close(fd);
			return ph_fail(err, PH_ENOMEM, "out of memory opening schedule table %s", file);
		}
		text_read(&fresh, f);
		fclose(f);
		text_free(&cache.text);
		cache.valid = fresh.stop == STOP_NOT_ACTION || fresh.stop == STOP_TOO_LARGE || fresh.stop == STOP_NUL ||
			      (fresh.stop == STOP_END && fresh.bytes == (size_t)sb.st_size);
		if (cache.valid) {
			now.tv_sec -= SETTLED_S;
			snprintf(cache.path, sizeof cache.path, "%s", file);
			cache.id = sb;
			cache.settled = older(&sb.st_mtim, &now) && older(&sb.st_ctim, &now);
			cache.text = fresh;
			memset(&fresh, 0, sizeof fresh);
		} else {
			t = &fresh;
		}
	}
	int rc = text_check(t, file, sh, err);
	if (!rc && rank >= 0) {
		size_t count = t->start[rank + 1] - t->start[rank];
		*n = count > INT_MAX ? INT_MAX : (int)count;
		if (count > (size_t)cap)
			rc = ph_fail(err, PH_EINVAL, "%s: rank %d lists %d actions, more than a schedule of %d chunk(s) x %d "
				     "micro-batches can hold (%d); remove the extra ones", file, rank, *n,
				     sh->chunks_per_rank, sh->microbatches, cap);
		else
			memcpy(out, t->act + t->start[rank], count * sizeof *out);
	}
	cache.shape = *sh;
	cache.next_rank = rank + 1; /* 0 after check() */
	pthread_mutex_unlock(&cache.lock);
	text_free(&fresh);
	return rc;
}

static int table_check(const void *config, const ph_schedule_shape *sh, ph_err *err)
{
	return read_table(config, sh, -1, NULL, 0, NULL, err);
}

static int table_generate(const void *config, const ph_schedule_shape *sh, int rank, ph_action *out, int cap, int *n,
			  ph_err *err)
{
	if (rank < 0 || rank >= sh->ranks)
		return ph_fail(err, PH_EINVAL, "table: rank %d is outside 0..%d", rank, sh->ranks - 1);
	return read_table(config, sh, rank, out, cap, n, err);
}

static const ph_schedule_ops table_ops = {
	.head = PH_HEAD(ph_schedule_ops, "table", "a schedule read from a CSV file: one row of actions per rank",
			table_options, table_cfg),
	.max_chunks_per_rank = MAX_CHUNKS,
	.check = table_check,
	.generate = table_generate,
};

static const ph_schedule_ops *const schedules[] = { &table_ops, NULL };
PH_PLUGIN(NULL, NULL, schedules)
