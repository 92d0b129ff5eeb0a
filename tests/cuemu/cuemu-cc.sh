#!/bin/sh
# SPDX-License-Identifier: MIT
# cuemu-cc.sh CXX [nvcc flags...] -c SRC.cu -o OUT.o   (or SRC.cpp: plain C++, as nvcc takes it)
# Stands in for nvcc in the emulator build (configure --enable-cuda-emulator):
# rewrites kernel<<<grid, block[, shmem[, stream]]>>>(args) into
# CUEMU_LAUNCH("kernel", (kernel), grid, block, ...)(args) (the name for
# messages; the parentheses keep the commas of kernel<A, B> out of the
# macro's arguments; a template kernel needs its arguments written out),
# then compiles the result as
# C++ with the emulator's headers (tests/cuemu/include) first on the path.
# nvcc-only flags (-gencode, -arch, -Xcompiler X) are dropped or unwrapped.
# --cuh-dir=DIR (ours, not nvcc's): DIR's .cuh headers are rewritten too and
# found first by quoted includes, for a test that includes a layer's kernels
# from outside plugins/layers (tests/cuda-sums.cu).
set -e
cxx=$1
shift
here=$(cd "$(dirname "$0")" && pwd)
src= out= args= cuhdirs=
while [ $# -gt 0 ]; do
	case $1 in
	-Xcompiler) shift; args="$args $1" ;;
	-Xcompiler=*) args="$args ${1#-Xcompiler=}" ;;
	-gencode=* | -arch=* | -code=* | --use_fast_math | -lineinfo | --expt-*) ;;
	-gencode | -arch | -code) shift ;;
	-o) shift; out=$1 ;;
	--cuh-dir=*) cuhdirs="$cuhdirs ${1#--cuh-dir=}" ;;
	-c) ;;
	*.cu | *.cpp) src=$1 ;;
	*) args="$args $1" ;;
	esac
	shift
done
[ -n "$src" ] && [ -n "$out" ] || { echo "cuemu-cc.sh: need -c SRC.cu and -o OUT" >&2; exit 2; }
# The source and the .cuh headers beside it (where its launches may be) are
# rewritten into a scratch directory, so their quoted includes find each
# other; #line keeps the original names in messages.
srcdir=$(cd "$(dirname "$src")" && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/cuemu-cc.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
rewrite() {
	printf '#line 1 "%s"\n' "$1"
	perl -0777 -pe 's/\b([A-Za-z_]\w*(?:\s*<[^<>;(){}]*>)?)\s*<<<(.*?)>>>\s*\(/my ($k, $c) = ($1, $2); (my $n = $k) =~ s{\s+}{ }g; "CUEMU_LAUNCH(\"$n\", ($k), $c)("/gse' "$1"
}
for h in "$srcdir"/*.cuh; do
	[ -f "$h" ] && rewrite "$h" >"$tmp/$(basename "$h")"
done
for d in $cuhdirs; do
	for h in "$d"/*.cuh; do
		[ -f "$h" ] && rewrite "$h" >"$tmp/$(basename "$h")"
	done
	args="$args -I$d"
done
rewrite "$src" >"$tmp/src.cc"
# -ffp-contract=off: the kernels' arithmetic rounds as written, as nvcc's
# __fadd_rn/__fmul_rn do; -I first so <cuda_runtime.h> is the emulator's
# shellcheck disable=SC2086
$cxx -x c++ -std=c++17 -I"$here/include" -ffp-contract=off -fPIC -DCUEMU=1 $args -I"$srcdir" -c "$tmp/src.cc" -o "$out"
