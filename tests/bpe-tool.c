/* SPDX-License-Identifier: MIT */
/* The BPE test tool (no pipehost needed): trains a small byte-level BPE
 * vocabulary on a corpus and writes it in GPT-2's format, and encodes or
 * round-trips a file through core/bpe.c.
 *   bpe-tool train MERGES CORPUS OUTDIR   -> OUTDIR/vocab.json, merges.txt
 *   bpe-tool encode VOCAB MERGES FILE     -> the ids, one a line
 *   bpe-tool roundtrip VOCAB MERGES FILE  -> "N bytes, M tokens, round trip OK"
 * Errors: one line on stderr, exit 1. */
#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bpe.h"

static int die(const char *msg)
{
	fprintf(stderr, "bpe-tool: %s\n", msg);
	return 1;
}

static unsigned char *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	size_t cap = 1 << 20, n = 0;
	unsigned char *b = malloc(cap);
	for (size_t got; b && (got = fread(b + n, 1, cap - n, f)) > 0;) {
		n += got;
		if (n == cap) {
			unsigned char *nb = realloc(b, cap *= 2);
			if (!nb)
				free(b);
			b = nb;
		}
	}
	fclose(f);
	*len = n;
	return b;
}

/* ---- training: count the chunks, then merge the most frequent pair ---- */

typedef struct {
	int32_t *sym;
	size_t n;
	long count;
} word;

typedef struct {
	unsigned char *s;
	size_t len;
} tokstr;

static uint64_t fnv(const unsigned char *s, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (size_t i = 0; i < n; i++)
		h = (h ^ s[i]) * 0x100000001b3ull;
	return h;
}

/* GPT-2's bytes_to_unicode: the code point byte b is written as. */
static uint32_t byte_cp(int b)
{
	int n = 0;
	for (int c = 0; c < 256; c++) {
		int printable = (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF);
		if (c == b)
			return printable ? (uint32_t)c : 256u + (uint32_t)n;
		n += !printable;
	}
	return 0;
}

static void unicode_str(const tokstr *t, char *out)
{
	size_t o = 0;
	for (size_t i = 0; i < t->len; i++) {
		uint32_t cp = byte_cp(t->s[i]);
		if (cp < 0x80) {
			out[o++] = (char)cp;
		} else {
			out[o++] = (char)(0xC0 | cp >> 6);
			out[o++] = (char)(0x80 | (cp & 0x3F));
		}
	}
	out[o] = 0;
}

static int train(int nmerges, const char *corpus, const char *outdir)
{
	size_t len;
	unsigned char *text = slurp(corpus, &len);
	if (!text)
		return die("cannot read the corpus");
	/* unique chunks and their counts */
	size_t cap = 1 << 20;
	word *words = calloc(cap, sizeof *words);
	unsigned char **keys = calloc(cap, sizeof *keys);
	size_t *klen = calloc(cap, sizeof *klen), nwords = 0;
	if (!words || !keys || !klen)
		return die("out of memory");
	for (size_t pos = 0; pos < len;) {
		size_t end = ph_bpe_next_chunk(text, len, pos), n = end - pos;
		size_t i = fnv(text + pos, n) & (cap - 1);
		while (keys[i] && !(klen[i] == n && !memcmp(keys[i], text + pos, n)))
			i = (i + 1) & (cap - 1);
		if (!keys[i]) {
			if (++nwords > cap / 2)
				return die("corpus has too many distinct words");
			keys[i] = text + pos, klen[i] = n;
			words[i].sym = malloc(n * sizeof(int32_t));
			words[i].n = n;
		}
		words[i].count++;
		pos = end;
	}
	/* ids 0..255: the bytes in GPT-2's order (printable ones first) */
	tokstr *vocab = calloc(256 + (size_t)nmerges, sizeof *vocab);
	int32_t (*merges)[2] = calloc((size_t)nmerges, sizeof *merges);
	int byte_id[256], nv = 0, nm = 0;
	for (int pass = 0; pass < 2; pass++)
		for (int c = 0; c < 256; c++) {
			int printable = byte_cp(c) == (uint32_t)c;
			if (printable == !pass) {
				vocab[nv].s = malloc(1);
				vocab[nv].s[0] = (unsigned char)c;
				vocab[nv].len = 1;
				byte_id[c] = nv++;
			}
		}
	/* the distinct words, packed */
	size_t nw = 0;
	for (size_t i = 0; i < cap; i++)
		if (keys[i]) {
			for (size_t k = 0; k < words[i].n; k++)
				words[i].sym[k] = byte_id[keys[i][k]];
			words[nw++] = words[i];
		}
	size_t pcap = 1 << 20, npairs;
	uint64_t *pkey = malloc(pcap * sizeof *pkey);
	long *pcount = malloc(pcap * sizeof *pcount);
	uint32_t *pgen = calloc(pcap, sizeof *pgen); /* a slot is used in round pgen */
	while (nm < nmerges) {
		uint32_t gen = (uint32_t)nm + 1;
		npairs = 0;
		uint64_t best = 0;
		long bestc = 1;
		for (size_t i = 0; i < nw; i++)
			for (size_t k = 0; k + 1 < words[i].n; k++) {
				uint64_t key = ((uint64_t)words[i].sym[k] << 32 | (uint32_t)words[i].sym[k + 1]) + 1;
				size_t h = (key * 0x9E3779B97F4A7C15ull >> 40) & (pcap - 1);
				while (pgen[h] == gen && pkey[h] != key)
					h = (h + 1) & (pcap - 1);
				if (pgen[h] != gen) {
					if (++npairs > pcap / 2)
						return die("corpus has too many distinct pairs");
					pgen[h] = gen, pkey[h] = key, pcount[h] = 0;
				}
				pcount[h] += words[i].count;
				if (pcount[h] > bestc || (pcount[h] == bestc && key < best))
					best = key, bestc = pcount[h];
			}
		if (!best)
			break; /* no pair occurs twice */
		int32_t a = (int32_t)((best - 1) >> 32), b = (int32_t)((best - 1) & 0xffffffff);
		tokstr t = { malloc(vocab[a].len + vocab[b].len), vocab[a].len + vocab[b].len };
		memcpy(t.s, vocab[a].s, vocab[a].len);
		memcpy(t.s + vocab[a].len, vocab[b].s, vocab[b].len);
		int32_t id = -1;
		for (int v = 0; v < nv && id < 0; v++)
			if (vocab[v].len == t.len && !memcmp(vocab[v].s, t.s, t.len))
				id = v;
		if (id < 0)
			vocab[id = nv++] = t;
		else
			free(t.s);
		merges[nm][0] = a, merges[nm][1] = b, nm++;
		for (size_t i = 0; i < nw; i++) {
			size_t o = 0;
			for (size_t k = 0; k < words[i].n;) {
				if (k + 1 < words[i].n && words[i].sym[k] == a && words[i].sym[k + 1] == b)
					words[i].sym[o++] = id, k += 2;
				else
					words[i].sym[o++] = words[i].sym[k++];
			}
			words[i].n = o;
		}
	}
	/* vocab.json through cJSON (it escapes " and \); merges.txt as GPT-2's */
	cJSON *root = cJSON_CreateObject();
	char *u = malloc(2 * len + 16), path[4096];
	for (int v = 0; v < nv; v++) {
		unicode_str(&vocab[v], u);
		cJSON_AddItemToObject(root, u, cJSON_CreateNumber(v));
	}
	char *json = cJSON_PrintUnformatted(root);
	snprintf(path, sizeof path, "%s/vocab.json", outdir);
	FILE *f = fopen(path, "w");
	if (!f || fputs(json, f) < 0 || fclose(f))
		return die("cannot write vocab.json");
	snprintf(path, sizeof path, "%s/merges.txt", outdir);
	if (!(f = fopen(path, "w")))
		return die("cannot write merges.txt");
	fprintf(f, "#version: 0.2\n");
	for (int m = 0; m < nm; m++) {
		unicode_str(&vocab[merges[m][0]], u);
		fprintf(f, "%s ", u);
		unicode_str(&vocab[merges[m][1]], u);
		fprintf(f, "%s\n", u);
	}
	if (fclose(f))
		return die("cannot write merges.txt");
	printf("%d tokens, %d merges, from %zu bytes (%zu distinct chunks)\n", nv, nm, len, nwords);
	/* freed, so that make check under ASan (detect_leaks) stays clean */
	for (size_t i = 0; i < nw; i++)
		free(words[i].sym);
	for (int v = 0; v < nv; v++)
		free(vocab[v].s);
	free(words), free(keys), free(klen), free(vocab), free(merges);
	free(pkey), free(pcount), free(pgen), free(u), free(json), free(text);
	cJSON_Delete(root);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 5 && !strcmp(argv[1], "train"))
		return train(atoi(argv[2]), argv[3], argv[4]);
	if (argc != 5 || (strcmp(argv[1], "encode") && strcmp(argv[1], "roundtrip")))
		return die("usage: bpe-tool train MERGES CORPUS OUTDIR | encode|roundtrip VOCAB MERGES FILE");
	ph_err err = { "" };
	ph_bpe *b;
	if (ph_bpe_load(&b, argv[2], argv[3], &err))
		return die(err.msg);
	size_t len, n, dlen;
	unsigned char *text = slurp(argv[4], &len), *back;
	int32_t *ids;
	if (!text)
		return die("cannot read the file to encode");
	if (ph_bpe_encode(b, text, len, &ids, &n, &err))
		return die(err.msg);
	if (!strcmp(argv[1], "encode")) {
		for (size_t i = 0; i < n; i++)
			printf("%d\n", ids[i]);
	} else {
		if (ph_bpe_decode(b, ids, n, &back, &dlen, &err))
			return die(err.msg);
		if (dlen != len || memcmp(back, text, len))
			return die("round trip differs");
		printf("%zu bytes, %zu tokens, round trip OK\n", len, n);
		free(back);
	}
	free(ids);
	free(text);
	ph_bpe_free(b);
	return 0;
}
