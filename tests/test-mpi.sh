#!/bin/sh
# SPDX-License-Identifier: MIT
# Several processes (mpirun -np N pipehost, core/comm.h) on the CPU: each
# process runs its share of the replicas and the processes gather every
# replica's gradient (MPI) and sum them in replica order, so
#  - mpirun -np 2 gives the same bits as 2 replicas in one process, and
#    -np 2 with 4 replicas as 4 in one;
#  - with fewer replicas than processes each pipeline is split over
#    processes (MPI messages between stages): the same bits as one process,
#    for every schedule, with ties across processes, clipping, evaluation
#    and resume; 2 replicas on 4 processes as 2 replicas in one;
#  - only process 0 writes: one progress stream, one checkpoint, one file
#    of weights; resuming under mpirun continues bit for bit;
#  - a bad request, or a failure in one process at run time, stops every
#    process with one line saying what to do (mpirun adds its own).
# Skipped (77) without Open MPI's mpirun or the MPI module.
. "$top_srcdir/tests/lib.sh"
. "$top_srcdir/tests/mpi-lib.sh"
if ! ph_have_mpi; then
	echo "SKIP: $ph_mpi_why"
	exit 77
fi
tiny="$fixtures/tiny.ini"
mp() {
	np=$1
	shift
	ph_mpirun "$np" -x PIPEHOST_PLUGIN_PATH "$@"
}

"$PIPEHOST" -c "$tiny" --set run.replicas=2 --save-weights "$tmp/r2.st" >/dev/null 2>&1
"$PIPEHOST" -c "$tiny" --set run.replicas=4 --save-weights "$tmp/r4.st" >/dev/null 2>&1

if mp 2 "$PIPEHOST" -c "$tiny" --save-weights "$tmp/m2.st" >"$tmp/m2.out" 2>"$tmp/m2.err" &&
	cmp -s "$tmp/r2.st" "$tmp/m2.st"; then
	ok "mpirun -np 2 (a replica each): weights byte-identical to 2 replicas in one process"
else
	not_ok "mpirun -np 2: differs or failed: $(tail -3 "$tmp/m2.err")"
fi
if [ "$(grep -c '^trained 20 steps' "$tmp/m2.out")" -eq 1 ] && [ "$(grep -c 'weights written' "$tmp/m2.out")" -eq 1 ]; then
	ok "mpirun -np 2: one process reports and writes"
else
	not_ok "mpirun -np 2: $(grep -c '^trained' "$tmp/m2.out") 'trained' lines, $(grep -c 'weights written' "$tmp/m2.out") 'weights written'"
fi
# --plan-json and --simulate's files: one process writes them, as a run's
# outputs (every process wrote them, each through a file of its own).  A
# FIFO shows it: its reader gets one document, not two (or, the reader
# gone after the first, a writer blocked for ever).
mkfifo "$tmp/pj.fifo" "$tmp/svg.fifo"
timeout 60 cat "$tmp/pj.fifo" >"$tmp/pj.out" &
cat_pj=$!
timeout 60 cat "$tmp/svg.fifo" >"$tmp/svg.out" &
cat_svg=$!
timeout 60 sh -c '. "$top_srcdir/tests/mpi-lib.sh"; ph_mpirun 2 -x PIPEHOST_PLUGIN_PATH "$@"' sh "$PIPEHOST" \
	-c "$tiny" --set run.replicas=2 --simulate --plan-json "$tmp/pj.fifo" --svg "$tmp/svg.fifo" \
	</dev/null >"$tmp/pj.log" 2>&1
rc=$?
wait "$cat_pj" "$cat_svg"
if [ "$rc" -eq 0 ] && [ "$(grep -c '^{' "$tmp/pj.out")" -eq 1 ] && [ "$(grep -c '^<svg' "$tmp/svg.out")" -eq 1 ]; then
	ok "mpirun -np 2 --simulate --plan-json --svg: one process writes each file once"
else
	not_ok "mpirun --plan-json/--svg: exit $rc, $(grep -c '^{' "$tmp/pj.out") plan(s), $(grep -c '^<svg' "$tmp/svg.out") svg(s); $(tail -3 "$tmp/pj.log")"
fi
if mp 2 "$PIPEHOST" -c "$tiny" --set run.replicas=4 --set run.stages=3 --set schedule.type=gpipe \
	--save-weights "$tmp/m4.st" >"$tmp/m4.out" 2>"$tmp/m4.err" && cmp -s "$tmp/r4.st" "$tmp/m4.st"; then
	ok "mpirun -np 2, 4 replicas of 3 stages (gpipe): byte-identical to 4 replicas of 2 stages in one process"
else
	not_ok "mpirun -np 2, 4 replicas: differs or failed: $(tail -3 "$tmp/m4.err")"
fi

# 2bw's stream under mpirun (whole pipelines per process): each process's
# last rank to finish a step sums every process's gradients from its
# worker thread; the bytes are those of the replicas in one process, and
# of a drain every step
lm="$fixtures/tiny-lm.ini"
"$PIPEHOST" -c "$lm" --set schedule.type=2bw --set run.replicas=4 --set run.batch=16 --set run.window=1 \
	--save-weights "$tmp/b4.st" >/dev/null 2>&1
if mp 2 "$PIPEHOST" -c "$lm" --set schedule.type=2bw --set run.replicas=4 --set run.batch=16 \
	--save-weights "$tmp/mb4.st" >"$tmp/mb4.out" 2>"$tmp/mb4.err" && grep -q '^2bw: up to 16 steps run as one stream' "$tmp/mb4.out" &&
	cmp -s "$tmp/b4.st" "$tmp/mb4.st"; then
	ok "mpirun -np 2, 2bw on 4 replicas (tie, clip): the stream's bytes = 4 replicas in one process, drained every step"
else
	not_ok "mpirun -np 2, 2bw stream: differs or failed: $(grep '^2bw:' "$tmp/mb4.out") $(tail -3 "$tmp/mb4.err")"
fi

# checkpoints: written once, by process 0; a resumed mpirun continues exactly
ck="$tmp/ck"
if mp 2 "$PIPEHOST" -c "$tiny" --set checkpoint.dir="$ck" --set checkpoint.every=10 --set checkpoint.keep=0 \
	--save-weights "$tmp/full.st" >"$tmp/full.out" 2>"$tmp/full.err" &&
	mp 2 "$PIPEHOST" -c "$tiny" --resume "$ck/step-00000010" --save-weights "$tmp/res.st" \
		>"$tmp/res.out" 2>"$tmp/res.err" && cmp -s "$tmp/full.st" "$tmp/res.st"; then
	ok "mpirun -np 2 resumed at step 10: byte-identical to the run without a stop"
else
	not_ok "mpirun -np 2 resume: differs or failed: $(tail -2 "$tmp/full.err") $(tail -2 "$tmp/res.err")"
fi
if [ "$(grep -c 'checkpoint: step 10 written' "$tmp/full.out")" -eq 1 ] && [ -d "$ck/step-00000020" ]; then
	ok "mpirun -np 2: each checkpoint written once"
else
	not_ok "mpirun -np 2 checkpoints: $(grep -c 'checkpoint: step 10' "$tmp/full.out") lines; $(ls "$ck" | tr '\n' ' ')"
fi

# A pipeline split over processes (replicas < processes): the links between
# them are MPI messages, and the weights are the single process's, byte
# for byte, for every schedule.
"$PIPEHOST" -c "$tiny" --save-weights "$tmp/one.st" >/dev/null 2>&1
while read -r np name opts; do
	desc=$(echo "$name" | tr _ ' ')
	# shellcheck disable=SC2086 # $opts is a list of options
	if mp "$np" "$PIPEHOST" -c "$tiny" --set run.replicas=1 $opts --save-weights "$tmp/$np-$name.st" \
		</dev/null >"$tmp/sp.out" 2>"$tmp/sp.err" && cmp -s "$tmp/one.st" "$tmp/$np-$name.st"; then
		ok "mpirun -np $np, one pipeline split over the processes, $desc: byte-identical to one process"
	else
		not_ok "mpirun -np $np, split pipeline, $desc: differs or failed: $(tail -3 "$tmp/sp.err")"
	fi
done <<'EOF'
2 2_stages,_1F1B
2 4_stages,_GPipe --set run.stages=4 --set schedule.type=gpipe
4 4_stages,_1F1B --set run.stages=4
2 interleaved,_2_ranks_x_2_chunks --set schedule.type=interleaved --set run.chunks=2
2 ZB-H1 --set schedule.type=zb-h1
3 recompute,_3_stages --set run.stages=3 --set run.recompute=yes
EOF
# both at once: 2 replicas, each split over 2 processes
if mp 4 "$PIPEHOST" -c "$tiny" --set run.replicas=2 --save-weights "$tmp/hy.st" >"$tmp/hy.out" 2>"$tmp/hy.err" &&
	cmp -s "$tmp/r2.st" "$tmp/hy.st"; then
	ok "mpirun -np 4, 2 replicas each split over 2 processes: byte-identical to 2 replicas in one process"
else
	not_ok "mpirun -np 4, 2 split replicas: differs or failed: $(tail -3 "$tmp/hy.err")"
fi
# one weight tied on three stages in three processes, with clipping
t3="$fixtures/tied3.ini"
"$PIPEHOST" -c "$t3" --set optimizer.clip=0.05 --save-weights "$tmp/t3.st" >/dev/null 2>&1
if mp 3 "$PIPEHOST" -c "$t3" --set optimizer.clip=0.05 --set run.replicas=1 --save-weights "$tmp/t3m.st" \
	>"$tmp/t3.out" 2>"$tmp/t3.err" && cmp -s "$tmp/t3.st" "$tmp/t3m.st"; then
	ok "mpirun -np 3: a weight tied across three processes, clipped: byte-identical to one process"
else
	not_ok "mpirun -np 3, tied weights: differs or failed: $(tail -3 "$tmp/t3.err")"
fi
# evaluation through the split pipeline: the same loss and accuracy
acc() { sed -n 's/.*final loss \([0-9.]*\); test accuracy \([0-9.]*%\) on \([0-9]*\).*/\1 \2 \3/p' "$1"; }
"$PIPEHOST" -c "$tiny" --set run.eval=yes >"$tmp/ev1.out" 2>&1
if mp 2 "$PIPEHOST" -c "$tiny" --set run.eval=yes --set run.replicas=1 >"$tmp/ev2.out" 2>"$tmp/ev2.err" &&
	a=$(acc "$tmp/ev1.out") && [ -n "$a" ] && [ "$a" = "$(acc "$tmp/ev2.out")" ]; then
	ok "mpirun -np 2, split pipeline: the same final loss, test accuracy and count ($a)"
else
	not_ok "mpirun -np 2, split evaluation: '$(acc "$tmp/ev1.out")' against '$(acc "$tmp/ev2.out")' $(tail -2 "$tmp/ev2.err")"
fi
# whole pipelines: process 0 alone evaluates, on its replica's weights
"$PIPEHOST" -c "$tiny" --set run.eval=yes --set run.replicas=2 >"$tmp/ev3.out" 2>&1
if mp 2 "$PIPEHOST" -c "$tiny" --set run.eval=yes >"$tmp/ev4.out" 2>"$tmp/ev4.err" &&
	a=$(acc "$tmp/ev3.out") && [ -n "$a" ] && [ "$a" = "$(acc "$tmp/ev4.out")" ]; then
	ok "mpirun -np 2, a replica each: the same final loss, test accuracy and count as 2 in one process ($a)"
else
	not_ok "mpirun -np 2, evaluation: '$(acc "$tmp/ev3.out")' against '$(acc "$tmp/ev4.out")' $(tail -2 "$tmp/ev4.err")"
fi
# checkpoint and resume through a split pipeline
ck2="$tmp/ck2"
if mp 2 "$PIPEHOST" -c "$tiny" --set run.replicas=1 --set checkpoint.dir="$ck2" --set checkpoint.every=10 \
	--save-weights "$tmp/sfull.st" >"$tmp/sfull.out" 2>"$tmp/sfull.err" &&
	mp 2 "$PIPEHOST" -c "$tiny" --set run.replicas=1 --resume "$ck2/step-00000010" --save-weights "$tmp/sres.st" \
		>"$tmp/sres.out" 2>"$tmp/sres.err" && cmp -s "$tmp/one.st" "$tmp/sres.st"; then
	ok "mpirun -np 2, split pipeline resumed at step 10: byte-identical to one process without a stop"
else
	not_ok "mpirun -np 2, split resume: differs or failed: $(tail -2 "$tmp/sfull.err") $(tail -2 "$tmp/sres.err")"
fi
# 2bw split over processes: the checkpoint holds every rank's W(t-1)
# (LAYER.PARAM.prev), not only process 0's, so the resume is exact
b2="--set schedule.type=2bw --set run.replicas=1"
"$PIPEHOST" -c "$lm" --set schedule.type=2bw --save-weights "$tmp/b1.st" >/dev/null 2>&1
# shellcheck disable=SC2086 # $b2 is a list of options
if mp 2 "$PIPEHOST" -c "$lm" $b2 --set checkpoint.dir="$tmp/ckb" --set checkpoint.every=10 \
	--save-weights "$tmp/bfull.st" >"$tmp/bfull.out" 2>"$tmp/bfull.err" && cmp -s "$tmp/b1.st" "$tmp/bfull.st" &&
	mp 2 "$PIPEHOST" -c "$lm" $b2 --resume "$tmp/ckb/step-00000010" --save-weights "$tmp/bres.st" \
		>"$tmp/bres.out" 2>"$tmp/bres.err" && cmp -s "$tmp/b1.st" "$tmp/bres.st"; then
	ok "mpirun -np 2, 2bw split over the processes, resumed at step 10: byte-identical to one process"
else
	not_ok "mpirun -np 2, 2bw split resume: differs or failed: $(tail -2 "$tmp/bfull.err") $(tail -2 "$tmp/bres.err")"
fi
if mp 2 "$PIPEHOST" -c "$tiny" --set run.replicas=1 --set run.stages=3 >"$tmp/e3.out" 2>"$tmp/e3.err"; then
	not_ok "3 stages split over 2 processes: mpirun exited 0"
elif grep -q "pipehost: process [01] of 2: .*its 3 stages do not divide among them" "$tmp/e3.err"; then
	ok "3 stages over 2 processes: $(grep -m1 "pipehost: process" "$tmp/e3.err")"
else
	not_ok "3 stages over 2 processes: $(head -c 600 "$tmp/e3.err")"
fi

# a failure in one process at run time stops every process with its line,
# no hang: a layer that fails on purpose (tests/plugins/fail_forward.c) on
# the last stage, process 1's, at its 3rd forward (step 2).  Bad data used
# to be the trigger; the data are now checked before step 1, everywhere.
# cost = flops: a profiler measuring the layers (a fresh cache) would make
# the failing call its own, and training would never fail.
mkdir "$tmp/failplug" && cp "$TEST_PLUGIN_DIR/fail_forward.so" "$tmp/failplug/" # the dir's other plugins are bad on purpose
sed 's/^\[layer loss\]$/[layer fail]\ntype = fail_forward\n[layer loss]/' "$fixtures/tiny-lm.ini" >"$tmp/fail-lm.ini"
printf 'some text for a tiny model to read, over and over. ' >"$tmp/t1.txt"
for _ in 1 2 3 4 5 6; do cat "$tmp/t1.txt" "$tmp/t1.txt" >"$tmp/t2.txt" && mv "$tmp/t2.txt" "$tmp/t1.txt"; done
if timeout 120 sh -c '. "$top_srcdir/tests/mpi-lib.sh"; ph_mpirun 2 -x PIPEHOST_PLUGIN_PATH "$@"' \
	sh env PH_TEST_FAIL_FORWARD=3 "$PIPEHOST" -c "$tmp/fail-lm.ini" --plugin-dir "$tmp/failplug" \
	--set "data.path=$tmp/t1.txt" --set run.replicas=1 --set partition.cost=flops </dev/null >"$tmp/rt.out" 2>"$tmp/rt.err"; then
	not_ok "a failing process: mpirun exited 0"
elif grep -q "pipehost: process 1 of 2: .*fail_forward: failing on purpose at forward call 3" "$tmp/rt.err"; then
	ok "a failing process stops the job: $(grep -m1 'pipehost: process' "$tmp/rt.err")"
else
	not_ok "a failing process: exit $?, $(head -c 600 "$tmp/rt.err")"
fi

# replicas that do not divide among the processes: every process stops
# with the line, and mpirun exits non-zero
if mp 2 "$PIPEHOST" -c "$tiny" --set run.replicas=3 >"$tmp/e.out" 2>"$tmp/e.err"; then
	not_ok "replicas = 3 on 2 processes: mpirun exited 0"
elif grep -q "pipehost: process [01] of 2: .*replicas = 3 does not divide among 2 processes" "$tmp/e.err"; then
	ok "replicas = 3 on 2 processes: $(grep -m1 "pipehost: process" "$tmp/e.err")"
else
	not_ok "replicas = 3 on 2 processes: $(head -c 600 "$tmp/e.err")"
fi

# Processes whose configs differ (each node its own copy of the INI, a
# per-host wrapper adding --set): process 1 stops the job with one line
# naming the first key that differs, before any data, profile or plan
# (core/config_agree.c).  Steps that differ used to hang the job for ever,
# a learning rate or micro-batches to train replicas that silently
# differed, a layer's width to fail with MPI_ERR_TRUNCATE; under timeout,
# so that a hang fails instead of stalling the suite.
# agree_fails DESC WANT OPT0 OPT1: process 0 with --set OPT0, process 1
# with --set OPT1 (an MPMD launch); WANT is process 1's "KEY = V here, W in
# process 0".
agree_fails() {
	timeout 120 sh -c '. "$top_srcdir/tests/mpi-lib.sh"; ph_mpirun 1 -x PIPEHOST_PLUGIN_PATH "$@"' sh \
		"$PIPEHOST" -c "$tiny" --set "$3" : -np 1 "$PIPEHOST" -c "$tiny" --set "$4" </dev/null >"$tmp/ag.out" 2>"$tmp/ag.err"
	rc=$?
	want="pipehost: process 1 of 2: its config differs from process 0's: $2; give every process the same config and --set options"
	if [ "$rc" -eq 0 ]; then
		not_ok "$1: mpirun exited 0"
	elif [ "$rc" -eq 124 ]; then
		not_ok "$1: the job hung (killed after 120 s)"
	elif [ "$(grep -c '^pipehost: ' "$tmp/ag.err")" -eq 1 ] && grep -qxF "$want" "$tmp/ag.err" &&
		! grep -Eq '^(plan|trained|profile)' "$tmp/ag.out"; then
		ok "$1: $want"
	else
		not_ok "$1: exit $rc, $(grep -c '^pipehost: ' "$tmp/ag.err") pipehost line(s): $(head -c 600 "$tmp/ag.err") $(head -3 "$tmp/ag.out")"
	fi
}
agree_fails "steps differ" "run.steps = 4 here, 2 in process 0" run.steps=2 run.steps=4
agree_fails "lr differs" "optimizer.lr = 0.02 here, 0.01 in process 0" optimizer.lr=0.01 optimizer.lr=0.02
agree_fails "a layer's width differs" "layer fc1.units = 8 here, 16 in process 0" "layer fc1.units=16" "layer fc1.units=8"
agree_fails "checkpoints in one process only" "checkpoint.dir = a path here, none in process 0" \
	checkpoint.every=0 checkpoint.dir="$tmp/ag-ck"
# what may differ: each node's own copy of the INI (relative paths resolve
# to other directories), the BLAS threads, and what process 0 alone uses
# (metrics, log_every); process 0 alone writes
mkdir "$tmp/n0" "$tmp/n1"
for d in n0 n1; do sed 's/^\[run\]$/[run]\nsave_weights = w.st/' "$tiny" >"$tmp/$d/run.ini"; done
if timeout 120 sh -c '. "$top_srcdir/tests/mpi-lib.sh"; ph_mpirun 1 -x PIPEHOST_PLUGIN_PATH "$@"' sh \
	"$PIPEHOST" -c "$tmp/n0/run.ini" --set run.threads=1 --set run.metrics="$tmp/ag.jsonl" --set run.log_every=5 : \
	-np 1 "$PIPEHOST" -c "$tmp/n1/run.ini" --set run.threads=2 --set run.log_every=7 </dev/null >"$tmp/agok.out" 2>"$tmp/agok.err" &&
	[ "$(grep -c '^trained 20 steps' "$tmp/agok.out")" -eq 1 ] && [ -f "$tmp/n0/w.st" ] && [ ! -e "$tmp/n1/w.st" ] &&
	[ -s "$tmp/ag.jsonl" ]; then
	ok "the same job with each node's INI, threads, metrics and log_every its own: trains, process 0 writes"
else
	not_ok "keys that may differ: exit $?, $(ls "$tmp/n0" "$tmp/n1" | tr '\n' ' ') $(head -c 600 "$tmp/agok.err")"
fi

# Each node's own copy of the data (data.path may differ), but the copies
# differ: one byte of the corpus.  Trained replicas that silently drifted
# apart; now process 1 stops the job with one line naming what differs,
# before any step, and the same copies in other places still train.
cat "$top_srcdir"/docs/*.md | head -c 60000 >"$tmp/corpus-a.txt"
mkdir "$tmp/other-node"
cp "$tmp/corpus-a.txt" "$tmp/other-node/corpus-a.txt"
cp "$tmp/corpus-a.txt" "$tmp/corpus-b.txt"
printf '\001' | dd of="$tmp/corpus-b.txt" bs=1 seek=30000 conv=notrunc 2>/dev/null
data_mpmd() { # OUT PATH0 PATH1: the tiny LM, 2 steps, each process its own data.path
	timeout 120 sh -c '. "$top_srcdir/tests/mpi-lib.sh"; ph_mpirun 1 -x PIPEHOST_PLUGIN_PATH "$@"' sh \
		"$PIPEHOST" -c "$lm" --set run.steps=2 --set data.path="$2" : \
		-np 1 "$PIPEHOST" -c "$lm" --set run.steps=2 --set data.path="$3" </dev/null >"$tmp/$1.out" 2>"$tmp/$1.err"
}
data_mpmd dd "$tmp/corpus-a.txt" "$tmp/corpus-b.txt"
rc=$?
want='^pipehost: process 1 of 2: its data differ from process 0.s: training data: inputs \(XXH3-64\) = [0-9a-f]{16} here, [0-9a-f]{16} in process 0; give every process the same data files$'
if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ "$(grep -c '^pipehost: ' "$tmp/dd.err")" -eq 1 ] &&
	grep -Eq "$want" "$tmp/dd.err" && ! grep -q '^trained' "$tmp/dd.out"; then
	ok "each process a different corpus: $(grep '^pipehost: ' "$tmp/dd.err" | cut -c1-90)..."
else
	not_ok "each process a different corpus: exit $rc, $(head -c 600 "$tmp/dd.err") $(head -3 "$tmp/dd.out")"
fi
if data_mpmd ds "$tmp/corpus-a.txt" "$tmp/other-node/corpus-a.txt" && grep -q '^trained 2 steps' "$tmp/ds.out"; then
	ok "the same corpus at two paths: trains"
else
	not_ok "the same corpus at two paths: exit $?, $(head -c 600 "$tmp/ds.err")"
fi

# --generate under mpirun: process 0 alone generates and prints (every
# process printed its own "generated" line); the others exit 0 quietly
cat "$top_srcdir"/docs/*.md | head -c 60000 >"$tmp/corpus.txt"
"$PIPEHOST" -c "$lm" --set data.path="$tmp/corpus.txt" --set run.steps=5 --save-weights "$tmp/lmw.st" >/dev/null 2>&1
if mp 2 "$PIPEHOST" -c "$lm" --set data.path="$tmp/corpus.txt" --load-weights "$tmp/lmw.st" --generate "The plan" \
	--max-new-tokens 10 </dev/null >"$tmp/gen.out" 2>"$tmp/gen.err" && [ "$(grep -c '^generated 10 tokens' "$tmp/gen.err")" -eq 1 ] &&
	[ "$(grep -c '^The plan' "$tmp/gen.out")" -eq 1 ]; then
	ok "mpirun -np 2 --generate: one process generates and prints"
else
	not_ok "mpirun -np 2 --generate: exit $?, $(grep -c '^generated' "$tmp/gen.err") 'generated' lines, $(grep -c '^The plan' "$tmp/gen.out") texts: $(head -c 400 "$tmp/gen.err")"
fi
finish
