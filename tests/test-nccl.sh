#!/bin/sh
# Pipelines across GPUs: tests/fixtures/tiny.ini (1F1B, 8 micro-batches) on
# 2 and 4 ranks spread over cuda:0 and cuda:1 must save weights
# byte-identical to 1 rank on cuda:0, as test-gpu.sh asks of ranks sharing
# one GPU: the links between GPUs (NCCL send/recv or peer copies) move bytes
# and change no arithmetic.  Where mpirun exists and pipehost --version
# names MPI (or PH_TEST_MPI=1), the same with one process per rank:
#     mpirun -np 2 pipehost -c tiny.ini --set run.stages=2 --set run.devices=cuda:0,cuda:1
# where MPI rank 0 is assumed to write --save-weights.
# Skips (exit 77) unless nvidia-smi -L lists 2 GPUs and pipehost runs a job
# on cuda:0; a run that fails saying "without NCCL" skips that check alone.
# shellcheck disable=SC2154 # make check sets top_srcdir
. "$top_srcdir/tests/lib.sh"
# shellcheck source=tests/gpu-lib.sh
. "$top_srcdir/tests/gpu-lib.sh"
need_gpus 2

common="--set run.micro_batches=8 --set schedule.type=1f1b"

# shellcheck disable=SC2086 # $common is a list of options
if train n1 $common --set run.stages=1 --set run.devices=cuda:0; then
	ok "reference: 1 rank on cuda:0 (loss $(loss_at n1 1) -> $(loss_at n1 last))"
else
	not_ok "1 rank on cuda:0: run failed: $(tail -3 "$tmp/n1.log")"
fi

while read -r name devs; do
	stages=$(echo "$devs" | tr ',' '\n' | wc -l)
	desc="$stages ranks on $devs"
	# shellcheck disable=SC2086
	if train "$name" $common --set run.stages="$stages" --set run.devices="$devs"; then
		same_weights "$desc" n1 "$name"
	elif grep -q 'without NCCL' "$tmp/$name.log"; then
		ok "$desc # SKIP $(grep -m1 'without NCCL' "$tmp/$name.log")"
	else
		not_ok "$desc: run failed: $(tail -3 "$tmp/$name.log")"
	fi
done <<'EOF'
n2 cuda:0,cuda:1
n4 cuda:0,cuda:1,cuda:0,cuda:1
n4b cuda:0,cuda:0,cuda:1,cuda:1
EOF

# one process per rank
if ! command -v mpirun >/dev/null 2>&1; then
	ok "mpirun -np 2 # SKIP no mpirun on PATH"
elif ! "$PIPEHOST" --version 2>&1 | grep -qi mpi && [ "${PH_TEST_MPI:-0}" != 1 ]; then
	ok "mpirun -np 2 # SKIP pipehost --version names no MPI support (PH_TEST_MPI=1 runs it anyway)"
else
	# Open MPI refuses root without these; MPICH ignores them
	# shellcheck disable=SC2086
	if OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun -np 2 \
		"$PIPEHOST" -c "$fixtures/tiny.ini" $common --set run.stages=2 --set run.devices=cuda:0,cuda:1 \
		--save-weights "$tmp/mpi.st" </dev/null >"$tmp/mpi.log" 2>&1; then
		same_weights "mpirun -np 2, one rank per process on cuda:0 and cuda:1" n1 mpi
	else
		not_ok "mpirun -np 2: run failed: $(tail -3 "$tmp/mpi.log")"
	fi
fi
finish
