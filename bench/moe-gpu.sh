#!/bin/sh
# SPDX-License-Identifier: MIT
# The mixture of experts on the GPU (docs/moe.md, "On a GPU"): the fortunes
# GPT with 8-expert top-2 MoE MLPs in blocks 1 and 3
# (etc/gpt-fortunes-moe.ini: 1 stage, 2 expert-parallel replicas holding 4
# experts each) against its dense twin (etc/gpt-fortunes.ini: 2 stages),
# the same active FLOPs a token, in fp32 and bf16, devices = auto (every
# rank on cuda:0 on a one-GPU machine).  Prints tokens/s from the last
# progress line (the run's own figure, since training started), the loss
# there, and the MoE/dense ratio per precision; the
# anchor is the dense model, the ratio what the experts' routing, exchanges
# and per-expert products cost.  The MoE twins are a first version (the
# experts one after another), so the ratio is where tuning starts.
#
#     bench/moe-gpu.sh [BUILD_DIR]
#
# Environment: STEPS (default 200; the runs log every 25), DATA (the text
# corpus, default the INIs' /usr/share/games/fortunes).  Exits 77 with one
# line when there is no GPU.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$top}
bin="$build/pipehost"
steps=${STEPS:-200}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# shellcheck source=bench/gpu-lib.sh
. "$top/bench/gpu-lib.sh"
need_pipehost moe-gpu.sh "$bin"
need_gpu moe-gpu.sh ": devices = auto would train on the CPU"
case $steps in '' | *[!0-9]*)
	echo "moe-gpu.sh: STEPS='$steps' is not a count of steps; give STEPS=200, say" >&2
	exit 1
	;;
esac

# run NAME INI PRECISION: one job; its last progress line's figures
run() {
	set -- "$1" "$2" "$3" --set run.devices=auto --set run.precision="$3" --set run.steps="$steps" \
		--set run.eval=no --set run.log_every=25 --set run.metrics="$tmp/$1.jsonl"
	[ -n "${DATA:-}" ] && set -- "$@" --set data.path="$DATA"
	name=$1 ini=$2
	shift 3
	if ! "$bin" -c "$top/etc/$ini" "$@" </dev/null >"$tmp/$name.log" 2>&1; then
		echo "moe-gpu.sh: $ini ($name) failed:" >&2
		tail -5 "$tmp/$name.log" >&2
		exit 1
	fi
}
# field NAME KEY: KEY's value in NAME's last progress line
field() { grep -v '"eval"' "$tmp/$1.jsonl" | tail -1 | sed -n "s/.*\"$2\":\([-0-9.e]*\).*/\1/p"; }

gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
echo "fortunes GPT, $steps steps of 32 sequences x 128 bytes, devices = auto on $ngpu GPU(s) (${gpu:-unknown})"
echo
printf '| model | precision | tokens/s | loss at step %s | MoE / dense |\n|---|---|---:|---:|---:|\n' "$steps"
for p in fp32 bf16; do
	run "dense-$p" gpt-fortunes.ini "$p"
	run "moe-$p" gpt-fortunes-moe.ini "$p"
	d=$(field "dense-$p" tokens_per_s) m=$(field "moe-$p" tokens_per_s)
	printf '| dense, 2 stages | %s | %s | %s | |\n' "$p" "$d" "$(field "dense-$p" loss)"
	printf '| MoE E = 8 top-2, 2 replicas | %s | %s | %s | %s |\n' "$p" "$m" "$(field "moe-$p" loss)" \
		"$(awk -v m="$m" -v d="$d" 'BEGIN { if (d > 0) printf "%.2fx", m / d; else print "?" }')"
done
echo
echo "router figures at step $steps (fp32, bf16):" \
	"$(grep -v '"eval"' "$tmp/moe-fp32.jsonl" | tail -1 | grep -o '"block[0-9]*\.[a-z_]*":[-0-9.e]*' | tr '\n' ' ')," \
	"$(grep -v '"eval"' "$tmp/moe-bf16.jsonl" | tail -1 | grep -o '"block[0-9]*\.[a-z_]*":[-0-9.e]*' | tr '\n' ' ')"
