#!/bin/sh
# SPDX-License-Identifier: MIT
# Where a GPT-2 small step's GPU time goes, kernel by kernel, both sides:
#
#   pipehost   bench/gpt2-124m.ini on 1 rank, bf16, M micro-batches, STEPS
#              steps under Nsight Compute (ncu: one metric, each kernel's
#              duration, clocks and caches left alone), bench/kernel_table.py
#              summing it by kernel name
#   PyTorch    bench/gpt2_124m_torch.py --kernels, eager bf16, the same
#              micro-batches: one step under torch.profiler
#
#     bench/gpt2-kernels.sh [BUILD_DIR]
#
# Each side prints its launches and summed kernel time per step, then the
# TOP heaviest kernel names.  ncu runs the kernels one at a time, so the
# sum is the GPU's busy time; set against bench/gpt2-124m.sh's step time
# (taken without a profiler) it says how long a step leaves the GPU
# waiting on the host, and the rows say which kernels to work on.
#
# Environment: NCU (the ncu binary; default ncu on PATH, else
# /usr/local/cuda/bin/ncu, else the newest /opt/nvidia/nsight-compute/*/ncu),
# M (micro-batches, default 8), STEPS (pipehost steps profiled, default 1),
# TOP (default 25), MAX_LAUNCHES (ncu stops profiling after this many,
# default 20000), PYTHON (an interpreter with torch; default python3;
# "false" skips PyTorch), KEEP (a directory for ncu's CSV and the logs).
# Exits 77 with one line when there is no GPU or no ncu.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$top}
bin="$build/pipehost"
ini="$top/bench/gpt2-124m.ini"
py=${PYTHON:-python3}
m=${M:-8}
steps=${STEPS:-1}
ntop=${TOP:-25}
maxl=${MAX_LAUNCHES:-20000}
# shellcheck source=bench/args-lib.sh
. "$top/bench/args-lib.sh"
need_count gpt2-kernels.sh M "$m" 1
need_count gpt2-kernels.sh STEPS "$steps" 1
need_count gpt2-kernels.sh TOP "$ntop" 1
need_count gpt2-kernels.sh MAX_LAUNCHES "$maxl" 1
tmp=${KEEP:-$(mktemp -d)}
mkdir -p "$tmp"
[ -n "${KEEP:-}" ] || trap 'rm -rf "$tmp"' EXIT

# shellcheck source=bench/gpu-lib.sh
. "$top/bench/gpu-lib.sh"
need_pipehost gpt2-kernels.sh "$bin"
need_gpu gpt2-kernels.sh "; this benchmark needs one"
ncu=${NCU:-}
if [ -z "$ncu" ]; then
	ncu=$(command -v ncu || true)
	[ -z "$ncu" ] && [ -x /usr/local/cuda/bin/ncu ] && ncu=/usr/local/cuda/bin/ncu
	[ -z "$ncu" ] && ncu=$(find /opt/nvidia/nsight-compute -maxdepth 2 -name ncu -type f 2>/dev/null | sort -V | tail -1)
fi
if [ -z "$ncu" ] || [ ! -x "$ncu" ]; then
	echo "gpt2-kernels.sh: no Nsight Compute (ncu) found; set NCU"
	exit 77
fi

data=""
[ -d /usr/share/games/fortunes ] || data="--set data.path=$top/core"

echo "GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1); bf16; batch 8 x 1024 tokens in $m micro-batches; $ncu"
# shellcheck disable=SC2086 # $data is a list of options
if ! "$ncu" --clock-control none --cache-control none --metrics gpu__time_duration.sum --csv \
	--launch-count "$maxl" --log-file "$tmp/ncu.csv" \
	"$bin" -c "$ini" $data --set run.stages=1 --set run.devices=cuda:0 --set run.micro_batches="$m" \
	--set run.steps="$steps" --set run.log_every=1 </dev/null >"$tmp/pipehost.log" 2>&1; then
	echo "gpt2-kernels.sh: pipehost under ncu failed:" >&2
	tail -5 "$tmp/pipehost.log" >&2
	tail -3 "$tmp/ncu.csv" >&2 2>/dev/null || true
	exit 1
fi
# (the table needs no torch: any python3).  ncu may run the program and
# still record nothing (no access to the counters): say so, and go on to
# PyTorch's table.
rc=0
if ! python3 "$top/bench/kernel_table.py" "$tmp/ncu.csv" --steps "$steps" --top "$ntop" --label "pipehost"; then
	echo "gpt2-kernels.sh: ncu recorded no kernel durations; its last lines:"
	grep '==PROF==\|==ERROR==\|==WARNING==' "$tmp/ncu.csv" "$tmp/pipehost.log" 2>/dev/null | tail -3
	rc=1
fi

[ "$py" = false ] && exit "$rc"
echo
if ! "$py" "$top/bench/gpt2_124m_torch.py" --mode eager --micro-batches "$m" --steps 2 --warmup 2 \
	--kernels "$ntop" </dev/null >"$tmp/torch.log" 2>&1; then
	echo "gpt2-kernels.sh: PyTorch failed:" >&2
	tail -5 "$tmp/torch.log" >&2
	exit 1
fi
sed -n '/^torch-eager: /,$p' "$tmp/torch.log"
exit "$rc"
