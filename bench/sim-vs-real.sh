#!/bin/sh
# SPDX-License-Identifier: MIT
# Simulated vs measured step time for etc/fashion-mnist.ini on 4 ranks, for
# every built-in schedule.  The simulation uses profiled layer costs
# ([partition] cost = profile); the measurement is the median step time of a
# real run (steps 6..STEPS, from the metrics file).  Run from a build tree:
#     bench/sim-vs-real.sh [BUILD_DIR]
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$top}
bin="$build/pipehost"
ini="$top/etc/fashion-mnist.ini"
steps=${STEPS:-40}
# shellcheck source=bench/args-lib.sh
. "$top/bench/args-lib.sh"
# the median skips the first 5 step times: 7 steps give one
need_count sim-vs-real.sh STEPS "$steps" 7
[ -x "$bin" ] || { echo "sim-vs-real.sh: no pipehost at $bin; pass the build directory" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# one pipeline (the ini's default is 2 replicas of one stage): 8 micro-batches of 16
common="--set run.stages=4 --set run.replicas=1 --set run.micro_batches=8 --set run.batch=128 --set partition.cost=profile --set partition.profile_cache=$tmp/cache"
printf '| schedule | simulated step (ms) | measured step (ms) | measured / simulated |\n|---|---|---|---|\n'
for s in gpipe 1f1b "interleaved 2" zb-h1; do
	set -- $s
	v=${2:-1}
	args="$common --set schedule.type=$1 --set run.chunks=$v"
	sim=$("$bin" -c "$ini" $args --simulate --svg "$tmp/t.svg" | sed -n 's/^  step time \([0-9.]*\) ms.*/\1/p')
	"$bin" -c "$ini" $args --set run.steps=$steps --set run.eval=no --set run.log_every=1 \
		--set "run.metrics=$tmp/m.jsonl" >/dev/null
	real=$(python3 - "$tmp/m.jsonl" <<'PY'
import json, sys, statistics
t = [json.loads(l)["elapsed_s"] for l in open(sys.argv[1]) if '"step"' in l and '"eval"' not in l]
d = [b - a for a, b in zip(t, t[1:])][5:]
print("%.2f" % (1000 * statistics.median(d)))
PY
)
	name=$1
	[ "$v" -gt 1 ] && name="$1 (v=$v)"
	awk -v n="$name" -v s="$sim" -v r="$real" 'BEGIN { printf "| %s | %.2f | %.2f | %.2f |\n", n, s, r, r / s }'
done
