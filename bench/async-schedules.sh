#!/bin/sh
# SPDX-License-Identifier: MIT
# The asynchronous schedules against 1f1b on the same job: the
# etc/gpt-fortunes.ini model on 4 ranks (batch 32 in 8 micro-batches, one
# BLAS thread per rank, no recomputation), run A/B/A/B back to back
# (ROUNDS rounds) so that a shared machine's load falls on all of them.
#
# A no-flush schedule runs up to [run] window = 16 steps without a drain,
# so a step's time is the steady state's: each schedule trains SHORT and
# LONG steps, and a step costs (time(LONG) - time(SHORT)) / (LONG - SHORT),
# from "trained N steps in T s" (start-up, the first window and the last
# drain cancel out).  Prints each schedule's median step time, samples/s,
# its ratio to 1f1b, and --simulate's predicted ratio (its steady state,
# no flush, against a flush every step).  pipedream runs without the tie
# and the clip it cannot have, against a 1f1b row on that same model.
#     bench/async-schedules.sh [BUILD_DIR]
# Environment: SHORT (default 16), LONG (48), ROUNDS (2), STAGES (4).
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$top}
bin="$build/pipehost"
ini="$top/etc/gpt-fortunes.ini"
short=${SHORT:-16}
long=${LONG:-48}
rounds=${ROUNDS:-2}
stages=${STAGES:-4}
# shellcheck source=bench/args-lib.sh
. "$top/bench/args-lib.sh"
need_count async-schedules.sh SHORT "$short" 1
need_count async-schedules.sh LONG "$long" 1
[ "$long" -gt "$short" ] || bench_bad async-schedules.sh LONG "$long" "is not more than SHORT=$short (a step is their difference)"
need_count async-schedules.sh ROUNDS "$rounds" 1
need_count async-schedules.sh STAGES "$stages" 1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
[ -x "$bin" ] || { echo "async-schedules.sh: no pipehost at $bin; pass the build directory" >&2; exit 1; }
common="--set run.stages=$stages --set run.threads=1 --set run.recompute=no --set run.eval=no
	--set run.micro_batches=8 --set run.batch=32"
untied="--set optimizer.clip=0 --set layer.head.tie="

train_s() { # schedule steps extra... -> seconds of training
	s=$1 n=$2
	shift 2
	# shellcheck disable=SC2086
	if ! "$bin" -c "$ini" $common "$@" --set schedule.type="$s" --set run.steps="$n" >"$tmp/out" 2>&1 </dev/null; then
		echo "async-schedules.sh: $s failed:" >&2
		tail -3 "$tmp/out" >&2
		exit 1
	fi
	sed -n 's/^trained [0-9]* steps in \([0-9.]*\) s.*/\1/p' "$tmp/out"
}
step_s() { # name schedule extra... -> one steady-state step time into name.times
	name=$1 s=$2
	shift 2
	a=$(train_s "$s" "$short" "$@")
	b=$(train_s "$s" "$long" "$@")
	awk -v a="$a" -v b="$b" -v n=$((long - short)) 'BEGIN { printf "%.5f\n", (b - a) / n }' >>"$tmp/$name.times"
}
for r in $(seq "$rounds"); do
	step_s 1f1b 1f1b
	step_s 2bw 2bw
	# shellcheck disable=SC2086
	step_s 1f1b-untied 1f1b $untied
	# shellcheck disable=SC2086
	step_s pipedream pipedream $untied
done
predicted() { # schedule -> --simulate's steady-state ratio
	# shellcheck disable=SC2086
	"$bin" -c "$ini" $common --set schedule.type="$1" --simulate 2>/dev/null |
		sed -n 's/.*a step, \([0-9.]*\)x the throughput.*/\1/p'
}
median() { sort -g | awk '{ x[n++] = $1 } END { printf "%.4f", n % 2 ? x[int(n / 2)] : (x[n / 2 - 1] + x[n / 2]) / 2 }'; }
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
echo "CPU: ${cpu:-unknown}, $(nproc) cores; $stages ranks, batch 32, 8 micro-batches; a step = (time of $long steps -" \
	"time of $short) / $((long - short)), median of $rounds"
echo
printf '| schedule | s/step | samples/s | / 1f1b | --simulate predicts |\n|---|---:|---:|---:|---:|\n'
for row in "1f1b 1f1b 1f1b" "2bw 2bw 1f1b" "1f1b-untied 1f1b 1f1b-untied" "pipedream pipedream 1f1b-untied"; do
	# shellcheck disable=SC2086
	set -- $row
	t=$(median <"$tmp/$1.times")
	base=$(median <"$tmp/$3.times")
	p=$([ "$2" = 1f1b ] && echo 1 || predicted "$2")
	awk -v n="$1" -v t="$t" -v b="$base" -v p="$p" \
		'BEGIN { printf "| %s | %.4f | %.1f | %.3f | %sx |\n", n, t, 32 / t, b / t, p }'
done
