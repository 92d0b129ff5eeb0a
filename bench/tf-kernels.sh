#!/bin/sh
# SPDX-License-Identifier: MIT
# The transformer layers' fast CPU kernels (plugins/layers/transformer_ops.h)
# against their plain references, at etc/gpt-fortunes.ini's shapes, on one
# thread: a table of medians (ms) and reference / fast ratios.
#     bench/tf-kernels.sh [BUILD_DIR] [REPS]
# The program is tests/tf-kernels-bench, built by `make check` (or
# `make tests/tf-kernels-bench`).
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$top}
prog="$build/tests/tf-kernels-bench"
[ -x "$prog" ] || { echo "tf-kernels.sh: no $prog; run make tests/tf-kernels-bench in the build tree" >&2; exit 1; }
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
echo "CPU: ${cpu:-unknown}"
OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 exec "$prog" "${2:-30}"
