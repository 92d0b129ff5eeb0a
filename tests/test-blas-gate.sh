#!/bin/sh
# SPDX-License-Identifier: MIT
# More rank threads than the process's OpenBLAS was built for take turns
# at BLAS (core/blas_gate.h): OpenBLAS 0.3.21 built for 64 threads warned
# and crashed once in three runs at 64 stages x 16 replicas.  The shim
# tests/blasshim.c stands a build of MAX_THREADS=4 in front of the real
# OpenBLAS and counts the threads inside cblas_sgemm at once:
#  - 8 stages x 4 replicas (32 rank threads) against MAX_THREADS=4: never
#    more than 4 inside at once, and the same weights, byte for byte, as
#    the run with no gate (MAX_THREADS=64, where more than 4 are inside:
#    the count can fail);
#  - a mixture of experts whose layer waits for its peers inside the call
#    (an all-to-all over 4 replicas) against one seat: it gives the seat
#    back while it waits, so the run ends (no deadlock) with the bytes of
#    the run with no gate.
. "$top_srcdir/tests/lib.sh"
if [ -n "${ASAN_OPTIONS:-}${TSAN_OPTIONS:-}" ]; then
	echo "SKIP: under a sanitizer (a preloaded shim goes before its runtime)"
	exit 77
fi
preload_shim blasshim || exit 77

cat >"$tmp/deep.ini" <<'INI'
[run]
seed = 3
stages = 8
replicas = 4
micro_batches = 8
batch = 64
steps = 2
eval = no
[data]
source = synthetic
shape = 16
classes = 4
samples = 256
test_samples = 16
[optimizer]
type = sgd
lr = 0.05
[partition]
type = uniform
[schedule]
type = 1f1b
[layer l1]
type = linear
units = 32
repeat = 16
[layer out]
type = linear
units = 4
[layer loss]
type = softmax_xent
INI

# shimmed NAME MAX_THREADS ARGS...: pipehost under the shim (2 ms asleep in
# each sgemm), weights $tmp/NAME.st, the peak in $tmp/NAME.peak
shimmed() {
	name=$1 max=$2
	shift 2
	BLASSHIM_MAX_THREADS=$max BLASSHIM_SLEEP_US=2000 BLASSHIM_PEAK="$tmp/$name.peak" LD_PRELOAD="$shim" \
		timeout 60 "$PIPEHOST" "$@" --save-weights "$tmp/$name.st" >"$tmp/$name.log" 2>&1
}
peak() { cat "$tmp/$1.peak" 2>/dev/null || echo none; }

shimmed free 64 -c "$tmp/deep.ini"
rc_free=$?
shimmed gated 4 -c "$tmp/deep.ini"
rc=$?
if [ "$rc" -eq 0 ] && [ "$(peak gated)" -le 4 ] 2>/dev/null && [ "$(peak gated)" -ge 2 ]; then
	if grep -q "built for 4 threads: at most 4 of the 32 ranks" "$tmp/gated.log"; then
		ok "32 rank threads, a build of 4: at most $(peak gated) inside sgemm at once, and the log says so"
	else
		not_ok "32 rank threads, a build of 4: no note in the log: $(grep note "$tmp/gated.log")"
	fi
else
	not_ok "32 rank threads, a build of 4: exit $rc, peak $(peak gated): $(tail -2 "$tmp/gated.log")"
fi
if [ "$rc_free" -eq 0 ] && [ "$(peak free)" -gt 4 ] 2>/dev/null; then
	ok "no gate below the build's 64: $(peak free) inside at once"
else
	not_ok "a build of 64: exit $rc_free, peak $(peak free): $(tail -2 "$tmp/free.log")"
fi
if cmp -s "$tmp/free.st" "$tmp/gated.st"; then
	ok "taking turns leaves the weights as they were, byte for byte"
else
	not_ok "the gated run's weights differ from the run without the gate"
fi

# The moe MLP's all-to-all waits inside the layer call: with one seat, a
# replica that kept it while waiting would never see its peers.
moe="-c $fixtures/moe-lm.ini --set run.replicas=4 --set run.micro_batches=1 --set run.steps=3"
# shellcheck disable=SC2086 # $moe is words
shimmed moefree 64 $moe
# shellcheck disable=SC2086
shimmed moegated 1 $moe
rc=$?
if [ "$rc" -eq 0 ] && [ "$(peak moegated)" = 1 ] && cmp -s "$tmp/moefree.st" "$tmp/moegated.st"; then
	ok "moe all-to-all over 4 replicas with one seat: ends, one inside at a time, the same bytes"
else
	not_ok "moe with one seat: exit $rc (124 means it hung), peak $(peak moegated): $(tail -2 "$tmp/moegated.log")"
fi
finish
