#!/bin/sh
# SPDX-License-Identifier: MIT
# What the processes of an mpirun job start from must be the same: the
# checkpoint they resume (only process 0 writes checkpoints, so a node's
# copy may be stale) and the [run] init weights.  A difference trained
# other weights without a word, overwrote a good checkpoint and hung the
# job; it is now one line.  And process 0's own setup failures (its
# checkpoint directory) are the job's one line, with no stop line from the
# others.
. "$top_srcdir/tests/lib.sh"
. "$top_srcdir/tests/mpi-lib.sh"
if ! ph_have_mpi; then
	echo "# skip: $ph_mpi_why"
	exit 77
fi
tiny="$fixtures/tiny.ini"

# checkpoints of one 20-step run: steps 5 and 10 among them
"$PIPEHOST" -c "$tiny" --set run.steps=20 --set "checkpoint.dir=$tmp/ck" --set checkpoint.every=5 \
	--set checkpoint.keep=0 >"$tmp/ck.log" 2>&1 || not_ok "the checkpoints: $(tail -2 "$tmp/ck.log")"
[ -d "$tmp/ck/step-00000005" ] && [ -d "$tmp/ck/step-00000010" ] || not_ok "no steps 5 and 10: $(ls "$tmp/ck")"
cp -r "$tmp/ck/step-00000010" "$tmp/copy-10"

# pipehost_pair A B: process 0 runs pipehost A..., process 1 pipehost B...
# (each a quoted argument list), a pipeline split over both
pair() {
	a=$1 b=$2
	# shellcheck disable=SC2086 # the lists split on purpose
	timeout 120 sh -c ". \"$top_srcdir/tests/mpi-lib.sh\"; ph_mpirun 1 \"$PIPEHOST\" -c \"$tiny\" --set run.replicas=1 \
		--set run.steps=20 $a : -np 1 \"$PIPEHOST\" -c \"$tiny\" --set run.replicas=1 --set run.steps=20 $b" \
		>"$tmp/out" 2>"$tmp/err"
}

pair "--resume $tmp/ck/step-00000010" "--resume $tmp/copy-10"
rc=$?
if [ "$rc" -eq 0 ] && grep -q "resumed from" "$tmp/out"; then
	ok "two copies of one checkpoint: the processes agree and train"
else
	not_ok "two copies of one checkpoint: exit $rc: $(grep pipehost: "$tmp/err" | head -3)"
fi

# one_line DESC RC REGEX: the job failed (not a timeout) with exactly one
# pipehost line on stderr, matching REGEX (basic)
one_line() {
	lines=$(grep -c "^pipehost:" "$tmp/err")
	if [ "$2" -ne 0 ] && [ "$2" -ne 124 ] && [ "$lines" -eq 1 ] && grep -q "$3" "$tmp/err"; then
		ok "$1: one line, exit $2: $(grep pipehost: "$tmp/err" | cut -c1-160)"
	else
		not_ok "$1: exit $2, $lines line(s): $(grep pipehost: "$tmp/err" | head -3)"
	fi
}

pair "--resume $tmp/ck/step-00000010" "--resume $tmp/ck/step-00000005"
one_line "two different checkpoints" $? \
	"^pipehost: process 1 of 2: its checkpoint differs from process 0's: resumed at step = 5 here, 10 in process 0; give every process the same checkpoint"

# [run] init: the same bytes pass, other weights are refused
"$PIPEHOST" -c "$tiny" --set run.steps=3 --save-weights "$tmp/a.st" >/dev/null 2>&1
"$PIPEHOST" -c "$tiny" --set run.steps=4 --save-weights "$tmp/b.st" >/dev/null 2>&1
pair "--set run.init=$tmp/a.st" "--set run.init=$tmp/b.st"
one_line "two different init files" $? \
	"^pipehost: process 1 of 2: its initial weights differ from process 0's: \[run\] init weights (XXH3-64) = [0-9a-f]* here, [0-9a-f]* in process 0; give every process the same \[run\] init file"

# process 0's checkpoint directory is a file: its line alone
: >"$tmp/afile"
timeout 120 sh -c ". \"$top_srcdir/tests/mpi-lib.sh\"; ph_mpirun 2 \"$PIPEHOST\" -c \"$tiny\" \
	--set checkpoint.dir=$tmp/afile" >"$tmp/out" 2>"$tmp/err"
# (the others' "interrupted" line once came with it)
one_line "process 0's checkpoint directory is a file" $? "^pipehost: process 0 of 2: checkpoint dir $tmp/afile is not a directory"
finish
