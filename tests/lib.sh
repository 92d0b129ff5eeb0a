# SPDX-License-Identifier: MIT
# Shared helpers for the shell tests (TAP-like lines, a plain summary).
set -u
: "${PIPEHOST:?run through make check, which sets PIPEHOST}"
: "${top_srcdir:?}"
fixtures="$top_srcdir/tests/fixtures"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
n=0
failed=0

ok() { n=$((n + 1)); echo "ok $n - $1"; }
not_ok() { n=$((n + 1)); failed=$((failed + 1)); echo "not ok $n - $1"; }

# expect_error DESC REGEX ARGS...: pipehost ARGS must exit non-zero and print
# exactly one line on stderr, matching REGEX (extended).
expect_error() {
	desc=$1 re=$2
	shift 2
	"$PIPEHOST" "$@" >"$tmp/out" 2>"$tmp/err"
	rc=$?
	lines=$(wc -l <"$tmp/err")
	if [ "$rc" -ne 0 ] && [ "$lines" -eq 1 ] && grep -Eq -- "$re" "$tmp/err"; then
		ok "$desc: $(cat "$tmp/err")"
	else
		not_ok "$desc: exit $rc, $lines stderr line(s): $(head -c 600 "$tmp/err")"
	fi
}

# expect_error_t: expect_error with pipehost under `timeout 20`, for input
# that once made it block for ever (a FIFO opened for reading): a hang
# ends as a failure with exit 124 instead of stalling the suite.
expect_error_t() {
	[ -x "$tmp/pipehost-timeout" ] || {
		printf '#!/bin/sh\nexec timeout 20 "%s" "$@"\n' "$PIPEHOST" >"$tmp/pipehost-timeout"
		chmod +x "$tmp/pipehost-timeout"
	}
	_et_real=$PIPEHOST
	PIPEHOST=$tmp/pipehost-timeout
	expect_error "$@"
	PIPEHOST=$_et_real
}

# preload_shim NAME: the LD_PRELOAD shim tests/NAME.c (make check builds
# it), its path in $shim; returns 1, with a "# skip" line, where it was not
# built.  Under ASan a shim comes before the ASan runtime: ASAN_OPTIONS
# lets it.
preload_shim() {
	shim="$top_builddir/tests/.libs/$1.so"
	export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"
	[ -f "$shim" ] && return 0
	echo "# skip: $shim not built"
	return 1
}

# expect_fault DESC DIR MODE N REGEX NOT ARGS...: pipehost ARGS with the
# Nth read of a file under DIR failing as MODE (tests/faultfs.c: readeio,
# readeof; $shim from preload_shim faultfs) must exit 1 (a failed run: not
# a usage error, not a crash) with one stderr line that matches REGEX
# (extended) and not NOT (nothing is refused when NOT is empty).
expect_fault() {
	desc=$1 dir=$2 mode=$3 nth=$4 re=$5 not=$6
	shift 6
	FAULTFS_DIR="$dir" FAULTFS_MODE=$mode FAULTFS_N=$nth LD_PRELOAD="$shim" "$PIPEHOST" "$@" >"$tmp/out" 2>"$tmp/err"
	rc=$?
	lines=$(wc -l <"$tmp/err")
	if [ "$rc" -eq 1 ] && [ "$lines" -eq 1 ] && grep -Eq -- "$re" "$tmp/err" &&
		{ [ -z "$not" ] || ! grep -Eq -- "$not" "$tmp/err"; }; then
		ok "$desc: $(cat "$tmp/err")"
	else
		not_ok "$desc: exit $rc, $lines stderr line(s): $(head -c 300 "$tmp/err")"
	fi
}

finish() {
	echo "$((n - failed)) passed, $failed failed"
	[ "$failed" -eq 0 ]
}

# tensor_bytes FILE NAME: the raw bytes of one tensor of a safetensors file
tensor_bytes() {
	hlen=$(od -An -tu8 -N8 "$1" | tr -d ' ')
	range=$(head -c $((8 + hlen)) "$1" | tail -c "$hlen" |
		sed -n "s/.*\"$2\":{[^}]*\"data_offsets\":\[\([0-9]*\),\([0-9]*\)\].*/\1 \2/p")
	set -- "$1" $range
	tail -c +$((8 + hlen + $2 + 1)) "$1" | head -c $(($3 - $2))
}
