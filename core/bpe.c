/* SPDX-License-Identifier: MIT */
/* GPT-2's byte-level BPE: vocab.json + merges.txt in, text <-> ids.
 * The pre-tokeniser is GPT-2's regex written out by hand (see
 * ph_bpe_next_chunk); each chunk's bytes start as single-byte tokens and
 * the best-ranked adjacent pair is merged until no pair has a rank, as
 * OpenAI's encoder.py does.  docs/tokenizer.md says the rest. */
#include <cJSON.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "bpe.h"
#include "bpe_unicode.h"
#include "json.h"

#define BPE_MAX_VOCAB (1 << 24)
#define BPE_MAX_FILE (1 << 30)

typedef struct {
	unsigned char *s; /* the token's bytes; NULL: no token has this id */
	uint32_t len;
} bpe_token;

typedef struct {
	uint64_t key;     /* a << 32 | b, + 1 so that 0 is empty */
	int32_t rank, id; /* the merge's rank and the id it makes */
} bpe_merge;

struct ph_bpe {
	bpe_token *tok;
	int ntok;             /* vocab size: largest id + 1 */
	int32_t *str_slot;    /* open-addressed ids by byte string; -1 empty */
	size_t str_cap;
	bpe_merge *merge;     /* open-addressed merges by pair */
	size_t merge_cap;
	int32_t byte_id[256]; /* the single-byte tokens */
};

/* ---- GPT-2's byte <-> unicode alphabet ---- */

/* bytes_to_unicode(): printable Latin-1 bytes stand for themselves, the
 * other 68 bytes map to U+0100.. in byte order. */
static void byte_alphabet(uint32_t b2u[256])
{
	int n = 0;
	for (int b = 0; b < 256; b++) {
		int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
		b2u[b] = printable ? (uint32_t)b : 256u + (uint32_t)n++;
	}
}

/* Decode one UTF-8 code point at s[0..len); returns its length, or 0 when
 * the bytes there are not valid UTF-8 (strict: no overlongs, surrogates or
 * values past U+10FFFF, as Python's decoder). */
static int utf8_decode(const unsigned char *s, size_t len, uint32_t *cp)
{
	unsigned char c = s[0];
	int n;
	uint32_t v, min;
	if (c < 0x80) {
		*cp = c;
		return 1;
	} else if (c >= 0xC2 && c <= 0xDF) {
		n = 2, v = c & 0x1F, min = 0x80;
	} else if (c >= 0xE0 && c <= 0xEF) {
		n = 3, v = c & 0x0F, min = 0x800;
	} else if (c >= 0xF0 && c <= 0xF4) {
		n = 4, v = c & 0x07, min = 0x10000;
	} else {
		return 0;
	}
	if ((size_t)n > len)
		return 0;
	for (int i = 1; i < n; i++) {
		if ((s[i] & 0xC0) != 0x80)
			return 0;
		v = v << 6 | (s[i] & 0x3F);
	}
	if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
		return 0;
	*cp = v;
	return n;
}

/* ---- the pre-tokeniser ---- */

enum { CL_LETTER, CL_NUMBER, CL_SPACE, CL_OTHER };

static int in_ranges(const uint32_t (*r)[2], size_t n, uint32_t cp)
{
	size_t lo = 0, hi = n;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (cp < r[mid][0])
			hi = mid;
		else if (cp > r[mid][1])
			lo = mid + 1;
		else
			return 1;
	}
	return 0;
}

/* \s: Unicode's White_Space property. */
static int is_space(uint32_t cp)
{
	return (cp >= 9 && cp <= 13) || cp == 32 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
	       (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
	       cp == 0x3000;
}

/* The class and byte length of the character at s[0..len); a byte that
 * is not valid UTF-8 is one character of class other. */
static int char_at(const unsigned char *s, size_t len, int *cls)
{
	uint32_t cp;
	int n = utf8_decode(s, len, &cp);
	if (!n) {
		*cls = CL_OTHER;
		return 1;
	}
	if (cp < 128)
		*cls = ((cp | 32) >= 'a' && (cp | 32) <= 'z') ? CL_LETTER
		       : (cp >= '0' && cp <= '9')            ? CL_NUMBER
		       : is_space(cp)                        ? CL_SPACE
							     : CL_OTHER;
	else if (is_space(cp))
		*cls = CL_SPACE;
	else if (in_ranges(bpe_letters, sizeof bpe_letters / sizeof *bpe_letters, cp))
		*cls = CL_LETTER;
	else if (in_ranges(bpe_numbers, sizeof bpe_numbers / sizeof *bpe_numbers, cp))
		*cls = CL_NUMBER;
	else
		*cls = CL_OTHER;
	return n;
}

/* The end of the run of class `cls` starting at p. */
static size_t run_end(const unsigned char *t, size_t len, size_t p, int cls)
{
	while (p < len) {
		int c, n = char_at(t + p, len - p, &c);
		if (c != cls)
			break;
		p += (size_t)n;
	}
	return p;
}

/* GPT-2's pattern, alternative by alternative in its order:
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
size_t ph_bpe_next_chunk(const unsigned char *t, size_t len, size_t pos)
{
	if (pos >= len)
		return len;
	const unsigned char *s = t + pos;
	size_t left = len - pos;
	if (s[0] == '\'' && left >= 2) {
		if (strchr("stmd", s[1]) && s[1])
			return pos + 2;
		if (left >= 3 && ((s[1] == 'r' && s[2] == 'e') || (s[1] == 'v' && s[2] == 'e') || (s[1] == 'l' && s[2] == 'l')))
			return pos + 3;
	}
	int cls;
	char_at(s, left, &cls);
	if (s[0] == ' ' && left > 1) {
		/* " ?X+": the optional space, then a run of one class */
		int next;
		char_at(s + 1, left - 1, &next);
		if (next != CL_SPACE)
			return run_end(t, len, pos + 1, next);
	}
	if (cls != CL_SPACE)
		return run_end(t, len, pos, cls);
	/* \s+(?!\S): all the spaces up to the end, or all but the last one
	 * before a non-space; failing that (a single space), \s+ */
	size_t end = run_end(t, len, pos, CL_SPACE);
	if (end == len)
		return end;
	size_t last = pos, p = pos;
	while (p < end) { /* the start of the run's last character */
		last = p;
		int c;
		p += (size_t)char_at(t + p, len - p, &c);
	}
	return last > pos ? last : end;
}

/* ---- hash tables ---- */

static uint64_t hash_bytes(const unsigned char *s, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (size_t i = 0; i < n; i++) {
		h ^= s[i];
		h *= 0x100000001b3ull;
	}
	return h;
}

static uint64_t mix(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	return x;
}

static int32_t find_str(const ph_bpe *b, const unsigned char *s, size_t n)
{
	for (size_t i = hash_bytes(s, n) & (b->str_cap - 1);; i = (i + 1) & (b->str_cap - 1)) {
		int32_t id = b->str_slot[i];
		if (id < 0)
			return -1;
		if (b->tok[id].len == n && memcmp(b->tok[id].s, s, n) == 0)
			return id;
	}
}

static void insert_str(ph_bpe *b, int32_t id)
{
	size_t i = hash_bytes(b->tok[id].s, b->tok[id].len) & (b->str_cap - 1);
	while (b->str_slot[i] >= 0)
		i = (i + 1) & (b->str_cap - 1);
	b->str_slot[i] = id;
}

static const bpe_merge *find_merge(const ph_bpe *b, int32_t x, int32_t y)
{
	uint64_t key = ((uint64_t)(uint32_t)x << 32 | (uint32_t)y) + 1;
	for (size_t i = mix(key) & (b->merge_cap - 1);; i = (i + 1) & (b->merge_cap - 1)) {
		if (b->merge[i].key == key)
			return &b->merge[i];
		if (!b->merge[i].key)
			return NULL;
	}
}

/* ---- loading ---- */

static int read_file(const char *path, const char *what, char **out, size_t *len, ph_err *err)
{
	*out = NULL;
	struct stat st;
	if (stat(path, &st) != 0)
		return ph_fail(err, PH_EIO, "bpe: %s %s not found: %s; check [data] %s", what, path, strerror(errno),
			       what);
	if (!S_ISREG(st.st_mode))
		return ph_fail(err, PH_EINVAL, "bpe: %s %s is not a regular file; check [data] %s", what, path, what);
	if (st.st_size > BPE_MAX_FILE)
		return ph_fail(err, PH_EINVAL, "bpe: %s %s is larger than 1 GiB, not a tokenizer file; check [data] %s",
			       what, path, what);
	FILE *f = fopen(path, "rb");
	if (!f)
		return ph_fail(err, PH_EIO, "bpe: cannot read %s %s: %s; check [data] %s", what, path,
			       strerror(errno), what);
	char *buf = malloc((size_t)st.st_size + 1);
	if (!buf) {
		fclose(f);
		return ph_fail(err, PH_ENOMEM, "bpe: out of memory reading %s", path);
	}
	size_t got = fread(buf, 1, (size_t)st.st_size, f);
	int bad = ferror(f), e = errno;
	fclose(f);
	if (got != (size_t)st.st_size) {
		free(buf);
		if (bad)
			return ph_fail(err, PH_EIO, "bpe: error reading %s: %s; check the disk and run again", path,
				       strerror(e));
		return ph_fail(err, PH_EIO, "bpe: %s shrank while being read (%zu of %lld bytes); run again once nothing "
			       "writes it", path, got, (long long)st.st_size);
	}
	buf[got] = 0;
	*out = buf;
	*len = got;
	return PH_OK;
}

/* A byte-level-unicode token string -> its bytes (into out, n bytes). */
static int unicode_to_bytes(const int16_t u2b[512], const char *s, size_t len, unsigned char *out, size_t *n)
{
	*n = 0;
	for (size_t i = 0; i < len;) {
		uint32_t cp;
		int k = utf8_decode((const unsigned char *)s + i, len - i, &cp);
		if (!k || cp >= 512 || u2b[cp] < 0)
			return -1;
		out[(*n)++] = (unsigned char)u2b[cp];
		i += (size_t)k;
	}
	return 0;
}

static size_t pow2_above(size_t n)
{
	size_t c = 16;
	while (c < n * 2)
		c *= 2;
	return c;
}

static int load_vocab(ph_bpe *b, const char *path, const int16_t u2b[512], ph_err *err)
{
	char *txt;
	size_t len;
	int rc = read_file(path, "vocab", &txt, &len, err);
	if (rc)
		return rc;
	const char *at = NULL;
	int oom;
	cJSON *root = ph_json_parse(txt, len, &at, &oom);
	if (!root && oom) {
		free(txt);
		return ph_fail(err, PH_ENOMEM, "bpe: %s: out of memory parsing it", path);
	}
	if (!root) {
		int line = 1;
		for (const char *p = txt; at && p < at && *p; p++)
			line += *p == '\n';
		free(txt);
		return ph_fail(err, PH_EINVAL, "bpe: %s:%d: not valid JSON; vocab.json must be GPT-2's token -> id object",
			       path, line);
	}
	free(txt);
	if (!cJSON_IsObject(root) || !root->child) {
		cJSON_Delete(root);
		return ph_fail(err, PH_EINVAL, "bpe: %s is not a JSON object of token -> id", path);
	}
	int maxid = -1, count = 0;
	for (cJSON *e = root->child; e; e = e->next) {
		double v = e->valuedouble;
		if (!cJSON_IsNumber(e) || v < 0 || v >= BPE_MAX_VOCAB || v != (double)(int)v) {
			rc = ph_fail(err, PH_EINVAL, "bpe: %s: token \"%.40s\" has id that is not an integer 0 .. %d", path,
				     e->string, BPE_MAX_VOCAB - 1);
			goto out;
		}
		if ((int)v > maxid)
			maxid = (int)v;
		count++;
	}
	/* Ids are positions in the model's embedding: a gap would be a row no
	 * text encodes to that the model may still sample, and decode could
	 * only fail on it mid-output.  So every id below the largest has a
	 * token (checked on a byte map before the tables are sized by it). */
	unsigned char *seen = calloc((size_t)maxid + 1, 1);
	if (!seen) {
		rc = ph_fail(err, PH_ENOMEM, "bpe: out of memory for %s", path);
		goto out;
	}
	for (cJSON *e = root->child; e; e = e->next)
		seen[(int)e->valuedouble] = 1;
	int hole = 0;
	while (hole <= maxid && seen[hole])
		hole++;
	free(seen);
	if (hole <= maxid) {
		rc = ph_fail(err, PH_EINVAL, "bpe: %s: no token has id %d, yet ids go up to %d; a vocabulary's ids must be "
			     "0 .. N-1 with none missing: give the vocab.json written with the tokenizer's merges.txt", path,
			     hole, maxid);
		goto out;
	}
	b->ntok = maxid + 1;
	b->tok = calloc((size_t)b->ntok, sizeof *b->tok);
	b->str_cap = pow2_above((size_t)count);
	b->str_slot = malloc(b->str_cap * sizeof *b->str_slot);
	if (!b->tok || !b->str_slot) {
		rc = ph_fail(err, PH_ENOMEM, "bpe: out of memory for %s", path);
		goto out;
	}
	memset(b->str_slot, 0xff, b->str_cap * sizeof *b->str_slot);
	for (cJSON *e = root->child; e; e = e->next) {
		int id = (int)e->valuedouble;
		size_t sl = strlen(e->string), n;
		unsigned char *bytes = malloc(sl + 1);
		if (!bytes) {
			rc = ph_fail(err, PH_ENOMEM, "bpe: out of memory for %s", path);
			goto out;
		}
		if (unicode_to_bytes(u2b, e->string, sl, bytes, &n) || n == 0) {
			free(bytes);
			rc = ph_fail(err, PH_EINVAL, "bpe: %s: token \"%.40s\" is not in GPT-2's byte-level alphabet", path,
				     e->string);
			goto out;
		}
		if (b->tok[id].s) {
			free(bytes);
			rc = ph_fail(err, PH_EINVAL, "bpe: %s: id %d is given to two tokens (\"%.40s\" and another)", path, id,
				     e->string);
			goto out;
		}
		if (find_str(b, bytes, n) >= 0) {
			free(bytes);
			rc = ph_fail(err, PH_EINVAL, "bpe: %s: token \"%.40s\" appears twice", path, e->string);
			goto out;
		}
		b->tok[id].s = bytes;
		b->tok[id].len = (uint32_t)n;
		insert_str(b, id);
	}
	for (int c = 0; c < 256; c++) {
		unsigned char byte = (unsigned char)c;
		if ((b->byte_id[c] = find_str(b, &byte, 1)) < 0) {
			rc = ph_fail(err, PH_EINVAL, "bpe: %s lacks the token of byte 0x%02x; a byte-level vocabulary has all 256",
				     path, c);
			goto out;
		}
	}
out:
	cJSON_Delete(root);
	return rc;
}

static int load_merges(ph_bpe *b, const char *path, const int16_t u2b[512], ph_err *err)
{
	char *txt;
	size_t len;
	int rc = read_file(path, "merges", &txt, &len, err);
	if (rc)
		return rc;
	size_t lines = 1;
	for (size_t i = 0; i < len; i++)
		lines += txt[i] == '\n';
	b->merge_cap = pow2_above(lines);
	b->merge = calloc(b->merge_cap, sizeof *b->merge);
	unsigned char *ab = malloc(len + 1);
	if (!b->merge || !ab) {
		free(txt);
		free(ab);
		return ph_fail(err, PH_ENOMEM, "bpe: out of memory for %s", path);
	}
	int rank = 0, line = 0;
	for (char *p = txt; p < txt + len && !rc;) {
		char *nl = memchr(p, '\n', (size_t)(txt + len - p)), *end = nl ? nl : txt + len;
		char *next = nl ? nl + 1 : txt + len;
		line++;
		if (end > p && end[-1] == '\r')
			end--;
		if (end == p || (line == 1 && !strncmp(p, "#version", 8))) {
			p = next;
			continue;
		}
		char *sp = memchr(p, ' ', (size_t)(end - p));
		if (!sp || sp == p || sp + 1 == end || memchr(sp + 1, ' ', (size_t)(end - sp - 1))) {
			rc = ph_fail(err, PH_EINVAL, "bpe: %s:%d: \"%.*s\" is not two tokens separated by one space", path, line,
				     (int)(end - p > 40 ? 40 : end - p), p);
			break;
		}
		size_t na, nb;
		int32_t ia = -1, ib = -1, im;
		const char *bad = NULL;
		int badlen = 0;
		if (unicode_to_bytes(u2b, p, (size_t)(sp - p), ab, &na) || (ia = find_str(b, ab, na)) < 0)
			bad = p, badlen = (int)(sp - p);
		else if (unicode_to_bytes(u2b, sp + 1, (size_t)(end - sp - 1), ab + na, &nb) ||
			 (ib = find_str(b, ab + na, nb)) < 0)
			bad = sp + 1, badlen = (int)(end - sp - 1);
		if (bad) {
			rc = ph_fail(err, PH_EINVAL, "bpe: %s:%d: merge of \"%.*s\": that token is not in the vocabulary; the "
				     "two files must come from the same tokenizer", path, line, badlen > 40 ? 40 : badlen, bad);
			break;
		}
		if ((im = find_str(b, ab, na + nb)) < 0) {
			rc = ph_fail(err, PH_EINVAL, "bpe: %s:%d: merge \"%.*s\" makes a token the vocabulary lacks; the two "
				     "files must come from the same tokenizer", path, line, (int)(end - p > 40 ? 40 : end - p), p);
			break;
		}
		/* a repeated pair takes its last rank, as in encoder.py's dict */
		uint64_t key = ((uint64_t)(uint32_t)ia << 32 | (uint32_t)ib) + 1;
		size_t i = mix(key) & (b->merge_cap - 1);
		while (b->merge[i].key && b->merge[i].key != key)
			i = (i + 1) & (b->merge_cap - 1);
		b->merge[i] = (bpe_merge){ key, rank, im };
		rank++;
		p = next;
	}
	free(ab);
	free(txt);
	if (!rc && rank == 0)
		rc = ph_fail(err, PH_EINVAL, "bpe: %s has no merges; give the merges.txt written with the vocabulary "
			     "(GPT-2's has 50000 lines after #version)", path);
	return rc;
}

/* A token as vocab.json writes it (GPT-2's byte alphabet), for messages:
 * at most 24 characters, "..." after a longer one. */
static const char *token_text(const ph_bpe *b, int32_t id, const uint32_t b2u[256], char *buf, size_t cap)
{
	size_t o = 0;
	const bpe_token *t = &b->tok[id];
	for (uint32_t i = 0; i < t->len && o + 8 < cap; i++) {
		uint32_t cp = b2u[t->s[i]];
		if (i == 24) {
			o += (size_t)snprintf(buf + o, cap - o, "...");
			break;
		}
		if (cp < 0x80) {
			buf[o++] = (char)cp;
		} else { /* b2u's code points are below U+0800: two bytes */
			buf[o++] = (char)(0xC0 | cp >> 6);
			buf[o++] = (char)(0x80 | (cp & 0x3F));
		}
	}
	buf[o] = 0;
	return buf;
}

/*
 * Every token past the single bytes must be the product of some merge, or
 * encoding can never give its id: a merges.txt cut short (a download that
 * stopped, a file from an older vocabulary) leaves the last-trained tokens
 * unmade and the model's rows for them dead.  Tokens that GPT-2's
 * pre-tokeniser would cut in two are exempt: no merge could make them
 * (merges join within a chunk), so they are special tokens added by hand,
 * such as GPT-2's <|endoftext|>.
 */
static int check_merges_make_vocab(const ph_bpe *b, const char *vocab, const char *merges, const uint32_t b2u[256],
				   ph_err *err)
{
	unsigned char *made = calloc((size_t)b->ntok, 1);
	if (!made)
		return ph_fail(err, PH_ENOMEM, "bpe: out of memory checking %s", merges);
	for (size_t i = 0; i < b->merge_cap; i++)
		if (b->merge[i].key)
			made[b->merge[i].id] = 1;
	int unmade = 0, first = -1;
	for (int id = 0; id < b->ntok; id++) {
		const bpe_token *t = &b->tok[id];
		if (t->len < 2 || made[id] || ph_bpe_next_chunk(t->s, t->len, 0) != t->len)
			continue;
		if (!unmade++)
			first = id;
	}
	free(made);
	if (!unmade)
		return PH_OK;
	char shown[128];
	return ph_fail(err, PH_EINVAL, "bpe: %s: no merge makes %d of the tokens of %s (the first: id %d \"%s\"), so "
		       "no text encodes to them; the file is cut short or from another tokenizer: give the merges.txt "
		       "written with that vocab.json", merges, unmade, vocab, first,
		       token_text(b, first, b2u, shown, sizeof shown));
}

int ph_bpe_load(ph_bpe **out, const char *vocab_json, const char *merges_txt, ph_err *err)
{
	*out = NULL;
	if (!vocab_json || !vocab_json[0] || !merges_txt || !merges_txt[0])
		return ph_fail(err, PH_EINVAL, "bpe: needs both vocab.json and merges.txt; set [data] vocab and merges");
	ph_bpe *b = calloc(1, sizeof *b);
	if (!b)
		return ph_fail(err, PH_ENOMEM, "bpe: out of memory");
	uint32_t b2u[256];
	int16_t u2b[512];
	byte_alphabet(b2u);
	memset(u2b, 0xff, sizeof u2b);
	for (int c = 0; c < 256; c++)
		u2b[b2u[c]] = (int16_t)c;
	int rc = load_vocab(b, vocab_json, u2b, err);
	if (!rc)
		rc = load_merges(b, merges_txt, u2b, err);
	if (!rc)
		rc = check_merges_make_vocab(b, vocab_json, merges_txt, b2u, err);
	if (rc) {
		ph_bpe_free(b);
		return rc;
	}
	*out = b;
	return PH_OK;
}

int ph_bpe_vocab_size(const ph_bpe *b)
{
	return b->ntok;
}

/* Merge the chunk's ids in place (w[0..*n)) as encoder.py's bpe(): the
 * best-ranked adjacent pair, every occurrence left to right, again. */
static void merge_chunk(const ph_bpe *b, int32_t *w, size_t *n)
{
	for (;;) {
		int32_t best = INT32_MAX, bx = 0, by = 0, bm = 0;
		for (size_t i = 0; i + 1 < *n; i++) {
			const bpe_merge *m = find_merge(b, w[i], w[i + 1]);
			if (m && m->rank < best)
				best = m->rank, bx = w[i], by = w[i + 1], bm = m->id;
		}
		if (best == INT32_MAX)
			return;
		size_t o = 0;
		for (size_t i = 0; i < *n;) {
			if (i + 1 < *n && w[i] == bx && w[i + 1] == by) {
				w[o++] = bm;
				i += 2;
			} else {
				w[o++] = w[i++];
			}
		}
		*n = o;
	}
}

int ph_bpe_encode(const ph_bpe *b, const unsigned char *text, size_t len, int32_t **ids, size_t *n, ph_err *err)
{
	*ids = NULL;
	*n = 0;
	/* never more ids than bytes */
	int32_t *out = malloc((len ? len : 1) * sizeof *out);
	if (!out)
		return ph_fail(err, PH_ENOMEM, "bpe: out of memory encoding %zu bytes", len);
	size_t used = 0;
	for (size_t pos = 0; pos < len;) {
		size_t end = ph_bpe_next_chunk(text, len, pos), k = end - pos;
		for (size_t i = 0; i < k; i++)
			out[used + i] = b->byte_id[text[pos + i]];
		merge_chunk(b, out + used, &k);
		used += k;
		pos = end;
	}
	*ids = out;
	*n = used;
	return PH_OK;
}

int ph_bpe_decode(const ph_bpe *b, const int32_t *ids, size_t n, unsigned char **out, size_t *len, ph_err *err)
{
	*out = NULL;
	*len = 0;
	size_t total = 0;
	for (size_t i = 0; i < n; i++) {
		if (ids[i] < 0 || ids[i] >= b->ntok || !b->tok[ids[i]].s)
			return ph_fail(err, PH_EINVAL, "bpe: id %d at position %zu is not in the vocabulary (0 .. %d)",
				       (int)ids[i], i, b->ntok - 1);
		total += b->tok[ids[i]].len;
	}
	unsigned char *s = malloc(total + 1);
	if (!s)
		return ph_fail(err, PH_ENOMEM, "bpe: out of memory decoding %zu ids", n);
	size_t o = 0;
	for (size_t i = 0; i < n; i++) {
		memcpy(s + o, b->tok[ids[i]].s, b->tok[ids[i]].len);
		o += b->tok[ids[i]].len;
	}
	s[o] = 0;
	*out = s;
	*len = o;
	return PH_OK;
}

void ph_bpe_free(ph_bpe *b)
{
	if (!b)
		return;
	for (int i = 0; b->tok && i < b->ntok; i++)
		free(b->tok[i].s);
	free(b->tok);
	free(b->str_slot);
	free(b->merge);
	free(b);
}
