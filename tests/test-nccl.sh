#!/bin/sh
# SPDX-License-Identifier: MIT
# Pipelines across GPUs: tests/fixtures/tiny.ini (1F1B, 8 micro-batches) on
# 2 and 4 ranks spread over cuda:0 and cuda:1 must save weights
# byte-identical to 1 rank on cuda:0, as test-gpu.sh asks of ranks sharing
# one GPU: the links between GPUs (peer copies) move bytes and change no
# arithmetic.  Then data parallelism: 2 replicas over cuda:0 and cuda:1
# against both on cuda:0, and, where Open MPI and the MPI module are
# (tests/mpi-lib.sh), one replica per process with NCCL between them:
#     mpirun -np 2 pipehost -c tiny.ini --set run.devices=auto
# and one pipeline split over the two processes, its stage links over NCCL
# (and through the host with PIPEHOST_NCCL=0).
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

# Replicas on two GPUs of one process (peer copies and a kernel), then one
# replica per process under mpirun (NCCL sums the two gradients; a sum of
# two floats is the same either way round, so the bits must match too).
# shellcheck disable=SC2086
if train r0 $common --set run.replicas=2 --set run.devices=cuda:0 &&
	train r01 $common --set run.replicas=2 --set run.devices=cuda:0,cuda:1; then
	same_weights "2 replicas on cuda:0 and cuda:1 against both on cuda:0" r0 r01
else
	not_ok "2 replicas over two GPUs: run failed: $(tail -3 "$tmp/r0.log") $(tail -3 "$tmp/r01.log")"
fi
# shellcheck source=tests/mpi-lib.sh
. "$top_srcdir/tests/mpi-lib.sh"
if ! ph_have_mpi; then
	ok "mpirun -np 2 # SKIP $ph_mpi_why"
else
	# devices = auto: each process takes the GPU of its place on the node.
	# One stage, so that each process's replica has a GPU of its own (with
	# tiny.ini's 2 stages both processes would use cuda:0 and cuda:1, and
	# NCCL refuses a communicator whose members share a GPU); the same
	# bits as 2 replicas of 2 stages, since the links change no arithmetic.
	# shellcheck disable=SC2086
	if ph_mpirun 2 -x PIPEHOST_PLUGIN_PATH -x PIPEHOST_CUDA_BACKEND "$PIPEHOST" -c "$fixtures/tiny.ini" $common \
		--set run.stages=1 --set run.devices=auto --save-weights "$tmp/mpi.st" </dev/null >"$tmp/mpi.log" 2>&1; then
		desc="mpirun -np 2, a replica per process on cuda:0 and cuda:1"
		if grep -q '^replicas: gradients summed through host memory.*without NCCL' "$tmp/mpi.log"; then
			same_weights "$desc (sum: the host, a build without NCCL)" r0 mpi
		elif grep -q '^replicas: gradients summed through host memory' "$tmp/mpi.log"; then
			not_ok "$desc: the sum did not go over NCCL: $(grep -m1 '^replicas:' "$tmp/mpi.log")"
		else
			same_weights "$desc (sum: NCCL)" r0 mpi
		fi
	else
		not_ok "mpirun -np 2: run failed: $(tail -3 "$tmp/mpi.log")"
	fi

	# One pipeline split over the two processes, each on its own GPU:
	# the stage links go GPU to GPU over NCCL (engine-links-nccl.c), or
	# with PIPEHOST_NCCL=0 through host memory over MPI; either way the
	# same bytes as 1 rank on cuda:0.  Interleaved with 2 chunks a rank,
	# three of the three links cross between the processes, both ways.
	#     mpirun -np 2 pipehost -c tiny.ini --set run.stages=2 --set run.devices=auto
	# In bf16 the products' operands are staged in buffers that grow in the
	# first step (core/cuda/bf16_operands.cu) while the links' messages are
	# queued: a cudaFree there would wait for NCCL's kernels, and they for
	# the peer (the emulator refuses it), so the buffers grow in stream order.
	train n1b $common --set run.stages=1 --set run.devices=cuda:0 --set run.precision=bf16 ||
		not_ok "1 rank on cuda:0 in bf16: run failed: $(tail -3 "$tmp/n1b.log")"
	# a device without a memory pool grows them through cudaFree (one process: no NCCL)
	if [ -n "${PH_CUEMU:-}" ]; then
		if PH_CUEMU_NO_POOLS=1 train n1bf $common --set run.stages=1 --set run.devices=cuda:0 --set run.precision=bf16; then
			same_weights "bf16 without a memory pool (PH_CUEMU_NO_POOLS)" n1b n1bf
		else
			not_ok "bf16 without a memory pool: run failed: $(tail -3 "$tmp/n1bf.log")"
		fi
	fi
	"$PIPEHOST" -c "$fixtures/tiny-lm.ini" $common --set run.steps=4 --set run.stages=1 --set run.devices=cuda:0 \
		--set run.precision=bf16 --save-weights "$tmp/lm1b.st" </dev/null >"$tmp/lm1b.log" 2>&1 ||
		not_ok "tiny-lm, 1 rank on cuda:0 in bf16: run failed: $(tail -3 "$tmp/lm1b.log")"
	while read -r sname nccl want ref ini opts; do
		# shellcheck disable=SC2086 # $common and $opts are lists of options
		if PIPEHOST_NCCL=$nccl ph_mpirun 2 -x PIPEHOST_PLUGIN_PATH -x PIPEHOST_CUDA_BACKEND -x PIPEHOST_NCCL \
			"$PIPEHOST" -c "$fixtures/$ini" $common --set run.replicas=1 --set run.devices=auto $opts \
			--save-weights "$tmp/$sname.st" </dev/null >"$tmp/$sname.log" 2>&1; then
			desc="mpirun -np 2, one pipeline ($opts) split over cuda:0 and cuda:1"
			if [ "$want" = nccl ] && ! grep -q '^links: between processes over NCCL' "$tmp/$sname.log"; then
				if grep -q '^links: .*without NCCL' "$tmp/$sname.log"; then
					ok "$desc # SKIP $(grep -m1 '^links:' "$tmp/$sname.log")"
					continue
				fi
				not_ok "$desc: the links did not go over NCCL: $(grep -m1 '^links:' "$tmp/$sname.log")"
			elif [ "$want" = host ] && ! grep -q '^links: .*through host memory over MPI, not NCCL: PIPEHOST_NCCL=0' "$tmp/$sname.log"; then
				not_ok "$desc, PIPEHOST_NCCL=0: no line saying the links go through the host"
			fi
			same_weights "$desc, links over $want" "$ref" "$sname"
		else
			not_ok "mpirun -np 2, split pipeline ($opts): run failed: $(tail -3 "$tmp/$sname.log")"
		fi
	done <<'EOF2'
lk2 1 nccl n1 tiny.ini --set run.stages=2
lk2h 0 host n1 tiny.ini --set run.stages=2
lk4 1 nccl n1 tiny.ini --set run.stages=2 --set run.chunks=2 --set schedule.type=interleaved
lk2b 1 nccl n1b tiny.ini --set run.stages=2 --set run.precision=bf16
lk4b 1 nccl lm1b tiny-lm.ini --set run.steps=4 --set run.stages=2 --set run.chunks=2 --set schedule.type=interleaved --set run.precision=bf16
EOF2

	# Four replicas, two a process, a GPU each (the emulator makes 4 for
	# this run): peer copies add each process's two, NCCL the processes'
	# sums, (r0 + r1) + (r2 + r3) where one process adds ((r0 + r1) + r2)
	# + r3, so the weights agree to rounding, not to the bit.
	desc="mpirun -np 2, 4 replicas (2 a process), a GPU each"
	if [ -z "${PH_CUEMU:-}" ] && [ "$(gpu_count)" -lt 4 ]; then
		ok "$desc # SKIP needs 4 GPUs; nvidia-smi -L lists $(gpu_count)"
	elif ! command -v python3 >/dev/null 2>&1; then
		ok "$desc # SKIP no python3 to compare safetensors files"
	# shellcheck disable=SC2086 # $common is a list of options
	elif train r4 $common --set run.stages=1 --set run.replicas=4 --set run.devices=cuda:0 &&
		PH_CUEMU_DEVICES=4 ph_mpirun 2 -x PIPEHOST_PLUGIN_PATH -x PIPEHOST_CUDA_BACKEND -x PH_CUEMU_DEVICES \
			"$PIPEHOST" -c "$fixtures/tiny.ini" $common --set run.stages=1 --set run.replicas=4 \
			--set run.devices=auto --save-weights "$tmp/r4m.st" </dev/null >"$tmp/r4m.log" 2>&1; then
		d=$(python3 "$top_srcdir/tests/st-diff.py" "$tmp/r4.st" "$tmp/r4m.st")
		if grep -q '^replicas: gradients summed through host memory' "$tmp/r4m.log" &&
			! grep -q 'without NCCL' "$tmp/r4m.log"; then
			not_ok "$desc: the sum did not go over NCCL: $(grep -m1 '^replicas:' "$tmp/r4m.log")"
		elif awk "BEGIN { exit !(${d%% *} <= 1e-5) }"; then
			ok "$desc: weights within $d of 4 replicas in one process"
		else
			not_ok "$desc: weights differ from 4 replicas in one process by '$d'"
		fi
	else
		not_ok "$desc: run failed: $(grep -v '^-\|^\s*$' "$tmp/r4m.log" | tail -2)"
	fi

	# Two replicas, each split over two processes, a GPU each: the links
	# and the replicas' sum (a communicator per rank over the replicas)
	# over NCCL; the bits of the 2 replicas in one process.  Needs 4 GPUs
	# (the emulator makes 4 for this run).
	#     mpirun -np 4 pipehost -c tiny.ini --set run.replicas=2 --set run.stages=2 --set run.devices=auto
	desc="mpirun -np 4, 2 replicas each split over 2 processes, a GPU each"
	if [ -z "${PH_CUEMU:-}" ] && [ "$(gpu_count)" -lt 4 ]; then
		ok "$desc # SKIP needs 4 GPUs; nvidia-smi -L lists $(gpu_count)"
	# shellcheck disable=SC2086 # $common is a list of options
	elif PH_CUEMU_DEVICES=4 ph_mpirun 4 -x PIPEHOST_PLUGIN_PATH -x PIPEHOST_CUDA_BACKEND -x PH_CUEMU_DEVICES \
		"$PIPEHOST" -c "$fixtures/tiny.ini" $common --set run.replicas=2 --set run.devices=auto \
		--save-weights "$tmp/sp4.st" </dev/null >"$tmp/sp4.log" 2>&1; then
		if grep -q 'without NCCL' "$tmp/sp4.log"; then
			ok "$desc # SKIP $(grep -m1 'without NCCL' "$tmp/sp4.log")"
		elif ! grep -q '^links: between processes over NCCL' "$tmp/sp4.log" ||
			grep -q '^replicas: gradients summed through host memory' "$tmp/sp4.log"; then
			not_ok "$desc: not over NCCL: $(grep '^links:\|^replicas:' "$tmp/sp4.log" | tr '\n' ' ')"
		else
			same_weights "$desc, links and sum over NCCL" r0 sp4
		fi
	else
		not_ok "$desc: run failed: $(grep -v '^-\|^\s*$' "$tmp/sp4.log" | tail -2)"
	fi
fi
finish
