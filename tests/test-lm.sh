#!/bin/sh
# SPDX-License-Identifier: MIT
# The byte-level GPT path: text data, transformer blocks, a head tied to the
# token table across stages, recomputation.  On the CPU the tied copies stay
# bitwise equal, recompute = yes gives the same weights as no, and the
# weights are byte-identical across schedules and partitions.
. "$top_srcdir/tests/lib.sh"
lm="$fixtures/tiny-lm.ini"
src=/usr/share/games/fortunes/computers
if [ ! -f "$src" ]; then
	echo "SKIP: Debian's fortunes package is not installed"
	exit 77
fi
head -c 60000 "$src" >"$tmp/corpus.txt"
run() { "$PIPEHOST" -c "$lm" --set "data.path=$tmp/corpus.txt" "$@"; }

if run --save-weights "$tmp/ref.st" --set run.metrics="$tmp/m.jsonl" --set run.log_every=1 >"$tmp/out" 2>&1; then
	ok "2-stage 1f1b LM trains 20 steps"
else
	not_ok "LM run failed: $(tail -3 "$tmp/out")"
fi
# the head is stored once, as the token table: the writer leaves a copy out
# only when it equals its source bit for bit
hlen=$(od -An -tu8 -N8 "$tmp/ref.st" | tr -d ' ')
case $(head -c $((8 + hlen)) "$tmp/ref.st" | tail -c "$hlen") in
*'"head.weight":'*) not_ok "tied copies differ: head.weight stored apart from embed.tokens" ;;
*'"tied":"head.weight=embed.tokens"'*)
	ok "tied copies (embed.tokens on stage 0, head.weight on stage 1) are bitwise equal after training" ;;
*) not_ok "no \"tied\" metadata for head.weight in $tmp/ref.st" ;;
esac
first=$(sed -n 's/.*"step":1,.*"loss":\([0-9.]*\).*/\1/p' "$tmp/m.jsonl")
last=$(sed -n 's/.*"step":20,.*"loss":\([0-9.]*\).*/\1/p' "$tmp/m.jsonl")
if [ -n "$first" ] && [ -n "$last" ] && awk "BEGIN{exit !($last < $first - 0.3)}"; then
	ok "loss falls from $first to $last nats per byte"
else
	not_ok "loss did not fall: '$first' -> '$last'"
fi
for extra in "run.recompute=yes" "run.recompute=except_last" "schedule.type=gpipe" "run.stages=3" \
	"run.stages=4 schedule.type=zb-h1" "run.stages=1" "partition.type=parameters run.stages=3 run.recompute=yes"; do
	args=""
	for kv in $extra; do args="$args --set $kv"; done
	if run $args --save-weights "$tmp/w.st" >"$tmp/out" 2>&1 && cmp -s "$tmp/ref.st" "$tmp/w.st"; then
		ok "$extra: weights byte-identical to the reference"
	else
		not_ok "$extra: weights differ or the run failed: $(tail -2 "$tmp/out")"
	fi
done
# The loss writes the logits' gradient over the logits (PH_LAYER_DX_OVER_X
# after linear's PH_LAYER_BACKWARD_NO_Y): the same bytes as with a buffer
# of their own (PIPEHOST_GRAD_IN_PLACE=0), and the head's rank holds one
# micro-batch's logits less (4 x 16 x 256 floats, 0.06 MiB).
rank1() { sed -n 's/^activation memory per rank: .*1: \([0-9.]*\) MiB.*/\1/p' "$1"; }
if run --save-weights "$tmp/w.st" >"$tmp/inplace" 2>&1 &&
	PIPEHOST_GRAD_IN_PLACE=0 run --save-weights "$tmp/w0.st" >"$tmp/apart" 2>&1 &&
	cmp -s "$tmp/ref.st" "$tmp/w.st" && cmp -s "$tmp/ref.st" "$tmp/w0.st" &&
	[ -n "$(rank1 "$tmp/inplace")" ] &&
	awk "BEGIN{d = $(rank1 "$tmp/apart") - $(rank1 "$tmp/inplace"); exit !(d > 0.055 && d < 0.075)}"; then
	ok "logits' gradient over the logits: same bytes, rank 1 holds $(rank1 "$tmp/inplace") MiB against $(rank1 "$tmp/apart")"
else
	not_ok "logits' gradient in place: $(grep 'activation memory' "$tmp/inplace" "$tmp/apart") $(tail -2 "$tmp/apart")"
fi
if run --set run.recompute=yes >"$tmp/out" 2>&1 && grep -q "activation memory per rank: 0: .* (recompute on)" "$tmp/out"; then
	ok "a recomputing run reports its activation memory per rank"
else
	not_ok "no activation memory report: $(tail -3 "$tmp/out")"
fi
expect_error "tie to a missing parameter" "layer head: tie = embed.nope: layer embed has no parameter nope" \
	-c "$lm" --set "data.path=$tmp/corpus.txt" --set "layer head.tie=embed.nope"
expect_error "tie to a tensor of another shape" \
	"layer head: tie = embed.positions: embed.positions is \[16,16\], and no parameter of head has that shape \(weight \[256,16\]\); change the sizes of head or embed so they match" \
	-c "$lm" --set "data.path=$tmp/corpus.txt" --set "layer head.tie=embed.positions"
# both shapes named: the head's own [256,16] says units is the size to change
expect_error "tied table of another vocabulary" \
	"^pipehost: layer head: tie = embed.tokens: embed.tokens is \[300,16\], and no parameter of head has that shape \(weight \[256,16\]\)" \
	-c "$lm" --set "data.path=$tmp/corpus.txt" --set layer.embed.vocab=300 --plan
expect_error "text path missing" "text: $tmp/none not found; set \[data\] path" -c "$lm" --set "data.path=$tmp/none"
finish
