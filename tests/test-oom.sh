#!/bin/sh
# SPDX-License-Identifier: MIT
# Out of memory at every allocation in turn (the LD_PRELOAD shim
# tests/oomshim.c fails the Nth malloc, calloc, realloc, ... made by
# pipehost or its plugins): each time the run either ends as the run
# without the failure does (the same weights, byte for byte) or says so in
# one stderr line naming memory and exits 1; never a crash, never a run that
# goes on with less (a config without its last sections, a checkpoint set
# aside as damaged).  The line says what to do (main adds it, and what the
# run was doing, where the place that ran out knew no more). docs/changes.md lists what an audit found this way.
. "$top_srcdir/tests/lib.sh"
tiny="$fixtures/tiny.ini"

if [ -n "${ASAN_OPTIONS:-}" ]; then
	# a malloc interposed in front of ASan's own: nothing left to check
	echo "SKIP: under ASan (its allocator is the one checked there)"
	exit 77
fi
preload_shim oomshim || exit 77

# sweep NAME REF CMD...: CMD under the shim with the Nth allocation failing,
# for every N the run makes, or the first $upto, or every $step-th of them
# (PH_OOM_* from the caller's environment too);
# REF: the weights file the run without a failure writes (compared where a
# trial exits 0), or - for none.  Counts the bad trials; says each kind once.
sweep() {
	name=$1 ref=$2
	shift 2
	rm -f "$tmp/count"
	PH_OOM_COUNT="$tmp/count" LD_PRELOAD="$shim" "$@" >/dev/null 2>"$tmp/err"
	calls=$(cat "$tmp/count" 2>/dev/null || echo 0)
	[ -z "${upto:-}" ] || [ "$calls" -le "$upto" ] || calls=$upto
	bad=0 fails=0 first=
	i=1
	while [ "$i" -le "$calls" ]; do
		rm -f "$tmp/w.st"
		PH_OOM_N=$i LD_PRELOAD="$shim" "$@" >"$tmp/out" 2>"$tmp/err"
		rc=$?
		why=
		if [ $rc -eq 0 ]; then
			if [ "$ref" != - ] && ! cmp -s "$ref" "$tmp/w.st"; then
				why="exit 0 with other weights"
			elif [ -s "$tmp/err" ] && ! grep -q "warning" "$tmp/err"; then
				why="exit 0 with stderr: $(head -c 200 "$tmp/err")"
			fi
		else
			fails=$((fails + 1))
			if [ $rc -ne 1 ]; then
				why="exit $rc: $(head -c 200 "$tmp/err")"
			elif [ "$(grep -vc "warning" "$tmp/err")" -ne 1 ] || ! grep -q "memory.*; " "$tmp/err"; then
				why="not one line about memory, with what to do: $(head -c 300 "$tmp/err")"
			elif grep -q -i -E "damaged|reinstall|corrupt|set aside" "$tmp/err"; then
				why="out of memory blamed on a file: $(head -c 300 "$tmp/err")"
			fi
		fi
		if [ -z "$why" ] && [ -n "${aside_dir:-}" ] && ls "$aside_dir" | grep -q damaged; then
			why="a checkpoint set aside: $(ls "$aside_dir" | tr '\n' ' ')"
		fi
		if [ -n "$why" ]; then
			bad=$((bad + 1))
			[ -n "$first" ] || first="N=$i: $why"
		fi
		[ -z "${reset:-}" ] || eval "$reset"
		i=$((i + ${step:-1}))
	done
	tried=$(((calls + ${step:-1} - 1) / ${step:-1}))
	if [ "$calls" -gt 20 ] && [ "$bad" = 0 ]; then
		ok "$name: ${step:+one in $step of }${upto:+the first }$calls allocations failed in turn: $fails said out of memory in one line, exit 1; $((tried - fails)) ended as the run without it"
	else
		not_ok "$name: $calls allocations, $bad bad trial(s); the first $first"
	fi
}

app="$top_builddir/"
# training, 2bw (its stream of steps) with recompute, every output written
"$PIPEHOST" -c "$tiny" --set run.steps=2 --set schedule.type=2bw --set run.recompute=yes --set run.threads=1 \
	--progress=none --save-weights "$tmp/ref.st" >/dev/null 2>"$tmp/err" || not_ok "reference run: $(cat "$tmp/err")"
PH_OOM_APP=$app sweep "a 2bw run with recompute" "$tmp/ref.st" "$PIPEHOST" -c "$tiny" --set run.steps=2 \
	--set schedule.type=2bw --set run.recompute=yes --set run.threads=1 --progress=none --save-weights "$tmp/w.st"

# a resume: the load of the newest step out of memory (the first 250
# allocations from its first file on, libcjson's included) is no damage:
# nothing is set aside, the run says so
"$PIPEHOST" -c "$tiny" --set run.steps=6 --set run.threads=1 --set checkpoint.dir="$tmp/ck0" --set checkpoint.every=2 \
	--set checkpoint.keep=3 --progress=none --save-weights "$tmp/ref6.st" >/dev/null 2>"$tmp/err" ||
	not_ok "checkpointed run: $(cat "$tmp/err")"
rm -rf "$tmp/ck0/step-00000006"
cp -r "$tmp/ck0" "$tmp/ck"
aside_dir="$tmp/ck" reset='rm -rf "$tmp/ck"; cp -r "$tmp/ck0" "$tmp/ck"' upto=250 PH_OOM_AFTER=step-00000004 \
	PH_OOM_APP="$app:libcjson" \
	sweep "a resume from step 4, out of memory reading it" "$tmp/ref6.st" "$PIPEHOST" -c "$tiny" --set run.steps=6 \
	--set run.threads=1 --set checkpoint.dir="$tmp/ck" --set checkpoint.every=2 --set checkpoint.keep=3 \
	--progress=none --resume "$tmp/ck" --save-weights "$tmp/w.st"

# --generate from saved weights (one allocation in 5: the model's load,
# the prompt, the sampler, the logits file)
lm="$fixtures/tiny-lm.ini"
head -c 4000 "$top_srcdir/README.md" >"$tmp/text.txt"
"$PIPEHOST" -c "$lm" --set "data.path=$tmp/text.txt" --set run.steps=1 --progress=none --save-weights "$tmp/lm.st" \
	>/dev/null 2>"$tmp/err" || not_ok "language model run: $(cat "$tmp/err")"
PH_OOM_APP=$app step=5 sweep "--generate" - "$PIPEHOST" -c "$lm" --set "data.path=$tmp/text.txt" \
	--load-weights "$tmp/lm.st" --generate "Hello" --max-new-tokens 3 --logits "$tmp/lg.st"

# Fashion-MNIST's gzip files: zlib's allocations count too (its inflate
# state comes at the first read, and once said "the file is damaged")
mkdir -p "$tmp/fm"
for s in train t10k; do
	printf '\000\000\010\001\000\000\000\003\001\002\003' | gzip -c >"$tmp/fm/$s-labels-idx1-ubyte.gz"
	{ printf '\000\000\010\003\000\000\000\003\000\000\000\034\000\000\000\034'; head -c 2352 /dev/zero; } |
		gzip -c >"$tmp/fm/$s-images-idx3-ubyte.gz"
done
fmrun() { "$PIPEHOST" -c "$tiny" --set data.source=fashion-mnist --set "data.path=$tmp/fm" --set run.batch=2 \
	--set run.micro_batches=1 --set run.steps=1 --progress=none --save-weights "$1"; }
fmrun "$tmp/fm.st" >/dev/null 2>"$tmp/err" || not_ok "fashion-mnist run: $(cat "$tmp/err")"
PH_OOM_APP="$app:libz" PH_OOM_AFTER=idx sweep "fashion-mnist's files" "$tmp/fm.st" fmrun "$tmp/w.st"

# --check-plugin: an allocation that fails, in the checker or in the
# plugin, in the parent or in a check's child, says nothing about the
# plugin: that check is a SKIP "not judged, out of memory", never a FAIL,
# and the whole check ends out of memory (exit 1, one line)
bad=0 first= oom=0 tried=0
for k in 1 2 3 4 5 6 8 12 20 30 45 60 80 120 160 240 320 480 640; do
	for so in layers/.libs/layernorm.so partitioners/.libs/dp.so schedules/.libs/onef1b.so; do
		tried=$((tried + 1))
		PH_OOM_APP=$app PH_OOM_N=$k LD_PRELOAD="$shim" "$PIPEHOST" --check-plugin "$top_builddir/plugins/$so" \
			>"$tmp/out" 2>"$tmp/err"
		rc=$?
		why=
		if grep -q "^FAIL" "$tmp/out"; then
			why="a FAIL: $(grep -m1 "^FAIL" "$tmp/out")"
		elif [ $rc -eq 1 ]; then
			oom=$((oom + 1))
			grep -q "not judged, out of memory" "$tmp/out" && [ "$(wc -l <"$tmp/err")" -eq 1 ] &&
				grep -q "out of memory in [0-9]* of [0-9]* checks.*; free memory and check again" "$tmp/err" ||
				why="exit 1 without the SKIP and the one line: $(head -c 300 "$tmp/err")"
		elif [ $rc -ne 0 ]; then
			why="exit $rc: $(head -c 300 "$tmp/err")"
		fi
		if [ -n "$why" ]; then
			bad=$((bad + 1))
			[ -n "$first" ] || first="$so, N=$k: $why"
		fi
	done
done
if [ "$bad" = 0 ] && [ "$oom" -ge 25 ]; then
	ok "--check-plugin of layernorm, dp and 1f1b, one of 19 allocations failing: $oom of $tried ran out of memory, each a SKIP and one line, no FAIL"
else
	not_ok "--check-plugin out of memory: $bad bad trial(s), $oom out of memory; the first $first"
fi
finish
