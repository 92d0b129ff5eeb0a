#!/bin/sh
# Several processes (mpirun -np N pipehost, core/comm.h) on the CPU: each
# process runs its share of the replicas and the processes gather every
# replica's gradient (MPI) and sum them in replica order, so
#  - mpirun -np 2 gives the same bits as 2 replicas in one process, and
#    -np 2 with 4 replicas as 4 in one;
#  - only process 0 writes: one progress stream, one checkpoint, one file
#    of weights; resuming under mpirun continues bit for bit;
#  - a bad request stops every process with one line saying what to do.
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
if mp 2 "$PIPEHOST" -c "$tiny" --set run.replicas=4 --set run.stages=3 --set schedule.type=gpipe \
	--save-weights "$tmp/m4.st" >"$tmp/m4.out" 2>"$tmp/m4.err" && cmp -s "$tmp/r4.st" "$tmp/m4.st"; then
	ok "mpirun -np 2, 4 replicas of 3 stages (gpipe): byte-identical to 4 replicas of 2 stages in one process"
else
	not_ok "mpirun -np 2, 4 replicas: differs or failed: $(tail -3 "$tmp/m4.err")"
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

# replicas that do not divide among the processes: every process stops
# with the line, and mpirun exits non-zero
if mp 2 "$PIPEHOST" -c "$tiny" --set run.replicas=3 >"$tmp/e.out" 2>"$tmp/e.err"; then
	not_ok "replicas = 3 on 2 processes: mpirun exited 0"
elif grep -q "pipehost: process 0 of 2: .*replicas = 3 does not divide among 2 processes" "$tmp/e.err"; then
	ok "replicas = 3 on 2 processes: $(grep -m1 'pipehost: process 0' "$tmp/e.err")"
else
	not_ok "replicas = 3 on 2 processes: $(head -c 600 "$tmp/e.err")"
fi
finish
