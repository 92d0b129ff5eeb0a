#!/bin/sh
# SPDX-License-Identifier: MIT
# Schedules read from a table (schedule.type = table): a bad table ends with
# one stderr line naming the broken rule, rank and position (or file:line)
# and a non-zero exit; a table that spells out a built-in schedule trains to
# the very same weights as that schedule.
. "$top_srcdir/tests/lib.sh"
tiny="$fixtures/tiny.ini"   # 2 stages, 4 micro-batches, 9 layers
sched="$fixtures/schedules"
T="--set schedule.type=table --set"   # then "schedule.file=FILE"

expect_error "table missing a forward" \
	"^pipehost: schedule table: rank 0 never runs F3; rule: every forward exactly once$" \
	-c "$tiny" --plan $T "schedule.file=$sched/missing-forward.csv"
expect_error "table with a backward before its forward" \
	"^pipehost: schedule table: rank 1 position 0: B0 comes before its forward; rule: each backward after its forward$" \
	-c "$tiny" --plan $T "schedule.file=$sched/backward-before-forward.csv"
expect_error "table that deadlocks" \
	"^pipehost: schedule table deadlocks: rank 0 waits forever at step 2 \(recv-gradient of chunk 0, micro-batch 0\) and no rank can move; rule: the lowered plan must not deadlock$" \
	-c "$tiny" --plan $T "schedule.file=$sched/deadlock.csv"
expect_error "malformed table line" \
	"^pipehost: $sched/malformed.csv:4: 'BB2' is not an action; write F3, B3, I3 or W3 \(chunk-prefixed like 1F3 when chunks > 1\)$" \
	-c "$tiny" --plan $T "schedule.file=$sched/malformed.csv"
expect_error "table with fewer rows than ranks" \
	"^pipehost: $sched/1f1b-p2-m4.csv:[0-9]+: the file ends after 2 row\(s\) of actions, but \[run\] stages = 3; write one row per rank, rank 0 first$" \
	-c "$tiny" --plan --set run.stages=3 $T "schedule.file=$sched/1f1b-p2-m4.csv"
printf '# only a comment\n\n' >"$tmp/empty.csv"
expect_error "table with no row at all (no line 0 quoted)" \
	"^pipehost: $tmp/empty.csv: the file holds no row of actions, but \[run\] stages = 2; write one row per rank, rank 0 first$" \
	-c "$tiny" --plan $T "schedule.file=$tmp/empty.csv"
expect_error "table that does not exist" \
	"^pipehost: cannot open schedule table $tmp/nope.csv: No such file or directory; check \[schedule\] file$" \
	-c "$tiny" --plan $T "schedule.file=$tmp/nope.csv"
expect_error "table without a file" "\[schedule\] needs file" -c "$tiny" --plan --set schedule.type=table
# the rules, each broken by one row of rank 1 (rank 0's row is 1F1B's)
rule() { # DESC ROW1 REGEX
	printf 'F0, F1, B0, F2, B1, F3, B2, B3\n%s\n' "$2" >"$tmp/rule.csv"
	expect_error "table $1" "^pipehost: schedule table: $3$" -c "$tiny" --plan $T "schedule.file=$tmp/rule.csv"
}
rule "running a forward twice" "F0, B0, F1, B1, F2, B2, F3, F3" \
	"rank 1 position 7: F3 runs twice \(first at position 6\); rule: every action exactly once"
rule "missing a backward" "F0, B0, F1, B1, F2, B2, F3" \
	"rank 1 never runs the backward of chunk 1 micro-batch 3; rule: every backward exactly once"
rule "with a W before its I" "F0, W0, I0, F1, B1, F2, B2, F3, B3" \
	"rank 1 position 1: W0 comes before its I; rule: each W after its I"
rule "with both B and I/W" "F0, B0, I0, W0, F1, B1, F2, B2, F3, B3" "chunk 1 micro-batch 0 has both B and I/W; use one"
rule "with an I and no W" "F0, I0, F1, B1, F2, B2, F3, B3" \
	"rank 1 never runs W of chunk 1 micro-batch 0; rule: every I has its W"
# each chunk adds its weight gradients in micro-batch order: in another
# order the floats sum to other bits, and the weights differed from every
# built-in schedule's (a docs audit, 2026-12-07)
rule "with backwards out of micro-batch order" "F0, F1, F2, F3, B3, B2, B1, B0" \
	"rank 1 position 5: B2 adds to chunk 1's weight gradients after micro-batch 3's \(position 4\); rule: each chunk's B or W in micro-batch order, so that every schedule gives the same weights"
rule "with Ws out of micro-batch order" "F0, F1, F2, F3, I0, I1, I2, I3, W1, W3, W0, W2" \
	"rank 1 position 10: W0 adds to chunk 1's weight gradients after micro-batch 3's \(position 9\); rule: each chunk's B or W in micro-batch order, so that every schedule gives the same weights"
rule "naming a micro-batch past the last" "F0, B0, F1, B1, F2, B2, F3, B3, F4" \
	"rank 1 position 8: action F4 \(kind 0, chunk 1, micro-batch 4\) is out of range \(kinds 0\.\.3, chunks 0\.\.1, micro-batches 0\.\.3\)"
{ printf 'F0, F1, B0, F2, B1, F3, B2, B3\n'; printf 'F0, B0\000, F1\n'; } >"$tmp/nul.csv"
expect_error "table with a NUL byte" "^pipehost: $tmp/nul.csv:2: a NUL byte; a schedule table is a text file$" \
	-c "$tiny" --plan $T "schedule.file=$tmp/nul.csv"
# a read that fails after the open (EIO): /proc/self/mem at address 0
if [ -r /proc/self/mem ]; then
	expect_error "table whose read fails" "^pipehost: cannot read schedule table /proc/self/mem: .+; check \[schedule\] file$" \
		-c "$tiny" --plan $T schedule.file=/proc/self/mem
fi

# A table equal to a built-in order trains to byte-identical weights.
train() { # NAME ARGS...: train tiny, weights to $tmp/NAME.safetensors
	name=$1
	shift
	if "$PIPEHOST" -c "$tiny" "$@" --save-weights "$tmp/$name.safetensors" >"$tmp/$name.log" 2>&1; then
		return 0
	fi
	not_ok "$name: run failed: $(tail -2 "$tmp/$name.log")"
	return 1
}
same() { # DESC A B
	if cmp -s "$tmp/$2.safetensors" "$tmp/$3.safetensors"; then
		ok "$1: weights byte-identical"
	else
		not_ok "$1: weights differ"
	fi
}
for s in 1f1b gpipe zb-h1; do
	if train "$s" --set schedule.type=$s && train "table-$s" $T "schedule.file=$sched/$s-p2-m4.csv"; then
		same "table $s-p2-m4.csv vs schedule.type=$s" "$s" "table-$s"
	fi
done
if train interleaved --set run.chunks=2 --set schedule.type=interleaved &&
	train table-interleaved --set run.chunks=2 $T "schedule.file=$sched/interleaved-p2-v2-m4.csv"; then
	same "table interleaved-p2-v2-m4.csv vs schedule.type=interleaved" interleaved table-interleaved
fi
# the input gradients (I) in any order: they add to no weight
printf 'F0, F1, F2, F3, B0, B1, B2, B3\nF0, F1, F2, F3, I3, I2, I1, I0, W0, W1, W2, W3\n' >"$tmp/i-reversed.csv"
if [ -f "$tmp/1f1b.safetensors" ] && train i-reversed $T "schedule.file=$tmp/i-reversed.csv"; then
	same "a table with its Is in reverse, its Ws in order, vs schedule.type=1f1b" 1f1b i-reversed
fi
# and every schedule trains to the same weights (DESIGN.md): the check can fail
[ -f "$tmp/1f1b.safetensors" ] && [ -f "$tmp/zb-h1.safetensors" ] && same "zb-h1 vs 1f1b" 1f1b zb-h1
# A table that fails to read (EIO on its first read, through the shim
# tests/faultfs.c) at a micro_batches it does not take: the read error, in
# one line, not "set micro_batches to one of ..." (each count tried read
# the file again, and the failure read as a count refused)
if preload_shim faultfs; then
	mkdir -p "$tmp/eio"
	cp "$fixtures/schedules/1f1b-p2-m4.csv" "$tmp/eio/t.csv"
	expect_fault "a table that fails to read" "$tmp/eio" readeio 1 "Input/output error" "micro_batches" \
		-c "$tiny" --set schedule.type=table --set "schedule.file=$tmp/eio/t.csv" --set run.micro_batches=8 \
		--set run.steps=1
fi
finish
