# SPDX-License-Identifier: MIT
# shellcheck shell=sh
# Helpers for the GPU shell tests (test-gpu.sh, test-nccl.sh).  Source after
# tests/lib.sh (it uses $PIPEHOST, $fixtures, $tmp, ok and not_ok).
# shellcheck disable=SC2154 # $fixtures and $tmp are lib.sh's

# skip WHY: the whole test is skipped (automake reads exit 77 as SKIP).
skip() {
	echo "SKIP: $(basename "$0"): $1"
	exit 77
}

# gpu_count: the GPUs `nvidia-smi -L` lists (0 without nvidia-smi or driver),
# or the emulator's in a --enable-cuda-emulator build.
gpu_count() {
	if [ -n "${PH_CUEMU:-}" ]; then # the emulator build: PH_CUEMU_DEVICES GPUs (tests/cuemu)
		echo "${PH_CUEMU_DEVICES:-1}"
		return
	fi
	if ! command -v nvidia-smi >/dev/null 2>&1; then
		echo 0
		return
	fi
	nvidia-smi -L 2>/dev/null | grep -c '^GPU '
}

# need_gpus N: skip unless nvidia-smi lists N GPUs and this pipehost runs a
# one-step job on cuda:0.  The host's messages say "without CUDA" (a build
# without it) and "no CUDA device" (a driver with no GPU visible, say
# CUDA_VISIBLE_DEVICES=""); any other failure of that job is a failure of
# the GPU path, not a reason to skip.
need_gpus() {
	have=$(gpu_count)
	[ "$have" -ge "$1" ] || skip "needs $1 GPU(s); nvidia-smi -L lists $have"
	"$PIPEHOST" -c "$fixtures/tiny.ini" --set run.stages=1 --set run.steps=1 \
		--set run.devices=cuda:0 </dev/null >"$tmp/probe.out" 2>"$tmp/probe.err"
	probe_rc=$?
	if [ "$probe_rc" -ne 0 ]; then
		if grep -q 'without CUDA' "$tmp/probe.err"; then
			skip "$(head -1 "$tmp/probe.err")"
		elif grep -q 'no CUDA device' "$tmp/probe.err"; then
			skip "$(head -1 "$tmp/probe.err")"
		fi
		echo "not ok 1 - a one-step job on cuda:0 failed (exit $probe_rc): $(head -c 600 "$tmp/probe.err")"
		echo "0 passed, 1 failed"
		exit 1
	fi
}

# train NAME ARGS...: run tiny.ini with ARGS, the weights to $tmp/NAME.st and
# the metrics to $tmp/NAME.jsonl (every step logged); the log in
# $tmp/NAME.log.  Returns pipehost's status.  (stdin is /dev/null: callers
# loop over here-documents.)
train() {
	name=$1
	shift
	"$PIPEHOST" -c "$fixtures/tiny.ini" --set run.log_every=1 --set "run.metrics=$tmp/$name.jsonl" \
		--save-weights "$tmp/$name.st" "$@" </dev/null >"$tmp/$name.log" 2>&1
}

# loss_at NAME STEP: the training loss of STEP in NAME's metrics ("last" =
# the final step), as printed (%.6f).
loss_at() {
	if [ "$2" = last ]; then
		grep '"step"' "$tmp/$1.jsonl" | grep -v '"eval"' | tail -1
	else
		grep "\"step\":$2," "$tmp/$1.jsonl" | grep -v '"eval"' | head -1
	fi | sed -n 's/.*"loss":\([^,}]*\).*/\1/p'
}

# is_number S: a finite decimal number (not nan, not inf).
is_number() {
	printf '%s\n' "$1" | grep -Eq '^-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$'
}

# rel_within A B TOL: |A - B| <= TOL * |B|.
rel_within() {
	is_number "$1" && is_number "$2" &&
		awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN { d = a - b; if (d < 0) d = -d; m = b < 0 ? -b : b; exit !(d <= t * m) }'
}

# rel_diff A B: |A - B| / |B|, for messages.
rel_diff() {
	awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; if (d < 0) d = -d; m = b < 0 ? -b : b; printf "%.3g", (m > 0 ? d / m : d) }'
}

# weights_diff A B: how far apart two safetensors files of the same model
# are, for a failure message (od reads the little-endian F32 data after the
# 8-byte header length and the JSON header; a different layout says so).
weights_diff() {
	ha=$(od -A n -t u8 -N 8 "$1" | tr -d ' ')
	hb=$(od -A n -t u8 -N 8 "$2" | tr -d ' ')
	if [ -z "$ha" ] || [ "$ha" != "$hb" ] || [ "$(wc -c <"$1")" -ne "$(wc -c <"$2")" ]; then
		echo "the files differ in layout ($(wc -c <"$1") and $(wc -c <"$2") bytes)"
		return
	fi
	od -A n -v -t f4 -j $((8 + ha)) "$1" | tr -s ' ' '\n' | sed '/^$/d' >"$tmp/wd.a"
	od -A n -v -t f4 -j $((8 + ha)) "$2" | tr -s ' ' '\n' | sed '/^$/d' >"$tmp/wd.b"
	paste "$tmp/wd.a" "$tmp/wd.b" | awk '
		{ n++; if ($1 != $2) { k++; d = $1 - $2; if (d < 0) d = -d
		  m = ($1 < 0 ? -$1 : $1); if (($2 < 0 ? -$2 : $2) > m) m = ($2 < 0 ? -$2 : $2)
		  if (d > worst) worst = d; if (m > 0 && d / m > rel) rel = d / m } }
		END { printf "%d of %d floats differ; largest |a - b| %.3g, largest relative %.3g", k, n, worst, rel }'
}

# same_weights DESC REF NAME: NAME's weights must be byte-identical to REF's.
same_weights() {
	if cmp -s "$tmp/$2.st" "$tmp/$3.st"; then
		ok "$1: weights byte-identical to $2"
	else
		not_ok "$1: weights differ from $2: $(weights_diff "$tmp/$2.st" "$tmp/$3.st")"
	fi
}
