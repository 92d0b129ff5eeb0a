#!/bin/sh
# SPDX-License-Identifier: MIT
# Training works end to end: the loss falls, the model beats chance on the
# held-out split through the same pipeline, and the outputs a user reads
# (plan table, progress lines, metrics file, weights) are there.
. "$top_srcdir/tests/lib.sh"
tiny="$fixtures/tiny.ini"

if "$PIPEHOST" -c "$tiny" --set run.steps=150 --set run.eval=yes --set run.log_every=50 \
	--set "run.metrics=$tmp/m.jsonl" --save-weights "$tmp/w.safetensors" >"$tmp/out" 2>"$tmp/err"; then
	ok "a 2-stage 1f1b run of 150 steps succeeds"
else
	not_ok "run failed: $(cat "$tmp/err")"
fi
acc=$(sed -n 's/.*test accuracy \([0-9.]*\)%.*/\1/p' "$tmp/out")
if [ -n "$acc" ] && awk "BEGIN{exit !($acc >= 60)}"; then
	ok "test accuracy $acc% on 10 synthetic classes (chance is 10%)"
else
	not_ok "test accuracy '$acc' below 60%: $(tail -3 "$tmp/out")"
fi
first=$(sed -n 's/.*"step":1,.*"loss":\([0-9.]*\).*/\1/p' "$tmp/m.jsonl")
last=$(sed -n 's/.*"step":150,.*"loss":\([0-9.]*\).*/\1/p' "$tmp/m.jsonl")
if [ -n "$first" ] && [ -n "$last" ] && awk "BEGIN{exit !($last < $first / 2)}"; then
	ok "loss falls from $first to $last"
else
	not_ok "loss did not halve: first '$first' last '$last'"
fi
if grep -q '"eval":true' "$tmp/m.jsonl" && [ "$(grep -c '^{.*}$' "$tmp/m.jsonl")" -eq "$(wc -l <"$tmp/m.jsonl")" ]; then
	ok "metrics file holds one JSON object per line, evaluation included"
else
	not_ok "metrics file malformed: $(head -3 "$tmp/m.jsonl")"
fi
if grep -q "^  chunk rank device" "$tmp/out" && grep -q "conv1..fc1 (0-4)" "$tmp/out"; then
	ok "the plan table is printed before training"
else
	not_ok "no plan table: $(head -5 "$tmp/out")"
fi
if grep -Eq "^epoch 2/5 step 50/150 loss [0-9.]+ lr [0-9.e-]+ samples/s [0-9]+ ETA" "$tmp/out"; then
	ok "plain progress lines when stdout is not a terminal"
else
	not_ok "no progress line: $(head -8 "$tmp/out")"
fi
hdr=$(od -An -tu8 -N8 "$tmp/w.safetensors" | tr -d ' ')
if [ -n "$hdr" ] && head -c $((8 + hdr)) "$tmp/w.safetensors" | tail -c "$hdr" | grep -q '"fc1.weight":{"dtype":"F32","shape":\[16,64\]'; then
	ok "weights saved as safetensors with LAYER.PARAM names"
else
	not_ok "safetensors header: $(head -c 200 "$tmp/w.safetensors" | tail -c 190)"
fi
if "$PIPEHOST" -c "$tiny" --plan >"$tmp/plan" 2>&1 && ! grep -q "trained" "$tmp/plan" && grep -q "relu2..loss (5-8)" "$tmp/plan"; then
	ok "--plan prints the partition and stops"
else
	not_ok "--plan: $(cat "$tmp/plan")"
fi
if "$PIPEHOST" --list-plugins >"$tmp/list" 2>&1 && grep -q "^  conv2d" "$tmp/list" && grep -q "filters" "$tmp/list" &&
	grep -q "^  1f1b" "$tmp/list" && grep -q "^  uniform" "$tmp/list"; then
	ok "--list-plugins lists layers, schedules and partitioners with their options"
else
	not_ok "--list-plugins: $(head -5 "$tmp/list")"
fi
finish
