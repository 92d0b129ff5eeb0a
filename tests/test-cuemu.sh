#!/bin/sh
# SPDX-License-Identifier: MIT
# The CUDA emulator's self-test (tests/cuemu/README.md): its barriers,
# shuffles and launches give known results, a barrier some threads never
# reach is reported rather than hanging, and PH_CUEMU_ORDER changes the
# order of threads (so the GPU tests run under two orders find races).
# Its NCCL between two processes (fork, no MPI): messages, a group of 8 MiB
# each way, sums, gathers, refusals, threads, under each stream mode; a
# receive of the wrong size and a vanished peer abort in one line each, and
# so does a cudaFree while a send waits for its peer (cudaFreeAsync passes);
# a lone member gives up after PH_CUEMU_NCCL_TIMEOUT; no rendezvous
# directory is left behind.
# Skipped unless the build is configured with --enable-cuda-emulator.
# shellcheck disable=SC2154 # lib.sh's variables
. "$top_srcdir/tests/lib.sh"

[ -n "${PH_CUEMU:-}" ] || { echo "SKIP: test-cuemu.sh: not an emulator build (configure --enable-cuda-emulator)"; exit 77; }
st="$top_builddir/tests/cuemu/selftest"

for order in forward reverse shuffle; do
	if PH_CUEMU_ORDER=$order "$st" >"$tmp/self-$order.out" 2>&1; then
		ok "kernels with known results, $order order ($(grep -c '^ok' "$tmp/self-$order.out") checks)"
	else
		not_ok "kernels with known results, $order order: $(grep -v '^ok' "$tmp/self-$order.out" | head -3)"
	fi
done

"$st" deadlock >"$tmp/dead.out" 2>&1
rc=$?
if [ "$rc" -ne 0 ] && grep -q 'cuemu: deadlock in kernel k_deadlock' "$tmp/dead.out"; then
	ok "a barrier not every thread reaches is reported (exit $rc)"
else
	not_ok "deadlock not reported (exit $rc): $(head -c 300 "$tmp/dead.out")"
fi

a=$(PH_CUEMU_ORDER=forward "$st" race)
b=$(PH_CUEMU_ORDER=reverse "$st" race)
if [ "$a" = 127 ] && [ "$b" = 0 ]; then
	ok "PH_CUEMU_ORDER reorders threads: a racy kernel gives $a forward and $b reversed"
else
	not_ok "a racy kernel gave $a forward and $b reversed (want 127 and 0)"
fi

# NCCL: the rendezvous directories go to $tmp/nccl, which must be empty after
mkdir "$tmp/nccl"
for streams in lazy eager sync; do
	if TMPDIR="$tmp/nccl" PH_CUEMU_DEVICES=2 PH_CUEMU_STREAMS=$streams "$st" nccl >"$tmp/nccl-$streams.out" 2>&1; then
		ok "NCCL between two processes, $streams streams ($(grep -c '^ok' "$tmp/nccl-$streams.out") checks)"
	else
		not_ok "NCCL between two processes, $streams streams: $(grep -v '^ok' "$tmp/nccl-$streams.out" | head -3)"
	fi
done

TMPDIR="$tmp/nccl" PH_CUEMU_DEVICES=2 "$st" nccl-mismatch >"$tmp/mismatch.out" 2>&1
rc=$?
line='cuemu: NCCL: member 1 sent 4096 bytes, member 0 expected 2048 (the two issue their sends and receives in different orders)'
if grep -qxF "$line" "$tmp/mismatch.out"; then
	ok "a receive of the wrong size aborts its process: $line"
else
	not_ok "a receive of the wrong size: $(head -c 400 "$tmp/mismatch.out")"
fi
if [ "$rc" -ne 0 ] && grep -q '^cuemu: NCCL: member 0 (pid [0-9]*) of the communicator at .* is gone (it exited or aborted.*) while member 1 waited for it to take a send$' "$tmp/mismatch.out"; then
	ok "a peer that vanished is reported (exit $rc)"
else
	not_ok "a vanished peer (exit $rc): $(head -c 400 "$tmp/mismatch.out")"
fi

TMPDIR="$tmp/nccl" PH_CUEMU_DEVICES=2 "$st" nccl-free >"$tmp/free.out" 2>&1
rc=$?
line='cuemu: cudaFree while 1 NCCL operation of this process is queued: on a GPU it waits for them and they for their peers, a deadlock when a peer waits for this process; free in stream order (cudaFreeAsync) or after they are done'
if [ "$rc" -ne 0 ] && grep -qx 'ok - cudaFreeAsync with a send queued' "$tmp/free.out" && grep -qxF "$line" "$tmp/free.out"; then
	ok "a cudaFree while a send waits for its peer aborts; cudaFreeAsync does not"
else
	not_ok "cudaFree with a send queued (exit $rc): $(head -c 400 "$tmp/free.out")"
fi

if TMPDIR="$tmp/nccl" "$st" nccl-timeout >"$tmp/timeout.out" 2>&1; then
	ok "a lone member gives up: $(head -1 "$tmp/timeout.out")"
else
	not_ok "a lone member: $(head -c 400 "$tmp/timeout.out")"
fi

left=$(ls "$tmp/nccl")
if [ -z "$left" ]; then
	ok "no rendezvous directory left behind"
else
	not_ok "rendezvous files left behind: $left"
fi

finish
