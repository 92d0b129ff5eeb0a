#!/bin/sh
# SPDX-License-Identifier: MIT
# The asynchronous schedules against 1f1b on the same job: the
# etc/gpt-fortunes.ini model on 4 ranks (batch 32 in 8 micro-batches, one
# BLAS thread per rank, no recomputation), STEPS steps after WARMUP, run
# A/B/A/B back to back (ROUNDS rounds) so that a shared machine's load
# falls on both.  Prints each schedule's median step time and samples/s
# from the metrics file's elapsed_s, its ratio to 1f1b, and --simulate's
# predicted ratio (its steady state, no flush, against a flush every step).
# pipedream runs without the tie and the clip it cannot have.
#     bench/async-schedules.sh [BUILD_DIR]
# Environment: STEPS (default 20), WARMUP (3), ROUNDS (2).
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$top}
bin="$build/pipehost"
ini="$top/etc/gpt-fortunes.ini"
steps=${STEPS:-20}
warm=${WARMUP:-3}
rounds=${ROUNDS:-2}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
[ -x "$bin" ] || { echo "async-schedules.sh: no pipehost at $bin; pass the build directory" >&2; exit 1; }
common="--set run.stages=4 --set run.threads=1 --set run.recompute=no --set run.eval=no --set run.micro_batches=8
	--set run.batch=32 --set run.steps=$((steps + warm + 1)) --set run.log_every=1"

step_times() { # metrics file -> one step time (s) a line, after the warm-up
	sed -n 's/.*"elapsed_s":\([0-9.]*\).*/\1/p' "$1" | awk -v w="$warm" 'NR > 1 { if (++n > w) print $1 - p } { p = $1 }'
}
median() { sort -g | awk '{ x[n++] = $1 } END { printf "%.4f", n % 2 ? x[int(n / 2)] : (x[n / 2 - 1] + x[n / 2]) / 2 }'; }

for r in $(seq "$rounds"); do
	for s in 1f1b 2bw pipedream; do
		extra=""
		[ "$s" = pipedream ] && extra="--set optimizer.clip=0 --set layer.head.tie="
		# shellcheck disable=SC2086
		if ! "$bin" -c "$ini" $common $extra --set schedule.type=$s --set "run.metrics=$tmp/m.jsonl" \
			>"$tmp/out" 2>&1 </dev/null; then
			echo "async-schedules.sh: $s failed:" >&2
			tail -3 "$tmp/out" >&2
			exit 1
		fi
		step_times "$tmp/m.jsonl" >>"$tmp/$s.times"
		rm -f "$tmp/m.jsonl"
	done
done
predicted() { # schedule -> --simulate's steady-state ratio
	# shellcheck disable=SC2086
	"$bin" -c "$ini" $common --set schedule.type="$1" --simulate 2>/dev/null |
		sed -n 's/.*a step, \([0-9.]*\)x the throughput.*/\1/p'
}
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
echo "CPU: ${cpu:-unknown}, $(nproc) cores; median of $rounds x $steps steps after $warm warm-up; 4 ranks, batch 32, 8 micro-batches"
echo
printf '| schedule | s/step | samples/s | / 1f1b | --simulate predicts |\n|---|---:|---:|---:|---:|\n'
base=$(median <"$tmp/1f1b.times")
for s in 1f1b 2bw pipedream; do
	t=$(median <"$tmp/$s.times")
	p=$([ "$s" = 1f1b ] && echo 1 || predicted "$s")
	awk -v n="$s" -v t="$t" -v b="$base" -v p="$p" \
		'BEGIN { printf "| %s | %.3f | %.1f | %.3f | %sx |\n", n, t, 32 / t, b / t, p }'
done
