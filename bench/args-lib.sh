# SPDX-License-Identifier: MIT
# shellcheck shell=sh
# The environment a benchmark reads, checked before it runs anything:
# sourced by the bench/*.sh scripts.  A value the script cannot use
# stops it with one line on stderr and exit 1, before a table header or
# the first run: a typo must not cost a half-hour of runs, a shell's
# "Illegal number" or a row that silently took a default.
# tests/test-bench-args.sh holds every script to it.

# bench_bad SCRIPT NAME VALUE WANT: the one line, and exit 1.
bench_bad() {
	echo "$1: $2=$3 $4; unset $2 for the default" >&2
	exit 1
}

# need_count SCRIPT NAME VALUE MIN: VALUE a whole number from MIN to
# 999999999, digits only, no leading zero (the shell would read 08 as
# octal).
need_count() {
	case $3 in
	'' | *[!0-9]* | 0?*) bench_bad "$1" "$2" "$3" "is not a whole number (give one of at least $4)" ;;
	esac
	[ ${#3} -le 9 ] || bench_bad "$1" "$2" "$3" "is too large (at most 999999999)"
	[ "$3" -ge "$4" ] || bench_bad "$1" "$2" "$3" "is below $4"
}

# need_flag SCRIPT NAME VALUE: VALUE 0 or 1.
need_flag() {
	case $3 in
	0 | 1) ;;
	*) bench_bad "$1" "$2" "$3" "is neither 0 nor 1" ;;
	esac
}

# need_words SCRIPT NAME VALUE WORD...: every word of VALUE one of the WORDs,
# and at least one word.
need_words() {
	s=$1 k=$2 v=$3
	shift 3
	set -f
	# shellcheck disable=SC2086 # VALUE is a list of words
	set -- "$@" -- $v
	set +f
	allowed=""
	while [ "$1" != -- ]; do
		allowed="$allowed $1"
		shift
	done
	shift
	[ $# -gt 0 ] || bench_bad "$s" "$k" "$v" "names nothing (give some of:$allowed)"
	for w in "$@"; do
		case " $allowed " in
		*" $w "*) ;;
		*) bench_bad "$s" "$k" "$v" "has \"$w\", not one of:$allowed" ;;
		esac
	done
}
