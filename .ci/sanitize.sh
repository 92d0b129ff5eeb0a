#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# CI, sanitizers: build with ASan + UBSan in a separate directory and run the
# whole test suite there (plugins are built with the same flags, so the
# dlopen'ed layer, schedule and partitioner code is checked too), then run
# every libFuzzer harness for FUZZ_SECONDS (default 30) from a plain build,
# whose plugins the config harness can load (gcc's ASan runtime in a
# sanitizer build's plugins cannot share a process with clang's).
#
#   .ci/sanitize.sh [BUILD_ROOT]      (default: $TMPDIR/pipehost-sanitize)
#
# Called by .ci/run after autoreconf.  Exits non-zero on any test failure,
# sanitizer report or fuzzer crash; logs stay under BUILD_ROOT.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
root=${1:-${TMPDIR:-/tmp}/pipehost-sanitize}
jobs=$(nproc 2>/dev/null || echo 2)
fuzz_seconds=${FUZZ_SECONDS:-30}

[ -x "$src/configure" ] || (cd "$src" && autoreconf -fi)

# 1. make check under ASan + UBSan.
mkdir -p "$root/sanitize"
cd "$root/sanitize"
# CPU only: the CUDA runtime does not run under ASan, and there is no GPU here
"$src/configure" -q --enable-sanitizers --without-cuda
make -j"$jobs"
export ASAN_OPTIONS=detect_leaks=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
if ! make -j"$jobs" check; then
	# the failing suites' logs carry the sanitizer reports
	find . -name '*.log' -newer Makefile -exec grep -l -E 'ERROR: (Address|Leak)Sanitizer|runtime error:|^FAIL' {} + |
		head -20 | while read -r f; do echo "=== $f"; tail -60 "$f"; done
	exit 1
fi
# A sanitizer report inside a test that still passed (e.g. in a child whose
# status a shell test ignored) counts as a failure too.
if grep -rl -E 'ERROR: (Address|Leak)Sanitizer|runtime error:' --include='*.log' . >/dev/null 2>&1; then
	grep -rn -E 'ERROR: (Address|Leak)Sanitizer|runtime error:' --include='*.log' . | head -20
	exit 1
fi
unset ASAN_OPTIONS UBSAN_OPTIONS

# 2. Fuzz every parser of untrusted bytes.
mkdir -p "$root/fuzz"
cd "$root/fuzz"
"$src/configure" -q --without-cuda
make -j"$jobs" fuzz FUZZ_SECONDS="$fuzz_seconds"
echo "sanitize: make check clean under ASan+UBSan; fuzzers ran ${fuzz_seconds}s each without a crash"
