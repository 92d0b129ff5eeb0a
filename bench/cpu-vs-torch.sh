#!/bin/sh
# SPDX-License-Identifier: MIT
# The shipped CPU jobs against PyTorch on the same cores, in one run: time
# to quality (issue 24).  Runs `pipehost -c etc/fashion-mnist.ini` and
# `pipehost -c etc/gpt-fortunes.ini` exactly as shipped (whatever the INIs
# say), then the same jobs in PyTorch (bench/fashion_mnist_torch.py,
# bench/gpt_fortunes_torch.py: the same models, data, steps, optimizer and
# learning rate at every step, read from the same INIs) with
# torch.set_num_threads(cores), and prints one table: wall seconds and
# quality of each side, and pipehost / PyTorch.
#
# Wall time is the whole process, start to exit, taken the same way for
# both sides by this script: start-up (interpreter and `import torch`;
# pipehost's plugin loading and planning), data loading, training, and the
# evaluation after every epoch.  Quality is the last evaluation's figure:
# test accuracy for Fashion-MNIST, validation loss in nats per byte for
# fortunes.  Issue 24 asks for ratio <= 1.0 with fashion-mnist >= 91.0% and
# fortunes' loss <= PyTorch's; the last lines say whether each holds.
#
#     bench/cpu-vs-torch.sh [BUILD_DIR]
#
# Environment:
#   PYTHON    an interpreter with torch (default python3); without torch the
#             PyTorch columns say "-" and only pipehost runs
#   CORES     run every process under `taskset -c 0-(CORES-1)` and give
#             PyTorch CORES threads (default: no pinning, threads = nproc)
#   JOBS      which rows: "fashion gpt" (default), "fashion" or "gpt"
#   ONECORE=1 add the one-core row: Fashion-MNIST, one epoch, pipehost with
#             stages = 1, threads = 1 against PyTorch with 1 thread
#   QUICK=1   a short check of the script itself (100 and 40 steps, figures
#             meaningless); FM_STEPS / GPT_STEPS set the lengths exactly
#   LOGDIR    keep every process's output there (default: a temporary
#             directory, removed)
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$top}
bin="$build/pipehost"
py=${PYTHON:-python3}
jobs=${JOBS:-fashion gpt}
# shellcheck source=bench/args-lib.sh
. "$top/bench/args-lib.sh"
need_words cpu-vs-torch.sh JOBS "$jobs" fashion gpt
need_flag cpu-vs-torch.sh QUICK "${QUICK:-0}"
need_flag cpu-vs-torch.sh ONECORE "${ONECORE:-0}"
[ -z "${FM_STEPS:-}" ] || need_count cpu-vs-torch.sh FM_STEPS "$FM_STEPS" 1
[ -z "${GPT_STEPS:-}" ] || need_count cpu-vs-torch.sh GPT_STEPS "$GPT_STEPS" 1
if [ -n "${CORES:-}" ]; then
	need_count cpu-vs-torch.sh CORES "$CORES" 1
	[ "$CORES" -le "$(nproc)" ] || bench_bad cpu-vs-torch.sh CORES "$CORES" "is more than the $(nproc) cores here"
fi
[ -x "$bin" ] || { echo "cpu-vs-torch.sh: no pipehost at $bin; pass the build directory" >&2; exit 1; }
if [ -n "${LOGDIR:-}" ]; then
	mkdir -p "$LOGDIR"
	tmp=$LOGDIR
else
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
fi
fm_steps=${FM_STEPS:-}
gpt_steps=${GPT_STEPS:-}
if [ "${QUICK:-0}" = 1 ]; then
	fm_steps=${fm_steps:-100}
	gpt_steps=${gpt_steps:-40}
fi
pin=""
if [ -n "${CORES:-}" ]; then
	threads=$CORES
	pin="taskset -c 0-$((CORES - 1))"
else
	threads=$(nproc)
fi
torch=""
if "$py" -c 'import torch' 2>/dev/null; then
	torch=$("$py" -c 'import torch; print(torch.__version__)')
else
	echo "cpu-vs-torch.sh: $py cannot import torch: the PyTorch columns are skipped (set PYTHON)" >&2
fi

now() { date +%s.%N; }

# run NAME CMD...: CMD's output to $tmp/NAME.log, its wall seconds to $tmp/NAME.s
run() {
	name=$1
	shift
	a=$(now)
	if ! $pin "$@" >"$tmp/$name.log" 2>&1; then
		echo "cpu-vs-torch.sh: $name failed:" >&2
		tail -20 "$tmp/$name.log" >&2
		exit 1
	fi
	b=$(now)
	awk -v a="$a" -v b="$b" 'BEGIN { printf "%.1f\n", b - a }' >"$tmp/$name.s"
}

# Quality from a log: the last evaluation line (pipehost's and the twins' alike).
acc() { sed -n 's/^epoch [0-9]*: test loss [0-9.]*, accuracy \([0-9.]*\)%.*/\1/p' "$1" | tail -1; }
vloss() { sed -n 's/^epoch [0-9]*: validation loss \([0-9.]*\) nats.*/\1/p' "$1" | tail -1; }

# "E epochs, S steps" from pipehost's last progress line "epoch E/E step S/S ...".
steps() { sed -n 's/^epoch \([0-9]*\)\/\1 step \([0-9]*\)\/\2 .*/\1 epoch(s), \2 steps/p' "$1" | tail -1; }

row() { # job, ph seconds, ph quality, pt seconds, pt quality
	if [ -n "$4" ]; then
		awk -v j="$1" -v a="$2" -v qa="$3" -v b="$4" -v qb="$5" \
			'BEGIN { printf "| %s | %.1f s to %s | %.1f s to %s | %.2f |\n", j, a, qa, b, qb, a / b }'
	else
		printf '| %s | %s s to %s | - | - |\n' "$1" "$2" "$3"
	fi
}

cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
echo "CPU: ${cpu:-unknown}, $(nproc) cores${CORES:+, pinned to $CORES}; PyTorch ${torch:-absent} with $threads threads"
echo

fm_ini="$top/etc/fashion-mnist.ini"
gpt_ini="$top/etc/gpt-fortunes.ini"
verdict=""
lines=""
case " $jobs " in *" fashion "*)
	set -- "$bin" -c "$fm_ini"
	[ -n "$fm_steps" ] && set -- "$@" --set run.steps="$fm_steps"
	run ph-fashion "$@"
	pa=$(acc "$tmp/ph-fashion.log")
	desc="etc/fashion-mnist.ini, $(steps "$tmp/ph-fashion.log")"
	tb="" ta=""
	if [ -n "$torch" ]; then
		set -- "$py" "$top/bench/fashion_mnist_torch.py" --ini "$fm_ini" --threads "$threads"
		[ -n "$fm_steps" ] && set -- "$@" --steps "$fm_steps"
		run pt-fashion "$@"
		tb=$(cat "$tmp/pt-fashion.s")
		ta=$(acc "$tmp/pt-fashion.log")%
	fi
	lines="$lines$(row "$desc" "$(cat "$tmp/ph-fashion.s")" "$pa%" "$tb" "$ta")
"
	verdict="$verdict$(awk -v a="$pa" 'BEGIN { printf("fashion-mnist: pipehost %.2f%% %s 91.0%%\n", a, (a >= 91.0 ? ">=" : "< (short of)")) }')
"
	if [ "${ONECORE:-0}" = 1 ]; then
		# one rank: 1 stage, 1 replica, the INI's micro-batch size kept
		fm_rep=$(sed -n 's/^replicas *= *\([0-9]*\).*/\1/p' "$fm_ini")
		fm_mb=$(sed -n 's/^micro_batches *= *\([0-9]*\).*/\1/p' "$fm_ini")
		[ "${fm_rep:-0}" -gt 0 ] || fm_rep=1
		run ph-fashion1 "$bin" -c "$fm_ini" --set run.stages=1 --set run.replicas=1 \
			--set run.micro_batches=$(( ${fm_mb:-4} * fm_rep )) --set run.threads=1 --set run.epochs=1 \
			${fm_steps:+--set run.steps=$fm_steps}
		tb="" ta=""
		if [ -n "$torch" ]; then
			run pt-fashion1 "$py" "$top/bench/fashion_mnist_torch.py" --ini "$fm_ini" --threads 1 --epochs 1 \
				${fm_steps:+--steps $fm_steps}
			tb=$(cat "$tmp/pt-fashion1.s")
			ta=$(acc "$tmp/pt-fashion1.log")%
		fi
		one="one epoch"
		[ -n "$fm_steps" ] && one="$fm_steps steps"
		lines="$lines$(row "same, $one on one core (stages = 1, threads = 1 / 1 thread)" \
			"$(cat "$tmp/ph-fashion1.s")" "$(acc "$tmp/ph-fashion1.log")%" "$tb" "$ta")
"
	fi
	;;
esac
case " $jobs " in *" gpt "*)
	set -- "$bin" -c "$gpt_ini"
	[ -n "$gpt_steps" ] && set -- "$@" --set run.steps="$gpt_steps"
	run ph-gpt "$@"
	pl=$(vloss "$tmp/ph-gpt.log")
	tb="" tl=""
	if [ -n "$torch" ]; then
		set -- "$py" "$top/bench/gpt_fortunes_torch.py" --ini "$gpt_ini" --threads "$threads"
		[ -n "$gpt_steps" ] && set -- "$@" --steps "$gpt_steps"
		run pt-gpt "$@"
		tb=$(cat "$tmp/pt-gpt.s")
		tl=$(vloss "$tmp/pt-gpt.log")
	fi
	lines="$lines$(row "etc/gpt-fortunes.ini, $(steps "$tmp/ph-gpt.log")" "$(cat "$tmp/ph-gpt.s")" "$pl nats/byte" "$tb" \
		"${tl:+$tl nats/byte}")
"
	if [ -n "$tl" ]; then
		verdict="$verdict$(awk -v a="$pl" -v b="$tl" 'BEGIN { printf("gpt-fortunes: pipehost %.4f %s PyTorch %.4f nats/byte\n", a, (a <= b ? "<=" : "> (worse than)"), b) }')
"
	fi
	;;
esac
printf '| job | pipehost | PyTorch, %s thread(s) | ratio |\n|---|---:|---:|---:|\n' "$threads"
printf '%s' "$lines"
echo
echo "quality (issue 24: ratio <= 1.0 at fashion-mnist >= 91.0% and fortunes' loss <= PyTorch's):"
printf '%s' "$verdict"
