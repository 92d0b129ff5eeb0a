# SPDX-License-Identifier: MIT
# shellcheck shell=sh
# Helpers for the expert-parallel tests (test-expert-parallel.sh with
# ep_linear, test-moe-ep.sh with gpt_block's moe MLP): the same job on R
# replicas holding 4/R experts each, compared with R = 1.  Source after
# tests/lib.sh, with ep_ini the INI and ep_args the options every run adds.
#
#	. "$top_srcdir/tests/ep-lib.sh"
#	ep_need_python
#	for R in 1 2 4; do ep_run "r$R" "$R"; done
#	ep_against_r1 "moe, "

# shellcheck disable=SC2154 # top_srcdir and tmp are the test environment's

# The weights are compared by tests/st-diff.py.
ep_need_python() {
	if ! command -v python3 >/dev/null 2>&1; then
		echo "SKIP: no python3 to compare safetensors files"
		exit 77
	fi
}

# ep_run NAME R ARGS...: R replicas at 4/R micro-batches (the same
# micro-batch size for every R), a metrics line each step; weights
# $tmp/NAME.st, metrics $tmp/NAME.jsonl, log $tmp/NAME.log.
ep_run() {
	name=$1 R=$2
	shift 2
	# shellcheck disable=SC2086,SC2154 # $ep_args are words; ep_ini is the caller's
	"$PIPEHOST" -c "$ep_ini" --set run.replicas="$R" --set run.micro_batches=$((4 / R)) --set run.log_every=1 \
		$ep_args --set run.metrics="$tmp/$name.jsonl" --save-weights "$tmp/$name.st" "$@" >"$tmp/$name.log" 2>&1
}

# ep_losses NAME: the loss of every step, one a line.
ep_losses() { sed -n 's/.*"loss":\([-0-9.e]*\).*/\1/p' "$tmp/$1.jsonl"; }

# ep_against_r1 LABEL: runs r2 and r4 against r1: weights within
# ep_wtol relative (default 1e-4) and losses within 1e-6 over 20 steps;
# one line each.
ep_against_r1() {
	label=$1 tol=${ep_wtol:-1e-4}
	for R in 2 4; do
		w=$(python3 "$top_srcdir/tests/st-diff.py" "$tmp/r1.st" "$tmp/r$R.st")
		ep_losses "r$R" >"$tmp/l$R"
		l=$(ep_losses r1 | paste - "$tmp/l$R" |
			awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > m) m = d } END { printf "%.3g %d", m, NR }')
		# shellcheck disable=SC2086 # two figures each
		set -- $w $l
		if [ "$4" = 20 ] && awk "BEGIN { exit !($1 <= $tol && $3 <= 1e-6) }"; then
			ok "${label}R = $R (experts 4/$R each) against R = 1: weights $1 relative ($2), losses $3 apart over 20 steps"
		else
			not_ok "${label}R = $R against R = 1: weights '$1' ($2), losses '$3' over '$4' steps"
		fi
	done
}
