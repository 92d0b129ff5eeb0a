#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# CI, the CUDA code on the CPU: build against the CUDA emulator
# (tests/cuemu, configure --enable-cuda-emulator, which emulates NCCL too:
# its processes meet over unix-domain sockets) in a separate directory and
# run the GPU suites there, which skip in every other build of a machine
# without a GPU:
#   test-cuemu.sh       the emulator's own checks, NCCL's between two processes
#   test-cuda-sums.sh   the split column sums against a host replay, bitwise
#   test-cuda-layers    every layer's CUDA twin against its CPU twin
#   test-gpu.sh         4 ranks on one GPU against 1 rank, schedules, bf16
#   test-nccl.sh        two (emulated) GPUs in one process, then one replica
#                       per process under mpirun with NCCL's sums between them
#   test-expert-parallel-gpu.sh  experts split over two GPUs (replica groups)
#   test-moe-gpu.sh     the MoE MLP on the GPU against the CPU, R = 2, bf16
#   test-gpu-switches.sh  the [gpu] keys reach the kernels' switches
#   test-out-of-tree.sh a third party's layer with its CUDA twin, built
#                       against the installed headers, trained on cuda:0
#   test-check-plugin.sh  pipehost --check-plugin, its twin check included:
#                       every twin of plugins/ against its CPU code, and a
#                       test twin broken two ways
# three times: threads of a block run forward, reversed and shuffled
# between barriers, so a kernel with a race gives different bits and fails
# the byte-for-byte checks.
#
#   .ci/cuemu.sh [BUILD_ROOT]      (default: $TMPDIR/pipehost-cuemu)
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
root=${1:-${TMPDIR:-/tmp}/pipehost-cuemu}
jobs=$(nproc 2>/dev/null || echo 2)

[ -x "$src/configure" ] || (cd "$src" && autoreconf -fi)
mkdir -p "$root"
cd "$root"
"$src/configure" -q --enable-cuda-emulator
make -j"$jobs"
suites="tests/test-cuemu.sh tests/test-cuda-sums.sh tests/test-cuda-layers tests/test-gpu.sh tests/test-nccl.sh tests/test-gpu-switches.sh tests/test-out-of-tree.sh tests/test-expert-parallel-gpu.sh tests/test-moe-gpu.sh tests/test-check-plugin.sh"
for order in forward reverse shuffle; do
	if ! PH_CUEMU_ORDER=$order PH_CUEMU_DEVICES=2 make -j"$jobs" check TESTS="$suites" >"check-$order.log" 2>&1; then
		cat "check-$order.log"
		for t in $suites; do
			echo "=== $t ($order)"
			tail -40 "${t%.sh}.log"
		done
		exit 1
	fi
	# every suite must have run: a SKIP here means the emulator build broke
	if grep -q '^SKIP:' "check-$order.log"; then
		grep '^SKIP:' "check-$order.log"
		for t in $suites; do tail -3 "${t%.sh}.log"; done
		echo "cuemu: a GPU suite skipped in the emulator build"
		exit 1
	fi
	echo "cuemu ($order): $(grep -c '^PASS:' "check-$order.log") GPU suites pass"
done
