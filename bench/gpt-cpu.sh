#!/bin/sh
# SPDX-License-Identifier: MIT
# pipehost vs PyTorch on one CPU core: the etc/gpt-fortunes.ini model (byte
# GPT, d = 128, 4 blocks, T = 128, 4 heads, AdamW, clip 1.0) on ONE rank with
# ONE BLAS thread and no recomputation, batch 32 split two ways: 8
# micro-batches of 4 (the INI's split; PyTorch accumulates gradients over 8
# backward passes) and 1 micro-batch of 32.  The step time is the median
# over STEPS steps after WARMUP warm-up steps: for pipehost the differences
# of the metrics file's elapsed_s, for PyTorch bench/gpt_cpu_torch.py (same
# model, torch.set_num_threads(1), F.scaled_dot_product_attention).
# Run from anywhere, pointing at a build tree:
#     bench/gpt-cpu.sh [BUILD_DIR]
# Environment: PYTHON (an interpreter with torch; default python3), STEPS
# (default 20), WARMUP (default 5), PROFILE=1 to add both per-layer tables.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$top}
bin="$build/pipehost"
ini="$top/etc/gpt-fortunes.ini"
py=${PYTHON:-python3}
steps=${STEPS:-20}
warm=${WARMUP:-5}
# shellcheck source=bench/args-lib.sh
. "$top/bench/args-lib.sh"
need_count gpt-cpu.sh STEPS "$steps" 1
need_count gpt-cpu.sh WARMUP "$warm" 0
need_flag gpt-cpu.sh PROFILE "${PROFILE:-0}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
[ -x "$bin" ] || { echo "gpt-cpu.sh: no pipehost at $bin; pass the build directory" >&2; exit 1; }
"$py" -c 'import torch' 2>/dev/null || { echo "gpt-cpu.sh: $py cannot import torch; set PYTHON" >&2; exit 1; }
common="--set run.stages=1 --set run.threads=1 --set run.recompute=no --set run.eval=no"

ph_step() { # micro-batches -> median ms
	"$bin" -c "$ini" $common --set run.micro_batches="$1" --set run.steps=$((steps + warm + 1)) \
		--set run.log_every=1 --set "run.metrics=$tmp/m.jsonl" >"$tmp/out.txt" 2>&1 ||
		{ cat "$tmp/out.txt" >&2; exit 1; }
	"$py" - "$tmp/m.jsonl" "$warm" <<'PY'
import json, sys, statistics
t = [json.loads(l)["elapsed_s"] for l in open(sys.argv[1]) if '"step"' in l and '"eval"' not in l]
d = [b - a for a, b in zip(t, t[1:])][int(sys.argv[2]):]
print("%.1f" % (1000 * statistics.median(d)))
PY
}
pt_step() { # micro-batches -> median ms
	"$py" "$top/bench/gpt_cpu_torch.py" --micro-batches "$1" --steps "$steps" --warmup "$warm" |
		sed -n 's/^median_ms=\([0-9.]*\) .*/\1/p'
}

cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
tv=$("$py" -c 'import torch; print(torch.__version__)' 2>/dev/null)
echo "CPU: ${cpu:-unknown}; 1 thread each; PyTorch $tv; median of $steps steps after $warm warm-up"
echo
printf '| batch 32 x 128 bytes as | pipehost ms/step | PyTorch ms/step | pipehost / PyTorch |\n|---|---:|---:|---:|\n'
for m in 8 1; do
	a=$(ph_step $m)
	b=$(pt_step $m)
	desc="$m micro-batches of $((32 / m))"
	[ "$m" = 1 ] && desc="1 micro-batch of 32"
	awk -v n="$desc" -v a="$a" -v b="$b" 'BEGIN { printf "| %s | %.0f | %.0f | %.2f |\n", n, a, b, a / b }'
done
if [ "${PROFILE:-0}" = 1 ]; then
	echo
	echo "pipehost per layer (partition.cost = profile):"
	"$bin" -c "$ini" $common --set partition.cost=profile --set "partition.profile_cache=$tmp/cache" --plan |
		sed -n '/^profile: measuring/,/^ *total/p'
	echo
	"$py" "$top/bench/gpt_cpu_torch.py" --steps 5 --warmup 2 --profile | sed 1d
fi
