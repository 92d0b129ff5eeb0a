#!/bin/sh
# SPDX-License-Identifier: MIT
# The replica group's all_to_all on the CPU against memcpy at the same
# bytes (issue 27: no more than 1.2x).  Run from the build directory:
#   bench/alltoall-cpu.sh [MiB per replica (64: past the caches)] [calls (10)]
set -eu
make -s bench/alltoall-cpu >/dev/null
for R in 2 4; do
	./bench/alltoall-cpu "$R" "${1:-64}" "${2:-10}"
done
