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
	_bw_s=$1 _bw_k=$2 _bw_v=$3
	shift 3
	set -f
	# shellcheck disable=SC2086 # VALUE is a list of words
	set -- "$@" -- $_bw_v
	set +f
	_bw_allowed=""
	while [ "$1" != -- ]; do
		_bw_allowed="$_bw_allowed $1"
		shift
	done
	shift
	[ $# -gt 0 ] || bench_bad "$_bw_s" "$_bw_k" "$_bw_v" "names nothing (give some of:$_bw_allowed)"
	for _bw_w in "$@"; do
		case " $_bw_allowed " in
		*" $_bw_w "*) ;;
		*) bench_bad "$_bw_s" "$_bw_k" "$_bw_v" "has \"$_bw_w\", not one of:$_bw_allowed" ;;
		esac
	done
}

# The environment switches of the GPU code that a benchmark's VARIANTS may
# set (docs/reference.md, Environment variables).  tests/test-bench-args.sh
# checks that the sources still read each one: a switch renamed there must
# be renamed here, or a variant row would time the default path under
# another name.
bench_switches="PIPEHOST_ATTN_CUDNN PIPEHOST_ATTN_CUDNN_GROUP PIPEHOST_ATTN_FLASH PIPEHOST_ATTN_MMA PIPEHOST_ATTN_SPLIT PIPEHOST_BF16_ACT \
PIPEHOST_COLSUM_SPLIT PIPEHOST_GELU_FUSE PIPEHOST_GEMM_CAST PIPEHOST_GEMM_LT PIPEHOST_GRAD_IN_PLACE PIPEHOST_LN_WARP \
PIPEHOST_MEMCHECK PIPEHOST_NCCL PIPEHOST_OPTIM_MANY PIPEHOST_TIE_SHARE"

# need_switches SCRIPT NAME VALUE: every word of VALUE a NAME=SETTING with
# NAME among bench_switches and SETTING not empty (none at all is allowed).
need_switches() {
	set -f
	for _bw_w in $3; do
		case $_bw_w in
		*=?*) ;;
		*) bench_bad "$1" "$2" "$3" "has \"$_bw_w\", not SWITCH=VALUE" ;;
		esac
		case " $bench_switches " in
		*" ${_bw_w%%=*} "*) ;;
		*) bench_bad "$1" "$2" "$3" "has \"${_bw_w%%=*}\", not a switch pipehost reads (bench/args-lib.sh lists them)" ;;
		esac
	done
	set +f
}
