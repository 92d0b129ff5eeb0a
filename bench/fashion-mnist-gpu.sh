#!/bin/sh
# SPDX-License-Identifier: MIT
# etc/fashion-mnist.ini (the quick start: a small CNN, 2 replicas, 5
# epochs) with devices = auto, which puts the ranks on the GPUs round-robin
# (all on cuda:0 on a one-GPU machine): its test accuracy per epoch next to
# the README's CPU figures (2-core EPYC: 87.17, 88.86, 90.77, 91.27,
# 91.57%, 69.0 s of training), and its times.  The GPU run is not expected
# to give the same accuracies to the last digit (other summation orders
# change the last bits, and 2340 steps amplify them), only to land about
# as close as two CPU runs with different seeds do.
#
#     bench/fashion-mnist-gpu.sh [BUILD_DIR]
#
# Environment: DATA (the Fashion-MNIST directory, default the INI's
# /usr/share/datasets/fashion-mnist).  Exits 77 with one line when there is
# no GPU (devices = auto would run on the CPU) or no data set.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$top}
bin="$build/pipehost"
ini="$top/etc/fashion-mnist.ini"
data=${DATA:-/usr/share/datasets/fashion-mnist}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# shellcheck source=bench/gpu-lib.sh
. "$top/bench/gpu-lib.sh"
need_pipehost fashion-mnist-gpu.sh "$bin"
need_gpu fashion-mnist-gpu.sh ": devices = auto would train on the CPU"
if [ ! -e "$data/train-images-idx3-ubyte.gz" ]; then
	echo "fashion-mnist-gpu.sh: no Fashion-MNIST in $data (apt-get install dataset-fashion-mnist, or set DATA)"
	exit 77
fi

gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
start=$(date +%s.%N)
if ! "$bin" -c "$ini" --set run.devices=auto --set "data.path=$data" --set "run.metrics=$tmp/m.jsonl" \
	</dev/null >"$tmp/out.txt" 2>&1; then
	echo "fashion-mnist-gpu.sh: the run failed:" >&2
	tail -5 "$tmp/out.txt" >&2
	exit 1
fi
end=$(date +%s.%N)
train_s=$(grep '"step"' "$tmp/m.jsonl" | grep -v '"eval"' | tail -1 | sed -n 's/.*"elapsed_s":\([0-9.]*\).*/\1/p')

echo "etc/fashion-mnist.ini, devices = auto on $ngpu GPU(s) (${gpu:-unknown}), against the README's CPU run"
echo
printf '| epoch | CPU (README) test accuracy | GPU test accuracy | GPU test loss |\n|---:|---:|---:|---:|\n'
grep '"eval":true' "$tmp/m.jsonl" | awk '
	BEGIN { split("87.17 88.86 90.77 91.27 91.57", cpu, " ") }
	{
		e = $0; sub(/.*"epoch":/, "", e); sub(/,.*/, "", e)
		a = $0; sub(/.*"test_accuracy":/, "", a); sub(/[,}].*/, "", a)
		l = $0; sub(/.*"test_loss":/, "", l); sub(/[,}].*/, "", l)
		printf "| %d | %s%% | %.2f%% | %.4f |\n", e, (e in cpu) ? cpu[e] : "?", 100 * a, l
	}'
echo
awk -v t="$train_s" -v s="$start" -v e="$end" 'BEGIN {
	printf "training: %.1f s on the GPU (CPU, README: 69.0 s); wall time with loading and evaluation %.1f s (CPU: 69.5 s)\n", t, e - s }'
