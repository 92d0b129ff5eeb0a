#!/bin/sh
# SPDX-License-Identifier: MIT
# GPT-2 small (124M) on one GPU in bf16: pipehost against PyTorch.
#
#   pipehost     bench/gpt2-124m.ini: 1 rank on cuda:0, then 4 ranks all on
#                cuda:0 (1F1B), batch 8 x 1024 tokens in M micro-batches
#   PyTorch      bench/gpt2_124m_torch.py, the same model, eager and
#                torch.compile, bf16 autocast, AdamW(fused=True), the same
#                micro-batches (gradient accumulation)
#
# pipehost prints no tokens/s (its progress line and metrics give
# samples/s, a sample being one sequence of T tokens, averaged from the
# start), so tokens/s come from the metrics file's elapsed_s: the time
# from the end of warm-up step WARMUP+1 to the end of the last step, over
# STEPS steps of 8 x 1024 tokens; PyTorch's the same way (its script times
# STEPS steps after WARMUP between two torch.cuda.synchronize()).
# TFLOP/s = tokens/s x 855,383,040 FLOPs per token: 6 N + 12 L T d with
# N = 123,689,472 (every parameter in a matrix product: all but the position
# table, the tied token table once), L = 12, T = 1024, d = 768 (see
# bench/gpt2_124m_torch.py). Each pipehost row also gives its last step's
# training loss, marked "(differs)" when more than 2% from the default
# 1-rank run's (same seed, same data: the fast path trains something else).
#
#     bench/gpt2-124m.sh [BUILD_DIR]
#
# Environment: PYTHON (an interpreter with torch; default python3), STEPS
# (timed, default 20), WARMUP (default 5), M (micro-batches, default 8),
# TORCH_MB (PyTorch's micro-batches, default M), VARIANTS (1-rank runs
# with one fast path turned off, to see what each is worth; default
# "PIPEHOST_ATTN_FLASH=0 PIPEHOST_ATTN_SPLIT=0 PIPEHOST_COLSUM_SPLIT=0 PIPEHOST_GELU_FUSE=0 PIPEHOST_GEMM_LT=0
# PIPEHOST_GEMM_CAST=0 PIPEHOST_BF16_ACT=0 PIPEHOST_LN_WARP=0", empty
# for none), COMPILE (default 1; 0: no torch.compile row), WHOLE (default 1: also pipehost on 1 rank and PyTorch eager
# with the batch as one micro-batch; 0: not), WHOLE_VARIANTS (those runs
# again with one switch set each, as VARIANTS; default none), WINNER_FILE
# (where to write the fastest of those whole-batch runs: its switch, or an
# empty line for the default kernels; scripts/gpu-session.sh hands it to
# its next call, PH_GPU_CORE=last).  Exits 77 with one line when there is no
# GPU; without torch it still times pipehost.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$top}
bin="$build/pipehost"
ini="$top/bench/gpt2-124m.ini"
py=${PYTHON:-python3}
steps=${STEPS:-20}
warm=${WARMUP:-5}
m=${M:-8}
tmb=${TORCH_MB:-$m}
# shellcheck source=bench/args-lib.sh
. "$top/bench/args-lib.sh"
need_count gpt2-124m.sh STEPS "$steps" 1
need_count gpt2-124m.sh WARMUP "$warm" 0
need_count gpt2-124m.sh M "$m" 1
need_count gpt2-124m.sh TORCH_MB "$tmb" 1
need_flag gpt2-124m.sh WHOLE "${WHOLE:-1}"
need_flag gpt2-124m.sh COMPILE "${COMPILE:-1}"
variants=${VARIANTS-PIPEHOST_ATTN_FLASH=0 PIPEHOST_ATTN_SPLIT=0 PIPEHOST_COLSUM_SPLIT=0 PIPEHOST_GELU_FUSE=0 PIPEHOST_GEMM_LT=0 PIPEHOST_GEMM_CAST=0 PIPEHOST_BF16_ACT=0 PIPEHOST_LN_WARP=0}
need_switches gpt2-124m.sh VARIANTS "$variants"
need_switches gpt2-124m.sh WHOLE_VARIANTS "${WHOLE_VARIANTS:-}"
tokens=$((8 * 1024)) # per step
fpt=855383040        # FLOPs per token
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# shellcheck source=bench/gpu-lib.sh
. "$top/bench/gpu-lib.sh"
need_pipehost gpt2-124m.sh "$bin"
need_gpu gpt2-124m.sh "; this benchmark needs one"
torch=yes
if ! "$py" -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
	torch=no
	echo "($py cannot import torch or sees no GPU through it: the PyTorch rows are n/a; set PYTHON)"
fi

# fortunes (Debian's package) or, without it, the C sources as text
data=""
if [ ! -d /usr/share/games/fortunes ]; then
	data="--set data.path=$top/core"
	echo "(no /usr/share/games/fortunes: training on $top/core's text instead; throughput is the same)"
fi

# ph_tag RANKS [VAR=VALUE] MB -> the name of that run's log and metrics
# files; the whole switch is in it (PIPEHOST_ATTN_CUDNN=1 and =2 are two runs)
ph_tag() {
	printf '%s' "$1${2:+-$2}-$3" | tr '=' '-'
}

# ph_peak TAG: the 'peak GPU memory' figures of that run's log, or nothing
ph_peak() {
	sed -n 's/^peak GPU memory[^:]*: //p' "$tmp/ph$1.log" 2>/dev/null || true
}

# pipehost with $1 ranks on cuda:0, $2 (optional) one VAR=VALUE for its
# environment, $3 (optional) micro-batches instead of M -> "tokens/s step_ms
# last_loss" (the last step's training loss: every run trains the same
# seed on the same data, so a fast path that computes the wrong thing shows
# as a loss apart from the default run's, in the same table)
ph_run() {
	mb=${3:-$m}
	tag=$(ph_tag "$1" "${2:-}" "$mb")
	# shellcheck disable=SC2086 # $data is a list of options
	if ! env ${2:-} "$bin" -c "$ini" $data --set run.stages="$1" --set run.devices=cuda:0 --set run.micro_batches="$mb" \
		--set schedule.type=1f1b --set run.steps=$((steps + warm)) --set run.log_every=1 \
		--set "run.metrics=$tmp/m$tag.jsonl" </dev/null >"$tmp/ph$tag.log" 2>&1; then
		echo "gpt2-124m.sh: pipehost on $1 rank(s) ${2:-} failed:" >&2
		tail -5 "$tmp/ph$tag.log" >&2
		echo "failed failed failed"
		return
	fi
	grep -h 'cuBLASLt refused' "$tmp/ph$tag.log" >&2 || true
	r=$(grep '"step"' "$tmp/m$tag.jsonl" | grep -v '"eval"' |
		sed -n 's/.*"elapsed_s":\([0-9.]*\).*/\1/p' |
		awk -v warm="$warm" -v steps="$steps" -v tok="$tokens" '
			{ t[NR] = $1 }
			END {
				if (NR != warm + steps || t[NR] <= t[warm]) { print "failed failed"; exit }
				dt = t[NR] - t[warm]
				printf "%.0f %.1f\n", steps * tok / dt, 1000 * dt / steps
			}')
	l=$(grep '"step"' "$tmp/m$tag.jsonl" | grep -v '"eval"' | tail -1 |
		sed -n 's/.*"loss":\([-0-9.eE+]*\).*/\1/p')
	r="$r ${l:-n/a}"
	done_row "pipehost, $1 rank(s), ${2:-default}, $mb micro-batch(es)" "$r"
	echo "$r"
}

# done_row NAME "TOKENS/S MS [LOSS]": each run's figures on stderr as it
# ends, so a run the caller's timeout cuts short still shows the rows it
# finished (the table below comes only at the end)
done_row() {
	# shellcheck disable=SC2086 # the figures are words
	set -- "$1" $2
	echo "gpt2-124m.sh: row done: $1: $2 tokens/s, $3 ms/step${4:+, last loss $4}" >&2
}

# PyTorch in mode $1, $2 (optional) micro-batches instead of TORCH_MB ->
# "tokens/s step_ms -" (its data are not pipehost's: no loss to compare)
pt_run() {
	ptmb=${2:-$tmb}
	if [ "$torch" = no ]; then
		echo "n/a n/a -"
		return
	fi
	if ! "$py" "$top/bench/gpt2_124m_torch.py" --mode "$1" --micro-batches "$ptmb" --steps "$steps" \
		--warmup "$warm" </dev/null >"$tmp/pt-$1-$ptmb.log" 2>&1; then
		echo "gpt2-124m.sh: PyTorch $1 failed:" >&2
		tail -5 "$tmp/pt-$1-$ptmb.log" >&2
		echo "failed failed -"
		return
	fi
	r=$(sed -n 's/^torch-[a-z]* tokens\/s=\([0-9.]*\) .*step_ms=\([0-9.]*\) .*/\1 \2/p' "$tmp/pt-$1-$ptmb.log")
	if [ -z "$r" ]; then
		echo "gpt2-124m.sh: no tokens/s line from PyTorch $1:" >&2
		tail -3 "$tmp/pt-$1-$ptmb.log" >&2
		r="failed failed"
	fi
	r="$r -"
	done_row "PyTorch $1, $ptmb micro-batch(es)" "$r"
	echo "$r"
}

gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
tv=n/a
[ "$torch" = yes ] && tv=$("$py" -c 'import torch; print(torch.__version__)')
echo "GPU: ${gpu:-unknown}; PyTorch $tv; bf16; batch 8 x 1024 tokens, pipehost in $m micro-batches, PyTorch in $tmb;"
echo "mean over $steps steps after $warm warm-up; TFLOP/s at 855.4 MFLOP per token (6N + 12LTd)"
echo

# Each run's figures are one word list, "TOKENS/S MS LOSS"; tokens/s is
# its first word.
p1f=$(ph_run 1) p1=${p1f%% *}
p4f=$(ph_run 4) p4=${p4f%% *}
vrows=""
for v in $variants; do
	vrows="$vrows$v $(ph_run 1 "$v")
"
done
tef=$(pt_run eager) te=${tef%% *}
# the whole batch as one micro-batch, both sides (fewer, larger products)
if [ "${WHOLE:-1}" = 1 ] && [ "$m" != 1 ]; then
	w1f=$(ph_run 1 "" 1) w1=${w1f%% *}
	wef=$(pt_run eager 1) we=${wef%% *}
	wrows=""
	for v in ${WHOLE_VARIANTS:-}; do
		wrows="$wrows$v $(ph_run 1 "$v" 1)
"
	done
fi
# The fastest of the whole-batch runs (the default's and WHOLE_VARIANTS'):
# a run that failed, or whose last loss is more than 2% from the default
# 1-rank run's (row() marks it "(differs)"), is never it.  Printed, and
# written to WINNER_FILE where that is set, only when the default ran.
ref_loss=$(echo "$p1f" | awk '{ print $3 }')
best=""
if [ -n "${w1:-}" ]; then
	best=$(printf 'default %s\n%s' "$w1f" "$wrows" | awk -v rl="$ref_loss" '
		NF >= 3 && $2 ~ /^[0-9.]+$/ {
			if ($4 ~ /^[0-9.]+$/ && rl ~ /^[0-9.]+$/ && ($4 - rl > 0.02 * rl || rl - $4 > 0.02 * rl)) next
			if (!n++ || $2 > bt) { bt = $2; bv = $1 }
		}
		END { if (n) print bv, bt }')
	if [ -n "$best" ]; then
		wsw=${best%% *}
		[ "$wsw" = default ] && wsw=""
		if [ -n "${WINNER_FILE:-}" ]; then
			printf '%s\n' "$wsw" >"$WINNER_FILE"
		fi
	fi
fi
tcf="skipped - -"
[ "${COMPILE:-1}" = 1 ] && tcf=$(pt_run compile)
tc=${tcf%% *}

# row NAME "TOKENS/S STEP_MS LOSS": tokens/s, TFLOP/s, ms, the ratio to
# pipehost's 1 rank and the last loss; a loss more than 2% from the 1-rank
# run's is marked: that fast path trains something else, whatever its speed
row() {
	echo "$2" | awk -v n="$1" -v f="$fpt" -v ref="$p1" -v rl="$ref_loss" '{
		t = $1; ms = $2; l = $3
		if (l == "-") l = ""
		else if (l ~ /^[0-9.]+$/ && rl ~ /^[0-9.]+$/ && (l - rl > 0.02 * rl || rl - l > 0.02 * rl))
			l = l " (differs)"
		if (l != "") l = " " l
		if (t !~ /^[0-9.]+$/) { printf "| %s | %s | | | |%s |\n", n, t, l; exit }
		r = ref ~ /^[0-9.]+$/ ? sprintf("%.2f", t / ref) : ""
		printf "| %s | %.0f | %.1f | %s | %s |%s |\n", n, t, t * f / 1e12, ms, r, l }'
}
# ratio A B: A / B, or n/a
ratio() {
	awk -v a="$1" -v b="$2" 'BEGIN { if (a ~ /^[0-9.]+$/ && b ~ /^[0-9.]+$/ && b > 0) printf "%.2f", a / b; else printf "n/a" }'
}

printf '| run | tokens/s | TFLOP/s | ms/step | vs pipehost 1 rank | last loss |\n|---|---:|---:|---:|---:|---:|\n'
row "pipehost, 1 rank on cuda:0" "$p1f"
row "pipehost, 4 ranks on cuda:0 (1F1B)" "$p4f"
printf '%s' "$vrows" | while read -r v r; do
	[ -n "$v" ] && row "pipehost, 1 rank, $v" "$r"
done
row "PyTorch eager" "$tef"
if [ -n "${w1:-}" ]; then
	row "pipehost, 1 rank, batch as 1 micro-batch" "$w1f"
	printf '%s' "$wrows" | while read -r v r; do
		[ -n "$v" ] && row "pipehost, 1 rank, batch as 1 micro-batch, $v" "$r"
	done
	row "PyTorch eager, batch as 1 micro-batch" "$wef"
fi
row "PyTorch torch.compile" "$tcf"
echo
echo "pipehost / PyTorch eager:   $(ratio "$p1" "$te")"
echo "pipehost / torch.compile:   $(ratio "$p1" "$tc")"
[ -n "${w1:-}" ] && echo "pipehost / PyTorch eager, batch as 1 micro-batch: $(ratio "$w1" "$we")"
[ -n "$best" ] && echo "pipehost fastest, batch as 1 micro-batch: ${wsw:-default kernels} (${best#* } tokens/s; $(ratio "${best#* }" "$we") of PyTorch eager's)"
echo "4 ranks / 1 rank (one GPU): $(ratio "$p4" "$p1")"
echo
# Peak device memory, context excluded, the same measure on both sides:
# pipehost's 'peak GPU memory' line (core/cuda/backend.cu mem_held) and
# PyTorch's held_mib, with its caching allocator's own peaks beside.
echo "peak GPU memory, MiB beyond the CUDA context (same batch, $m micro-batches):"
for tag in 1-$m 4-$m; do
	l=$(ph_peak "$tag")
	echo "  pipehost ${tag%%-*} rank(s): ${l:-n/a}"
done
# the variants' too: PIPEHOST_GRAD_IN_PLACE=0 shows what the loss writing
# over the logits saves, PIPEHOST_TIE_SHARE=0 what the shared table does
for v in $variants; do
	l=$(ph_peak "$(ph_tag 1 "$v" "$m")")
	echo "  pipehost 1 rank, $v: ${l:-n/a}"
done
l=$(sed -n 's/.*peak_reserved_mib=\([0-9.]*\) peak_allocated_mib=\([0-9.]*\) held_mib=\([0-9.]*\).*/held \3 (reserved \1, allocated \2)/p' \
	"$tmp/pt-eager-$tmb.log" 2>/dev/null || true) # no log without torch: set -e must not end the script here
echo "  PyTorch eager: ${l:-n/a}"
