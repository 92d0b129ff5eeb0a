#!/bin/sh
# SPDX-License-Identifier: MIT
# Hugging Face GPT-2 weights (core/hf_gpt2.c): a trained tiny LM written in
# GPT-2's layout (tests/hf-gpt2-layout.py: Conv1D [in, out] weights, h.N.*,
# ln_f, no lm_head, an attn.bias buffer, with and without "transformer.")
# in F32, BF16 and F16 gives, through --load-weights and [run] init, logits
# bitwise equal to pipehost's own file of the same (rounded) values.  Bad
# files are one line.  The check against transformers itself is
# tests/reference/gpt2_hf_logits.py.
. "$top_srcdir/tests/lib.sh"
if ! command -v python3 >/dev/null 2>&1; then
	echo "SKIP: python3 is needed to write the GPT-2 files"
	exit 77
fi
lm="$fixtures/tiny-lm.ini"
layout() { python3 "$top_srcdir/tests/hf-gpt2-layout.py" "$@"; }
cat "$top_srcdir"/docs/*.md | head -c 60000 >"$tmp/corpus.txt"
run() { "$PIPEHOST" -c "$lm" --set "data.path=$tmp/corpus.txt" "$@"; }
logits() { # WEIGHTS OUT [flags]: the logits of a fixed prompt
	w=$1 o=$2
	shift 2
	run --load-weights "$w" --generate "Weights in, text out" --max-new-tokens 0 --logits "$o" "$@" >/dev/null 2>"$tmp/gen.err"
}

if run --set run.steps=30 --save-weights "$tmp/w.st" >"$tmp/out" 2>&1; then
	ok "the tiny LM trains 30 steps"
else
	not_ok "training failed: $(tail -3 "$tmp/out")"
fi
logits "$tmp/w.st" "$tmp/native.st"
for case in "f32" "bf16" "f16 --prefix transformer." "f32 --prefix transformer. --extra-positions 8"; do
	set -- $case
	dt=$1
	shift
	if layout "$tmp/w.st" "$tmp/hf.st" --dtype "$dt" --rounded "$tmp/rounded.st" "$@" &&
		logits "$tmp/hf.st" "$tmp/l-hf.st" && grep -q "(Hugging Face GPT-2)" "$tmp/gen.err" &&
		logits "$tmp/rounded.st" "$tmp/l-rounded.st" &&
		tensor_bytes "$tmp/l-hf.st" logits >"$tmp/a" && tensor_bytes "$tmp/l-rounded.st" logits >"$tmp/b" &&
		[ "$(wc -c <"$tmp/a")" -eq $((16 * 256 * 4)) ] && cmp -s "$tmp/a" "$tmp/b"; then
		ok "GPT-2 layout, $case: logits bitwise equal to pipehost's file of the same values"
	else
		not_ok "GPT-2 layout, $case: $(cat "$tmp/gen.err")"
	fi
done
layout "$tmp/w.st" "$tmp/hf.st"
tensor_bytes "$tmp/native.st" logits >"$tmp/a"
tensor_bytes "$tmp/l-hf.st" logits >"$tmp/b"
cmp -s "$tmp/a" "$tmp/b" && ok "F32 is lossless: the logits of the original file" || not_ok "F32 GPT-2 logits differ from the original's"
layout "$tmp/w.st" "$tmp/hf16.st" --dtype bf16 --rounded "$tmp/r16.st"
run --set run.steps=2 --set run.init="$tmp/hf16.st" --save-weights "$tmp/a.st" >"$tmp/out" 2>&1
run --set run.steps=2 --set run.init="$tmp/r16.st" --save-weights "$tmp/b.st" >"$tmp/out2" 2>&1
if grep -q "initial weights read from $tmp/hf16.st (Hugging Face GPT-2)" "$tmp/out" && cmp -s "$tmp/a.st" "$tmp/b.st"; then
	ok "[run] init = a BF16 GPT-2 file trains to the same bytes as pipehost's file"
else
	not_ok "[run] init from GPT-2: $(tail -2 "$tmp/out")"
fi

# bad files and models that do not fit
layout "$tmp/w.st" "$tmp/one.st" --blocks 1
expect_error "a file with fewer blocks" "one.st: no tensor h.1.ln_1.weight" -c "$lm" --load-weights "$tmp/one.st" --generate x
expect_error "a file with more blocks" "hf.st: the file has more than the model's 1 blocks \(h.1.ln_1.weight\)" \
	-c "$lm" --set "layer block.repeat=1" --load-weights "$tmp/hf.st" --generate x
expect_error "n_positions < seq_len" "wpe.weight is \[16,16\]; the model needs at least 32 rows" \
	-c "$lm" --set data.seq_len=32 --load-weights "$tmp/hf.st" --generate x
expect_error "another width" "wte.weight is \[256,16\]; the model needs \[256,32\]" \
	-c "$lm" --set "layer embed.dim=32" --load-weights "$tmp/hf.st" --generate x
layout "$tmp/w.st" "$tmp/i64.st" --wte-dtype I64
expect_error "an integer tensor" "i64.st: wte.weight is I64; F32, F16 or BF16 are read" -c "$lm" --load-weights "$tmp/i64.st" --generate x
head -c 3000 "$tmp/hf.st" >"$tmp/cut.st"
expect_error "a truncated file" "cut.st: " -c "$lm" --load-weights "$tmp/cut.st" --generate x
mkdir -p "$tmp/dir"
cp "$tmp/hf.st" "$tmp/dir/model.safetensors"
printf '{"n_head": 4, "n_layer": 2, "activation_function": "gelu_new"}' >"$tmp/dir/config.json"
expect_error "config.json's n_head" "config.json: n_head = 4, layer block0 has heads = 2; set heads = 4" \
	-c "$lm" --load-weights "$tmp/dir/model.safetensors" --generate x
printf '{"n_head": 2, "n_layer": 2, "activation_function": "relu"}' >"$tmp/dir/config.json"
expect_error "config.json's activation" "activation_function = relu; gpt_block's gelu is the tanh approximation" \
	-c "$lm" --load-weights "$tmp/dir/model.safetensors" --generate x
printf '{"n_head": 2, "n_layer": 2, "activation_function": "gelu_new"}' >"$tmp/dir/config.json"
if run --load-weights "$tmp/dir/model.safetensors" --generate x --max-new-tokens 2 >/dev/null 2>&1; then
	ok "a matching config.json is accepted"
else
	not_ok "a matching config.json was refused"
fi
printf '[1, 2]' >"$tmp/dir/config.json"
expect_error "config.json not an object" \
	"^pipehost: $tmp/dir/config.json: not a JSON object; give Hugging Face's config.json of these weights or remove it$" \
	-c "$lm" --load-weights "$tmp/dir/model.safetensors" --generate x
printf '{"n_head": 2, "n_layer": 3}' >"$tmp/dir/config.json"
expect_error "config.json's n_layer" "config.json: n_layer = 3, the model has 2 gpt_block layers; set repeat = 3$" \
	-c "$lm" --load-weights "$tmp/dir/model.safetensors" --generate x
# config.json's values are checked as JSON before any is converted: a
# whole number, not 1e300 (once cast to -2147483648) nor 2.7 (once 2); the
# activation a string; a large file read whole, one past 16 MiB refused
for c in '{"n_layer": 1e300}|n_layer = 1e\+300 is not a whole number 1 .. 1000000' \
	'{"n_head": 2.7}|n_head = 2.7 is not a whole number' '{"n_head": "2"}|n_head = "2" is not a whole number' \
	'{"n_layer": -2}|n_layer = -2 is not a whole number' \
	'{"activation_function": 5}|activation_function = 5 is not a string; GPT-2.s is "gelu_new"$'; do
	printf '%s' "${c%%|*}" >"$tmp/dir/config.json"
	expect_error "config.json ${c%%|*}" "^pipehost: $tmp/dir/config.json: ${c#*|}" \
		-c "$lm" --load-weights "$tmp/dir/model.safetensors" --generate x
done
python3 -c 'import json; print(json.dumps({"n_head": 2, "n_layer": 2, "pad": "x" * 2000000}))' >"$tmp/dir/config.json"
if run --load-weights "$tmp/dir/model.safetensors" --generate x --max-new-tokens 2 >/dev/null 2>"$tmp/err"; then
	ok "a 2 MB config.json is read whole"
else
	not_ok "a 2 MB config.json: $(cat "$tmp/err")"
fi
truncate -s 17M "$tmp/dir/config.json"
expect_error "config.json of 17 MiB" "^pipehost: $tmp/dir/config.json: 17825792 bytes, too large for a config.json \(16 MiB at most\)" \
	-c "$lm" --load-weights "$tmp/dir/model.safetensors" --generate x
rm -r "$tmp/dir"
# a GPT-2 file with a damaged tensor is reported as GPT-2's, not re-read
# under pipehost's names ("tensor embed.tokens missing")
reshape() { # IN OUT TENSOR SHAPE: IN with TENSOR's shape (same bytes) set to SHAPE
	python3 - "$@" <<'PY'
import json, struct, sys
src, dst, name, shape = sys.argv[1:5]
d = open(src, "rb").read()
n = struct.unpack("<Q", d[:8])[0]
h = json.loads(d[8:8 + n])
h[name]["shape"] = json.loads(shape)
hj = json.dumps(h, separators=(",", ":")).encode()
hj += b" " * (-len(hj) % 8)
open(dst, "wb").write(struct.pack("<Q", len(hj)) + hj + d[8 + n:])
PY
}
reshape "$tmp/hf.st" "$tmp/9dim.st" h.0.attn.c_attn.weight "[1,1,1,1,1,1,1,1,768]"
expect_error "a GPT-2 tensor of 9 dimensions" \
	"^pipehost: $tmp/9dim.st: h.0.attn.c_attn.weight is \[1,1,1,1,1,1,1,1,768\]; the model needs \[16,48\] \(2 dimensions\): the file is corrupt or not GPT-2.s$" \
	-c "$lm" --load-weights "$tmp/9dim.st" --generate x
reshape "$tmp/hf.st" "$tmp/17dim.st" h.1.mlp.c_fc.weight "[$(printf '1,%.0s' $(seq 16))1024]"
expect_error "a GPT-2 tensor of 17 dimensions" \
	"^pipehost: $tmp/17dim.st: Hugging Face GPT-2 tensor h.1.mlp.c_fc.weight has 17 dimensions" \
	-c "$lm" --set run.init="$tmp/17dim.st"
reshape "$tmp/hf.st" "$tmp/short.st" h.0.ln_2.bias "[15]"
expect_error "a GPT-2 tensor's shape and bytes disagree" \
	"^pipehost: $tmp/short.st: Hugging Face GPT-2 tensor h.0.ln_2.bias F32 \[15\]: 64 bytes for 15 values; the file is corrupt" \
	-c "$lm" --load-weights "$tmp/short.st" --generate x
# a layer named wte: pipehost's own file holds wte.weight, yet its
# __metadata__ says pipehost wrote it; without that mark, a file holding
# every tensor the model asks for is still the model's own
sed 's/^\[layer fc1\]/[layer wte]/' "$fixtures/tiny.ini" >"$tmp/wte.ini"
"$PIPEHOST" -c "$tmp/wte.ini" --set run.steps=2 --save-weights "$tmp/wte.st" >/dev/null 2>&1
if "$PIPEHOST" -c "$tmp/wte.ini" --set run.steps=2 --set run.init="$tmp/wte.st" >"$tmp/out" 2>&1 &&
	grep -q "initial weights read from $tmp/wte.st\$" "$tmp/out"; then
	ok "[run] init: a model with a layer named wte reads its own weights back"
else
	not_ok "[run] init of a model with a layer named wte: $(tail -1 "$tmp/out")"
fi
sed -e 's/^\[layer head\]/[layer wte]/' -e '/^tie = /d' "$lm" >"$tmp/wte-lm.ini"
wte_run() { "$PIPEHOST" -c "$tmp/wte-lm.ini" --set "data.path=$tmp/corpus.txt" "$@"; }
wte_run --set run.steps=2 --save-weights "$tmp/wte-lm.st" >/dev/null 2>&1
python3 - "$tmp/wte-lm.st" "$tmp/wte-nometa.st" <<'PY'
import json, struct, sys
d = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", d[:8])[0]
h = json.loads(d[8:8 + n])
del h["__metadata__"]
hj = json.dumps(h, separators=(",", ":")).encode()
hj += b" " * (-len(hj) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(hj)) + hj + d[8 + n:])
PY
for w in wte-lm wte-nometa; do
	if wte_run --load-weights "$tmp/$w.st" --generate x --max-new-tokens 2 >/dev/null 2>"$tmp/err" &&
		! grep -q "Hugging Face" "$tmp/err"; then
		ok "--generate: an LM whose head is named wte reads $w.st as pipehost's"
	else
		not_ok "--generate of an LM whose head is named wte, $w.st: $(tail -1 "$tmp/err")"
	fi
done

# models that GPT-2's tensors do not map onto
expect_error "a head with a bias" "^pipehost: $tmp/hf.st: layer head has a bias; GPT-2's head has none: set bias = no$" \
	-c "$lm" --set layer.head.bias=yes --load-weights "$tmp/hf.st" --generate x
awk '/^\[layer lnf\]/ { print "[layer ln0]\ntype = layernorm" } { print }' "$lm" >"$tmp/ln2.ini"
expect_error "a second layernorm" "^pipehost: $tmp/hf.st: the model has 2 layernorm layers besides its blocks; a GPT-2 file has one \(ln_f\)$" \
	-c "$tmp/ln2.ini" --load-weights "$tmp/hf.st" --generate x
awk '/^\[layer lnf\]/ { print "[layer att]\ntype = attention\nheads = 2" } { print }' "$lm" >"$tmp/att.ini"
expect_error "a layer GPT-2 has no tensors for" \
	"^pipehost: $tmp/hf.st: layer att \(attention\) parameter qkv_weight has no counterpart in a Hugging Face GPT-2 file" \
	-c "$tmp/att.ini" --load-weights "$tmp/hf.st" --generate x
# A read error in a GPT-2 file: the system's error, named; it once made the
# format check read "not GPT-2", and the file was then blamed for missing
# pipehost's names ("tensor embed.tokens missing")
mkdir -p "$tmp/eio"
if preload_shim faultfs && layout "$tmp/w.st" "$tmp/eio/hf.st" --dtype f32; then
	for rn in 1 2 3; do
		expect_fault "a GPT-2 file, EIO on read $rn" "$tmp/eio" readeio "$rn" "Input/output error" "missing" \
			-c "$lm" --set "data.path=$tmp/corpus.txt" --load-weights "$tmp/eio/hf.st" --generate "Weights" \
			--max-new-tokens 1
	done
fi
finish
