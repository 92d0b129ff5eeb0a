#!/bin/sh
# SPDX-License-Identifier: MIT
# Expert parallelism on the CPU (plugin ABI 1.5: replica groups and
# sharded parameters; core/engine-group.c, core/engine-shard.c), with
# ep_linear (tests/plugins/ep-linear.c): 4 experts split over the R
# replicas of its stage, tokens exchanged with all_to_all, loads summed
# with all_reduce_sum and reported.
#  - R = 1 holding all experts, R = 2 and R = 4 holding 4/R each, at the
#    same micro-batch size: the same losses to 1e-6 and weights to 1e-4
#    relative after 20 steps (with the clip norm active);
#  - a given R gives the same bits in one process and under mpirun
#    (skipped without Open MPI), replicas all remote or mixed;
#  - kill (SIGTERM) and resume: the same bits as the run without a stop;
#  - the layer's figures in the progress line and the metrics file; a
#    figure given through report_device (ABI 1.8) averaged exactly as the
#    same figure through report, for R = 1, 2, 4;
#  - R not dividing the experts: one line naming the layer.
. "$top_srcdir/tests/lib.sh"
. "$top_srcdir/tests/ep-lib.sh"
ini="$fixtures/ep.ini"
ep_ini=$ini
ep_args="--set optimizer.clip=0.05"
PIPEHOST_PLUGIN_PATH="$TEST_PLUGIN_DIR:${PIPEHOST_PLUGIN_PATH:-}"
export PIPEHOST_PLUGIN_PATH
ep_need_python

for R in 1 2 4; do
	ep_run "r$R" "$R" || not_ok "R = $R: run failed: $(tail -2 "$tmp/r$R.log")"
done
ep_against_r1 ""
if cmp -s "$tmp/r1.st" "$tmp/r2.st"; then
	not_ok "R = 2 gave R = 1's bits: the check cannot see a difference"
else
	ok "R = 2 and R = 1 differ in the last bits only"
fi

# The figures, averaged over the step's calls.
if grep -q 'ep.load_max 0.25 ep.tokens 16 ep.y0 [-+0-9.e]* ep.y0_at [-+0-9.e]* ' "$tmp/r2.log" &&
	grep -q '"elapsed_s":[0-9.]*,"ep.load_max":0.25,"ep.tokens":16,"ep.y0":[-+0-9.e]*,"ep.y0_at":[-+0-9.e]*}' "$tmp/r2.jsonl"; then
	ok "ep.load_max, ep.tokens, ep.y0 and ep.y0_at in the progress line and the metrics file"
else
	not_ok "no layer figures: $(grep -m1 'step 1/' "$tmp/r2.log"); $(head -1 "$tmp/r2.jsonl")"
fi
# ep.y0 (report) and ep.y0_at (report_device) are one figure, the
# micro-batch's first output: every step's means the same, and they change.
for R in 1 2 4; do
	v=$(sed -n 's/.*"ep.y0":\([-+0-9.e]*\),"ep.y0_at":\([-+0-9.e]*\)}.*/\1 \2/p' "$tmp/r$R.jsonl" |
		awk '$1 == $2 { same++ } { seen[$1] = 1 } END { n = 0; for (k in seen) n++; print NR, same + 0, n }')
	# shellcheck disable=SC2086 # three counts
	set -- $v
	if [ "$1" = 20 ] && [ "$2" = 20 ] && [ "$3" -gt 10 ]; then
		ok "R = $R: report_device's mean is report's at all $1 steps ($3 different means)"
	else
		not_ok "R = $R: ep.y0 against ep.y0_at: '$v' (steps, equal, different): $(head -1 "$tmp/r$R.jsonl")"
	fi
done

# Kill and resume: every replica gets its own experts back.
ck="$tmp/ck"
"$PIPEHOST" -c "$ini" --set run.replicas=2 --set run.micro_batches=2 --set optimizer.clip=0.05 \
	--set checkpoint.dir="$ck" --set checkpoint.every=100 --set run.steps=3000 --save-weights "$tmp/full.st" \
	>"$tmp/full.log" 2>&1 &
pid=$!
i=0
while [ ! -d "$ck/step-00000100" ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i + 1)); done
kill -TERM $pid
wait $pid
at=$(sed -n 's/.*interrupted at step \([0-9]*\).*/\1/p' "$tmp/full.log")
if [ -n "$at" ] && "$PIPEHOST" -c "$ini" --set run.replicas=2 --set run.micro_batches=2 --set optimizer.clip=0.05 \
	--set checkpoint.dir="$ck" --set checkpoint.every=100 --set run.steps=3000 --resume "$ck" \
	--save-weights "$tmp/resumed.st" >"$tmp/resumed.log" 2>&1 &&
	"$PIPEHOST" -c "$ini" --set run.replicas=2 --set run.micro_batches=2 --set optimizer.clip=0.05 \
		--set run.steps=3000 --save-weights "$tmp/whole.st" >"$tmp/whole.log" 2>&1 &&
	cmp -s "$tmp/whole.st" "$tmp/resumed.st"; then
	ok "killed at step $at and resumed: byte-identical to the run without a stop"
else
	not_ok "kill and resume: differs or failed (stopped at '$at'): $(tail -2 "$tmp/full.log") $(tail -2 "$tmp/resumed.log")"
fi
# The checkpoint holds every expert, whole: R = 4 resumes R = 2's final
# checkpoint (each replica takes its rows) and writes the same weights.
if [ -n "$at" ] && "$PIPEHOST" -c "$ini" --set run.replicas=4 --set run.micro_batches=2 --set optimizer.clip=0.05 \
	--set checkpoint.dir="$ck" --set checkpoint.every=100 --set run.steps=3000 --resume "$ck" --save-weights "$tmp/r4res.st" >"$tmp/r4res.log" 2>&1 &&
	cmp -s "$tmp/r4res.st" "$tmp/resumed.st"; then
	ok "R = 4 loads R = 2's checkpoint and writes back the same weights"
else
	not_ok "R = 4 loading R = 2's checkpoint: differs or failed: $(tail -2 "$tmp/r4res.log")"
fi

# Evaluation: every replica takes part (its experts are needed); the
# figures are R = 1's.
for R in 1 2 4; do
	"$PIPEHOST" -c "$ini" --set run.replicas="$R" --set run.micro_batches=$((4 / R)) --set run.eval=yes \
		--set run.steps=5 >"$tmp/e$R.log" 2>&1
	sed -n 's/.*test loss \([0-9.]*\).*/\1/p' "$tmp/e$R.log" >"$tmp/e$R.loss"
done
if [ -s "$tmp/e1.loss" ] && cmp -s "$tmp/e1.loss" "$tmp/e2.loss" && cmp -s "$tmp/e1.loss" "$tmp/e4.loss"; then
	ok "evaluation with the experts split over 1, 2, 4 replicas: test loss $(cat "$tmp/e1.loss") for each"
else
	not_ok "evaluation: test losses '$(cat "$tmp/e1.loss")' '$(cat "$tmp/e2.loss")' '$(cat "$tmp/e4.loss")'"
fi

# --plan counts a replica's rows: 4 experts of 8 x 8 at R = 1, one at R = 4.
p1=$("$PIPEHOST" -c "$ini" --plan | awk '$4 ~ /^flat/ { print $6 }')
p4=$("$PIPEHOST" -c "$ini" --set run.replicas=4 --set run.micro_batches=1 --plan | awk '$4 ~ /^flat/ { print $6 }')
if [ "$p1" = 784 ] && [ "$p4" = 592 ]; then
	ok "--plan: stage 0 holds $p1 parameters at R = 1, $p4 at R = 4 (one expert of 64)"
else
	not_ok "--plan: stage 0 parameters '$p1' at R = 1, '$p4' at R = 4 (want 784, 592)"
fi

# The layer passes the plugin check (finite differences; a group of one).
if "$PIPEHOST" --check-plugin "$TEST_PLUGIN_DIR/ep-linear.so" >"$tmp/check" 2>&1 && ! grep -q '^FAIL' "$tmp/check"; then
	ok "ep_linear passes --check-plugin: $(grep 'gradients (batch 4)' "$tmp/check" | sed 's/.*finite differences //')"
else
	not_ok "ep_linear --check-plugin: $(grep '^FAIL' "$tmp/check" | head -2)"
fi

# Bad use: R must divide the experts.
expect_error "3 replicas for 4 experts" "layer ep \(ep_linear\).*replicas = 3 does not divide the 4 rows.*weight" \
	-c "$ini" --set run.replicas=3 --set run.micro_batches=1 --set run.batch=24

# One process against mpirun: the same bits for a given R.
. "$top_srcdir/tests/mpi-lib.sh"
if ph_have_mpi; then
	for np_R in "2 2" "2 4"; do
		set -- $np_R
		if ph_mpirun "$1" -x PIPEHOST_PLUGIN_PATH "$PIPEHOST" -c "$ini" --set run.replicas="$2" \
			--set run.micro_batches=$((4 / $2)) --set optimizer.clip=0.05 --set run.log_every=1 \
			--save-weights "$tmp/m$1-$2.st" >"$tmp/m$1-$2.log" 2>&1 && cmp -s "$tmp/r$2.st" "$tmp/m$1-$2.st"; then
			ok "mpirun -np $1 with R = $2: weights byte-identical to one process"
		else
			not_ok "mpirun -np $1 with R = $2: differs or failed: $(tail -3 "$tmp/m$1-$2.log")"
		fi
	done
	# evaluation needs every process's experts: all processes take part
	if ph_mpirun 2 -x PIPEHOST_PLUGIN_PATH "$PIPEHOST" -c "$ini" --set run.replicas=2 --set run.micro_batches=2 \
		--set run.eval=yes --set run.steps=5 >"$tmp/me.log" 2>&1 &&
		sed -n 's/.*test loss \([0-9.]*\).*/\1/p' "$tmp/me.log" | cmp -s - "$tmp/e2.loss"; then
		ok "mpirun -np 2 with R = 2 evaluates: test loss $(cat "$tmp/e2.loss"), as one process"
	else
		not_ok "mpirun -np 2 evaluation: $(grep 'test loss' "$tmp/me.log") against $(cat "$tmp/e2.loss"): $(tail -2 "$tmp/me.log")"
	fi
else
	echo "# mpirun checks skipped: $ph_mpi_why"
fi
finish
