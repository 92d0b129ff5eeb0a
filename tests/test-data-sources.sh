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

finish
