#!/bin/sh
# SPDX-License-Identifier: MIT
# The GPU's split column sums (bias and layernorm weight gradients,
# plugins/layers/cuda_ops.cuh) give the bits of a host replay of their
# order, under each thread order of the emulator (a race in the tree over
# lanes changes them): tests/cuda-sums.cu.
# Skipped unless the build is configured with --enable-cuda-emulator.
# shellcheck disable=SC2154 # lib.sh's variables
. "$top_srcdir/tests/lib.sh"

[ -n "${PH_CUEMU:-}" ] || { echo "SKIP: test-cuda-sums.sh: not an emulator build (configure --enable-cuda-emulator)"; exit 77; }
prog="$top_builddir/tests/cuda-sums"

for order in forward reverse shuffle; do
	if PH_CUEMU_ORDER=$order "$prog" >"$tmp/sums-$order.out" 2>&1; then
		ok "split column sums against the host's replay, $order order ($(grep -c '^ok' "$tmp/sums-$order.out") checks)"
	else
		not_ok "split column sums, $order order: $(grep -v '^ok' "$tmp/sums-$order.out" | head -3)"
	fi
done
finish
