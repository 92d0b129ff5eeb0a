#!/bin/sh
# SPDX-License-Identifier: MIT
# pipehost at the sizes the scale audits tried (docs/changes.md, the
# tenth and eleventh sessions): deep MLPs of linear (width 4) and relu
# layers on synthetic data, written here, so that every figure quoted
# there can be run again.
#     bench/scale.sh [BUILD_DIR] [JOB ...]
# Jobs (all by default):
#   plan   `--plan` of 10,002 layers into 64 stages x 8 chunks,
#          interleaved, partitioner = parameters (311.7 s before its scan
#          stopped early, 6.8 s after)
#   gate   one training step of 8,002 layers on 64 stages x 16 replicas
#          (1,024 rank threads in one process, 256 micro-batches): past
#          what OpenBLAS was built for (core/blas_gate.h); prints whether
#          OpenBLAS warned "precompiled NUM_THREADS exceeded"
#   ini    `--plan` of 20,002 layers (a section each) into 64 stages,
#          partitioner = uniform: reading and resolving the INI (9.59 s
#          before its sections were indexed by name, 0.94 s after)
#   dp     the same with partitioner = dp (32.6 s before the INI's index
#          and dp's narrower scans, 3.5 s after)
#   svg    `--simulate --svg` of 602 layers on 64 stages x 8 chunks x 4096
#          micro-batches (671 MB written in 51 s before the limit):
#          refused (past 200,000 boxes), and how long the refusal took
# Each prints its wall time, from one run (ROUNDS, default 1, runs each
# that many times and prints every time).
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$top}
[ $# -ge 1 ] && shift
jobs=${*:-plan ini dp gate svg}
bin="$build/pipehost"
rounds=${ROUNDS:-1}
# shellcheck source=bench/args-lib.sh
. "$top/bench/args-lib.sh"
need_count scale.sh ROUNDS "$rounds" 1
[ -x "$bin" ] || { echo "scale.sh: no pipehost at $bin; pass the build directory" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# mlp N STAGES CHUNKS REPLICAS MICRO PER SCHEDULE PARTITIONER: an INI of
# N hidden layers (linear and relu in turn), a last linear and the loss;
# MICRO micro-batches of PER samples a replica
mlp() {
	n=$1 stages=$2 chunks=$3 reps=$4 m=$5 per=$6 sched=$7 part=$8
	printf '[run]\nseed = 1\nstages = %s\nchunks = %s\nmicro_batches = %s\nbatch = %s\nsteps = 1\n' \
		"$stages" "$chunks" "$m" $((m * per * reps))
	printf 'eval = no\nreplicas = %s\nthreads = 1\n' "$reps"
	printf '[data]\nsource = synthetic\nshape = 4\nclasses = 4\nsamples = 8192\ntest_samples = 16\n'
	printf '[optimizer]\ntype = sgd\nlr = 0.01\nlr_schedule = constant\n'
	printf '[partition]\ntype = %s\ncost = flops\n[schedule]\ntype = %s\n' "$part" "$sched"
	awk -v n="$n" 'BEGIN {
		for (i = 0; i < n; i++)
			if (i % 2 == 0) printf "[layer l%d]\ntype = linear\nunits = 4\n", i
			else printf "[layer r%d]\ntype = relu\n", i
		printf "[layer out]\ntype = linear\nunits = 4\n[layer loss]\ntype = softmax_xent\n"
	}'
}

# timed NAME CMD...: runs CMD ROUNDS times, prints each wall time; the
# last run's output in $tmp/NAME.out, its exit status in $rc
timed() {
	name=$1
	shift
	r=0
	while [ "$r" -lt "$rounds" ]; do
		t0=$(date +%s.%N)
		rc=0
		"$@" >"$tmp/$name.out" 2>&1 || rc=$?
		t1=$(date +%s.%N)
		awk -v a="$t0" -v b="$t1" -v n="$name" -v rc="$rc" 'BEGIN { printf "%-5s %8.2f s  (exit %d)\n", n, b - a, rc }'
		r=$((r + 1))
	done
}

for job in $jobs; do
	case $job in
	plan)
		mlp 10000 64 8 1 128 2 interleaved parameters >"$tmp/plan.ini"
		timed plan "$bin" -c "$tmp/plan.ini" --plan
		;;
	ini)
		mlp 20000 64 1 1 128 1 1f1b uniform >"$tmp/ini.ini"
		timed ini "$bin" -c "$tmp/ini.ini" --plan
		;;
	dp)
		mlp 20000 64 1 1 128 1 1f1b dp >"$tmp/dp.ini"
		timed dp "$bin" -c "$tmp/dp.ini" --plan
		;;
	gate)
		mlp 8000 64 1 16 256 1 1f1b dp >"$tmp/gate.ini"
		timed gate "$bin" -c "$tmp/gate.ini"
		grep -q "precompiled NUM_THREADS exceeded" "$tmp/gate.out" && w=yes || w=no
		echo "gate  OpenBLAS warned: $w; $(grep -m1 'inside it at once' "$tmp/gate.out" || echo 'no gate (fewer ranks than OpenBLAS threads)')"
		;;
	svg)
		mlp 600 64 8 1 4096 1 interleaved uniform >"$tmp/svg.ini"
		timed svg "$bin" -c "$tmp/svg.ini" --simulate --svg "$tmp/t.svg"
		echo "svg   $(tail -1 "$tmp/svg.out" | cut -c1-160)"
		;;
	*)
		echo "scale.sh: unknown job '$job' (plan, ini, dp, gate, svg)" >&2
		exit 1
		;;
	esac
done
