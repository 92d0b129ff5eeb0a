#!/bin/sh
# SPDX-License-Identifier: MIT
# Expert parallelism on GPUs (tests/test-expert-parallel.sh on the CPU):
# ep_linear's CUDA twin with its 4 experts split over 2 replicas whose
# exchanges are the replica group's device copies (core/engine-group.c):
#  - 2 replicas on cuda:0 and cuda:1 give the same bits as both on cuda:0
#    (the copies between GPUs move bytes and change no sum), and 4 over the
#    two GPUs the same bits as 4 on cuda:0;
#  - R = 2 and R = 4 train the model R = 1 trains, to 1e-4 relative;
#  - the GPU trains the model the CPU trains, to 1e-4 relative;
#  - a figure the twin gives in device memory (report_device, ABI 1.8:
#    queued behind the kernel that writes it) averages as the same figure
#    read back and given to report, on one GPU and two, and in a step of
#    more figures than the host's ring holds;
#  - under mpirun without NCCL the exchange is refused in one line; with
#    NCCL (all-to-all over ncclSend/ncclRecv, one replica a process on its
#    own GPU) it gives the bits of the 2 replicas on cuda:0 and cuda:1.
# Skips (77) without two GPUs (the emulator's count: .ci/cuemu.sh).
. "$top_srcdir/tests/lib.sh"
. "$top_srcdir/tests/gpu-lib.sh"
need_gpus 2
ini="$fixtures/ep.ini"
PIPEHOST_PLUGIN_PATH="$TEST_PLUGIN_DIR:${PIPEHOST_PLUGIN_PATH:-}"
export PIPEHOST_PLUGIN_PATH
command -v python3 >/dev/null 2>&1 || skip "no python3 to compare safetensors files"

ep() { # ep NAME R DEVICES [ARGS]: 20 steps of ep.ini, one stage
	name=$1 R=$2 devs=$3
	shift 3
	"$PIPEHOST" -c "$ini" --set run.stages=1 --set run.replicas="$R" --set run.micro_batches=$((4 / R)) \
		--set optimizer.clip=0.05 --set run.devices="$devs" --set run.log_every=1 \
		--set run.metrics="$tmp/$name.jsonl" --save-weights "$tmp/$name.st" "$@" </dev/null >"$tmp/$name.log" 2>&1 ||
		not_ok "$name: R = $R on $devs failed: $(tail -3 "$tmp/$name.log")"
}
ep g1 1 cuda:0
ep g2a 2 cuda:0
ep g2b 2 cuda:0,cuda:1
ep g4a 4 cuda:0
ep g4b 4 cuda:0,cuda:1,cuda:0,cuda:1
ep c2 2 cpu
for pair in "g2a g2b" "g4a g4b"; do
	set -- $pair
	if cmp -s "$tmp/$1.st" "$tmp/$2.st"; then
		ok "$2: experts over two GPUs give the same bits as on one ($1)"
	else
		not_ok "$2 against $1: weights differ"
	fi
done
for pair in "g1 g2b" "g1 g4b" "c2 g2b"; do
	set -- $pair
	d=$(python3 "$top_srcdir/tests/st-diff.py" "$tmp/$1.st" "$tmp/$2.st")
	if awk "BEGIN { exit !(${d%% *} <= 1e-4) }"; then
		ok "$2 against $1: weights within $d"
	else
		not_ok "$2 against $1: weights differ by '$d'"
	fi
done
# across processes the experts' exchange needs NCCL: without it (here
# PIPEHOST_NCCL=0, or a build without NCCL) the job stops in one line
# shellcheck source=tests/mpi-lib.sh
. "$top_srcdir/tests/mpi-lib.sh"
if ! ph_have_mpi; then
	ok "experts across processes without NCCL # SKIP $ph_mpi_why"
elif PIPEHOST_NCCL=0 ph_mpirun 2 -x PIPEHOST_PLUGIN_PATH -x PIPEHOST_CUDA_BACKEND -x PIPEHOST_NCCL "$PIPEHOST" \
	-c "$ini" --set run.stages=1 --set run.replicas=2 --set run.micro_batches=2 --set run.devices=auto \
	</dev/null >"$tmp/epm.log" 2>&1; then
	not_ok "experts across processes without NCCL: mpirun exited 0"
elif grep -q 'pipehost: process [01] of 2: .*replica-group collectives between processes on GPUs run over NCCL' "$tmp/epm.log"; then
	ok "experts across processes without NCCL: refused in one line"
else
	not_ok "experts across processes without NCCL: $(grep -v '^-\|^\s*$' "$tmp/epm.log" | head -2)"
fi
if ph_have_mpi; then
	if ph_mpirun 2 -x PIPEHOST_PLUGIN_PATH -x PIPEHOST_CUDA_BACKEND "$PIPEHOST" -c "$ini" --set run.stages=1 \
		--set run.replicas=2 --set run.micro_batches=2 --set optimizer.clip=0.05 --set run.devices=auto \
		--save-weights "$tmp/epn.st" </dev/null >"$tmp/epn.log" 2>&1; then
		if cmp -s "$tmp/g2b.st" "$tmp/epn.st"; then
			ok "experts across 2 processes over NCCL give the bits of g2b (one process, cuda:0 and cuda:1)"
		else
			not_ok "experts across 2 processes over NCCL: weights differ from g2b"
		fi
	elif grep -q 'without NCCL' "$tmp/epn.log"; then
		ok "experts across processes over NCCL # SKIP $(grep -m1 'without NCCL' "$tmp/epn.log")"
	else
		not_ok "experts across 2 processes over NCCL: $(grep -v '^-\|^\s*$' "$tmp/epn.log" | tail -2)"
	fi
fi
# ep.y0 (read back, report) and ep.y0_at (report_device): one figure
y0_same() { # y0_same NAME STEPS: every step's two means equal, and they change
	v=$(sed -n 's/.*"ep.y0":\([-+0-9.e]*\),"ep.y0_at":\([-+0-9.e]*\)}.*/\1 \2/p' "$tmp/$1.jsonl" |
		awk '$1 == $2 { same++ } { seen[$1] = 1 } END { n = 0; for (k in seen) n++; print NR, same + 0, n }')
	# shellcheck disable=SC2086 # three counts
	set -- $v "$2"
	[ "$1" = "$4" ] && [ "$2" = "$4" ] && [ "$3" -gt $(($4 / 2)) ]
}
for name in g1 g2b g4b c2; do
	if y0_same "$name" 20; then
		ok "$name: report_device's mean is report's at every step"
	else
		not_ok "$name: ep.y0 against ep.y0_at (steps, equal, different): '$v': $(head -1 "$tmp/$name.jsonl")"
	fi
done
# 1100 micro-batches of one sample: more figures in a step than the
# group's ring of 1024 on the GPU holds (read back when full)
ep ring 1 cuda:0 --set data.samples=2200 --set run.batch=1100 --set run.micro_batches=1100 --set run.steps=2
if y0_same ring 2; then
	ok "1100 figures a step on one GPU: report_device's mean is report's"
else
	not_ok "1100 figures a step: ep.y0 against ep.y0_at (steps, equal, different): '$v': $(head -1 "$tmp/ring.jsonl")"
fi
if grep -q 'ep.load_max 0.25' "$tmp/g2b.log"; then
	ok "the layer's figures from the GPUs: $(grep -m1 -o 'ep.load_max [0-9.]* ep.tokens [0-9]*' "$tmp/g2b.log")"
else
	not_ok "no ep.load_max in the progress lines: $(grep -m1 'step' "$tmp/g2b.log")"
fi
finish
