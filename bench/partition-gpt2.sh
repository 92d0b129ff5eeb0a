#!/bin/sh
# SPDX-License-Identifier: MIT
# Compare the partitioners on GPT-2 small (bench/gpt2-shape.ini: embedding,
# 12 transformer blocks, LM head) cut into K stages, as a Markdown table:
# layers, parameters (millions) and FLOPs share per stage, and the slowest
# stage over the mean (1.00 = perfect balance; the pipeline runs at the
# slowest stage's pace).
#
#   bench/partition-gpt2.sh [BUILD_DIR]          (K = 4; STAGES=8 for 8)
#
# BUILD_DIR is a configured build tree after `make check` (which builds the
# test plugin tests/plugins/.libs/gpt2_shape.so); default: the current
# directory.  Only --plan runs: nothing is loaded or trained, it takes a
# second.  With --plan=json (pipehost >= the JSON plan) the numbers come from
# the JSON; otherwise from the --plan table.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-.}
K=${STAGES:-4}
ini="$here/gpt2-shape.ini"
pipehost=${PIPEHOST:-$build/core/pipehost}
[ -x "$pipehost" ] || { echo "partition-gpt2: no $pipehost; pass the build directory" >&2; exit 1; }
so="$build/tests/plugins/.libs/gpt2_shape.so"
[ -f "$so" ] || { echo "partition-gpt2: no $so; run make check (or make tests/plugins/gpt2_shape.la) in $build" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# only the stand-in plugin: its directory also holds deliberately broken ones
mkdir "$tmp/plugins" && cp "$so" "$tmp/plugins/"
export PIPEHOST_PLUGIN_PATH="$build/plugins/layers/.libs:$build/plugins/schedules/.libs:$build/plugins/partitioners/.libs${PIPEHOST_PLUGIN_PATH:+:$PIPEHOST_PLUGIN_PATH}"

json=no
"$pipehost" -c "$ini" --plugin-dir "$tmp/plugins" --set run.stages="$K" --plan=json >/dev/null 2>&1 && json=yes

echo "GPT-2 small (124M + untied 38.6M head; T = 1024, micro-batch 4), $K stages, 1F1B, cost = FLOPs:"
echo
echo "| partitioner | layers per stage | parameters per stage (M) | FLOPs share per stage (%) | max/mean stage cost |"
echo "|---|---|---|---|---|"
for p in uniform parameters histogram type dp; do
	set -- -c "$ini" --plugin-dir "$tmp/plugins" --set run.stages="$K" --set partition.type=$p
	label=$p
	if [ $p = type ]; then
		set -- "$@" --set 'partition.regex=^gpt2_block$'
		label='type (regex `^gpt2_block$`)'
	fi
	if [ $json = yes ]; then
		"$pipehost" "$@" --plan=json >"$tmp/out" 2>"$tmp/err" || { echo "| $label | error: $(cat "$tmp/err") | | | |"; continue; }
		python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
s = d["stages"]
print("| %s | %s | %s | %s | %.2f |" % (sys.argv[2],
      ",".join(str(x["nlayers"]) for x in s),
      ", ".join("%.1f" % (x["params"] / 1e6) for x in s),
      ", ".join("%.1f" % (100 * x["cost_share"]) for x in s),
      d["totals"]["max_over_mean_cost"]))' "$tmp/out" "$label"
	else
		"$pipehost" "$@" --plan >"$tmp/out" 2>"$tmp/err" || { echo "| $label | error: $(cat "$tmp/err") | | | |"; continue; }
		awk -v label="$label" '
		/^  [0-9]/ {
			r = $0; sub(/.*\(/, "", r); sub(/\).*/, "", r)
			n = split(r, ab, "-"); cnt = n > 1 ? ab[2] - ab[1] + 1 : 1
			for (i = 1; i <= NF; i++) if ($i ~ /%$/) { c = substr($i, 1, length($i) - 1) + 0; pm = $(i - 1) }
			k++; L = L (k > 1 ? "," : "") cnt
			P = P (k > 1 ? ", " : "") sprintf("%.1f", pm / 1e6)
			C = C (k > 1 ? ", " : "") sprintf("%.1f", c)
			if (c > mx) mx = c; sum += c
		}
		END { printf "| %s | %s | %s | %s | %.2f |\n", label, L, P, C, (sum > 0 ? mx / (sum / k) : 0) }' "$tmp/out"
	fi
done
echo
echo "(read from $( [ $json = yes ] && echo 'pipehost --plan=json' || echo 'the pipehost --plan table' ))"
