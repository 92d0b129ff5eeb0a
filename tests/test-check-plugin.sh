#!/bin/sh
# SPDX-License-Identifier: MIT
# pipehost --check-plugin: every shipped plugin passes it; a layer with a
# wrong backward, one whose meta disagrees with its forward, a schedule that
# deadlocks, a partitioner writing past its bounds and a layer that crashes
# each fail, naming the check (and for a crash the hook); a bad request is
# one line and nothing checked.
. "$top_srcdir/tests/lib.sh"

# check_fails DESC PLUGIN REGEX: non-zero exit, a FAIL line matching REGEX,
# and one line on stderr naming the file
check_fails() {
	"$PIPEHOST" --check-plugin "$2" >"$tmp/out" 2>"$tmp/err"
	rc=$?
	if [ "$rc" -ne 0 ] && grep -Eq -- "$3" "$tmp/out" && [ "$(wc -l <"$tmp/err")" -eq 1 ] &&
		grep -q "checks failed" "$tmp/err"; then
		ok "$1: $(grep -E -- "$3" "$tmp/out" | head -1 | cut -c1-200)"
	else
		not_ok "$1: exit $rc; $(grep '^FAIL' "$tmp/out" | head -3) stderr: $(cat "$tmp/err")"
	fi
}

# Every shipped plugin.  The options that have no default and that the
# checker cannot choose (a file, a list, a regex) are given: a table of
# one of the fixtures' shapes, bounds for 8 layers in 2 stages, the blocks.
n_shipped=0
for so in "$top_builddir"/plugins/*/.libs/*.so; do
	[ -e "$so" ] || continue
	n_shipped=$((n_shipped + 1))
	name=$(basename "$so" .so)
	set --
	case $name in
	table) set -- --set "table.file=$fixtures/schedules/1f1b-p2-m4.csv" ;;
	explicit) set -- --set explicit.bounds=0,4 ;;
	type) set -- --set type.regex=gpt_block ;;
	# the checker's objective is sum(y r); moe's auxiliary loss adds a term
	# of its own (tests/test-moe checks that one)
	moe) set -- --set moe.aux_coef=0 ;;
	esac
	if "$PIPEHOST" --check-plugin "$so" "$@" >"$tmp/out" 2>"$tmp/err" && ! grep -q '^FAIL' "$tmp/out"; then
		ok "$name: $(tail -1 "$tmp/out")"
	else
		not_ok "$name: $(grep '^FAIL' "$tmp/out" | head -3) $(cat "$tmp/err")"
	fi
done
if [ "$n_shipped" -ge 20 ]; then ok "$n_shipped shipped plugins checked"; else not_ok "only $n_shipped plugins under plugins/*/.libs"; fi

# What a pass checks, on one layer: one line per check, all of them there.
"$PIPEHOST" --check-plugin "$top_builddir/plugins/layers/.libs/linear.so" >"$tmp/linear" 2>&1
for check in "abi and descriptor" "layer linear: options" "layer linear: create" \
	"layer linear: meta matches forward and backward \(batch 1\)" \
	"layer linear: meta matches forward and backward \(batch 4\)" "layer linear: determinism" \
	"layer linear: split backward" "layer linear: gradients \(batch 1\)" "layer linear: gradients \(batch 4\)"; do
	if grep -Eq "^PASS $check" "$tmp/linear"; then ok "linear: PASS $check"; else not_ok "linear: no PASS $check: $(cat "$tmp/linear")"; fi
done

# The broken plugins, each failing the check that sees its bug.
check_fails "wrong backward" "$TEST_PLUGIN_DIR/check-bad-backward.so" \
	"^FAIL layer check_bad_backward: gradients \(batch 1\): check_bad_backward: dweight\[0\] analytic"
check_fails "meta disagrees with forward" "$TEST_PLUGIN_DIR/check-bad-meta.so" \
	"^FAIL layer check_bad_meta: meta matches forward and backward \(batch 1\): check_bad_meta forward wrote past y"
check_fails "a false PH_LAYER_DX_OVER_X" "$TEST_PLUGIN_DIR/check-bad-in-place.so" \
	"^FAIL layer check_bad_over_x: in place \(batch [0-9]+\): check_bad_over_x: backward with dx = x .* gives another dx"
check_fails "a false PH_LAYER_BACKWARD_NO_Y" "$TEST_PLUGIN_DIR/check-bad-in-place.so" \
	"^FAIL layer check_bad_no_y: in place \(batch [0-9]+\): check_bad_no_y: backward with y all NaN .* gives another dx"
# the shipped claims: the GPT loss writes over the logits, linear never reads y
for pair in "seq_xent:with dx = x" "linear:with y all NaN"; do
	"$PIPEHOST" --check-plugin "$top_builddir/plugins/layers/.libs/${pair%%:*}.so" >"$tmp/out" 2>&1
	if grep -q "^PASS layer ${pair%%:*}: in place (batch [0-9]*): backward's bits ${pair#*:}" "$tmp/out"; then
		ok "${pair%%:*}: $(grep "in place" "$tmp/out")"
	else
		not_ok "${pair%%:*}: no PASS in place: $(grep "in place" "$tmp/out")"
	fi
done
check_fails "deadlocking schedule" "$TEST_PLUGIN_DIR/check-deadlock.so" \
	"^FAIL schedule check_deadlock: p=2 v=1 m=4: schedule deadlocks"
if grep -q "^PASS schedule check_deadlock: p=1 v=1 m=4" "$tmp/out"; then
	ok "the deadlocking schedule passes where it is valid (1 rank)"
else
	not_ok "check_deadlock on 1 rank: $(cat "$tmp/out")"
fi
# A crash: a FAIL of the check under way naming the hook that crashed
# (under ASan, whose handler ends the process and prints its report,
# "ended the process"), then the count.
# check_crash DESC PLUGIN CHECK HOOK: a FAIL of CHECK (a regex) naming HOOK
check_crash() {
	"$PIPEHOST" --check-plugin "$2" >"$tmp/out" 2>"$tmp/err"
	rc=$?
	if [ "$rc" -ne 0 ] && grep -Eq "^FAIL $3: the plugin's $4 (crashed \(signal 11|ended the process)" "$tmp/out" &&
		grep -q "^[0-9]* check(s): .* 1 failed" "$tmp/out" && grep -q "checks failed" "$tmp/err"; then
		ok "$1: $(grep '^FAIL' "$tmp/out")"
	else
		not_ok "$1: exit $rc; $(cat "$tmp/out") stderr: $(tail -2 "$tmp/err")"
	fi
}
check_crash "a layer that crashes in forward" "$TEST_PLUGIN_DIR/check-crash.so" "layer check_crash: create" forward
check_crash "a backward writing through dx = NULL" "$TEST_PLUGIN_DIR/check-dx-null.so" \
	"layer check_dx_null: determinism \(batch 4\)" "backward \(dx = NULL\)"
# A partitioner writing past first[stages] is named for it (the checker's
# array has a guard zone), and a refusal without a message says so.
check_fails "a partitioner writing past first[K]" "$TEST_PLUGIN_DIR/check-bad-partition.so" \
	"^FAIL partitioner check_past_bounds: 8 equal layers into 2 stages: partition wrote past first\[2\] \(the array has K \+ 1 = 3 entries for K = 2 stages; it wrote first\[3\]\)$"
if grep -q "^SKIP partitioner check_silent: 4 layers into 4 stages: refused: (it gave no reason; a bug in the plugin)$" "$tmp/out"; then
	ok "a partitioner refusing without a reason: $(grep '^SKIP partitioner check_silent' "$tmp/out" | head -1)"
else
	not_ok "a partitioner refusing without a reason: $(grep 'check_silent' "$tmp/out")"
fi
# ... and a run: one line naming the partitioner, not free()'s SIGABRT
# or "partitioner check_silent: " and nothing
mkdir -p "$tmp/bp" && cp "$TEST_PLUGIN_DIR/check-bad-partition.so" "$tmp/bp/"
expect_error "a run with a partitioner writing past first[K]" \
	"^pipehost: partitioner check_past_bounds wrote past first\[2\] \(the bounds array has K \+ 1 = 3 entries for K = 2 stages; it wrote first\[3\]\); fix the plugin$" \
	-c "$fixtures/tiny.ini" --plugin-dir "$tmp/bp" --set partition.type=check_past_bounds --plan
expect_error "a run with a partitioner refusing without a reason" \
	"^pipehost: --set: partitioner check_silent: it refused without saying why; a bug in the plugin$" \
	-c "$fixtures/tiny.ini" --plugin-dir "$tmp/bp" --set partition.type=check_silent --set run.stages=3 --plan
# A plugin that crashes or exits while it is opened: a FAIL of loading it
# and the count line, exit 1 (the loader's guard alone would end
# pipehost with the signal, exit 139). Under ASan a SEGV ends the child
# with ASan's exit status instead of the signal.  One line on stderr: the
# loader's own line from the child is not printed besides the FAIL.
"$PIPEHOST" --check-plugin "$TEST_PLUGIN_DIR/wild_descriptor.so" >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ "$rc" -eq 1 ] &&
	grep -Eq "^FAIL abi and descriptor: .*wild_descriptor.so (crashed while being loaded \(signal 11, .*\): a constructor or its descriptor function is broken|ended the process while being loaded)" "$tmp/out" &&
	grep -q "^1 check(s): 0 passed, 1 failed, 0 skipped$" "$tmp/out" && grep -q "checks failed" "$tmp/err" &&
	[ "$(wc -l <"$tmp/err")" -eq 1 ]; then
	ok "a descriptor that crashes when read: exit 1; $(grep '^FAIL' "$tmp/out" | cut -c1-150)"
else
	not_ok "a descriptor that crashes when read: exit $rc; $(cat "$tmp/out") stderr: $(tail -2 "$tmp/err")"
fi
PH_TEST_CTOR_EXIT=1 "$PIPEHOST" --check-plugin "$TEST_PLUGIN_DIR/check-ctor-exit.so" >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ "$rc" -eq 1 ] &&
	grep -q "^FAIL abi and descriptor: .*check-ctor-exit.so ended the process while being loaded (exit status 3): a constructor calls exit" "$tmp/out" &&
	grep -q "^1 check(s): 0 passed, 1 failed, 0 skipped$" "$tmp/out"; then
	ok "a constructor that exits: exit 1; $(grep '^FAIL' "$tmp/out" | cut -c1-150)"
else
	not_ok "a constructor that exits: exit $rc; $(cat "$tmp/out") stderr: $(tail -2 "$tmp/err")"
fi
# The same plugin without the variable passes: the trial load leaves no trace.
if "$PIPEHOST" --check-plugin "$TEST_PLUGIN_DIR/check-ctor-exit.so" >"$tmp/out" 2>"$tmp/err" &&
	grep -q "^PASS abi and descriptor" "$tmp/out" && ! grep -q "^FAIL" "$tmp/out"; then
	ok "the same plugin, its constructor harmless: $(tail -1 "$tmp/out")"
else
	not_ok "check-ctor-exit.so unset: $(cat "$tmp/out") stderr: $(tail -2 "$tmp/err")"
fi
# What a constructor says on stderr before it crashes is in the FAIL line,
# and stderr is the one line.
PH_TEST_CTOR_CRASH=1 "$PIPEHOST" --check-plugin "$TEST_PLUGIN_DIR/check-ctor-stderr.so" >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ "$rc" -eq 1 ] &&
	grep -Eq "^FAIL abi and descriptor: .*check-ctor-stderr.so (crashed|ended the process) while being loaded .*\(on stderr: \"check_ctor_stderr: no licence file" "$tmp/out" &&
	[ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -q "checks failed" "$tmp/err"; then
	ok "a constructor that complains, then crashes: $(grep '^FAIL' "$tmp/out" | cut -c1-220)"
else
	not_ok "a constructor that complains, then crashes: exit $rc; $(cat "$tmp/out") stderr: $(cat "$tmp/err")"
fi
# The CUDA twin check (core/check_twin.c): where the build has the twin and
# a GPU (the emulator's counts), fp32 and bf16 pass, and each bug
# $PH_TEST_BAD_TWIN picks is a FAIL naming it; elsewhere one SKIP says why.
twin="$TEST_PLUGIN_DIR/check-twin.so"
"$PIPEHOST" --check-plugin "$twin" >"$tmp/out" 2>&1
twin_rc=$?
if ! "$PIPEHOST" --version | grep -q "backends: [^;]*cuda"; then
	if [ "$twin_rc" -eq 0 ] && grep -q "^SKIP layer check_twin: cuda twin: the layer has no CUDA twin (devices: cpu)$" "$tmp/out"; then
		ok "a build without CUDA: the twin check is one SKIP line"
	else
		not_ok "twin check without CUDA: exit $twin_rc; $(grep "cuda twin" "$tmp/out")"
	fi
elif [ -z "${PH_CUEMU:-}" ] && ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
	if [ "$twin_rc" -eq 0 ] && grep -q "^SKIP layer check_twin: cuda twin: no GPU to run it on: " "$tmp/out"; then
		ok "a CUDA build without a GPU: $(grep "cuda twin" "$tmp/out")"
	else
		not_ok "twin check without a GPU: exit $twin_rc; $(grep "cuda twin" "$tmp/out")"
	fi
else
	if [ "$twin_rc" -eq 0 ] && grep -q "^PASS layer check_twin: cuda twin (fp32, batch 4): y, dx and 1 parameter gradient(s) within fp32's bounds" "$tmp/out" &&
		grep -q "^PASS layer check_twin: cuda twin (bf16, batch 4): .* the same bits twice, x and parameters untouched, nothing written past a buffer$" "$tmp/out"; then
		ok "a right twin passes on the GPU: $(grep "cuda twin (fp32" "$tmp/out" | cut -c1-160)"
	else
		not_ok "a right twin: exit $twin_rc; $(grep -i "cuda twin\|FAIL" "$tmp/out")"
	fi
	# a twin that exchanges through its replica group (ABI 1.5) gets a
	# group of one on the GPU, as the engine gives it
	"$PIPEHOST" --check-plugin "$TEST_PLUGIN_DIR/ep-linear.so" >"$tmp/out" 2>&1
	if [ $? -eq 0 ] && grep -q "^PASS layer ep_linear: cuda twin (fp32, batch 4): " "$tmp/out"; then
		ok "a twin using its group (ep_linear) passes"
	else
		not_ok "ep_linear's twin: $(grep -i "cuda twin\|FAIL" "$tmp/out")"
	fi
	PH_TEST_BAD_TWIN=scale "$PIPEHOST" --check-plugin "$twin" >"$tmp/out" 2>&1
	if [ $? -eq 1 ] && grep -q "^FAIL layer check_twin: cuda twin (fp32, batch 4): check_twin's CUDA twin (fp32): y\[0\] is .*, the CPU's .*; the twin computes something else$" "$tmp/out" &&
		grep -q "^FAIL layer check_twin: cuda twin (bf16, batch 4): " "$tmp/out"; then
		ok "a twin 10% off fails: $(grep "^FAIL.*fp32" "$tmp/out" | cut -c1-170)"
	else
		not_ok "a twin 10% off: $(grep -i "cuda twin" "$tmp/out")"
	fi
	PH_TEST_BAD_TWIN=past "$PIPEHOST" --check-plugin "$twin" >"$tmp/out" 2>&1
	if [ $? -eq 1 ] && grep -q "^FAIL layer check_twin: cuda twin (fp32, batch 4): check_twin's CUDA forward wrote past y (byte 0 after its 512); the host gives exactly" "$tmp/out"; then
		ok "a twin writing past y fails: $(grep "^FAIL.*fp32" "$tmp/out" | cut -c1-170)"
	else
		not_ok "a twin writing past y: $(grep -i "cuda twin" "$tmp/out")"
	fi
fi
check_fails "not a plugin" "$TEST_PLUGIN_DIR/not_a_plugin.so" "^FAIL abi and descriptor: .*exports no pipehost_plugin symbol"
check_fails "a required string option not given" "$top_builddir/plugins/schedules/.libs/table.so" \
	"^FAIL schedule table: options: file is required and has no default; give one with --set table.file=VALUE"

# --shape: the layer is checked on that input.
if "$PIPEHOST" --check-plugin "$top_builddir/plugins/layers/.libs/relu.so" --shape 3x5 --batch 2 >"$tmp/out" 2>&1 &&
	grep -q "^PASS layer relu: create: input 3x5 of reals U(-1, 1), batches 1 and 2" "$tmp/out" &&
	grep -q "^PASS layer relu: gradients (batch 2)" "$tmp/out"; then
	ok "--shape 3x5 --batch 2"
else
	not_ok "--shape 3x5 --batch 2: $(cat "$tmp/out")"
fi
# A large --shape: the gradients are checked at a sample of each tensor,
# evenly spread, not at every element (one forward each: hours at 64k).
if "$PIPEHOST" --check-plugin "$top_builddir/plugins/layers/.libs/linear.so" --shape 3000 >"$tmp/out" 2>&1 &&
	grep -Eq "^PASS layer linear: gradients \(batch 1\): dx and 2 parameter tensor\(s\), [0-9]+ of [0-9]+ values \(evenly spread\)" "$tmp/out"; then
	ok "--shape 3000: gradients at an even sample ($(grep -o "[0-9]* of [0-9]* values" "$tmp/out" | head -1))"
else
	not_ok "--shape 3000: $(grep -v ^PASS "$tmp/out" | head -5)"
fi
# A shape the layer refuses is a FAIL naming --shape.
conv2d="$top_builddir/plugins/layers/.libs/conv2d.so"
if "$PIPEHOST" --check-plugin "$conv2d" --shape 8 >"$tmp/out" 2>&1; then
	not_ok "conv2d --shape 8 passed"
elif grep -q "^FAIL layer conv2d: create: refused every input tried (8: conv2d.*); give one it accepts with --shape" "$tmp/out"; then
	ok "a --shape the layer refuses: $(grep "^FAIL" "$tmp/out" | cut -c1-160)"
else
	not_ok "conv2d --shape 8: $(cat "$tmp/out")"
fi

# Bad requests: one line, nothing checked.
linear="$top_builddir/plugins/layers/.libs/linear.so"
expect_error "no such file" "^pipehost: --check-plugin $tmp/nope.so: No such file or directory$" --check-plugin "$tmp/nope.so"
expect_error "--set for another plugin" "^pipehost: --set relu.units=2: .*linear.so provides no plugin named relu$" \
	--check-plugin "$linear" --set relu.units=2
expect_error "--set of no such option" "^pipehost: --set linear.unit=2: layer linear has no option unit" \
	--check-plugin "$linear" --set linear.unit=2
expect_error "bad --shape" "^pipehost: --shape 4xx8: expected 1 to 4 sizes" --check-plugin "$linear" --shape 4xx8
expect_error "--shape with a space" "^pipehost: --shape  4x8: expected 1 to 4 sizes" --check-plugin "$linear" --shape " 4x8"
expect_error "--shape with a sign" "^pipehost: --shape 4x[+]8: expected 1 to 4 sizes" --check-plugin "$linear" --shape 4x+8
expect_error "--shape without --check-plugin" "^pipehost: --shape is for --check-plugin FILE.so only$" -c "$fixtures/tiny.ini" --shape 4
expect_error "bad --batch" "^pipehost: --batch 0: give a number of samples from 1 to 4096$" --check-plugin "$linear" --batch 0
expect_error "--shape ending with x" "^pipehost: --shape 4x ends with x; give the last size$" --check-plugin "$linear" --shape 4x
expect_error "an empty --shape" "^pipehost: --shape is empty; give sizes joined by x, e\.g\. 4x8$" --check-plugin "$linear" --shape ""
expect_error "--check-plugin a directory" "^pipehost: --check-plugin $tmp: not a file; give the plugin's \.so$" --check-plugin "$tmp"
expect_error "--check-plugin with a config" "^pipehost: --check-plugin runs alone: drop -c$" \
	--check-plugin "$linear" -c "$fixtures/tiny.ini"
finish
