#!/bin/sh
# SPDX-License-Identifier: MIT
# Pipeline, replicas and processes on the CPU: the etc/gpt-fortunes.ini model
# (byte GPT, d = 128, 4 blocks, T = 128; batch 32 in 8 micro-batches, one
# BLAS thread per rank, no recomputation) run as two workers four ways:
#   2 stages in one process (the anchor: a pipeline, 1F1B),
#   2 replicas of 1 stage in one process (gradients summed in memory),
#   2 replicas under mpirun -np 2 (gradients gathered over MPI),
#   2 stages split over mpirun -np 2 (activations and gradients over MPI).
# Prints the median step time over STEPS steps after WARMUP, from the
# metrics file's elapsed_s, and each figure's ratio to the anchor.  The
# four runs train the same model: the pipeline and the split pipeline give
# byte-identical weights, the replicas the same to rounding.
#     bench/parallel-cpu.sh [BUILD_DIR]
# Needs Open MPI's mpirun and a build with the MPI module for the last two
# rows (skipped otherwise).  Environment: STEPS (default 30), WARMUP (5).
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$top}
bin="$build/pipehost"
ini="$top/etc/gpt-fortunes.ini"
steps=${STEPS:-30}
warm=${WARMUP:-5}
# shellcheck source=bench/args-lib.sh
. "$top/bench/args-lib.sh"
need_count parallel-cpu.sh STEPS "$steps" 1
need_count parallel-cpu.sh WARMUP "$warm" 0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
[ -x "$bin" ] || { echo "parallel-cpu.sh: no pipehost at $bin; pass the build directory" >&2; exit 1; }
top_builddir=$build
export top_builddir
# shellcheck source=tests/mpi-lib.sh
. "$top/tests/mpi-lib.sh"
common="--set run.threads=1 --set run.recompute=no --set run.eval=no --set run.micro_batches=8 --set run.batch=32
	--set run.steps=$((steps + warm + 1)) --set run.log_every=1 --set run.metrics=$tmp/m.jsonl"

median_ms() { # the metrics file -> median step time in ms after the warm-up
	sed -n 's/.*"elapsed_s":\([0-9.]*\).*/\1/p' "$tmp/m.jsonl" |
		awk -v w="$warm" 'NR > 1 { d[n++] = $1 - p } { p = $1 }
			END { for (i = w; i < n; i++) x[k++] = d[i]
			      for (i = 0; i < k; i++) for (j = i + 1; j < k; j++) if (x[j] < x[i]) { t = x[i]; x[i] = x[j]; x[j] = t }
			      printf "%.1f", 1000 * (k % 2 ? x[int(k / 2)] : (x[k / 2 - 1] + x[k / 2]) / 2) }'
}

run() { # desc, then the command's arguments after the config
	desc=$1
	shift
	rm -f "$tmp/m.jsonl"
	# shellcheck disable=SC2086 # $common is a list of options
	if ! "$@" >"$tmp/out" 2>&1 </dev/null; then
		echo "parallel-cpu.sh: $desc failed:" >&2
		tail -5 "$tmp/out" >&2
		exit 1
	fi
	ms=$(median_ms)
	[ -n "${anchor:-}" ] || anchor=$ms
	awk -v n="$desc" -v a="$ms" -v b="$anchor" 'BEGIN { printf "| %s | %.1f | %.2f |\n", n, a, a / b }'
}

cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
echo "CPU: ${cpu:-unknown}, $(nproc) cores; median of $steps steps after $warm warm-up; batch 32 x 128 bytes, 8 micro-batches"
echo
printf '| two workers as | ms/step | / pipeline |\n|---|---:|---:|\n'
# shellcheck disable=SC2086
run "2 stages, 1 process (1F1B)" "$bin" -c "$ini" $common --set run.stages=2
# shellcheck disable=SC2086
run "2 replicas of 1 stage, 1 process" "$bin" -c "$ini" $common --set run.stages=1 --set run.replicas=2
if ph_have_mpi; then
	# shellcheck disable=SC2086
	run "2 replicas, mpirun -np 2" ph_mpirun 2 "$bin" -c "$ini" $common --set run.stages=1
	# shellcheck disable=SC2086
	run "2 stages split over mpirun -np 2" ph_mpirun 2 "$bin" -c "$ini" $common --set run.stages=2 \
		--set run.replicas=1
else
	echo "(mpirun rows skipped: $ph_mpi_why)"
fi
