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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

/* Read the whole file; check its syntax and row count.  When rank >= 0, put
 * that rank's actions in out[0..cap) and their number in *n (counted past
 * cap, so that the caller learns the size it needs). */
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
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
	FILE *f = fdopen(fd, "r");
	if (!f) {
		close(fd);
		return ph_fail(err, PH_ENOMEM, "out of memory opening schedule table %s", file);
	}
	char *line = NULL;
	size_t linecap = 0;
	ssize_t got;
	int lineno = 0, row = 0, rc = PH_OK, count = 0;
	while ((errno = 0, got = getline(&line, &linecap, f)) >= 0) {
		lineno++;
		if ((size_t)got != strlen(line)) {
			rc = ph_fail(err, PH_EINVAL, "%s:%d: a NUL byte; a schedule table is a text file", file, lineno);
			break;
		}
		char *hash = strchr(line, '#');
		if (hash)
			*hash = 0;
		int actions = 0;
		char *s = line;
		while (!rc) {
			while (*s && is_sep((unsigned char)*s))
				s++;
			if (!*s)
				break;
			char *tok = s;
			while (*s && !is_sep((unsigned char)*s))
				s++;
			size_t len = (size_t)(s - tok);
			if (row >= sh->ranks) {
				rc = ph_fail(err, PH_EINVAL, "%s:%d: a row for rank %d, but [run] stages = %d; write one row per "
					     "rank, %d in all", file, lineno, row, sh->ranks, sh->ranks);
				break;
			}
			ph_action a;
			int has_chunk;
			int bad = parse_action(tok, len, &a, &has_chunk);
			if (bad == 1)
				rc = ph_fail(err, PH_EINVAL, "%s:%d: '%.*s' is not an action; write F3, B3, I3 or W3 "
					     "(chunk-prefixed like 1F3 when chunks > 1)", file, lineno,
					     len > 40 ? 40 : (int)len, tok);
			else if (bad == 2)
				rc = ph_fail(err, PH_EINVAL, "%s:%d: '%.*s': the number is too large (chunks 0..%d, "
					     "micro-batches 0..%d)", file, lineno, len > 40 ? 40 : (int)len, tok,
					     sh->ranks * sh->chunks_per_rank - 1, sh->microbatches - 1);
			else if (!has_chunk && sh->chunks_per_rank > 1)
				rc = ph_fail(err, PH_EINVAL, "%s:%d: '%.*s' needs its chunk in front when chunks > 1: "
					     "rank %d holds chunks %d..%d in steps of %d (e.g. %d%.*s)", file, lineno,
					     (int)len, tok, row, row, row + (sh->chunks_per_rank - 1) * sh->ranks,
					     sh->ranks, row, (int)len, tok);
			if (rc)
				break;
			if (!has_chunk)
				a.chunk = (uint16_t)row;
			if (row == rank) {
				if (count < cap)
					out[count] = a;
				count++;
			}
			actions++;
		}
		if (rc)
			break;
		if (actions)
			row++;
	}
	/* getline's -1 short of the end: glibc's ENOMEM sets no error flag,
	 * and a table read as far as memory went was once taken as whole */
	int read_errno = errno;
	if (!rc && got < 0 && !feof(f) && read_errno == ENOMEM)
		rc = ph_fail(err, PH_ENOMEM, "out of memory reading schedule table %s at line %d", file, lineno + 1);
	else if (!rc && (ferror(f) || (got < 0 && !feof(f))))
		rc = ph_fail(err, PH_EIO, "cannot read schedule table %s: %s; check [schedule] file", file,
			     strerror(read_errno));
	free(line);
	fclose(f);
	if (rc)
		return rc;
	if (row == 0)
		return ph_fail(err, PH_EINVAL, "%s: the file holds no row of actions, but [run] stages = %d; write one "
			       "row per rank, rank 0 first", file, sh->ranks);
	if (row < sh->ranks)
		return ph_fail(err, PH_EINVAL, "%s:%d: the file ends after %d row(s) of actions, but [run] stages = %d; "
			       "write one row per rank, rank 0 first", file, lineno, row, sh->ranks);
	if (rank >= 0) {
		*n = count;
		if (count > cap)
			return ph_fail(err, PH_EINVAL, "%s: rank %d lists %d actions, more than a schedule of %d chunk(s) x %d "
				       "micro-batches can hold (%d); remove the extra ones", file, rank, count,
				       sh->chunks_per_rank, sh->microbatches, cap);
	}
	return PH_OK;
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
