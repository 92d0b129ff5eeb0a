#!/bin/sh
# SPDX-License-Identifier: MIT
# Checkpoints from the command line: [checkpoint] dir/every/keep, --resume
# continues exactly (weights byte-identical to an uninterrupted run, under any
# schedule or stage count), SIGINT/SIGTERM finish the step, write a
# checkpoint and exit 128 + the signal, and every corrupted checkpoint is refused with one
# clear line.  docs/corrupted-inputs.md lists the messages.
. "$top_srcdir/tests/lib.sh"
tiny="$fixtures/tiny.ini"

if ! "$PIPEHOST" --help 2>&1 | grep -q -- "--resume"; then
	echo "SKIP: this pipehost has no --resume"
	exit 77
fi

ph() { "$PIPEHOST" -c "$tiny" "$@"; }

# --- save, keep, resume ---------------------------------------------------
ph --set run.steps=40 --save-weights "$tmp/ref40.st" >"$tmp/out" 2>"$tmp/err" || not_ok "reference run: $(cat "$tmp/err")"
if ph --set run.steps=40 --set "checkpoint.dir=$tmp/ck" --set checkpoint.every=10 --set checkpoint.keep=2 \
	--save-weights "$tmp/w40.st" >"$tmp/out" 2>"$tmp/err" &&
	[ "$(ls "$tmp/ck" | tr '\n' ' ')" = "step-00000030 step-00000040 " ] &&
	grep -q "^checkpoint: step 10 written to $tmp/ck/step-00000010$" "$tmp/out"; then
	ok "every = 10, keep = 2: step-00000030 and step-00000040 remain"
else
	not_ok "checkpoint dir holds: $(ls -a "$tmp/ck" | tr '\n' ' ') $(cat "$tmp/err")"
fi
cmp -s "$tmp/ref40.st" "$tmp/w40.st" && ok "checkpointing does not change the trajectory" ||
	not_ok "weights differ with checkpoints on"
f="$tmp/ck/step-00000030"
if [ -f "$f/weights.safetensors" ] && [ -f "$f/optimizer.safetensors" ] &&
	grep -q '"format":[[:space:]]*"pipehost-checkpoint"' "$f/state.json" &&
	grep -q '"version":[[:space:]]*1,' "$f/state.json" && grep -q '"step":[[:space:]]*30,' "$f/state.json" &&
	grep -Eq '"config_digest":[[:space:]]*"[0-9a-f]{16}"' "$f/state.json" &&
	grep -q '"conv1.weight.adam_m"' "$f/optimizer.safetensors"; then
	ok "a step holds weights, AdamW moments and state.json (format, version, step, digest)"
else
	not_ok "step-00000030: $(ls "$f") $(head -c 300 "$f/state.json")"
fi

if ph --set run.steps=40 --resume "$tmp/ck/step-00000030" --save-weights "$tmp/r.st" >"$tmp/out" 2>"$tmp/err" &&
	grep -q "^resumed from $tmp/ck/step-00000030 at step 30 of 40$" "$tmp/out" && cmp -s "$tmp/ref40.st" "$tmp/r.st" &&
	grep -q "^checkpoint: step 40 written to $tmp/ck/step-00000040$" "$tmp/out" &&
	[ "$(ls -A "$tmp/ck" | tr '\n' ' ')" = "step-00000030 step-00000040 " ]; then
	ok "--resume DIR/step-00000030: weights byte-identical to the uninterrupted run; step-00000040 replaced in place"
else
	not_ok "resume from step 30: $(cat "$tmp/err") $(grep resumed "$tmp/out")"
fi
# Resumed from an older step into the same directory: its later steps are
# an abandoned continuation's.  keep = 2 used to delete the steps this run
# wrote and keep the stale step-00000040, and nothing said that --resume
# DIR would now take step 40 (an audit, 2026-12-07).
C="--set optimizer.lr_schedule=constant"
# shellcheck disable=SC2086 # C is words
if ph $C --set run.steps=40 --set "checkpoint.dir=$tmp/ck5" --set checkpoint.every=10 >/dev/null 2>"$tmp/err" &&
	ph $C --set run.steps=30 --set checkpoint.every=10 --set checkpoint.keep=2 --resume "$tmp/ck5/step-00000010" \
		>"$tmp/out" 2>"$tmp/err" &&
	grep -q "^note: $tmp/ck5 holds steps up to 40 from an earlier continuation; this run replaces each as it reaches it, and until then --resume $tmp/ck5 takes them: resume this run from its own step directory$" "$tmp/out" &&
	[ "$(ls -A "$tmp/ck5" | tr '\n' ' ')" = "step-00000020 step-00000030 step-00000040 " ]; then
	ok "resumed at step 10 into a directory up to step 40: a note, and keep = 2 keeps this run's steps 20 and 30"
else
	not_ok "resume into a directory with later steps: $(ls -A "$tmp/ck5" | tr '\n' ' ') $(grep -v '^epoch\|^step' "$tmp/out" | head -3) $(head -c 300 "$tmp/err")"
fi
# under cosine the schedule's length is in the digest: the refusal names
# what the user sets ([run] steps or epochs), not the digest's own key
expect_error "cosine, another run length" \
	"^pipehost: checkpoint $tmp/ck/step-00000030 was written for another model or training config \(digest [0-9a-f]+, this one [0-9a-f]+; \[run\] steps or epochs: 40 steps in the checkpoint, 50 here\); use the matching config or start fresh\$" \
	-c "$tiny" --set run.steps=50 --resume "$tmp/ck/step-00000030"
# --resume DIR reads its newest step: a file of DIR's own is no input, so
# the same command runs twice (the second was refused: "an input of this
# run"); the newest step's files still are
# shellcheck disable=SC2086
if ph $C --set run.steps=40 --resume "$tmp/ck5" --save-weights "$tmp/ck5/final.st" >/dev/null 2>"$tmp/err" &&
	ph $C --set run.steps=40 --resume "$tmp/ck5" --save-weights "$tmp/ck5/final.st" >/dev/null 2>"$tmp/err"; then
	ok "--resume DIR --save-weights DIR/final.st, twice"
else
	not_ok "--resume DIR --save-weights DIR/final.st twice: $(head -c 300 "$tmp/err")"
fi
# shellcheck disable=SC2086
expect_error "--save-weights over the resumed step's weights" \
	"^pipehost: --save-weights $tmp/ck5/step-00000040/weights.safetensors is $tmp/ck5/step-00000040/weights.safetensors, an input of this run; write to another file\$" \
	-c "$tiny" $C --set run.steps=40 --resume "$tmp/ck5" --save-weights "$tmp/ck5/step-00000040/weights.safetensors"
# "--resume DIR/" names the step without a double slash, and the last line
# counts the steps this run trained (it said "trained 50 steps" for 10)
# shellcheck disable=SC2086
if ph $C --set run.steps=50 --resume "$tmp/ck5/" >"$tmp/out" 2>"$tmp/err" &&
	grep -q "^resumed from $tmp/ck5/step-00000040 at step 40 of 50$" "$tmp/out" &&
	grep -q "^trained 10 steps (steps 41\.\.50, resumed) in " "$tmp/out"; then
	ok "--resume DIR/: resumed from DIR/step-00000040; trained 10 steps (steps 41..50, resumed)"
else
	not_ok "--resume DIR/: $(grep -E '^resumed|^trained' "$tmp/out") $(head -c 300 "$tmp/err")"
fi
# Lion's one moment per weight: saved as LAYER.PARAM.lion_m, state.json
# says "lion", and a resume gives the uninterrupted run's bytes
lion="--set optimizer.type=lion --set optimizer.lr=0.001 --set optimizer.beta2=0.99"
# shellcheck disable=SC2086
{
	ph --set run.steps=20 $lion --save-weights "$tmp/lref.st" >/dev/null 2>&1
	ph --set run.steps=20 $lion --set "checkpoint.dir=$tmp/lk" --set checkpoint.every=10 >/dev/null 2>&1
	rm -rf "$tmp/lk/step-00000020"
	ph --set run.steps=20 $lion --resume "$tmp/lk" --save-weights "$tmp/lr.st" >"$tmp/out" 2>"$tmp/err"
}
f="$tmp/lk/step-00000010"
if grep -q '"conv1.weight.lion_m"' "$f/optimizer.safetensors" && ! grep -q 'adam_m\|momentum' "$f/optimizer.safetensors" &&
	grep -q '"optimizer":[[:space:]]*"lion"' "$f/state.json" && cmp -s "$tmp/lref.st" "$tmp/lr.st"; then
	ok "Lion: step 10 holds LAYER.PARAM.lion_m and \"optimizer\": \"lion\"; the resume gives the uninterrupted run's bytes"
else
	not_ok "Lion checkpoint: $(cat "$tmp/err") $(head -c 300 "$f/state.json")"
fi
# a step in the middle of an epoch (32 steps per epoch), resumed under
# another schedule, stage count and partitioner
ph --set run.steps=40 --set "checkpoint.dir=$tmp/ck2" --set checkpoint.every=7 >/dev/null 2>&1
rm -rf "$tmp/ck2/step-00000040" "$tmp/ck2/step-00000035"
if ph --set run.steps=40 --set run.stages=1 --set schedule.type=gpipe --resume "$tmp/ck2" \
	--save-weights "$tmp/r2.st" >"$tmp/out" 2>"$tmp/err" &&
	grep -q "^resumed from $tmp/ck2/step-00000028 at step 28 of 40$" "$tmp/out" && cmp -s "$tmp/ref40.st" "$tmp/r2.st"; then
	ok "--resume DIR takes the newest step; 1 stage + gpipe resumes a 2-stage 1f1b run exactly"
else
	not_ok "resume from DIR under gpipe: $(cat "$tmp/err") $(grep resumed "$tmp/out")"
fi
if [ -d "$tmp/ck2/step-00000040" ] && ph --set run.steps=40 --resume "$tmp/ck2" >"$tmp/out" 2>&1 &&
	grep -q "already complete" "$tmp/out"; then
	ok "a resume without [checkpoint] dir keeps saving beside its checkpoint; a finished run says so"
else
	not_ok "no step-00000040 after the resume, or: $(tail -2 "$tmp/out")"
fi

# leftovers of a killed save are ignored, then cleaned up
mkdir -p "$tmp/ck3" && cp -r "$tmp/ck/step-00000030" "$tmp/ck3/" && mkdir "$tmp/ck3/.tmp-step-00000099" "$tmp/ck3/step-00000098"
echo garbage >"$tmp/ck3/.tmp-step-00000099/state.json"
if ph --set run.steps=40 --resume "$tmp/ck3" --set checkpoint.every=5 >"$tmp/out" 2>"$tmp/err" &&
	grep -q "^resumed from $tmp/ck3/step-00000030 at" "$tmp/out" && [ ! -e "$tmp/ck3/.tmp-step-00000099" ]; then
	ok "a .tmp-* leftover and a step dir without state.json are ignored; the next save removes .tmp-*"
else
	not_ok "leftovers: $(ls -a "$tmp/ck3" | tr '\n' ' ') $(cat "$tmp/err")"
fi

# --- signals --------------------------------------------------------------
# Background jobs of a script ignore SIGINT, and pipehost keeps an ignored
# SIGINT ignored; env --default-signal undoes that for the test.
ph --set run.steps=3000 --save-weights "$tmp/ref3000.st" >/dev/null 2>&1
sig_test() { # SIGNAL DIR
	sig=$1 d=$2
	if [ "$sig" = INT ]; then
		env --default-signal=INT "$PIPEHOST" -c "$tiny" --set run.steps=3000 --set "checkpoint.dir=$d" \
			--set checkpoint.every=100 >"$tmp/sig.out" 2>"$tmp/sig.err" &
	else
		"$PIPEHOST" -c "$tiny" --set run.steps=3000 --set "checkpoint.dir=$d" \
			--set checkpoint.every=100 >"$tmp/sig.out" 2>"$tmp/sig.err" &
	fi
	pid=$!
	i=0
	while [ ! -d "$d/step-00000100" ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i + 1)); done
	kill -"$sig" "$pid"
	wait "$pid"
	rc=$?
	line=$(grep "^interrupted at step" "$tmp/sig.out")
	step=$(echo "$line" | sed -n 's/^interrupted at step \([0-9]*\):.*/\1/p')
	dir=$(printf '%s/step-%08d' "$d" "${step:-0}")
	# 128 + the signal: a scheduler sees a preempted run as not finished
	want=143
	[ "$sig" = INT ] && want=130
	if [ "$rc" -eq "$want" ] && [ -n "$step" ] && [ "$step" -lt 3000 ] &&
		[ "$line" = "interrupted at step $step: checkpoint written to $dir; resume with --resume $d" ] &&
		[ -f "$dir/state.json" ] && grep -q "interrupted: finishing this step" "$tmp/sig.err"; then
		ok "SIG$sig: exit $rc, '$line'"
	else
		not_ok "SIG$sig: exit $rc, '$line', $(tail -2 "$tmp/sig.out") $(cat "$tmp/sig.err")"
		return
	fi
	if ph --set run.steps=3000 --resume "$d" --save-weights "$tmp/sig.st" >"$tmp/out" 2>"$tmp/err" &&
		cmp -s "$tmp/ref3000.st" "$tmp/sig.st"; then
		ok "resuming after SIG$sig at step $step ends byte-identical to an uninterrupted run"
	else
		not_ok "resume after SIG$sig: $(cat "$tmp/err")"
	fi
}
if env --default-signal=INT true 2>/dev/null; then
	sig_test INT "$tmp/int"
else
	echo "# env --default-signal unsupported: SIGINT test skipped"
fi
sig_test TERM "$tmp/term"

# --- refused checkpoints: one line each, exit 1 ----------------------------
good="$tmp/ck/step-00000040"
st="$tmp/bad/step-00000040"
fresh() { rm -rf "$tmp/bad" && mkdir -p "$tmp/bad" && cp -r "$good" "$tmp/bad/"; }
resume() { expect_error "$1" "$2" -c "$tiny" --set run.steps=40 --resume "$tmp/bad"; }
# same-length byte edits of a safetensors header
edit() { LC_ALL=C sed -i "s/$2/$3/" "$st/$1"; }

fresh && head -c 100 "$good/weights.safetensors" >"$st/weights.safetensors"
resume "truncated weights" "weights.safetensors: header length [0-9]+ exceeds the file \(100 bytes\): truncated or not safetensors"
fresh && head -c 5 "$good/weights.safetensors" >"$st/weights.safetensors"
resume "weights cut inside the length" "weights.safetensors: 5 bytes, too short for the 8-byte header length"
fresh && size=$(wc -c <"$good/weights.safetensors") && head -c $((size - 4)) "$good/weights.safetensors" >"$st/weights.safetensors"
resume "weights missing their last 4 bytes" "fc2.bias data_offsets \[4960,5000\] run past the data section \(4996 bytes\): truncated file"
fresh && printf 'PK\003\004garbage-not-safetensors' >"$st/weights.safetensors"
resume "bad magic (a zip file)" "weights.safetensors: header length [0-9]+ exceeds the file"
fresh && printf '\040\000\000\000\000\000\000\000%-32s' '{"a":1}' >"$st/weights.safetensors"
resume "header not of tensors" "weights.safetensors: header entry a is not an object: corrupt or not safetensors"
fresh && { printf '\000\000\000\011\000\000\000\000'; } >"$st/weights.safetensors" && truncate -s 200M "$st/weights.safetensors"
resume "oversized header (150 MB, in a 200 MB sparse file)" "header length 150994944 exceeds the 100 MB limit: corrupt or not safetensors"
fresh && edit weights.safetensors '"data_offsets":\[4960,5000\]' '"data_offsets":[4960,9000]'
resume "offsets out of range" "fc2.bias data_offsets \[4960,9000\] run past the data section \(5000 bytes\)"
fresh && edit weights.safetensors '"data_offsets":\[0,144\]' '"data_offsets":[0,140]'
resume "offsets disagree with the shape" "conv1.weight data_offsets \[0,140\] hold 140 bytes, but its shape of F32 needs 144"
fresh && edit weights.safetensors '"data_offsets":\[144,160\]' '"data_offsets":[100,116]'
resume "overlapping tensors" "tensors conv1.weight and conv1.bias overlap in the data section"
fresh && edit weights.safetensors '"shape":\[4,1,3,3\]' '"shape":[1,4,3,3]'
resume "wrong shape" "conv1.weight has shape \[1,4,3,3\], the model expects \[4,1,3,3\]"
fresh && edit weights.safetensors '"dtype":"F32","shape":\[4\]' '"dtype":"I32","shape":[4]'
resume "wrong dtype" "dtype I32 for conv1.bias; only F32, F16 and BF16 are read"
fresh && edit weights.safetensors '"fc2.bias"' '"fc9.bias"'
resume "a tensor missing" "tensor fc2.bias missing; was the file written for another model\?"
fresh && edit weights.safetensors '"dtype":"F32"' '"dtype":"Q32"'
resume "unknown dtype" "conv1.weight has unknown dtype \"Q32\""
fresh && edit weights.safetensors '{"__metadata__"' '["__metadata__"'
resume "header not JSON" "weights.safetensors: header is not valid JSON"
fresh && edit optimizer.safetensors '"conv1.bias.adam_v":{"dtype":"F32","shape":\[4\]' '"conv1.bias.adam_v":{"dtype":"F32","shape":[2]'
resume "optimizer state of the wrong shape" "optimizer.safetensors: conv1.bias.adam_v data_offsets \[304,320\] hold 16 bytes, but its shape of F32 needs 8"
fresh && rm "$st/optimizer.safetensors"
resume "optimizer state missing" "optimizer.safetensors: cannot open: No such file or directory"
fresh && echo '{"format":"pipehost-checkpoint",' >"$st/state.json"
resume "state.json truncated" "state.json: not valid JSON \(error near byte [0-9]+ of 33\): corrupt checkpoint"
fresh && sed -i 's/"pipehost-checkpoint"/"something-else"/' "$st/state.json"
resume "state.json of another format" "state.json: \"format\" is not \"pipehost-checkpoint\": not a pipehost checkpoint"
fresh && sed -i 's/"version":[[:space:]]*1,/"version": 2,/' "$st/state.json"
resume "state.json from a newer version" "state.json: checkpoint format version 2; this pipehost reads version 1: upgrade pipehost"
fresh && sed -i 's/"step":[[:space:]]*40,/"step": 41,/' "$st/state.json"
resume "state.json step disagrees with its directory" "state.json says step 41 but the directory is step-00000040: corrupt checkpoint"
fresh && sed -i 's/"step":[[:space:]]*40,/"step": -40,/' "$st/state.json"
resume "negative step" "\"step\" missing or not a whole number >= 0: corrupt checkpoint"
fresh && sed -i 's/"config_digest":[[:space:]]*"[0-9a-f]*"/"config_digest": "xyz"/' "$st/state.json"
resume "malformed digest" "\"config_digest\" missing or not 16 hex digits: corrupt checkpoint"
fresh && echo x >>"$st/state.json"
resume "state.json with bytes after the JSON" "state.json: bytes after the JSON \(at byte [0-9]+\): corrupt checkpoint$"
fresh && echo '[1, 2]' >"$st/state.json"
resume "state.json an array" "state.json: JSON but not an object: not a checkpoint state$"
fresh && sed -i 's/"version":[[:space:]]*1,/"version": "1",/' "$st/state.json"
resume "version a string" "state.json: \"version\" missing or not a whole number: corrupt checkpoint$"
fresh && sed -i 's/"seed":[[:space:]]*[0-9]*,/"seed": -7,/' "$st/state.json"
resume "negative seed" "state.json: \"seed\" missing or not a whole number >= 0: corrupt checkpoint$"
fresh && sed -i 's/"total_steps":[[:space:]]*40,/"total_steps": 40.5,/' "$st/state.json"
resume "fractional total_steps" "state.json: \"total_steps\" is not a whole number >= 0: corrupt checkpoint$"
fresh && sed -i 's/"optimizer":[[:space:]]*"adamw"/"optimizer": "adam"/' "$st/state.json"
resume "unknown optimizer" "state.json: \"optimizer\" missing or not \"sgd\"/\"adamw\"/\"lion\": corrupt checkpoint$"
fresh && sed -i 's/"identity":[[:space:]]*\[/"identity": [1, /' "$st/state.json"
resume "identity not of strings" "state.json: \"identity\" is not an array of one-line strings: corrupt checkpoint$"
fresh && truncate -s 17M "$st/state.json"
resume "state.json of 17 MiB (sparse)" "state.json: 17825792 bytes, over the 16777216-byte limit: not a checkpoint state$"
fresh && sed -i '$d' "$st/manifest.txt"
resume "manifest without its last line" "manifest.txt: no valid last line \"end xxh3 HEX\": damaged checkpoint$"
fresh && rm "$st/state.json"
expect_error "--resume of a step without state.json" \
	"^pipehost: checkpoint $st has no state.json: an incomplete or damaged step; resume from another step, or from the checkpoint dir" \
	-c "$tiny" --set run.steps=40 --resume "$st"
rm -rf "$tmp/bad"
fresh
expect_error "config changed (another learning rate)" \
	"checkpoint $st was written for another model or training config \(digest [0-9a-f]{16}, this one [0-9a-f]{16}; optimizer.lr = 0.01 in the checkpoint, 0.02 here\); use the matching config or start fresh" \
	-c "$tiny" --set run.steps=40 --set optimizer.lr=0.02 --resume "$tmp/bad"
expect_error "config changed (another layer width)" "another model or training config .*layer fc1.units = 16 in the checkpoint, 17 here" \
	-c "$tiny" --set run.steps=40 --set layer.fc1.units=17 --resume "$tmp/bad"
ph --set run.steps=10 --set optimizer.lr_schedule=constant --set "checkpoint.dir=$tmp/const" >/dev/null 2>&1
expect_error "checkpoint past the run's end" "checkpoint $tmp/const/step-00000010 is at step 10, past this run's 5 steps; raise \[run\] steps" \
	-c "$tiny" --set run.steps=5 --set optimizer.lr_schedule=constant --resume "$tmp/const"
expect_error "resume from a missing path" "cannot resume from $tmp/nowhere: No such file or directory" \
	-c "$tiny" --resume "$tmp/nowhere"
expect_error "resume from a file" "cannot resume from $tiny: not a directory" -c "$tiny" --resume "$tiny"
mkdir -p "$tmp/empty"
expect_error "resume from a dir without checkpoints" "no checkpoint in $tmp/empty \(expected $tmp/empty/step-NNNNNNNN/state.json\)" \
	-c "$tiny" --resume "$tmp/empty"
printf 'x' >"$tmp/afile"
expect_error "checkpoint dir is a file" "checkpoint dir $tmp/afile is not a directory" \
	-c "$tiny" --set run.steps=2 --set "checkpoint.dir=$tmp/afile"
expect_error "checkpoint dir below a file" \
	"^pipehost: cannot create checkpoint dir $tmp/afile/ck: Not a directory; check \[checkpoint\] dir$" \
	-c "$tiny" --set run.steps=2 --set "checkpoint.dir=$tmp/afile/ck"
# a directory the run cannot write in: mode 555, or /sys for root
mkdir -p "$tmp/ro" && chmod 555 "$tmp/ro"
ro=$tmp/ro
if touch "$tmp/ro/probe" 2>/dev/null; then
	rm -f "$tmp/ro/probe"
	ro=/sys
fi
if ! touch "$ro/probe" 2>/dev/null; then
	expect_error "checkpoint dir not writable ($ro)" "^pipehost: checkpoint dir $ro is not writable: .+; check \[checkpoint\] dir$" \
		-c "$tiny" --set run.steps=2 --set "checkpoint.dir=$ro"
fi
chmod 755 "$tmp/ro"
expect_error "[checkpoint] key misspelt" "unknown key 'evry' in \[checkpoint\]; did you mean 'every'\?" \
	-c "$tiny" --set checkpoint.evry=5

# A stop during an epoch's evaluation cuts it short: the step's checkpoint
# says so and the resumed run evaluates first (the figure was lost for good:
# at the last step, a preempted run resubmitted ended "complete" without
# its result).  A test set of 200000 samples through 128 filters takes
# about a second.
big="--set data.test_samples=200000 --set layer.conv1.filters=128 --set run.eval=yes --set run.log_every=1"
# stop_in_eval STEPS DIR OUT ERR: train STEPS steps with checkpoints in DIR,
# SIGTERM once step 32 (epoch 1's end) is logged, that is during its
# evaluation; rc gets the exit status
stop_in_eval() {
	rm -f "$tmp/ev.jsonl"
	# shellcheck disable=SC2086 # $big splits on purpose
	"$PIPEHOST" -c "$tiny" $big --set run.steps="$1" --set "checkpoint.dir=$2" --set "run.metrics=$tmp/ev.jsonl" \
		>"$3" 2>"$4" &
	pid=$!
	i=0
	while ! grep -q '"step":32,' "$tmp/ev.jsonl" 2>/dev/null && [ $i -lt 2400 ]; do sleep 0.05; i=$((i + 1)); done
	sleep 0.2
	kill -TERM "$pid"
	wait "$pid"
	rc=$?
}
ev="$tmp/ev"
stop_in_eval 64 "$ev" "$tmp/ev1.out" "$tmp/ev1.err"
if [ "$rc" -eq 143 ] && ! grep -q "test loss" "$tmp/ev1.out" &&
	grep -q "^interrupted at step 32: .*(its evaluation was cut short: the resumed run evaluates first)" "$tmp/ev1.out" &&
	grep -q '"eval_pending":[[:space:]]*true' "$ev/step-00000032/state.json"; then
	ok "SIGTERM during epoch 1's evaluation: step 32 saved with its evaluation pending"
	# shellcheck disable=SC2086
	"$PIPEHOST" -c "$tiny" $big --set run.steps=64 --set "checkpoint.dir=$ev" --resume "$ev" \
		--set "run.metrics=$tmp/ev.jsonl" >"$tmp/ev2.out" 2>&1
	first=$(grep -n "^epoch 1: test loss" "$tmp/ev2.out" | cut -d: -f1)
	step33=$(grep -n "step 33/64" "$tmp/ev2.out" | head -1 | cut -d: -f1)
	if [ -n "$first" ] && [ -n "$step33" ] && [ "$first" -lt "$step33" ] && grep -q "^epoch 2: test loss" "$tmp/ev2.out" &&
		[ "$(grep -c '"test_loss"' "$tmp/ev.jsonl")" -eq 2 ]; then
		ok "the resume evaluates epoch 1 first, then trains on: $(grep '^epoch 1: test loss' "$tmp/ev2.out")"
	else
		not_ok "the resume: $(head -5 "$tmp/ev2.out")"
	fi
else
	not_ok "SIGTERM during the evaluation: exit $rc, $(grep -E 'interrupted|test loss' "$tmp/ev1.out") $(cat "$tmp/ev1.err")"
fi
# the same at the last step: the run says so, and --resume of the complete
# run evaluates
ev="$tmp/evlast"
stop_in_eval 32 "$ev" "$tmp/ev3.out" "$tmp/ev3.err"
# shellcheck disable=SC2086
if [ "$rc" -eq 143 ] && grep -q "but the final evaluation was cut short (--resume $ev/step-00000032 evaluates it)" "$tmp/ev3.out" &&
	"$PIPEHOST" -c "$tiny" $big --set run.steps=32 --resume "$ev" >"$tmp/ev4.out" 2>&1 &&
	grep -q "^epoch 1: test loss" "$tmp/ev4.out"; then
	ok "SIGTERM during the final evaluation: said, and the resume of the complete run evaluates"
else
	not_ok "SIGTERM during the final evaluation: exit $rc, $(tail -1 "$tmp/ev3.out"); $(tail -2 "$tmp/ev4.out" 2>/dev/null)"
fi
finish
