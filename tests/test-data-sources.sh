#!/bin/sh
# SPDX-License-Identifier: MIT
# [data] source names a source of the one registry (core/data_sources.c):
# an unknown name is one line naming every source, --list-options shows
# each with the keys it reads, and each source plans and trains.
. "$top_srcdir/tests/lib.sh"
tiny="$fixtures/tiny.ini"

sed 's/^source = synthetic$/source = mnist/' "$tiny" >"$tmp/src.ini"
line=$(grep -n '^source = mnist' "$tmp/src.ini" | cut -d: -f1)
expect_error "unknown data source" \
	"^pipehost: $tmp/src.ini:$line: \[data\] source = mnist is not a data source; the sources are: fashion-mnist, synthetic, text, npy, tokens\$" \
	-c "$tmp/src.ini"
expect_error "unknown data source via --set" "source = csv is not a data source; the sources are: fashion-mnist, synthetic, text, npy, tokens" \
	-c "$tiny" --set data.source=csv

"$PIPEHOST" --list-options >"$tmp/list"
for want in "source = fashion-mnist .*; reads path\$" "source = synthetic .*; reads samples, test_samples, classes, shape\$" \
	"source = text .*; reads path, seq_len, holdout, tokenizer, vocab, merges\$" \
	"source = npy .*; reads train_images, train_labels, test_images, test_labels\$" \
	"source = tokens .*; reads tokens, test_tokens, token_type, vocab_size, seq_len, holdout\$"; do
	if grep -q -- "$want" "$tmp/list"; then
		ok "--list-options: $(grep -- "$want" "$tmp/list" | sed 's/^ *//' | cut -c1-60)"
	else
		not_ok "--list-options lacks /$want/"
	fi
done

# Each source's sample shape reaches the plan (--plan reads no data).
for case in "tiny:fashion-mnist:[1,28,28]" "tiny:synthetic:[1,8,8]" "tiny-lm:text:[16]" "tiny-lm:tokens:[16]"; do
	ini=${case%%:*} rest=${case#*:}
	src=${rest%%:*} want=${rest#*:}
	if "$PIPEHOST" -c "$fixtures/$ini.ini" --plan=json --set data.source="$src" >"$tmp/plan.json" 2>"$tmp/err" &&
		tr -d ' \t\n' <"$tmp/plan.json" | grep -qF "\"input\":$want"; then
		ok "--plan with source = $src: input $want"
	else
		not_ok "--plan with source = $src: want input $want; $(head -c 300 "$tmp/err") $(grep input "$tmp/plan.json")"
	fi
done

# A [data] key the source does not read is refused as an unknown key is,
# naming it, where it was given, the source and the keys the source reads:
# it would be dropped without a word.
lm="$fixtures/tiny-lm.ini"
reads_text="path, seq_len, holdout, tokenizer, vocab, merges \\(and shuffle, limit, test_limit\\)"
reads_tokens="tokens, test_tokens, token_type, vocab_size, seq_len, holdout \\(and shuffle, limit, test_limit\\)"
expect_error "text source: another source's key" \
	"^pipehost: --set: \[data\] tokens is not read by source = text, which reads $reads_text; drop tokens, or use source = tokens\$" \
	-c "$lm" --set data.tokens=/x --set run.steps=1
expect_error "text source: vocab without tokenizer = bpe" \
	"^pipehost: --set: \[data\] vocab is read by source = text only with tokenizer = bpe; set tokenizer = bpe, or drop vocab\$" \
	-c "$lm" --set data.vocab=/nonexistent.json --set run.steps=1
expect_error "text source: merges without tokenizer = bpe" "^pipehost: --set: \[data\] merges is read by source = text only with tokenizer = bpe" \
	-c "$lm" --set data.merges=/nonexistent.txt --set run.steps=1
sed 's/^source = text$/source = tokens/' "$lm" >"$tmp/tok.ini"
expect_error "tokens source: tokenizer" \
	"^pipehost: --set: \[data\] tokenizer is not read by source = tokens, which reads $reads_tokens; drop tokenizer, or use source = text\$" \
	-c "$tmp/tok.ini" --set data.tokenizer=bpe
expect_error "tokens source: path" "^pipehost: --set: \[data\] path is not read by source = tokens, .*; drop path, or use source = fashion-mnist or text\$" \
	-c "$tmp/tok.ini" --set data.path=/nonexistent
sed -i 's/^seq_len = 16$/seq_len = 16\nvocab = v.json/' "$tmp/tok.ini"
line=$(grep -n '^vocab = v.json' "$tmp/tok.ini" | cut -d: -f1)
expect_error "an INI's key the source does not read: file:line" \
	"^pipehost: $tmp/tok.ini:$line: \[data\] vocab is not read by source = tokens, .*; drop vocab, or use source = text\$" \
	-c "$tmp/tok.ini"
# --set data.source=...: the INI's keys were for the INI's source
if "$PIPEHOST" -c "$tiny" --plan --set data.source=fashion-mnist >"$tmp/out" 2>&1; then
	ok "--set data.source: the INI's keys for its own source are not held against the new one"
else
	not_ok "--set data.source over tiny.ini's synthetic keys: $(tail -1 "$tmp/out")"
fi

# text: a directory whose every entry is skipped says what it held
mkdir -p "$tmp/skip/sub"
printf 'abc\000def' >"$tmp/skip/a.bin"
printf 'some text\n' >"$tmp/plain.txt"
ln -s ../plain.txt "$tmp/skip/l.txt"
expect_error "text: a directory of nothing the source reads" \
	"^pipehost: text: $tmp/skip holds no text: skipped 1 file holding NUL bytes, 1 symlink, 1 subdirectory \(only regular files without NUL bytes are read\); add text files, or set \[data\] path to one\$" \
	-c "$lm" --set "data.path=$tmp/skip" --set run.steps=1
# 100 bytes, holdout 0.1: 90 bytes train, 10 held out: too few for a
# validation sequence of 16; the hint names holdout, and a run without
# eval (which never reads them) trains all the same
awk 'BEGIN { for (i = 0; i < 100; i++) printf "%c", 97 + i % 26 }' >"$tmp/h.txt"
expect_error "text: a held-out part too short names holdout" \
	"^pipehost: text: $tmp/h.txt has 100 bytes; its last holdout = 0.1 is 10 bytes, too few for one validation sequence of 16; raise \[data\] holdout, use more text or a shorter seq_len, or set \[run\] eval = no\$" \
	-c "$lm" --set "data.path=$tmp/h.txt" --set run.batch=2 --set run.steps=2 --set run.eval=yes
if "$PIPEHOST" -c "$lm" --set "data.path=$tmp/h.txt" --set run.batch=2 --set run.steps=2 --set run.eval=no \
	>"$tmp/out" 2>&1 && grep -q "^trained 2 steps" "$tmp/out"; then
	ok "text: eval = no trains on a text whose held-out part is too short: $(grep '^trained' "$tmp/out")"
else
	not_ok "text: eval = no, 100 bytes: $(tail -2 "$tmp/out")"
fi

finish
