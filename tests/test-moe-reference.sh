#!/bin/sh
# SPDX-License-Identifier: MIT
# The `moe` layer against tests/reference/moe_reference.py, an independent
# PyTorch (float64, autograd) implementation of the same gating, capacity,
# drops, auxiliary loss and experts fed the same weights, tokens and
# random draws: outputs and every gradient to 1e-5 relative, for top-1,
# top-2 with the random and the always second expert, capacities that
# drop tokens, and capacity_factor = 0.  Skipped (77) where torch and
# numpy cannot be imported by $PH_REFERENCE_PYTHON (default python3).
py=${PH_REFERENCE_PYTHON:-python3}
if ! "$py" -c "import torch, numpy" >/dev/null 2>&1; then
	echo "SKIP: $py cannot import torch and numpy (set PH_REFERENCE_PYTHON)"
	exit 77
fi
src=${top_srcdir:-.}
dump=./tests/moe-dump
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
rc=0
# B T d, then the layer's options (E = 4, h = 12, aux_coef 0.3)
while read -r name opts; do
	[ -n "$name" ] || continue
	echo "== $name: $opts"
	# shellcheck disable=SC2086
	if ! "$dump" "$tmp/d.bin" 2 16 8 experts=4 hidden=12 aux_coef=0.3 $opts; then
		rc=1
		continue
	fi
	# shellcheck disable=SC2086
	"$py" "$src/tests/reference/moe_reference.py" "$tmp/d.bin" 2 16 8 experts=4 hidden=12 \
		aux_coef=0.3 $opts || rc=1
done <<'CASES'
top1 top_k=1 capacity_factor=2
top1-drops top_k=1 capacity_factor=1 group_size=8
top2-random second_expert=random capacity_factor=2
top2-always-drops second_expert=always capacity_factor=1 group_size=8
top2-random-drops second_expert=random capacity_factor=0.5
dropless-top2 second_expert=always capacity_factor=0 group_size=4
dropless-top1 top_k=1 capacity_factor=0 residual=no
CASES
exit $rc
