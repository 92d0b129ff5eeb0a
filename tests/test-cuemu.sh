#!/bin/sh
# SPDX-License-Identifier: MIT
# The CUDA emulator's self-test (tests/cuemu/README.md): its barriers,
# shuffles and launches give known results, a barrier some threads never
# reach is reported rather than hanging, and PH_CUEMU_ORDER changes the
# order of threads (so the GPU tests run under two orders find races).
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

finish
