#!/bin/sh
# SPDX-License-Identifier: MIT
# Data parallelism on the CPU (`[run] replicas = R`, core/engine-replicas.c): R
# copies of the pipeline, each on batch / R samples, their gradients summed
# in replica order before every step.
#  - With the same R and m, the weights are byte-identical for every
#    schedule, partition and stage count, as for one pipeline (DESIGN.md).
#  - Against R = 1 only the order of a float sum differs: the same loss to
#    four decimals (dropout off, since replicas draw their own masks).
#  - Resuming a checkpoint gives every replica the weights back.
. "$top_srcdir/tests/lib.sh"
tiny="$fixtures/tiny.ini"

run() { # run NAME ARGS...: weights in $tmp/NAME.st, the log in $tmp/NAME.log
	name=$1
	shift
	"$PIPEHOST" -c "$tiny" --save-weights "$tmp/$name.st" "$@" >"$tmp/$name.log" 2>&1
}

if run ref --set run.replicas=2; then
	ok "reference: 2 replicas of 2 stages, 1f1b"
else
	not_ok "reference run failed: $(tail -2 "$tmp/ref.log")"
fi
for extra in "1 gpipe uniform 1" "3 1f1b parameters 1" "4 gpipe uniform 1" "2 interleaved uniform 2" \
	"2 zb-h1 uniform 1"; do
	set -- $extra
	if ! run "s$1-$2-$3-$4" --set run.replicas=2 --set run.stages=$1 --set schedule.type=$2 \
		--set partition.type=$3 --set run.chunks=$4; then
		not_ok "2 replicas, $1 stages, $2, $3, $4 chunk(s): run failed: $(tail -2 "$tmp/s$1-$2-$3-$4.log")"
	elif cmp -s "$tmp/ref.st" "$tmp/s$1-$2-$3-$4.st"; then
		ok "2 replicas, $1 stages, $2, $3, $4 chunk(s): weights byte-identical to the reference"
	else
		not_ok "2 replicas, $1 stages, $2, $3, $4 chunk(s): weights differ from the reference"
	fi
done
if run rc --set run.replicas=2 --set run.recompute=yes --set run.stages=3 && cmp -s "$tmp/ref.st" "$tmp/rc.st"; then
	ok "2 replicas with recomputation: byte-identical"
else
	not_ok "2 replicas with recomputation: differs or failed: $(tail -2 "$tmp/rc.log")"
fi
# the check can fail: 4 replicas sum in another order
if run r4 --set run.replicas=4 && ! cmp -s "$tmp/ref.st" "$tmp/r4.st"; then
	ok "4 replicas give other bits than 2"
else
	not_ok "4 replicas: same bits as 2, or failed: $(tail -2 "$tmp/r4.log")"
fi

# Against one pipeline: the same training to rounding.
loss() { sed -n 's/.*final loss \([0-9.]*\).*/\1/p' "$tmp/$1.log"; }
run one --set "layer drop.rate=0" --set run.replicas=1
for R in 2 4 8; do
	if ! run "nd$R" --set "layer drop.rate=0" --set run.replicas=$R; then
		not_ok "$R replicas without dropout: run failed: $(tail -2 "$tmp/nd$R.log")"
		continue
	fi
	a=$(loss one) b=$(loss "nd$R")
	if [ -n "$a" ] && [ "$a" = "$b" ]; then
		ok "$R replicas: final loss $b, the same as 1 replica"
	else
		not_ok "$R replicas: final loss '$b', 1 replica '$a'"
	fi
done

# Resume: every replica continues from the checkpoint's weights.
ck="$tmp/ck"
if run full --set run.replicas=2 --set checkpoint.dir="$ck" --set checkpoint.every=10 &&
	run resumed --set run.replicas=2 --resume "$ck/step-00000010" && cmp -s "$tmp/full.st" "$tmp/resumed.st"; then
	ok "2 replicas resumed at step 10: byte-identical to the run without a stop"
else
	not_ok "2 replicas resumed at step 10: differs or failed: $(tail -2 "$tmp/resumed.log")"
fi
finish
