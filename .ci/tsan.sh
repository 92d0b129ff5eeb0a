#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# CI, threads: build with ThreadSanitizer in a separate directory (the
# plugins too: CFLAGS reach libtool's module builds) and run the suites
# whose runs put the CPU engine's threads to work: replicas polling each
# other's abort flags under 2bw's stream, every schedule against every
# other bitwise, signals during runs and saves, --trace.  Any report fails
# the suite (TSan exits 66).  Left out: the suites under mpirun (Open MPI's
# own synchronisation is invisible to TSan) and under ulimit -v (TSan
# cannot run there).  docs/changes.md, "Found by audits of allocation
# failures, threads and static analysis".
#
#   .ci/tsan.sh [BUILD_ROOT]      (default: $TMPDIR/pipehost-tsan)
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
root=${1:-${TMPDIR:-/tmp}/pipehost-tsan}
jobs=$(nproc 2>/dev/null || echo 2)

[ -x "$src/configure" ] || (cd "$src" && autoreconf -fi)
mkdir -p "$root/tsan"
cd "$root/tsan"
"$src/configure" -q --without-cuda CFLAGS='-g -O1 -fsanitize=thread' LDFLAGS='-fsanitize=thread'
make -j"$jobs"
export TSAN_OPTIONS=second_deadlock_stack=1
suites="tests/test-twobw.sh tests/test-replicas.sh tests/test-reproducible.sh tests/test-crash.sh tests/test-trace.sh"
if ! make -j"$jobs" check TESTS="$suites"; then
	grep -l -E 'WARNING: ThreadSanitizer|^not ok' tests/*.log 2>/dev/null | head -5 | while read -r f; do
		echo "=== $f"
		grep -A30 -m1 -E 'WARNING: ThreadSanitizer|^not ok' "$f"
	done
	exit 1
fi
echo "tsan: $(echo "$suites" | wc -w) suites pass, no report"
