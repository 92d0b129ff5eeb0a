#!/bin/sh
# SPDX-License-Identifier: MIT
# Nothing lost, nothing silent: every output is checked before step 1 (a
# directory, a read-only place, an input of the run, two outputs on one
# file); a symlink is followed and a FIFO or device written through, never
# replaced; a checkpoint dir belongs to one run and one process; checkpoints
# carry a manifest checked on load, and a damaged newest one is passed over
# loudly; a diverged run stops (exit 1) and never writes or prunes past its
# last finite checkpoint; a metrics file that cannot be written is said; the
# final outputs are all attempted when one fails.  Files that existed before
# a refused run are checksummed before and after.
# docs/reliability-outputs.md lists the messages.
. "$top_srcdir/tests/lib.sh"
tiny="$fixtures/tiny.ini"
shim="$top_builddir/tests/.libs/faultfs.so"

ph() { "$PIPEHOST" -c "$tiny" --set run.steps=8 "$@"; }
sums() { find "$@" -type f -exec sha256sum {} + 2>/dev/null | sort; }
# refused_early DESC REGEX ARGS...: one line matching REGEX, exit 1, and
# not one step trained first
refused_early() {
	desc=$1
	expect_error "$@"
	if grep -q "^epoch\|^trained" "$tmp/out"; then
		not_ok "$desc: refused only after training"
	fi
}

ph --save-weights "$tmp/ref.st" >/dev/null 2>"$tmp/err" || not_ok "reference run: $(cat "$tmp/err")"

# --- 1. a checkpoint dir belongs to one run -------------------------------
ph --set "checkpoint.dir=$tmp/ck" --set checkpoint.every=4 >/dev/null 2>&1
before=$(sums "$tmp/ck")
refused_early "a fresh run into another run's checkpoint dir" \
	"checkpoint dir $tmp/ck holds 2 checkpoint\(s\) of another run \(run [0-9a-f]{8}, newest step-00000008\); resume it with --resume $tmp/ck, set another \[checkpoint\] dir, or set \[checkpoint\] overwrite = yes" \
	-c "$tiny" --set run.steps=8 --set "checkpoint.dir=$tmp/ck" --set checkpoint.keep=1
[ "$(sums "$tmp/ck")" = "$before" ] && ok "... and the other run's checkpoints are unchanged (sha256)" ||
	not_ok "the other run's checkpoints changed"
if ph --set run.steps=3 --set "checkpoint.dir=$tmp/ck" --set checkpoint.overwrite=yes >"$tmp/out" 2>"$tmp/err" &&
	grep -q "^checkpoint dir $tmp/ck: 2 checkpoint(s) of run [0-9a-f]* removed (\[checkpoint\] overwrite = yes)$" "$tmp/out" &&
	[ "$(ls "$tmp/ck" | tr '\n' ' ')" = "step-00000003 " ]; then
	ok "[checkpoint] overwrite = yes: the other run's checkpoints removed, said on stdout"
else
	not_ok "overwrite: $(ls -A "$tmp/ck" | tr '\n' ' ') $(cat "$tmp/err")"
fi
if ph --set run.steps=6 --set optimizer.lr_schedule=constant --set "checkpoint.dir=$tmp/own" >/dev/null 2>&1 &&
	ph --set run.steps=9 --set optimizer.lr_schedule=constant --set "checkpoint.dir=$tmp/own" --resume "$tmp/own" \
		>"$tmp/out" 2>"$tmp/err" && [ "$(ls "$tmp/own" | tr '\n' ' ')" = "step-00000006 step-00000009 " ]; then
	ok "a resumed run goes on writing its own dir"
else
	not_ok "resume into its own dir: $(cat "$tmp/err")"
fi

expect_error "a resumed run into another run's checkpoint dir" \
	"checkpoint dir $tmp/ck holds 1 checkpoint\(s\) of another run \(run [0-9a-f]{8}, newest step-00000003\)" \
	-c "$tiny" --set run.steps=9 --set optimizer.lr_schedule=constant --set "checkpoint.dir=$tmp/ck" --resume "$tmp/own"

# --- 11. one process per checkpoint dir ----------------------------------
"$PIPEHOST" -c "$tiny" --set run.steps=100000 --set "checkpoint.dir=$tmp/busy" --set checkpoint.every=50 \
	>/dev/null 2>&1 &
pid=$!
w=0
while [ ! -d "$tmp/busy/step-00000050" ] && [ $w -lt 400 ]; do sleep 0.05; w=$((w + 1)); done
before=$(sums "$tmp/busy/step-00000050")
refused_early "a second process on a dir in use" \
	"checkpoint dir $tmp/busy is in use by another pipehost process \(it holds the lock\); wait for that run to end or set another \[checkpoint\] dir" \
	-c "$tiny" --set run.steps=100000 --resume "$tmp/busy"
kill -TERM "$pid" 2>/dev/null
wait "$pid"
[ "$(sums "$tmp/busy/step-00000050")" = "$before" ] && ok "... and the first one's step-00000050 is unchanged" ||
	not_ok "step-00000050 changed under the second process"

# --- 2. outputs checked before step 1 ------------------------------------
mkdir -p "$tmp/adir"
refused_early "--save-weights a directory" "--save-weights $tmp/adir is a directory; give a file name" \
	-c "$tiny" --set run.steps=8 --save-weights "$tmp/adir"
refused_early "--trace a directory" "--trace $tmp/adir is a directory; give a file name" \
	-c "$tiny" --set run.steps=8 --trace "$tmp/adir"
refused_early "[run] save_weights in a missing directory" \
	"\[run\] save_weights $tmp/nodir/w.st: cannot create files in $tmp/nodir: No such file or directory" \
	-c "$tiny" --set run.steps=8 --set "run.save_weights=$tmp/nodir/w.st"
mkdir -p "$tmp/ro" && chmod 555 "$tmp/ro"
if touch "$tmp/ro/probe" 2>/dev/null; then
	rm -f "$tmp/ro/probe"
	ro=/sys # root writes a mode-555 dir; sysfs refuses even root
else
	ro=$tmp/ro
fi
refused_early "--save-weights where files cannot be created ($ro)" \
	"--save-weights $ro/w.st: cannot create files in $ro: (Permission denied|Read-only file system)" \
	-c "$tiny" --set run.steps=8 --save-weights "$ro/w.st"
refused_early "[run] metrics where files cannot be created ($ro)" \
	"\[run\] metrics $ro/m.jsonl: cannot create files in $ro" -c "$tiny" --set run.steps=8 --set "run.metrics=$ro/m.jsonl"
chmod 755 "$tmp/ro"
echo "not a directory" >"$tmp/plain"
refused_early "--save-weights below a file" \
	"^pipehost: --save-weights $tmp/plain/w.st: Not a directory; check the path$" \
	-c "$tiny" --set run.steps=8 --save-weights "$tmp/plain/w.st"
# a socket is neither a file to replace nor one to write through
if command -v python3 >/dev/null 2>&1 &&
	python3 -c 'import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])' "$tmp/sock" 2>/dev/null; then
	refused_early "[run] metrics a socket" \
		"^pipehost: \[run\] metrics $tmp/sock is not a file, a device or a FIFO; give a file name$" \
		-c "$tiny" --set run.steps=8 --set "run.metrics=$tmp/sock"
fi

# the final checkpoint fails (ENOSPC on its first write): --save-weights is
# still written, and the exit is 1 naming the checkpoint
if [ -f "$shim" ]; then
	rm -f "$tmp/w.st"
	FAULTFS_DIR="$tmp/full" FAULTFS_MODE=enospc FAULTFS_N=1 LD_PRELOAD="$shim" \
		ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" \
		"$PIPEHOST" -c "$tiny" --set run.steps=8 --set "checkpoint.dir=$tmp/full" --save-weights "$tmp/w.st" \
		>"$tmp/out" 2>"$tmp/err"
	rc=$?
	if [ "$rc" -ne 0 ] && cmp -s "$tmp/ref.st" "$tmp/w.st" && [ "$(wc -l <"$tmp/err")" -eq 1 ] &&
		grep -q "^pipehost: $tmp/full/.tmp-step-00000008/weights.safetensors: writing failed: No space left on device" "$tmp/err"; then
		ok "a final checkpoint that fails: --save-weights still written, exit 1: $(cat "$tmp/err")"
	else
		not_ok "final checkpoint failing: exit $rc, weights $(cmp "$tmp/ref.st" "$tmp/w.st" 2>&1), $(cat "$tmp/err")"
	fi
fi

# --- 3. what an output names is not replaced -----------------------------
echo "not weights" >"$tmp/target.st"
ln -s "$tmp/target.st" "$tmp/link.st"
if ph --save-weights "$tmp/link.st" >/dev/null 2>"$tmp/err" && [ -L "$tmp/link.st" ] && cmp -s "$tmp/ref.st" "$tmp/target.st"; then
	ok "--save-weights a symlink: followed, the link stays a link, its target holds the weights"
else
	not_ok "symlink: $(ls -l "$tmp/link.st") $(cat "$tmp/err")"
fi
echo "not a trace" >"$tmp/target.json"
ln -s "$tmp/target.json" "$tmp/link.json"
if ph --trace "$tmp/link.json" >/dev/null 2>"$tmp/err" && [ -L "$tmp/link.json" ] && grep -q '"traceEvents"' "$tmp/target.json"; then
	ok "--trace a symlink: followed, the link stays a link"
else
	not_ok "trace symlink: $(ls -l "$tmp/link.json") $(cat "$tmp/err")"
fi
ln -s "$tmp/nowhere.st" "$tmp/dangling.st"
refused_early "--save-weights a dangling symlink" "--save-weights $tmp/dangling.st is a symlink to nothing \(No such file or directory\)" \
	-c "$tiny" --set run.steps=8 --save-weights "$tmp/dangling.st"
mkfifo "$tmp/fifo"
cat "$tmp/fifo" >"$tmp/from-fifo" &
cat_pid=$!
ph --save-weights "$tmp/fifo" >/dev/null 2>"$tmp/err"
rc=$?
if [ -p "$tmp/fifo" ]; then
	wait "$cat_pid"
	fifo_ok=1
else
	kill "$cat_pid" 2>/dev/null # it waits on the FIFO that was replaced
	fifo_ok=
fi
if [ "$rc" -eq 0 ] && [ -n "$fifo_ok" ] && cmp -s "$tmp/ref.st" "$tmp/from-fifo"; then
	ok "--save-weights a FIFO: written through, still a FIFO"
else
	not_ok "FIFO: exit $rc, $(ls -l "$tmp/fifo") $(cat "$tmp/err")"
fi
# /dev/null only once the FIFO case passes: the old code replaced it
if [ -n "$fifo_ok" ] && [ -c /dev/null ]; then
	if ph --save-weights /dev/null >/dev/null 2>"$tmp/err" && [ -c /dev/null ]; then
		ok "--save-weights /dev/null: written through, still a device"
	else
		not_ok "/dev/null: $(cat "$tmp/err")"
	fi
fi
# --svg and --plan-json by the same rules: both once renamed a file of
# their own over the path, replacing a symlink itself, a FIFO, and (as
# root) /dev/null's device node
echo "not a drawing" >"$tmp/target.svg" && ln -s "$tmp/target.svg" "$tmp/link.svg"
echo "not a plan" >"$tmp/target-plan.json" && ln -s "$tmp/target-plan.json" "$tmp/link-plan.json"
if "$PIPEHOST" -c "$tiny" --simulate --svg "$tmp/link.svg" --plan-json "$tmp/link-plan.json" >/dev/null 2>"$tmp/err" &&
	[ -L "$tmp/link.svg" ] && grep -q '<svg ' "$tmp/target.svg" && [ -L "$tmp/link-plan.json" ] &&
	grep -q '"pipehost-plan"' "$tmp/target-plan.json"; then
	ok "--svg and --plan-json a symlink: followed, the links stay links, their targets hold the files"
else
	not_ok "svg/plan symlinks: $(ls -l "$tmp/link.svg" "$tmp/link-plan.json") $(cat "$tmp/err")"
fi
mkfifo "$tmp/fifo.svg" "$tmp/fifo.json"
cat "$tmp/fifo.svg" >"$tmp/from-fifo.svg" &
svg_pid=$!
cat "$tmp/fifo.json" >"$tmp/from-fifo.json" &
json_pid=$!
"$PIPEHOST" -c "$tiny" --simulate --svg "$tmp/fifo.svg" --plan-json "$tmp/fifo.json" >/dev/null 2>"$tmp/err"
rc=$?
svgfifo_ok=
if [ -p "$tmp/fifo.svg" ] && [ -p "$tmp/fifo.json" ]; then
	wait "$svg_pid" "$json_pid"
	svgfifo_ok=1
else
	kill "$svg_pid" "$json_pid" 2>/dev/null
fi
if [ "$rc" -eq 0 ] && [ -n "$svgfifo_ok" ] && grep -q '<svg ' "$tmp/from-fifo.svg" &&
	grep -q '"pipehost-plan"' "$tmp/from-fifo.json"; then
	ok "--svg and --plan-json a FIFO: written through, still FIFOs"
else
	not_ok "svg/plan FIFO: exit $rc, $(ls -l "$tmp/fifo.svg" "$tmp/fifo.json") $(cat "$tmp/err")"
fi
if [ -n "$svgfifo_ok" ] && [ -c /dev/null ]; then
	if "$PIPEHOST" -c "$tiny" --simulate --svg /dev/null --plan-json /dev/null >/dev/null 2>"$tmp/err" && [ -c /dev/null ]; then
		ok "--svg and --plan-json /dev/null: written through, still a device"
	else
		not_ok "svg/plan /dev/null: $(cat "$tmp/err")"
	fi
fi
cp "$tiny" "$tmp/run.ini"
"$PIPEHOST" -c "$tiny" --set run.steps=2 --save-weights "$tmp/init.st" >/dev/null 2>&1
mkdir -p "$tmp/data" && printf 'hello world, hello text. ' >"$tmp/data/text.txt"
before=$(sums "$tmp/run.ini" "$tmp/init.st" "$tmp/data")
refused_early "--save-weights the run's own INI" "--save-weights $tmp/run.ini is $tmp/run.ini, an input of this run; write to another file" \
	-c "$tmp/run.ini" --set run.steps=8 --save-weights "$tmp/run.ini"
ln -s "$tmp/run.ini" "$tmp/ini-link"
refused_early "[run] metrics the run's INI through a symlink" "\[run\] metrics $tmp/ini-link is $tmp/run.ini, an input of this run" \
	-c "$tmp/run.ini" --set run.steps=8 --set "run.metrics=$tmp/ini-link"
refused_early "--save-weights the initial weights" "--save-weights $tmp/init.st is $tmp/init.st, an input of this run" \
	-c "$tmp/run.ini" --set run.steps=8 --set "run.init=$tmp/init.st" --save-weights "$tmp/init.st"
refused_early "--trace a data file" "--trace $tmp/data/text.txt is $tmp/data/text.txt, an input of this run" \
	-c "$fixtures/tiny-lm.ini" --set run.steps=2 --set "data.path=$tmp/data/text.txt" --trace "$tmp/data/text.txt"
# the outputs of --plan, --simulate and --generate, each once written over its input
refused_early "--plan-json the run's own INI" "--plan-json $tmp/run.ini is $tmp/run.ini, an input of this run" \
	-c "$tmp/run.ini" --plan --plan-json "$tmp/run.ini"
refused_early "--simulate --svg the run's own INI" "--svg $tmp/run.ini is $tmp/run.ini, an input of this run" \
	-c "$tmp/run.ini" --simulate --svg "$tmp/run.ini"
refused_early "--simulate --trace the run's own INI" "--trace $tmp/run.ini is $tmp/run.ini, an input of this run" \
	-c "$tmp/run.ini" --simulate --trace "$tmp/run.ini"
for i in 1 2 3 4 5 6 7 8 9 10; do printf 'a little text for a tiny language model, line %d.\n' "$i"; done >"$tmp/lm.txt"
"$PIPEHOST" -c "$fixtures/tiny-lm.ini" --set run.steps=2 --set "data.path=$tmp/lm.txt" --save-weights "$tmp/lm.st" \
	>/dev/null 2>"$tmp/err" || not_ok "the tiny LM's weights: $(cat "$tmp/err")"
# a token file of the tokens source: 64 byte ids, uint16
printf 'the tokens of a tiny corpus, sixty-four bytes of them in all.  x' | od -An -v -tu1 |
	tr -s ' ' '\n' | awk 'NF { printf "%c%c", $1, 0 }' >"$tmp/data/train.bin"
before=$(sums "$tmp/run.ini" "$tmp/init.st" "$tmp/data" "$tmp/lm.st")
refused_early "--generate --logits the weights it reads" "--logits $tmp/lm.st is $tmp/lm.st, an input of this run" \
	-c "$fixtures/tiny-lm.ini" --set "data.path=$tmp/lm.txt" --generate hi --load-weights "$tmp/lm.st" \
	--logits "$tmp/lm.st"
refused_early "[run] metrics the token file" "\[run\] metrics $tmp/data/train.bin is $tmp/data/train.bin, an input of this run" \
	-c "$fixtures/tiny-lm.ini" --set run.steps=2 --set data.source=tokens --set "data.tokens=$tmp/data/train.bin" \
	--set data.vocab_size=256 --set data.seq_len=4 --set run.batch=2 --set "run.metrics=$tmp/data/train.bin"
refused_early "--plan-json and --save-weights on one file" \
	"--save-weights $tmp/same is also another output of this run; give each its own file" \
	-c "$tiny" --set run.steps=8 --plan-json "$tmp/same" --save-weights "$tmp/same"
[ ! -e "$tmp/same" ] && ok "... and the plan was not written first" || not_ok "$tmp/same was written"
[ "$(sums "$tmp/run.ini" "$tmp/init.st" "$tmp/data" "$tmp/lm.st")" = "$before" ] &&
	ok "... the INI, initial weights, data, token file and LM weights unchanged (sha256)" ||
	not_ok "an input of the run changed"
refused_early "two outputs on one file" "\[run\] metrics $tmp/same is also another output of this run; give each its own file" \
	-c "$tiny" --set run.steps=8 --save-weights "$tmp/same" --set "run.metrics=$tmp/same"

# --- 4. manifests ---------------------------------------------------------
ph --set "checkpoint.dir=$tmp/m" --set checkpoint.every=4 >/dev/null 2>&1
s8="$tmp/m/step-00000008"
cp -r "$tmp/m" "$tmp/m0"
# one bit of the last tensor's data: the file still parses
size=$(wc -c <"$s8/weights.safetensors")
b=$(od -An -tu1 -j$((size - 1)) -N1 "$s8/weights.safetensors" | tr -d ' ')
# shellcheck disable=SC2059
printf "$(printf '\\%03o' $((b ^ 1)))" | dd of="$s8/weights.safetensors" bs=1 seek=$((size - 1)) conv=notrunc 2>/dev/null
expect_error "a flipped bit in tensor data" \
	"$s8/weights.safetensors: its checksum does not match the manifest's: damaged checkpoint \(changed after it was written\)" \
	-c "$tiny" --set run.steps=8 --resume "$s8"
rm -rf "$tmp/m" && cp -r "$tmp/m0" "$tmp/m"
cp "$tmp/m/step-00000004/optimizer.safetensors" "$s8/"
expect_error "a file copied from another step" \
	"$s8/optimizer.safetensors: its checksum does not match the manifest's: damaged checkpoint" \
	-c "$tiny" --set run.steps=8 --resume "$s8"
# --resume DIR passes over the damaged newest, loudly, and sets it aside
if ph --resume "$tmp/m" --save-weights "$tmp/fb.st" >"$tmp/out" 2>"$tmp/err" &&
	[ "$(wc -l <"$tmp/err")" -eq 1 ] &&
	grep -q "^pipehost: WARNING: checkpoint $s8 is damaged: $s8/optimizer.safetensors: its checksum does not match the manifest's: damaged checkpoint (changed after it was written); resuming from the previous verified checkpoint $tmp/m/step-00000004; the damaged one is kept as $tmp/m/damaged-step-00000008$" "$tmp/err" &&
	grep -q "^resumed from $tmp/m/step-00000004 at step 4 of 8$" "$tmp/out" && cmp -s "$tmp/ref.st" "$tmp/fb.st" &&
	[ -d "$tmp/m/damaged-step-00000008" ] && [ -d "$s8" ]; then
	ok "--resume DIR with a damaged newest: $(cat "$tmp/err" | cut -c1-80)...; ends byte-identical"
else
	not_ok "fallback: $(cat "$tmp/err") $(grep resumed "$tmp/out") $(ls "$tmp/m" | tr '\n' ' ')"
fi
rm -rf "$tmp/m" && cp -r "$tmp/m0" "$tmp/m"
echo '{"format":"pipehost-checkpoint",' >"$s8/state.json"
if ph --resume "$tmp/m" >"$tmp/out" 2>"$tmp/err" &&
	grep -q "^pipehost: WARNING: checkpoint $s8 is damaged: $s8/state.json: not valid JSON (error near byte [0-9]* of 33): corrupt checkpoint; resuming from the previous verified checkpoint $tmp/m/step-00000004" "$tmp/err"; then
	ok "a corrupt state.json in the newest step: said, not passed over silently"
else
	not_ok "corrupt state.json: $(cat "$tmp/err")"
fi
rm -rf "$tmp/m" && cp -r "$tmp/m0" "$tmp/m"
rm "$s8/manifest.txt"
if ph --resume "$s8" >"$tmp/out" 2>"$tmp/err" &&
	grep -q "^pipehost: warning: $s8 has no manifest.txt (written by an older pipehost?): its files cannot be verified$" "$tmp/err"; then
	ok "a step without manifest.txt (an older pipehost's) loads, with a warning"
else
	not_ok "no manifest: $(cat "$tmp/err")"
fi
rm -rf "$tmp/m" && cp -r "$tmp/m0" "$tmp/m"
sed -i 's/^step 8$/step 9/' "$s8/manifest.txt"
expect_error "a manifest edited by hand" "$s8/manifest.txt: its checksum does not match its contents: damaged checkpoint" \
	-c "$tiny" --set run.steps=8 --resume "$s8"

# --- 5. divergence --------------------------------------------------------
# eps = 0: a gradient of exactly 0 (a dead ReLU's) updates by 0/0
expect_error "eps = 0: the loss is NaN at step 2" \
	"step 2: the loss is NaN: training diverged and stopped; no checkpoint or weights written; lower \[optimizer\] lr or check beta2/eps" \
	-c "$tiny" --set run.steps=8 --set optimizer.eps=0 --save-weights "$tmp/nan.st"
[ ! -e "$tmp/nan.st" ] && ok "... and no weights file" || not_ok "NaN weights written to $tmp/nan.st"
# lr 1, weight decay 3: finite for 33 steps, then the optimizer state overflows
"$PIPEHOST" -c "$tiny" --set run.steps=40 --set optimizer.lr=1 --set optimizer.weight_decay=3 \
	--set optimizer.lr_schedule=constant --set optimizer.warmup=0 --set "checkpoint.dir=$tmp/div" \
	--set checkpoint.every=1 --set checkpoint.keep=2 >"$tmp/out" 2>"$tmp/err"
rc=$?
newest=$(ls "$tmp/div" | tail -1)
finite=yes
for s in "$tmp/div"/step-*; do
	od -An -tf4 "$s/weights.safetensors" "$s/optimizer.safetensors" | grep -qi "nan\|inf" && finite=no
done
if [ "$rc" -ne 0 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && [ "$finite" = yes ] && [ -n "$newest" ] &&
	grep -Eq "^pipehost: step ([0-9]+): [a-z0-9._]+ holds (NaN|an infinity) at element [0-9]+: training diverged; checkpoint not written, older ones kept" "$tmp/err"; then
	ok "a run diverging at $(sed -n 's/^pipehost: step \([0-9]*\):.*/\1/p' "$tmp/err"): exit 1, $newest and the one before kept, all finite"
else
	not_ok "divergence: exit $rc, finite=$finite, $(ls "$tmp/div" | tr '\n' ' ') $(cat "$tmp/err")"
fi

# --- 6. metrics write errors ----------------------------------------------
if [ -c /dev/full ]; then
	ph --set run.metrics=/dev/full --save-weights "$tmp/mf.st" >"$tmp/out" 2>"$tmp/err"
	rc=$?
	if [ "$rc" -ne 0 ] && grep -q "^trained 8 steps" "$tmp/out" && cmp -s "$tmp/ref.st" "$tmp/mf.st" &&
		[ "$(grep -c "^pipehost: metrics file /dev/full: write failed: No space left on device; training goes on without metrics, the exit status will be 1$" "$tmp/err")" -eq 1 ]; then
		ok "metrics to /dev/full: one line, training goes on, weights written, exit 1"
	else
		not_ok "metrics /dev/full: exit $rc, $(cat "$tmp/err")"
	fi
fi

# the stdio outputs said "I/O error" here: stdio had dropped the errno of
# the write that failed
if [ -c /dev/full ]; then
	expect_error "--simulate --trace /dev/full: the cause named" \
		"^pipehost: --trace /dev/full: writing failed: No space left on device$" -c "$tiny" --simulate --trace /dev/full
	expect_error "--simulate --svg /dev/full: the cause named" \
		"^pipehost: --svg /dev/full: writing failed: No space left on device$" -c "$tiny" --simulate --svg /dev/full
	expect_error "--plan-json /dev/full: the cause named" \
		"^pipehost: --plan-json /dev/full: writing failed: No space left on device$" -c "$tiny" --plan --plan-json /dev/full
fi

# --- "-" is standard output for --plan-json alone ------------------------
# --save-weights - wrote a file named "-"; a binary or a second stream
# beside the progress lines on stdout would be no better
here=$(pwd)
cd "$tmp" || exit 1
expect_error "--save-weights -" \
	"^pipehost: --save-weights -: only --plan-json writes to standard output; give a file name \(\./- for a file named -\)$" \
	-c "$tiny" --set run.steps=8 --save-weights -
expect_error "[run] metrics = -" "^pipehost: \[run\] metrics -: only --plan-json writes to standard output" \
	-c "$tiny" --set run.steps=8 --set run.metrics=-
expect_error "--simulate --svg -" "^pipehost: --svg -: only --plan-json writes to standard output" \
	-c "$tiny" --simulate --svg -
[ ! -e "$tmp/-" ] && ok "... and no file named - written" || not_ok "a file named - was written"
# a value the option cannot take: exit 2, as every bad command line; the
# same in the INI is a config's error: 1 (the reference's rule; 2026-12-07)
for c in "2 --save-weights -" "2 --trace -" "2 --simulate --svg -" "1 --set run.metrics=-"; do
	want=${c%% *}
	# shellcheck disable=SC2086 # the options are words
	"$PIPEHOST" -c "$tiny" --set run.steps=2 ${c#* } >/dev/null 2>"$tmp/err"
	rc=$?
	[ "$rc" -eq "$want" ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && ok "${c#* }: exit $rc" ||
		not_ok "${c#* }: exit $rc (want $want): $(head -c 300 "$tmp/err")"
done
"$PIPEHOST" -c "$tiny" --set run.steps=2 --save-weights ./- >/dev/null 2>"$tmp/err" && [ -s "$tmp/-" ] &&
	ok "--save-weights ./-: a file named -, as asked" || not_ok "--save-weights ./-: $(cat "$tmp/err")"
cd "$here" || exit 1

# --- an output named like the checkpoint dir -----------------------------
# refused before step 1, and the directory not made for nothing
refused_early "--save-weights named like [checkpoint] dir" \
	"^pipehost: --save-weights $tmp/ckname is also \[checkpoint\] dir, where this run writes its checkpoints; give the --save-weights a file name of its own$" \
	-c "$tiny" --set run.steps=8 --set "checkpoint.dir=$tmp/ckname" --save-weights "$tmp/ckname"
refused_early "[run] metrics named like [checkpoint] dir/" \
	"^pipehost: \[run\] metrics $tmp/ckname is also \[checkpoint\] dir" \
	-c "$tiny" --set run.steps=8 --set "checkpoint.dir=$tmp/ckname/" --set "run.metrics=$tmp/ckname"
[ ! -e "$tmp/ckname" ] && ok "... and no directory $tmp/ckname made" || not_ok "$tmp/ckname made by a refused run"
(cd "$tmp" && "$PIPEHOST" -c "$tiny" --set run.steps=8 --set checkpoint.dir=trc --trace "$tmp/trc") >"$tmp/out" 2>"$tmp/err"
if [ $? -eq 1 ] && grep -q "^pipehost: --trace $tmp/trc is also \[checkpoint\] dir" "$tmp/err" && [ ! -e "$tmp/trc" ]; then
	ok "--trace given as an absolute path, the checkpoint dir as a relative one: the same place, refused"
else
	not_ok "--trace as the checkpoint dir: $(cat "$tmp/err")"
fi

# --- a resume of a finished run tells the truth ---------------------------
ph --set "checkpoint.dir=$tmp/done" >/dev/null 2>&1
if ph --resume "$tmp/done" >"$tmp/out" 2>"$tmp/err" &&
	grep -q "^trained no step (the run of 8 steps was complete); no loss to report$" "$tmp/out" &&
	! grep -q "final loss" "$tmp/out"; then
	ok "resuming a finished run: 'trained no step ...; no loss to report'"
else
	not_ok "finished run: $(grep trained "$tmp/out") $(cat "$tmp/err")"
fi
# --- every layer's figure reaches the progress line -------------------------
# Six MoE blocks report three figures each: about 1,000 bytes of figures,
# which a fixed 512-byte buffer once cut short without a word.
{
	sed -n '/^\[run\]/,/^\[layer block0\]/p' "$fixtures/moe-lm.ini" | sed '$d'
	for i in 0 1 2 3 4 5; do
		printf '[layer a_block_with_a_rather_long_name_%s]\ntype = gpt_block\nheads = 2\nmlp = moe\n' "$i"
		printf 'moe_experts = 2\nmoe_top_k = 1\nmoe_hidden = 8\n'
	done
	printf '[layer lnf]\ntype = layernorm\n[layer head]\ntype = linear\nunits = 256\n[layer loss]\ntype = seq_xent\n'
} >"$tmp/moe6.ini"
if "$PIPEHOST" -c "$tmp/moe6.ini" --set run.steps=2 --set run.log_every=1 --progress=lines >"$tmp/out" 2>"$tmp/err"; then
	line=$(grep "^epoch 1/1 step 2/2 " "$tmp/out")
	have=0
	for i in 0 1 2 3 4 5; do
		for k in aux_loss load_max_over_mean drop_frac; do
			case $line in *" a_block_with_a_rather_long_name_$i.$k "*) have=$((have + 1)) ;; esac
		done
	done
	case $line in *" ETA "*) ;; *) have=0 ;; esac
	if [ "$have" = 18 ]; then
		ok "progress line with 18 layer figures (${#line} bytes): every figure, then the ETA"
	else
		not_ok "progress line has $have of 18 figures: $line"
	fi
else
	not_ok "six MoE blocks: $(cat "$tmp/err")"
fi
finish
