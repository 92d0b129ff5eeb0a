#!/bin/sh
# SPDX-License-Identifier: MIT
# GPT-2's byte-level BPE (core/bpe.c) on the fortunes: a small vocabulary
# trained here by tests/bpe-tool (GPT-2's vocab.json + merges.txt format),
# the whole corpus round-trips byte for byte, the ids equal an independent
# Python implementation's (tests/reference/bpe_reference.py, when Python's
# `regex` module is installed), a tiny LM trains on BPE tokens
# ([data] tokenizer = bpe), and bad files are one line each.
. "$top_srcdir/tests/lib.sh"
tool="$top_builddir/tests/bpe-tool"
lm="$fixtures/tiny-lm.ini"
dir=/usr/share/games/fortunes
if [ ! -d "$dir" ]; then
	echo "SKIP: Debian's fortunes package is not installed"
	exit 77
fi
# the text source's corpus: regular files, no .dat indexes, no NUL bytes, by name
for f in $(LC_ALL=C ls "$dir"); do
	p="$dir/$f"
	case "$f" in *.dat) continue ;; esac
	[ -f "$p" ] && [ ! -L "$p" ] && tr -d '\000' <"$p" | cmp -s - "$p" && cat "$p"
done >"$tmp/corpus.txt"
if "$tool" train 500 "$tmp/corpus.txt" "$tmp" >"$tmp/train.out" 2>&1 && [ -s "$tmp/vocab.json" ] && [ -s "$tmp/merges.txt" ]; then
	ok "trained on the fortunes: $(cat "$tmp/train.out")"
else
	not_ok "training failed: $(cat "$tmp/train.out")"
fi
V="$tmp/vocab.json" M="$tmp/merges.txt"
nv=$(grep -o '"[^"]*":[0-9]*' "$V" | wc -l)

# edge cases of the pre-tokeniser: contractions, runs of spaces before a
# word, tabs and newlines, non-ASCII letters and numbers, bytes that are
# not UTF-8 (cut sequences, a surrogate, an overlong form), trailing spaces
printf "It's they're we've I'm you'll he'd 'S ''s x's\n  \t  word\t\n\n\n   \nÉcole naïve 日本語 ١٢٣ ²³ Ⅻ ½ café—“quotes” ©2024\r\n\377\376 bad \342\202 utf8 \355\240\200 surrogate \300\257 overlong   end   " >"$tmp/edge.txt"
for f in corpus edge; do
	if "$tool" roundtrip "$V" "$M" "$tmp/$f.txt" >"$tmp/rt" 2>&1 && grep -q "round trip OK" "$tmp/rt"; then
		ok "$f: $(cat "$tmp/rt")"
	else
		not_ok "$f: $(cat "$tmp/rt")"
	fi
	"$tool" encode "$V" "$M" "$tmp/$f.txt" >"$tmp/$f.ids" 2>"$tmp/err"
	if ! command -v python3 >/dev/null; then
		ok "# SKIP $f: no python3 for the reference BPE"
		continue
	fi
	python3 "$top_srcdir/tests/reference/bpe_reference.py" "$V" "$M" "$tmp/$f.txt" >"$tmp/$f.ref" 2>"$tmp/err"
	rc=$?
	if [ $rc -eq 77 ]; then
		ok "# SKIP $f: $(cat "$tmp/err")"
	elif [ $rc -eq 0 ] && [ -s "$tmp/$f.ids" ] && cmp -s "$tmp/$f.ids" "$tmp/$f.ref"; then
		ok "$f: $(wc -l <"$tmp/$f.ids") ids, equal to the reference's (tests/reference/bpe_reference.py)"
	else
		not_ok "$f: ids differ from the reference's: $(cmp "$tmp/$f.ids" "$tmp/$f.ref" 2>&1 | head -1) $(head -c 300 "$tmp/err")"
	fi
done

# a tiny LM on BPE tokens: the vocabulary's size is the model's
head -c 60000 "$tmp/corpus.txt" >"$tmp/small.txt"
set -- -c "$lm" --set "data.path=$tmp/small.txt" --set data.tokenizer=bpe --set "data.vocab=$V" --set "data.merges=$M" \
	--set "layer embed.vocab=$nv" --set "layer head.units=$nv"
if "$PIPEHOST" "$@" --set run.metrics="$tmp/m.jsonl" --set run.log_every=1 >"$tmp/out" 2>&1; then
	first=$(sed -n 's/.*"step":1,.*"loss":\([0-9.]*\).*/\1/p' "$tmp/m.jsonl")
	last=$(sed -n 's/.*"step":20,.*"loss":\([0-9.]*\).*/\1/p' "$tmp/m.jsonl")
	if [ -n "$first" ] && [ -n "$last" ] && awk "BEGIN{exit !($last < $first - 0.2)}"; then
		ok "tokenizer = bpe: a tiny LM over $nv tokens trains 20 steps, loss $first -> $last"
	else
		not_ok "tokenizer = bpe: loss did not fall: '$first' -> '$last'"
	fi
	# --generate speaks the run's BPE: the prompt encoded, new ids decoded
	# (with the byte tokenizer a model of $nv ids is refused)
	"$PIPEHOST" "$@" --save-weights "$tmp/bpe.st" >/dev/null 2>&1
	for k in 1 2; do
		"$PIPEHOST" "$@" --load-weights "$tmp/bpe.st" --generate "A fool" --max-new-tokens 12 --seed 5 \
			>"$tmp/gen$k" 2>"$tmp/gen$k.err"
	done
	if [ "$(head -c 6 "$tmp/gen1")" = "A fool" ] && [ "$(wc -c <"$tmp/gen1")" -gt 8 ] && cmp -s "$tmp/gen1" "$tmp/gen2"; then
		ok "--generate with tokenizer = bpe: the same text for the same seed: $(head -c 80 "$tmp/gen1" | LC_ALL=C tr -c '[:print:]' '?')"
	else
		not_ok "--generate with tokenizer = bpe: $(head -c 200 "$tmp/gen1") $(cat "$tmp/gen1.err")"
	fi
	# a target is a token: the evaluation's loss is not labelled per byte
	"$PIPEHOST" "$@" --set run.eval=yes --set run.steps=2 >"$tmp/ev" 2>&1
	if grep -q 'test loss' "$tmp/ev" && ! grep -q 'nats/byte' "$tmp/ev"; then
		ok "tokenizer = bpe: losses are per token, not labelled per byte: $(grep -m1 'test loss' "$tmp/ev")"
	else
		not_ok "tokenizer = bpe: evaluation line: $(grep -m1 -E 'test loss|validation loss' "$tmp/ev") $(tail -1 "$tmp/ev")"
	fi
else
	not_ok "tokenizer = bpe run failed: $(tail -3 "$tmp/out")"
fi
expect_error "bpe: vocab not set" "^pipehost: bpe: needs both vocab.json and merges.txt; set \[data\] vocab and merges" \
	-c "$lm" --set "data.path=$tmp/small.txt" --set data.tokenizer=bpe
expect_error "bpe: vocab missing" "^pipehost: bpe: vocab $tmp/none.json not found" "$@" --set "data.vocab=$tmp/none.json"
mkdir -p "$tmp/adir"
expect_error "bpe: vocab a directory" "^pipehost: bpe: vocab $tmp/adir is not a regular file; check \[data\] vocab$" \
	"$@" --set "data.vocab=$tmp/adir"
expect_error "bpe: merges a directory" "^pipehost: bpe: merges $tmp/adir is not a regular file; check \[data\] merges$" \
	"$@" --set "data.merges=$tmp/adir"
truncate -s 1100M "$tmp/huge.json"
expect_error "bpe: vocab of 1.1 GB (sparse)" \
	"^pipehost: bpe: vocab $tmp/huge.json is larger than 1 GiB, not a tokenizer file; check \[data\] vocab$" \
	"$@" --set "data.vocab=$tmp/huge.json"
rm -f "$tmp/huge.json"
printf '{"a": 0, "b": 0}' >"$tmp/dupid.json"
expect_error "bpe: one id for two tokens" "^pipehost: bpe: $tmp/dupid.json: id 0 is given to two tokens \(\"b\" and another\)$" \
	"$@" --set "data.vocab=$tmp/dupid.json"
printf '{"a": 0, "a": 1}' >"$tmp/duptok.json"
expect_error "bpe: one token twice" "^pipehost: bpe: $tmp/duptok.json: token \"a\" appears twice$" \
	"$@" --set "data.vocab=$tmp/duptok.json"

# bad files, through the tool: one line, exit 1
bad() {
	desc=$1 re=$2
	shift 2
	"$tool" "$@" >"$tmp/out" 2>"$tmp/err"
	rc=$?
	if [ $rc -eq 1 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -Eq -- "$re" "$tmp/err"; then
		ok "$desc: $(cat "$tmp/err")"
	else
		not_ok "$desc: exit $rc: $(head -c 400 "$tmp/err")"
	fi
}
printf '{"a": 0, "b": 1,' >"$tmp/trunc.json"
printf '[1, 2]' >"$tmp/array.json"
# "!" gone, its id 0 given to a longer token so that no id is missing
sed 's/"!":0,/"Ġqqqqqq":0,/' "$V" >"$tmp/nobang.json"
sed 's/"!":0,/"!":"x",/' "$V" >"$tmp/strid.json"
sed 's/"!":0,/"\\u00a0":0,/' "$V" >"$tmp/alien.json"
{ sed -n 1,3p "$M"; echo "Ġt zzzq"; } >"$tmp/unknown.txt"
{ sed -n 1,3p "$M"; echo "q z"; } >"$tmp/nomake.txt"
{ sed -n 1,3p "$M"; echo "onlyone"; } >"$tmp/one.txt"
bad "missing merges" "merges $tmp/none.txt not found" encode "$V" "$tmp/none.txt" "$tmp/edge.txt"
bad "cut JSON" "bpe: $tmp/trunc.json:1: not valid JSON" encode "$tmp/trunc.json" "$M" "$tmp/edge.txt"
bad "JSON not an object" "bpe: $tmp/array.json is not a JSON object of token -> id" encode "$tmp/array.json" "$M" "$tmp/edge.txt"
bad "a byte missing" "bpe: $tmp/nobang.json lacks the token of byte 0x21" encode "$tmp/nobang.json" "$M" "$tmp/edge.txt"
bad "an id not a number" "bpe: $tmp/strid.json: token \"!\" has id that is not an integer" encode "$tmp/strid.json" "$M" "$tmp/edge.txt"
bad "a token outside the alphabet" "bpe: $tmp/alien.json: token \".*\" is not in GPT-2's byte-level alphabet" encode "$tmp/alien.json" "$M" "$tmp/edge.txt"
bad "merge of an unknown token" "bpe: $tmp/unknown.txt:4: merge of \"zzzq\": that token is not in the vocabulary" encode "$V" "$tmp/unknown.txt" "$tmp/edge.txt"
bad "merge making an unknown token" "bpe: $tmp/nomake.txt:4: merge \"q z\" makes a token the vocabulary lacks" encode "$V" "$tmp/nomake.txt" "$tmp/edge.txt"
bad "merge line of one token" "bpe: $tmp/one.txt:4: \"onlyone\" is not two tokens separated by one space" encode "$V" "$tmp/one.txt" "$tmp/edge.txt"

# ids with a gap: 4 ids without a token, which the model could still
# sample and decode could only fail on, halfway through its output
sed "s/}\$/,\"Ġqqqq\":$((nv + 4))}/" "$V" >"$tmp/hole.json"
bad "a gap in the ids" "^bpe-tool: bpe: $tmp/hole.json: no token has id $nv, yet ids go up to $((nv + 4)); a vocabulary's ids must be 0 .. N-1 with none missing" \
	encode "$tmp/hole.json" "$M" "$tmp/edge.txt"
expect_error "pipehost: a gap in the ids" "^pipehost: bpe: $tmp/hole.json: no token has id $nv" \
	"$@" --set "data.vocab=$tmp/hole.json" --set "layer embed.vocab=$((nv + 5))" --set "layer head.units=$((nv + 5))" \
	--set run.steps=1
# merges that cannot make the vocabulary: none at all, the #version line
# alone, a file cut short (after 19 merges), one line lost in the middle
: >"$tmp/empty.txt"
head -1 "$M" >"$tmp/version.txt"
head -n 20 "$M" >"$tmp/cut.txt"
sed 10d "$M" >"$tmp/gap.txt"
bad "empty merges.txt" "^bpe-tool: bpe: $tmp/empty.txt has no merges; give the merges.txt written with the vocabulary" \
	encode "$V" "$tmp/empty.txt" "$tmp/edge.txt"
bad "merges.txt of #version alone" "^bpe-tool: bpe: $tmp/version.txt has no merges" encode "$V" "$tmp/version.txt" "$tmp/edge.txt"
unmade=$(($(wc -l <"$M") - $(wc -l <"$tmp/cut.txt")))
bad "merges.txt cut short" \
	"^bpe-tool: bpe: $tmp/cut.txt: no merge makes $unmade of the tokens of $V \(the first: id $((nv - unmade)) \".+\"\), so no text encodes to them; the file is cut short" \
	encode "$V" "$tmp/cut.txt" "$tmp/edge.txt"
bad "merges.txt without its 9th merge" "^bpe-tool: bpe: $tmp/gap.txt: no merge makes 1 of the tokens of $V \(the first: id 264 " \
	encode "$V" "$tmp/gap.txt" "$tmp/edge.txt"
expect_error "pipehost: merges.txt cut short" "^pipehost: bpe: $tmp/cut.txt: no merge makes $unmade of the tokens" \
	"$@" --set "data.merges=$tmp/cut.txt" --set run.steps=1
# GPT-2's own shape: 256 bytes, the merges, then <|endoftext|>, which no
# merge makes (the pre-tokeniser cuts it up): it loads and round-trips
sed "s/}\$/,\"<|endoftext|>\":$nv}/" "$V" >"$tmp/eot.json"
if "$tool" roundtrip "$tmp/eot.json" "$M" "$tmp/edge.txt" >"$tmp/rt" 2>&1 && grep -q "round trip OK" "$tmp/rt"; then
	ok "a vocabulary with <|endoftext|> past the merges loads: $(cat "$tmp/rt")"
else
	not_ok "a vocabulary with <|endoftext|> past the merges: $(cat "$tmp/rt")"
fi
finish
