#!/bin/sh
# SPDX-License-Identifier: MIT
# pipehost --generate: text from a trained byte-level LM (and tokens/s in
# the progress of its training).  The same seed gives
# the same text, another seed another text, greedy decoding (temperature 0,
# top-k 1) ignores the seed; a short context gives the same logits as the
# same positions of a longer one (causal attention); the weights come from
# --load-weights, else the newest checkpoint that verifies (as for --resume),
# [run] save_weights, [run] init; bad flags, models that are no LM, text
# that cannot be written and checkpoints damaged or of another model are
# one clear line.
. "$top_srcdir/tests/lib.sh"
lm="$fixtures/tiny-lm.ini"
# a corpus every tree has: the project's own docs
cat "$top_srcdir"/docs/*.md | head -c 60000 >"$tmp/corpus.txt"
run() { "$PIPEHOST" -c "$lm" --set "data.path=$tmp/corpus.txt" "$@"; }
gen() { run --load-weights "$tmp/w.st" --generate "$@" 2>"$tmp/gen.err"; }

if run --set run.steps=30 --save-weights "$tmp/w.st" --set run.log_every=10 --set run.metrics="$tmp/m.jsonl" >"$tmp/out" 2>&1; then
	ok "the tiny LM trains 30 steps"
else
	not_ok "training failed: $(tail -3 "$tmp/out")"
fi
# token data: tokens/s = samples/s x T (16) in the progress line and the metrics
if grep -Eq "^epoch 1/[0-9]+ step 10/30 loss [0-9.]+ lr [0-9.e-]+ samples/s [0-9]+ tokens/s [0-9]+ ETA" "$tmp/out" &&
	sed -n 's/.*"samples_per_s":\([0-9.]*\),"tokens_per_s":\([0-9.]*\),.*/\1 \2/p' "$tmp/m.jsonl" >"$tmp/tps" &&
	[ "$(wc -l <"$tmp/tps")" -eq 4 ] && awk '{ d = $1 * 16 - $2; if (d < -1 || d > 1) exit 1 }' "$tmp/tps"; then
	ok "tokens/s = 16 x samples/s in the progress line and the metrics: $(sed -n 2p "$tmp/tps")"
else
	not_ok "no tokens/s: $(grep step "$tmp/out" | head -2) $(head -2 "$tmp/m.jsonl")"
fi
"$PIPEHOST" -c "$fixtures/tiny.ini" --set run.metrics="$tmp/m2.jsonl" >"$tmp/out2" 2>&1
if grep -q "samples/s" "$tmp/out2" && ! grep -q "tokens" "$tmp/out2" "$tmp/m2.jsonl"; then
	ok "image data: samples/s only"
else
	not_ok "image data: $(grep step "$tmp/out2") $(head -1 "$tmp/m2.jsonl")"
fi

gen "The plan" --max-new-tokens 40 --seed 5 >"$tmp/a" && gen "The plan" --max-new-tokens 40 --seed 5 >"$tmp/b"
len=$(wc -c <"$tmp/a")
if [ "$(head -c 8 "$tmp/a")" = "The plan" ] && [ "$len" -eq 49 ] && grep -q "generated 40 tokens from $tmp/w.st" "$tmp/gen.err"; then
	ok "prints the prompt, 40 new bytes and a newline ($len bytes): $(head -n 1 "$tmp/a" | tr -cd '[:print:]')"
else
	not_ok "output of $len bytes: $(head -c 100 "$tmp/a"); stderr: $(cat "$tmp/gen.err")"
fi
cmp -s "$tmp/a" "$tmp/b" && ok "the same seed gives the same text" || not_ok "seed 5 twice gave different texts"
gen "The plan" --max-new-tokens 40 --seed 6 >"$tmp/c"
cmp -s "$tmp/a" "$tmp/c" && not_ok "seeds 5 and 6 gave the same text" || ok "another seed gives another text"
gen "The plan" --max-new-tokens 40 >"$tmp/d"
gen "The plan" --max-new-tokens 40 --seed 3 >"$tmp/e"
cmp -s "$tmp/d" "$tmp/e" && ok "the seed defaults to [run] seed (3)" || not_ok "no --seed differs from --seed 3"

gen "The plan" --max-new-tokens 30 --temperature 0 --seed 1 >"$tmp/g1"
gen "The plan" --max-new-tokens 30 --temperature 0 --seed 2 >"$tmp/g2"
gen "The plan" --max-new-tokens 30 --top-k 1 --temperature 0.7 --seed 9 >"$tmp/g3"
if cmp -s "$tmp/g1" "$tmp/g2" && cmp -s "$tmp/g1" "$tmp/g3" && [ "$(wc -c <"$tmp/g1")" -eq 39 ]; then
	ok "greedy (temperature 0, or top-k 1) is the same for every seed"
else
	not_ok "greedy outputs differ: $(cat "$tmp/g1" "$tmp/g2" "$tmp/g3")"
fi
gen "The plan" --max-new-tokens 40 --top-k 5 --seed 5 >"$tmp/k5" && gen "The plan" --max-new-tokens 40 --top-k 5 --seed 5 >"$tmp/k5b"
cmp -s "$tmp/k5" "$tmp/k5b" && ! cmp -s "$tmp/k5" "$tmp/a" && ok "top-k 5 is reproducible and differs from sampling all" ||
	not_ok "top-k 5: $(cat "$tmp/k5")"

# text that cannot be written is an error, and the first failed write ends
# generation: a full disk, a closed standard output, a reader that has gone
# (SIGPIPE is ignored: the write fails with EPIPE)
# gen_fails DESC REGEX: the last gen exited $rc non-zero with one line
# matching REGEX in $tmp/gen.err
gen_fails() {
	if [ "$rc" -ne 0 ] && [ "$(wc -l <"$tmp/gen.err")" -eq 1 ] && grep -Eq -- "$2" "$tmp/gen.err"; then
		ok "$1: $(cat "$tmp/gen.err")"
	else
		not_ok "$1: exit $rc, stderr: $(head -c 600 "$tmp/gen.err")"
	fi
}
werr="^pipehost: --generate: cannot write the text to standard output"
if [ -w /dev/full ]; then
	gen "The plan" --max-new-tokens 5 >/dev/full
	rc=$?
	gen_fails "standard output on a full disk" "$werr: No space left on device; generation stopped; check the disk"
fi
gen "The plan" --max-new-tokens 5 >&-
rc=$?
gen_fails "standard output closed" "$werr: Bad file descriptor"
# 100000 tokens take seconds; the reader goes after 3 bytes
{
	gen "The plan" --max-new-tokens 100000
	echo $? >"$tmp/rc"
} | head -c 3 >"$tmp/head"
rc=$(cat "$tmp/rc")
gen_fails "a reader that goes after 3 bytes" "$werr: Broken pipe"

# positions 0..7 of a 16-byte context agree with an 8-byte context: the
# layers accept a short context and the positions are the right rows
p16="ab cd ef gh ij k" p8="ab cd ef"
gen "$p16" --max-new-tokens 0 --logits "$tmp/l16.st" >/dev/null && gen "$p8" --max-new-tokens 0 --logits "$tmp/l8.st" >/dev/null
tensor_bytes "$tmp/l16.st" logits | head -c $((8 * 256 * 4)) | od -An -v -tf4 -w4 >"$tmp/l16"
tensor_bytes "$tmp/l8.st" logits | od -An -v -tf4 -w4 >"$tmp/l8"
if [ "$(wc -l <"$tmp/l8")" -eq $((8 * 256)) ] &&
	paste "$tmp/l16" "$tmp/l8" | awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > m) m = d } END { exit !(m < 1e-5) }'; then
	ok "an 8-byte context gives the logits of the first 8 positions of a 16-byte one"
else
	not_ok "short-context logits differ: $(paste "$tmp/l16" "$tmp/l8" | head -3)"
fi
long=$(printf '%s' "0123456789abcdefghijklmnopqrstuvwxyz")
gen "klmnopqrstuvwxyz" --max-new-tokens 5 --seed 1 >"$tmp/last16"
if gen "$long" --max-new-tokens 5 --seed 1 >"$tmp/long" && [ "$(wc -c <"$tmp/long")" -eq 42 ] &&
	[ "$(tail -c 6 "$tmp/long" | od -An -tx1)" = "$(tail -c 6 "$tmp/last16" | od -An -tx1)" ]; then
	ok "a prompt longer than seq_len (36 > 16 bytes) keeps its last 16"
else
	not_ok "long prompt: $(cat "$tmp/long" "$tmp/gen.err")"
fi
# --logits of that long prompt: the last 16 positions, as the model saw
# them (the logits of "klmnopqrstuvwxyz"), and a note saying so
gen "$long" --max-new-tokens 0 --logits "$tmp/llong.st" >/dev/null && cp "$tmp/gen.err" "$tmp/llong.err"
gen "klmnopqrstuvwxyz" --max-new-tokens 0 --logits "$tmp/l16b.st" >/dev/null
if [ -s "$tmp/llong.st" ] && [ "$(tensor_bytes "$tmp/llong.st" logits | od -An -v -tx1)" = "$(tensor_bytes "$tmp/l16b.st" logits | od -An -v -tx1)" ] &&
	grep -q "^pipehost: note: --logits $tmp/llong.st holds the last 16 of the prompt's 36 tokens (the model's context, seq_len = 16), positions counted from 0 as the model saw them$" "$tmp/llong.err"; then
	ok "--logits of a 36-byte prompt: its last 16 positions, with a note"
else
	not_ok "--logits of a long prompt: $(cat "$tmp/llong.err")"
fi

# which weights: a checkpoint, else save_weights, else init
run --set run.steps=10 --set checkpoint.dir="$tmp/ck" >/dev/null 2>&1
if run --set checkpoint.dir="$tmp/ck" --set run.save_weights="$tmp/w.st" --generate "x" --max-new-tokens 3 >/dev/null 2>"$tmp/err" && grep -q "from $tmp/ck/step-00000010/weights.safetensors" "$tmp/err"; then
	ok "without --load-weights: the newest checkpoint (before [run] save_weights)"
else
	not_ok "checkpoint not used: $(cat "$tmp/err")"
fi
if run --set run.save_weights="$tmp/w.st" --set run.init="$tmp/none.st" --generate "x" --max-new-tokens 3 >/dev/null 2>"$tmp/err" &&
	grep -q "from $tmp/w.st" "$tmp/err"; then
	ok "else [run] save_weights when the file exists (before [run] init)"
else
	not_ok "save_weights not used: $(cat "$tmp/err")"
fi
if run --set run.save_weights="$tmp/none.st" --set run.init="$tmp/w.st" --generate "x" --max-new-tokens 3 >/dev/null 2>"$tmp/err" &&
	grep -q "from $tmp/w.st" "$tmp/err"; then
	ok "else [run] init"
else
	not_ok "init not used: $(cat "$tmp/err")"
fi
# the checkpoint is checked as --resume checks it: a damaged newest step is
# passed over, loudly, for the one before it; a step of another model is
# refused.  Two steps, each test on its own copy.
run --set run.steps=4 --set checkpoint.every=2 --set checkpoint.dir="$tmp/ck2" >/dev/null 2>&1
# flip_byte FILE: the byte 10 from its end, changed (tensor data, not the header)
flip_byte() {
	at=$(($(wc -c <"$1") - 10))
	b=$(od -An -tu1 -j "$at" -N1 "$1" | tr -d ' ')
	printf "\\$(printf %o $(((b + 1) % 256)))" | dd of="$1" bs=1 seek="$at" conv=notrunc 2>/dev/null
}
for d in one two opt; do cp -R "$tmp/ck2" "$tmp/ck-$d"; done
flip_byte "$tmp/ck-one/step-00000004/weights.safetensors"
if run --set checkpoint.dir="$tmp/ck-one" --generate "x" --max-new-tokens 3 >/dev/null 2>"$tmp/err" &&
	grep -q "^pipehost: WARNING: checkpoint $tmp/ck-one/step-00000004 is damaged: .*its checksum does not match the manifest's.*; generating from the previous verified checkpoint $tmp/ck-one/step-00000002$" "$tmp/err" &&
	grep -q "^generated 3 tokens from $tmp/ck-one/step-00000002/weights.safetensors" "$tmp/err"; then
	ok "a newest checkpoint with a flipped byte: passed over, with a warning, for the one before"
else
	not_ok "a damaged checkpoint used: $(cat "$tmp/err")"
fi
flip_byte "$tmp/ck-two/step-00000004/weights.safetensors"
flip_byte "$tmp/ck-two/step-00000002/weights.safetensors"
expect_error "every checkpoint damaged" \
	"^pipehost: --generate: $tmp/ck-two/step-00000004/weights.safetensors: its checksum does not match the manifest's: damaged checkpoint .*; no older checkpoint verifies in $tmp/ck-two; give --load-weights FILE$" \
	-c "$lm" --set "data.path=$tmp/corpus.txt" --set checkpoint.dir="$tmp/ck-two" --generate "x" --max-new-tokens 3
[ ! -s "$tmp/out" ] && ok "... and nothing on stdout" || not_ok "damaged checkpoints: stdout has $(head -c 100 "$tmp/out")"
expect_error "a checkpoint of another model" \
	"^pipehost: --generate: checkpoint $tmp/ck2/step-00000004 was written for another model \(layer block0.heads = 2 in the checkpoint, 4 here\); use the config it was trained with, or give --load-weights FILE$" \
	-c "$lm" --set "data.path=$tmp/corpus.txt" --set checkpoint.dir="$tmp/ck2" --set "layer block.heads=4" --generate "x"
# what --generate does not read or use: the optimizer's state, the training's settings
flip_byte "$tmp/ck-opt/step-00000004/optimizer.safetensors"
if run --set checkpoint.dir="$tmp/ck-opt" --set optimizer.lr=0.1 --set run.batch=4 --generate "x" --max-new-tokens 3 \
	>/dev/null 2>"$tmp/err" && [ "$(wc -l <"$tmp/err")" -eq 1 ] &&
	grep -q "^generated 3 tokens from $tmp/ck-opt/step-00000004/weights.safetensors" "$tmp/err"; then
	ok "a damaged optimizer state and another lr and batch: the newest weights still serve"
else
	not_ok "optimizer damage or training settings refused: $(cat "$tmp/err")"
fi

expect_error "no weights anywhere" "^pipehost: --generate needs trained weights: give --load-weights FILE" \
	-c "$lm" --generate "x"
expect_error "a missing weights file" "$tmp/none.st" -c "$lm" --load-weights "$tmp/none.st" --generate "x"
expect_error "weights of another model" "w.st: embed.tokens has shape \[256,16\], the model expects \[256,32\]" -c "$lm" --set "layer block.heads=4" --set "layer embed.dim=32" \
	--load-weights "$tmp/w.st" --generate "x"

expect_error "negative --max-new-tokens" "^pipehost: --max-new-tokens -1: give a number of tokens from 0" \
	-c "$lm" --generate "x" --max-new-tokens -1
expect_error "--max-new-tokens not a number" "^pipehost: --max-new-tokens ten: give" -c "$lm" --generate "x" --max-new-tokens ten
expect_error "negative --temperature" "^pipehost: --temperature -0.5: give a number from 0 to 1e6" -c "$lm" --generate "x" --temperature -0.5
expect_error "fractional --top-k" "^pipehost: --top-k 1.5: give a whole number from 0 to 2\^30" -c "$lm" --generate "x" --top-k 1.5
expect_error "--seed without --generate" "are for --generate PROMPT only" -c "$lm" --seed 4
# the bounds are said, and the seed read exactly: 2^53 + 1 once passed as 2^53
expect_error "--temperature past its bound" "^pipehost: --temperature 1e30: give a number from 0 to 1e6 \(0 = greedy\)$" \
	-c "$lm" --generate "x" --temperature 1e30
expect_error "--seed past 2^53" "^pipehost: --seed 9007199254740993: give a whole number from 0 to 2\^53$" \
	-c "$lm" --generate "x" --seed 9007199254740993
expect_error "--generate with --plan" "^pipehost: --generate runs alone: drop --plan" -c "$lm" --plan --generate "x"
expect_error "an empty prompt" "^pipehost: --generate: the prompt is empty" -c "$lm" --set "data.path=$tmp/corpus.txt" \
	--load-weights "$tmp/w.st" --generate ""
expect_error "a prompt byte outside a smaller vocab" "prompt token 0 is id 126, outside the model's vocab of 100" \
	-c "$lm" --set "layer embed.vocab=100" --set "layer head.units=100" --load-weights "$tmp/w.st" --generate "~"
expect_error "--generate on an image classifier" "^pipehost: --generate needs a language model .*takes \[1,8,8\]" \
	-c "$fixtures/tiny.ini" --generate "x" --load-weights "$tmp/w.st"
expect_error "a vocab past the byte tokenizer's 256" \
	"^pipehost: --generate: the model has 300 logits a position, the bytes tokenizer only 256 ids; use a model whose vocab is 256" \
	-c "$lm" --set "data.path=$tmp/corpus.txt" --set "layer embed.vocab=300" --set "layer head.units=300" --generate "x"
# the vocab is checked before the parameters take memory; a model that does
# not fit says how much it needs (under ulimit -v, 3 GB: ASan cannot run so)
if [ -z "${ASAN_OPTIONS:-}" ] && (ulimit -v 3000000) 2>/dev/null; then
	printf '#!/bin/sh\nulimit -v 3000000\nexec "%s" "$@"\n' "$PIPEHOST" >"$tmp/pipehost-uv"
	chmod +x "$tmp/pipehost-uv"
	real=$PIPEHOST
	PIPEHOST=$tmp/pipehost-uv
	expect_error "a vocab of 1e6 (8 GB of parameters): the tokenizer's limit, not out of memory" \
		"^pipehost: --generate: the model has 1000000 logits a position, the bytes tokenizer only 256 ids" \
		-c "$lm" --set "layer embed.vocab=1000000" --set "layer head.units=1000000" --set "layer embed.dim=1024" \
		--load-weights "$tmp/w.st" --generate "x"
	expect_error "a model larger than memory: its size in MiB" \
		"^pipehost: --generate: out of memory for layer block0's parameters \([0-9.]+ MiB of the model's [0-9.]+ MiB\); free memory, or make the model smaller" \
		-c "$lm" --set "layer embed.dim=100000" --load-weights "$tmp/w.st" --generate "x"
	PIPEHOST=$real
fi
# weights whose last float is a NaN: the logits say so, no text is made of them
cp "$tmp/w.st" "$tmp/nan.st"
size=$(wc -c <"$tmp/nan.st")
printf '\000\000\300\177' | dd of="$tmp/nan.st" bs=1 seek=$((size - 4)) conv=notrunc 2>/dev/null
expect_error "weights holding a NaN" \
	"^pipehost: --generate: the logits after 1 tokens are not finite; the weights in $tmp/nan.st are broken \(NaN or Inf\)$" \
	-c "$lm" --set "data.path=$tmp/corpus.txt" --load-weights "$tmp/nan.st" --generate "x"
[ ! -s "$tmp/out" ] && ok "... and nothing on stdout, not even the prompt" ||
	not_ok "weights holding a NaN: stdout has $(head -c 100 "$tmp/out")"
expect_error "--logits of weights holding a NaN" \
	"^pipehost: --logits $tmp/nan-logits.st: not written: the logits of the 1 prompt tokens are not finite; the weights in $tmp/nan.st are broken \(NaN or Inf\)$" \
	-c "$lm" --set "data.path=$tmp/corpus.txt" --load-weights "$tmp/nan.st" --generate "x" --max-new-tokens 0 \
	--logits "$tmp/nan-logits.st"
[ ! -e "$tmp/nan-logits.st" ] && ok "... and no logits file" || not_ok "NaN logits written to $tmp/nan-logits.st"
finish
