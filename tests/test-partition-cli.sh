#!/bin/sh
# SPDX-License-Identifier: MIT
# [partition] through the command line: bad inputs end with one clear stderr
# line and a non-zero exit; good ones give the splits they promise, on the
# tiny conv net and on the GPT-2 small stand-in (tests/plugins/gpt2_shape.c,
# bench/gpt2-shape.ini).  Only --plan runs: no data is loaded, nothing trains.
. "$top_srcdir/tests/lib.sh"
tiny="$fixtures/tiny.ini"
gpt2="$top_srcdir/bench/gpt2-shape.ini"
# TEST_PLUGIN_DIR also holds the broken test plugins: take only ours.
gpt2_dir="$tmp/gpt2"
mkdir -p "$gpt2_dir" && cp "$TEST_PLUGIN_DIR/gpt2_shape.so" "$gpt2_dir/"

skip() { n=$((n + 1)); echo "ok $n - # SKIP $1"; }

# plan ARGS...: run --plan, stdout to $tmp/plan, stderr to $tmp/perr.
plan() {
	"$PIPEHOST" "$@" --plan >"$tmp/plan" 2>"$tmp/perr"
}
# The layer ranges of the last plan, one per chunk: "0-1 2-5 6-8".
ranges() {
	sed -n 's/^  [0-9][0-9]* .*(\([0-9][0-9-]*\)) .*/\1/p' "$tmp/plan" | tr '\n' ' ' | sed 's/ $//'
}
# Layers per chunk of the last plan: "4,3,3,4".
counts() {
	ranges | tr ' ' '\n' | awk -F- '{ printf "%s%d", (NR > 1 ? "," : ""), (NF > 1 ? $2 - $1 : 0) + 1 }'
}
# The largest cost share (percent) of the last plan.
max_cost() {
	awk '/^  [0-9]/ { for (i = 1; i <= NF; i++) if ($i ~ /%$/) { v = substr($i, 1, length($i) - 1) + 0; if (v > m) m = v } }
	     END { if (m != "") printf "%.1f", m }' "$tmp/plan"
}
# The largest est. MiB (the last column) of the last plan.
max_mib() {
	awk '/^  [0-9]/ { if (m == "" || $NF + 0 > m) m = $NF + 0 } END { if (m != "") printf "%.1f", m }' "$tmp/plan"
}
# expect DESC WANT GOT
expect() {
	if [ "$2" = "$3" ]; then ok "$1: $3"; else not_ok "$1: want $2, got $3 (stderr: $(head -c 300 "$tmp/perr"))"; fi
}

# ---- bad inputs ------------------------------------------------------------

expect_error "more stages than marked cut points" \
	"3 stages need 2 boundaries but the layers allow only 1 \(\[partition\] cuts = marked and few layers say cut = yes\): lower stages or allow more cuts" \
	-c "$tiny" --plan --set run.stages=3 --set partition.cuts=marked --set "layer relu1.cut=yes"

expect_error "memory limit no split satisfies (dp)" \
	"partitioner dp: .*no split of 14 layers into 4 stages fits memory; at best stage [0-9]+ \(layers [0-9]+\.\.[0-9]+, [a-z0-9]+\.\.[a-z0-9]+\) needs [0-9.]+ GiB, [0-9.]+ GiB over its 2\.0 GiB limit" \
	-c "$gpt2" --plugin-dir "$gpt2_dir" --plan --set partition.type=dp --set partition.memory=2

expect_error "explicit bounds not increasing" \
	"partitioner explicit: .*bounds must increase: stage 2 starts at 3, not after stage 1's 5" \
	-c "$tiny" --plan --set run.stages=3 --set partition.type=explicit --set partition.bounds=0,5,3

# a trailing comma was dropped, though "0,,4" is refused
expect_error "explicit bounds ending with a comma" \
	"^pipehost: --set: \[partition\] bounds = 0,4, ends with a comma; remove it, or give the missing value$" \
	-c "$tiny" --plan --set run.stages=3 --set partition.type=explicit --set "partition.bounds=0,4,"
expect_error "explicit bounds out of range" \
	"partitioner explicit: .*stage 1 starts at layer 12, but the model has layers 0\.\.8 only" \
	-c "$tiny" --plan --set partition.type=explicit --set partition.bounds=0,12

expect_error "explicit bounds, one per stage" \
	"partitioner explicit: .*bounds lists 3 stages but there are 2 stages" \
	-c "$tiny" --plan --set partition.type=explicit --set partition.bounds=0,2,4

expect_error "explicit bound after a cut = no layer" \
	"partitioner explicit: .*stage 1 starts at layer 2 \(pool1\), but the model may not be cut after layer 1 \(relu1\)" \
	-c "$tiny" --plan --set partition.type=explicit --set partition.bounds=0,2 --set "layer relu1.cut=no"

expect_error "type regex matching fewer layers than stages" \
	'partitioner type: .*1 layer of type matching .\^gpt2_head\$., fewer than the 4 stages' \
	-c "$gpt2" --plugin-dir "$gpt2_dir" --plan --set partition.type=type --set 'partition.regex=^gpt2_head$'

# a partitioner's error in an INI names the line of [partition] type
sed 's/^type = uniform$/type = explicit\nbounds = 0,2,4/' "$tiny" >"$tmp/bounds.ini"
expect_error "a partitioner's error names the INI's line" \
	"^pipehost: $tmp/bounds.ini:[0-9]+: partitioner explicit: .*bounds lists 3 stages but there are 2 stages" \
	-c "$tmp/bounds.ini" --plan
sed 's/^stages = 2$/stages = 12/' "$tiny" >"$tmp/many.ini"
expect_error "too many stages for the layers, at [run] stages' line" \
	"^pipehost: $tmp/many.ini:5: \[run\] stages = 12 x chunks = 1 needs at least 12 layers" \
	-c "$tmp/many.ini" --plan

# Parameter-free layers with cost = params: every layer costs 0.  The
# partitioners would quietly split by layer count; the host refuses.
printf '[run]\nstages = 2\nbatch = 8\nmicro_batches = 2\n[data]\nsource = synthetic\nshape = 1,8,8\n[partition]\ncost = params\n[layer pool]\ntype = maxpool2d\n[layer relu]\ntype = relu\n[layer flat]\ntype = flatten\n[layer loss]\ntype = softmax_xent\n' >"$tmp/zero.ini"
for p in dp histogram; do
	expect_error "cost 0 for every layer ($p), at the INI's line" \
		"^pipehost: $tmp/zero.ini:9: \[partition\] cost = params gives every layer a cost of 0" \
		-c "$tmp/zero.ini" --plan --set partition.type=$p
done

# ---- good inputs -----------------------------------------------------------

# cuts = marked: boundaries only after relu1 (1) and relu2 (5), whatever the partitioner.
for p in uniform parameters histogram dp; do
	plan -c "$tiny" --set run.stages=3 --set partition.cuts=marked --set "layer relu1.cut=yes" \
		--set "layer relu2.cut=yes" --set partition.type=$p
	expect "cuts = marked respected by $p" "0-1 2-5 6-8" "$(ranges)"
done
# cut = no is respected without cuts = marked: uniform would start stage 1 at
# layer 5; the nearest allowed starts are 4 and 6, and the earlier wins.
plan -c "$tiny" --set "layer fc1.cut=no"
expect "cut = no moves uniform's boundary" "0-3 4-8" "$(ranges)"

plan -c "$tiny" --set run.stages=3 --set partition.type=explicit --set partition.bounds=0,2,7
expect "explicit bounds honoured" "0-1 2-6 7-8" "$(ranges)"

# GPT-2 small: 14 layers (embedding, 12 blocks, head) into 4 stages.
plan -c "$gpt2" --plugin-dir "$gpt2_dir" --set partition.type=type --set 'partition.regex=^gpt2_block$'
expect "type balances the blocks like DeepSpeed (4,3,3,4)" "4,3,3,4" "$(counts)"

plan -c "$gpt2" --plugin-dir "$gpt2_dir" --set partition.type=dp
dp_max=$(max_cost)
dp_counts=$(counts)
expect "dp gives the head a stage of its own" "5,4,4,1" "$dp_counts"
for p in uniform parameters histogram type; do
	if [ $p = type ]; then
		plan -c "$gpt2" --plugin-dir "$gpt2_dir" --set partition.type=type --set 'partition.regex=^gpt2_block$'
	else
		plan -c "$gpt2" --plugin-dir "$gpt2_dir" --set partition.type=$p
	fi
	other=$(max_cost)
	if [ -n "$dp_max" ] && [ -n "$other" ] && awk -v a="$dp_max" -v b="$other" 'BEGIN { exit !(a <= b) }'; then
		ok "dp's slowest stage ($dp_max%) <= $p's ($other%)"
	else
		not_ok "dp's slowest stage ($dp_max%) <= $p's ($other%) ($(head -c 300 "$tmp/perr"))"
	fi
done

# A memory limit that can be met: dp meets it (and pays in balance).
plan -c "$gpt2" --plugin-dir "$gpt2_dir" --set partition.type=dp --set partition.memory=4
mib=$(max_mib)
if [ -s "$tmp/plan" ] && awk -v m="$mib" 'BEGIN { exit !(m > 0 && m <= 4096) }'; then
	ok "dp within a 4 GiB limit: largest stage $mib MiB ($(counts))"
else
	not_ok "dp within a 4 GiB limit: largest stage $mib MiB ($(head -c 300 "$tmp/perr"))"
fi

# The limit bounds each chunk's memory as --plan prints it (est. MiB), the
# scratch, ties and weight versions the partitioners do not model included:
# a limit between dp's model (17.1 MiB) and the plan's figure (19.1) used
# to pass, and recompute was left out of dp's model (2026-12-07).
fortunes="$top_srcdir/etc/gpt-fortunes.ini"
F="--set partition.cost=flops --set partition.type=dp"
limit_gib() { # the last plan's largest est. MiB plus $1 MiB, in GiB
	awk -v m="$(max_mib)" -v d="$1" 'BEGIN { printf "%.6f", (m + d) / 1024 }'
}
# shellcheck disable=SC2086 # F is words
plan -c "$fortunes" $F
below=$(limit_gib -0.3) above=$(limit_gib 0.3) need=$(max_mib)
# shellcheck disable=SC2086
plan -c "$fortunes" $F --set partition.memory="$above"
[ -s "$tmp/plan" ] && [ "$(max_mib)" = "$need" ] && ok "a limit 0.3 MiB above the plan's largest chunk ($need MiB): accepted" ||
	not_ok "a limit just above $need MiB: $(head -c 300 "$tmp/perr")"
# shellcheck disable=SC2086
expect_error "a limit 0.3 MiB below the plan's largest chunk" \
	"^pipehost: --set: chunk [0-9]+ \(layers [0-9]+\.\.[0-9]+, [a-z0-9]+\.\.[a-z0-9]+\) needs $need MiB \(--plan's est\. MiB\), over \[partition\] memory = [0-9.]+ GiB \([0-9.]+ MiB\); raise it, add stages, or set \[run\] recompute = yes\$" \
	-c "$fortunes" $F --set partition.memory="$below" --plan
R="--set run.stages=1 --set schedule.type=gpipe --set run.recompute=yes"
# shellcheck disable=SC2086
plan -c "$fortunes" $F $R
above=$(limit_gib 0.5) need=$(max_mib)
# shellcheck disable=SC2086
plan -c "$fortunes" $F $R --set partition.memory="$above"
[ -s "$tmp/plan" ] && ok "recompute: 16 micro-batches in flight within $need MiB + 0.5 (dp counted each whole)" ||
	not_ok "recompute, a limit just above $need MiB: $(head -c 300 "$tmp/perr")"

# ---- --plan=json and cost = profile, once main.c wires them ----------------
# Wired when --help lists --plan-json (the same change brings both); from
# then on they must work.

wired=no
"$PIPEHOST" --help 2>/dev/null | grep -q -- '--plan-json' && wired=yes
if [ $wired = no ]; then
	skip "--plan=json is not wired into main.c yet"
elif ! "$PIPEHOST" -c "$tiny" --plan=json >"$tmp/plan.json" 2>"$tmp/perr"; then
	not_ok "--plan=json: $(head -c 300 "$tmp/perr")"
else
	if command -v python3 >/dev/null 2>&1; then
		got=$(python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
s = d["stages"]
assert d["format"] == "pipehost-plan" and d["p"] == 2 and len(s) == 2, d
for st in s:
    m = st["memory"]
    assert m["total"] == m["params"] + m["grads"] + m["optimizer"] + m["activations"] + m["scratch"], m
    assert st["params"] == sum(l["params"] for l in st["layers"]), st
print(" ".join("%d-%d" % (st["first"], st["last"]) for st in s))' "$tmp/plan.json" 2>&1)
		plan -c "$tiny"
		expect "--plan=json gives the table's split" "$(ranges)" "$got"
	else
		skip "--plan=json: no python3 to read it"
	fi
	"$PIPEHOST" -c "$tiny" --plan-json "$tmp/p.json" --plan >"$tmp/plan" 2>"$tmp/perr"
	if grep -q '"format":' "$tmp/p.json" 2>/dev/null && grep -q '^plan:' "$tmp/plan" && ! ls "$tmp"/p.json.*.tmp >/dev/null 2>&1; then
		ok "--plan-json FILE writes the JSON and keeps the table"
	else
		not_ok "--plan-json FILE writes the JSON and keeps the table ($(head -c 300 "$tmp/perr"))"
	fi
	expect_error "--plan=bogus" "--plan=yaml: expected --plan, --plan=text or --plan=json" -c "$tiny" --plan=yaml
	# --plan=json's stdout is one JSON document: nothing printed beside it, no file silently dropped
	expect_error "--plan=json with --simulate" "--plan=json prints only the plan's JSON on stdout, --simulate a report beside it: for both, give --simulate --plan-json FILE" \
		-c "$tiny" --plan=json --simulate
	expect_error "--plan=json with --plan-json FILE" "--plan=json prints the plan's JSON on stdout and --plan-json writes it to a file: give one of them" \
		-c "$tiny" --plan-json "$tmp/p2.json" --plan=json
	expect_error "--plan-json into a missing directory" "--plan-json $tmp/no/such/p\.json: cannot create files in $tmp/no/such: No such file or directory" \
		-c "$tiny" --plan --plan-json "$tmp/no/such/p.json"
fi

cache="$tmp/cache"
plan -c "$tiny" --set partition.cost=profile --set partition.type=dp --set "partition.profile_cache=$cache"
if [ $wired = no ]; then
	skip "cost = profile is not wired into main.c yet"
elif grep -q '^profile: measuring' "$tmp/plan"; then
	ok "cost = profile measures: $(grep -c '^  [0-9]' "$tmp/plan") table lines"
	plan -c "$tiny" --set partition.cost=profile --set partition.type=dp --set "partition.profile_cache=$cache"
	if grep -q '^profile: cache hit' "$tmp/plan" && [ "$(ls "$cache" | wc -l)" -eq 1 ]; then
		ok "cost = profile: the second run reads the cache"
	else
		not_ok "cost = profile: the second run reads the cache ($(head -3 "$tmp/plan"))"
	fi
	plan -c "$tiny" --set partition.cost=profile --set run.batch=64 --set "partition.profile_cache=$cache"
	if grep -q '^profile: measuring' "$tmp/plan" && [ "$(ls "$cache" | wc -l)" -eq 2 ]; then
		ok "cost = profile: another micro-batch size is measured again"
	else
		not_ok "cost = profile: another micro-batch size is measured again ($(head -3 "$tmp/plan"))"
	fi
	# names are not what a layer costs: a renamed layer reads the cache (a
	# check of names once made two INIs rewrite each other's file)
	sed 's/^\[layer relu1\]/[layer act1]/' "$tiny" >"$tmp/renamed.ini"
	plan -c "$tmp/renamed.ini" --set partition.cost=profile --set partition.type=dp --set "partition.profile_cache=$cache"
	if grep -q '^profile: cache hit' "$tmp/plan"; then
		ok "cost = profile: a renamed layer reads the cache"
	else
		not_ok "cost = profile: a renamed layer: $(head -3 "$tmp/plan")"
	fi
	# an option that leaves the meta alone still moves the time (a dropout
	# rate of 0 draws no mask): each rate its own entry
	cp "$tiny" "$tmp/drop.ini" # its [layer drop] is a dropout
	plan -c "$tmp/drop.ini" --set partition.cost=profile --set "partition.profile_cache=$tmp/c2" --set layer.drop.rate=0.5
	plan -c "$tmp/drop.ini" --set partition.cost=profile --set "partition.profile_cache=$tmp/c2" --set layer.drop.rate=0
	if grep -q '^profile: measuring' "$tmp/plan" && [ "$(ls "$tmp/c2" | wc -l)" -eq 2 ]; then
		ok "cost = profile: another dropout rate (not in the meta) is measured again"
	else
		not_ok "cost = profile: a dropout rate read a stale entry: $(head -3 "$tmp/plan")"
	fi
	# a file of zero times (no measurement gives them) is a note and a
	# measurement, not a run refused for costs of 0
	f=$(ls "$tmp/c2"/* | head -1)
	awk '/^layer / { $4 = 0; $5 = 0 } { print }' "$f" >"$f.new" && mv "$f.new" "$f"
	plan -c "$tmp/drop.ini" --set partition.cost=profile --set "partition.profile_cache=$tmp/c2" --set layer.drop.rate=0
	plan2=$(cat "$tmp/plan")
	plan -c "$tmp/drop.ini" --set partition.cost=profile --set "partition.profile_cache=$tmp/c2" --set layer.drop.rate=0.5
	if echo "$plan2 $(cat "$tmp/plan")" | grep -q "ignoring the cache: .*every layer's time is 0, which no measurement gives"; then
		ok "cost = profile: a cache file of zero times is ignored and measured again"
	else
		not_ok "cost = profile: zero times: $(head -3 "$tmp/plan") $(cat "$tmp/perr")"
	fi
	# cost = auto counts each timed call's cache eviction: 600 small layers
	# are few FLOPs but 10,800 evictions of 16 MiB or more (a model of 62
	# once estimated 0.003 s and measured for 24)
	printf '[run]\nstages = 4\nbatch = 32\nmicro_batches = 4\n[data]\nsource = synthetic\nshape = 32\nclasses = 4\n[layer fc]\ntype = linear\nunits = 32\nrepeat = 600\n[layer out]\ntype = linear\nunits = 4\n[layer loss]\ntype = softmax_xent\n' >"$tmp/deep.ini"
	plan -c "$tmp/deep.ini" --set "partition.profile_cache=$tmp/c4"
	if grep -Eq '^cost: flops \(\[partition\] cost = auto: measuring would take about [0-9]+ s; cost = profile measures anyway\)$' "$tmp/plan"; then
		ok "cost = auto: 600 small layers plan on FLOPs: $(grep '^cost' "$tmp/plan")"
	else
		not_ok "cost = auto, 600 small layers: $(grep -E '^(cost|profile)' "$tmp/plan" | head -2) $(cat "$tmp/perr")"
	fi
	# timed on random input because the run's data did not load: not
	# cached, or the run with its data would read those times
	plan -c "$fixtures/tiny-lm.ini" --set data.path="$tmp/none" --set partition.cost=profile --set "partition.profile_cache=$tmp/c3"
	if grep -q '^profile: not cached: timed on random input, not the run.s samples$' "$tmp/plan" && [ ! -e "$tmp/c3" ]; then
		ok "cost = profile: times taken on random input (the data did not load) are not cached"
	else
		not_ok "cost = profile: random input cached: $(grep '^profile' "$tmp/plan")"
	fi
else
	not_ok "cost = profile measures ($(head -c 300 "$tmp/perr"))"
fi

finish
