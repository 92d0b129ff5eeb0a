#!/bin/sh
# SPDX-License-Identifier: MIT
# The bash completion (share/bash-completion/pipehost) offers what this
# pipehost has: its options, the --set sections and keys, a choice's values,
# the plugin names for a type, and the layers of the -c file.
. "$top_srcdir/tests/lib.sh"
command -v bash >/dev/null 2>&1 || { echo "SKIP: no bash"; exit 77; }
comp="$top_srcdir/share/bash-completion/pipehost"
ini="$top_srcdir/etc/fashion-mnist.ini"

# complete LINE: the candidates for the end of LINE, space-separated (bash's
# own COMP_WORDBREAKS, which holds = and :)
complete_line() {
	bash -c '. "$1"; COMP_LINE=$2; COMP_POINT=${#COMP_LINE}; _pipehost; printf "%s\n" "${COMPREPLY[*]}"' sh "$comp" "$1"
}

# expect DESC LINE WANTED: the candidates are exactly WANTED (in any order)
expect() {
	got=$(complete_line "$2" | tr ' ' '\n' | sort | tr '\n' ' ')
	want=$(printf '%s\n' $3 | sort | tr '\n' ' ')
	if [ "$got" = "$want" ]; then ok "$1: $got"; else not_ok "$1: got '$got', want '$want'"; fi
}

expect "options" "$PIPEHOST --pl" "--plan --plan-json --plugin-dir"
expect "the new flags" "$PIPEHOST --check-p" "--check-plugin"
expect "a core section" "$PIPEHOST --set ru" "run."
expect "a section's keys" "$PIPEHOST --set run.st" "run.stages= run.steps="
expect "a choice's values" "$PIPEHOST --set run.recompute=" "no yes except_last"
expect "a bool's values" "$PIPEHOST --set data.shuffle=" "yes no"
expect "schedule plugins" "$PIPEHOST --set schedule.type=" "gpipe interleaved 1f1b table zb-h1 2bw pipedream"
expect "partitioner plugins" "$PIPEHOST --set partition.type=d" "dp"
expect "the -c file's layers" "$PIPEHOST -c $ini --set layer\\ fc" 'layer\ fc1. layer\ fc2.'
expect "a layer's keys and its plugin's options" "$PIPEHOST -c $ini --set layer\\ fc1.u" 'layer\ fc1.units='
expect "layer plugins" "$PIPEHOST -c $ini --set layer\\ fc1.type=li" "linear"
expect "a core choice named type is not a plugin" "$PIPEHOST --set optimizer.type=" "sgd adamw lion"
expect "the data sources" "$PIPEHOST --set data.source=" "fashion-mnist synthetic text npy tokens"
expect "the sources are values, not keys" "$PIPEHOST --set data.so" "data.source="
expect "--progress's modes" "$PIPEHOST --progress " "auto tty lines none"
expect "--plan=FORM" "$PIPEHOST --plan=" "text json"
expect "--help" "$PIPEHOST --he" "--help"
expect "--set=KEY as one word" "$PIPEHOST --set=run.st" "run.stages= run.steps="
expect "a layer written with a dot" "$PIPEHOST -c $ini --set layer.fc1.u" "layer.fc1.units="
printf '[schedule]\ntype = pipedream\n' >"$tmp/pd.ini"
expect "the -c file's schedule's own keys" "$PIPEHOST -c $tmp/pd.ini --set schedule." "schedule.type= schedule.delay="
# a plugin only --plugin-dir finds
mkdir -p "$tmp/more"
cp "$TEST_PLUGIN_DIR/check-deadlock.so" "$tmp/more/"
expect "plugins of --plugin-dir" "$PIPEHOST --plugin-dir $tmp/more --set schedule.type=check" "check_deadlock"
finish
