# SPDX-License-Identifier: MIT
# shellcheck shell=sh
# What the GPU benchmarks check before they run; sourced by
# bench/gpt2-124m.sh, bench/fashion-mnist-gpu.sh and bench/gpt2-kernels.sh.

# need_pipehost SCRIPT BIN: exit 1 with one line unless BIN is executable.
need_pipehost() {
	[ -x "$2" ] || {
		echo "$1: no pipehost at $2; pass the build directory" >&2
		exit 1
	}
}

# need_gpu SCRIPT WHY: exit 77 (skipped) with one line unless nvidia-smi -L
# lists a GPU; WHY says what running without one would mean.  Leaves the
# count in ngpu.
need_gpu() {
	ngpu=0
	command -v nvidia-smi >/dev/null 2>&1 && ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
	if [ "$ngpu" -lt 1 ]; then
		echo "$1: no GPU (nvidia-smi -L lists none)$2"
		exit 77
	fi
}
