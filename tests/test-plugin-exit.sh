#!/bin/sh
# SPDX-License-Identifier: MIT
# A plugin whose hook calls exit() or crashes during a run (core/signals.c,
# ph_plugin_guard_arm).  Before: exit(0) in a forward ended the run with
# status 0, no "trained" line and no weights, and a crash (SIGSEGV,
# SIGABRT, ...) printed nothing at all.  Now: one line on stderr, naming
# the plugin's .so, and a failing status (1 for an exit, 128 + the signal
# for a crash); no output file, whole or partial.  pipehost's own exits
# (a normal end, a usage error, an ordinary failure, --check-plugin) are
# as before.  tests/plugins/misbehave.c is the layer.
. "$top_srcdir/tests/lib.sh"
mkdir "$tmp/plug" && cp "$TEST_PLUGIN_DIR/misbehave.so" "$tmp/plug/" # the dir's other plugins are bad on purpose
so="$tmp/plug/misbehave.so"
sed 's/^\[layer loss\]$/[layer mis]\ntype = misbehave\n[layer loss]/' "$fixtures/tiny.ini" >"$tmp/mis.ini"
# cost = flops: the profiler would make the failing call its own
set -- -c "$tmp/mis.ini" --plugin-dir "$tmp/plug" --set partition.cost=flops --set run.steps=5

# run HOW [ARGS...]: pipehost with PH_TEST_MISBEHAVE=HOW (at its 2nd forward,
# step 1), stdout and stderr in $tmp/out and $tmp/err, no core file; the
# braces keep the shell's own "Segmentation fault" out of the output
run() {
	how=$1
	shift
	rm -rf "$tmp/o" && mkdir "$tmp/o"
	{ (ulimit -c 0; PH_TEST_MISBEHAVE=$how exec "$PIPEHOST" "$@" >"$tmp/out" 2>"$tmp/err"); } 2>/dev/null
}
# one_line REGEX: stderr is one line, matching REGEX (extended)
one_line() { [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -Eq -- "$1" "$tmp/err"; }
# nothing written: no weights, no temporary file of them, no "trained"
nothing_left() { [ -z "$(ls -A "$tmp/o")" ] && ! grep -q "^trained" "$tmp/out"; }

run exit0 "$@" --save-weights "$tmp/o/w.st"
rc=$?
if [ "$rc" -eq 1 ] && nothing_left &&
	one_line "^pipehost: a plugin called exit\(0\) during the run \(code in $so\), so the run did not finish: no weights or other final outputs were written"; then
	ok "exit(0) in a forward: exit 1, no weights: $(cat "$tmp/err")"
else
	not_ok "exit(0) in a forward: exit $rc, left: $(ls -A "$tmp/o" | tr '\n' ' ') $(head -c 600 "$tmp/err")"
fi
run exit3 "$@" --save-weights "$tmp/o/w.st"
rc=$?
if [ "$rc" -eq 1 ] && nothing_left && one_line "^pipehost: a plugin called exit\(3\) during the run \(code in $so\)"; then
	ok "exit(3) in a forward: exit 1, one line"
else
	not_ok "exit(3) in a forward: exit $rc, left: $(ls -A "$tmp/o" | tr '\n' ' ') $(head -c 600 "$tmp/err")"
fi
# with checkpoints every step: exit(0) at forward call 10 (step 3; 4
# micro-batches a step): steps 1 and 2 stay, whole
rm -rf "$tmp/o" && mkdir "$tmp/o"
PH_TEST_MISBEHAVE=exit0 PH_TEST_MISBEHAVE_AT=10 "$PIPEHOST" "$@" --set "checkpoint.dir=$tmp/o/ck" --set checkpoint.every=1 \
	>"$tmp/out" 2>"$tmp/err"
rc=$?
if [ "$rc" -eq 1 ] && [ -f "$tmp/o/ck/step-00000001/state.json" ] && ! ls -A "$tmp/o/ck" | grep -q tmp &&
	one_line "^pipehost: a plugin called exit\(0\) during the run"; then
	ok "exit(0) at step 3 with checkpoints: exit 1, the checkpoints before it whole ($(ls -A "$tmp/o/ck" | tr '\n' ' '))"
else
	not_ok "exit(0) with checkpoints: exit $rc, $(ls -A "$tmp/o/ck" 2>&1 | tr '\n' ' ') $(head -c 600 "$tmp/err")"
fi

# crash HOW STATUS REGEX ARGS...: a crash in the forward keeps its status
# (128 + the signal), now with one line naming the signal and the .so
crash() {
	how=$1 status=$2 re=$3
	shift 3
	run "$how" "$@" --save-weights "$tmp/o/w.st"
	rc=$?
	if [ "$rc" -eq "$status" ] && nothing_left && one_line "$re"; then
		ok "$how in a forward: exit $rc, $(cat "$tmp/err")"
	else
		not_ok "$how in a forward: exit $rc, left: $(ls -A "$tmp/o" | tr '\n' ' ') $(head -c 600 "$tmp/err")"
	fi
}
tail_re="; nothing more is saved \(checkpoints already written stay: continue from the last with --resume once the cause is fixed\)$"
crash segv 139 "^pipehost: crashed during the run: SIGSEGV \(a bad memory access\) in plugin code, $so$tail_re" "$@"
crash fpe 136 "^pipehost: crashed during the run: SIGFPE \(an arithmetic fault, such as an integer division by zero\) in plugin code, $so$tail_re" "$@"
# abort() runs in libc, whoever called it: the line names no object
crash abort 134 "^pipehost: crashed during the run: SIGABRT \(abort\(\) was called: a failed assertion, or a corrupted heap\)$tail_re" "$@"

# pipehost's own exits are as they were
rm -rf "$tmp/o" && mkdir "$tmp/o"
if "$PIPEHOST" "$@" --save-weights "$tmp/o/w.st" >"$tmp/out" 2>"$tmp/err" && grep -q "^trained 5 steps" "$tmp/out" &&
	[ -s "$tmp/o/w.st" ] && [ ! -s "$tmp/err" ]; then
	ok "the plugin behaving: exit 0, trained, the weights written, nothing on stderr"
else
	not_ok "the plugin behaving: $(tail -1 "$tmp/out") $(head -c 600 "$tmp/err")"
fi
expect_error "an ordinary failure with the guard armed: one line, exit 1" "^pipehost: .*steps = -1 is out of range" "$@" --set run.steps=-1
[ "$rc" -eq 1 ] || not_ok "an ordinary failure: exit $rc, not 1"
"$PIPEHOST" "$@" --no-such-option >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ "$rc" -eq 2 ] && one_line "^pipehost: unknown option --no-such-option"; then
	ok "a usage error: exit 2, one line"
else
	not_ok "a usage error: exit $rc, $(cat "$tmp/err")"
fi
"$PIPEHOST" "$@" --plan >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ "$rc" -eq 0 ] && [ ! -s "$tmp/err" ]; then
	ok "--plan: exit 0, nothing on stderr"
else
	not_ok "--plan: exit $rc, $(cat "$tmp/err")"
fi
# --check-plugin runs no run: not armed, its own report of the layer
if "$PIPEHOST" --check-plugin "$so" >"$tmp/out" 2>"$tmp/err" && ! grep -q '^FAIL' "$tmp/out"; then
	ok "--check-plugin misbehave.so (unset): $(tail -1 "$tmp/out")"
else
	not_ok "--check-plugin misbehave.so: $(grep '^FAIL' "$tmp/out" | head -2) $(head -c 300 "$tmp/err")"
fi

# under mpirun: one process's plugin calls exit(0); the job fails, with the line
. "$top_srcdir/tests/mpi-lib.sh"
if ! ph_have_mpi; then
	ok "# SKIP under mpirun: $ph_mpi_why"
else
	PH_TEST_MISBEHAVE=exit0 timeout 120 sh -c '. "$top_srcdir/tests/mpi-lib.sh"; ph_mpirun 2 -x PH_TEST_MISBEHAVE -x PIPEHOST_PLUGIN_PATH "$@"' \
		sh "$PIPEHOST" "$@" --set run.replicas=1 </dev/null >"$tmp/out" 2>"$tmp/err"
	rc=$?
	if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && grep -q "^pipehost: a plugin called exit(0) during the run (code in $so)" "$tmp/err" &&
		! grep -q "^trained" "$tmp/out"; then
		ok "under mpirun, exit(0) in process 1's forward: mpirun exit $rc, $(grep -c '^pipehost: a plugin called' "$tmp/err") line(s)"
	else
		not_ok "under mpirun, exit(0) in a forward: mpirun exit $rc, $(head -c 800 "$tmp/err")"
	fi
fi
# A plugin printing on stdout from create: under --plan=json stdout holds
# the document alone (the line goes to stderr), where it used to open the
# document with "misbehave: ..." and break every JSON reader.
if PH_TEST_MISBEHAVE=print "$PIPEHOST" "$@" --plan=json >"$tmp/out" 2>"$tmp/err" &&
	[ "$(head -c 1 "$tmp/out")" = "{" ] && ! grep -q '^misbehave: created' "$tmp/out" && grep -q '^misbehave: created' "$tmp/err"; then
	ok "a plugin's printf under --plan=json goes to stderr; stdout is the document alone"
else
	not_ok "--plan=json with a printing plugin: stdout starts $(head -c 80 "$tmp/out" | tr '\n' ' '), stderr $(head -c 200 "$tmp/err")"
fi
finish
