#!/bin/sh
# SPDX-License-Identifier: MIT
# Does a pipeline turn cores into speed?  The same job (default
# etc/gpt-fortunes.ini, whose 4 blocks cut evenly in two) as 1 stage on 1
# core (1 rank x 1 BLAS thread) and as 2 stages (2 ranks x 1 thread, the
# dp cut on measured costs), back to back; prints the median step time of
# each over STEPS steps after WARMUP (from the metrics file's elapsed_s),
# the speedup and the 1F1B ideal 2m / (m + 1) for m micro-batches (the
# bubble: each rank idles for one micro-batch's work at each end).
# Target on 2 free cores: >= 1.8x with m = 16 (ideal 1.88x).
#     bench/pipeline-speedup.sh [BUILD_DIR] [INI] [--set ...]
# Environment: STEPS (default 30), WARMUP (5), ROUNDS (3): the two runs
# alternate ROUNDS times and the speedup is the median of the rounds'
# speedups, because a shared 2-core VM's speed drifts from minute to
# minute (1 stage took 205-235 ms a step over one afternoon of
# 2026-12-04), and a 1-stage run and the 2-stage run right after it see
# more nearly the same machine than two medians taken apart do.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$top}
ini=${2:-$top/etc/gpt-fortunes.ini}
[ $# -ge 2 ] && shift 2 || shift $#
bin="$build/pipehost"
steps=${STEPS:-30}
warm=${WARMUP:-5}
rounds=${ROUNDS:-3}
# shellcheck source=bench/args-lib.sh
. "$top/bench/args-lib.sh"
need_count pipeline-speedup.sh STEPS "$steps" 1
need_count pipeline-speedup.sh WARMUP "$warm" 0
need_count pipeline-speedup.sh ROUNDS "$rounds" 1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
[ -x "$bin" ] || { echo "pipeline-speedup.sh: no pipehost at $bin; pass the build directory" >&2; exit 1; }

median() { # FORMAT; numbers, one per line -> their median, printed with FORMAT
	sort -n | awk -v f="$1" '{ x[n++] = $1 } END { printf f, n % 2 ? x[int(n / 2)] : (x[n / 2 - 1] + x[n / 2]) / 2 }'
}
median_ms() { # METRICS -> the median step time after the warm-up, ms
	sed -n 's/.*"elapsed_s":\([0-9.]*\).*/\1/p' "$1" |
		awk -v w="$warm" 'NR > 1 && n++ >= w { print 1000 * ($1 - p) } { p = $1 }' | median %.1f
}
run() { # STAGES [--set ...] -> median ms
	st=$1
	shift
	rm -f "$tmp/m.jsonl"
	"$bin" -c "$ini" --set run.stages="$st" --set run.threads=1 --set run.eval=no --set run.log_every=1 \
		--set run.steps=$((steps + warm + 1)) --set run.metrics="$tmp/m.jsonl" \
		--set partition.profile_cache="$tmp/cache" --progress=none "$@" >"$tmp/out.txt" 2>&1 ||
		{ cat "$tmp/out.txt" >&2; exit 1; }
	median_ms "$tmp/m.jsonl"
}

: >"$tmp/ones"
: >"$tmp/twos"
: >"$tmp/ratios"
r=1
while [ "$r" -le "$rounds" ]; do
	one=$(run 1 "$@")
	two=$(run 2 "$@")
	ratio=$(awk -v a="$one" -v b="$two" 'BEGIN { printf "%.4f", a / b }')
	echo "$one" >>"$tmp/ones"
	echo "$two" >>"$tmp/twos"
	echo "$ratio" >>"$tmp/ratios"
	awk -v r="$r" -v a="$one" -v b="$two" -v s="$ratio" 'BEGIN { printf "round %d: 1 stage %.1f, 2 stages %.1f ms/step, speedup %.2fx\n", r, a, b, s }'
	r=$((r + 1))
done
one=$(median %.1f <"$tmp/ones")
two=$(median %.1f <"$tmp/twos")
m=$(sed -n 's/^plan: .* \([0-9]*\) micro-batches.*/\1/p' "$tmp/out.txt")
grep '^  [0-9]' "$tmp/out.txt" || true
echo "1 stage x 1 thread:  $one ms/step (median of $rounds)"
echo "2 stages x 1 thread: $two ms/step (median of $rounds)"
sp=$(median %.2f <"$tmp/ratios")
awk -v s="$sp" -v r="$rounds" -v m="$m" 'BEGIN { printf "speedup %.2fx (median of %d rounds); 1F1B ideal 2m/(m+1) = %.2fx (m = %d)\n", s, r, 2 * m / (m + 1), m }'
