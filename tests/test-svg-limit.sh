#!/bin/sh
# SPDX-License-Identifier: MIT
# --simulate --svg FILE draws at most 200000 boxes (one per compute op; a
# schedule without a flush draws 4 steps).  Past that it writes nothing:
# one line says how many boxes, about how many MB, and what to do (fewer
# micro-batches or stages, or --trace), exit 1, before the simulation and
# before the report; a file already at FILE is left as it was.  At the
# limit the timeline is written as before.  (64 stages x 8 chunks x 4096
# micro-batches once wrote 668 MB, and took 51 s.)
. "$top_srcdir/tests/lib.sh"

# S stages of 1f1b x 4096 micro-batches: 2 x S x 4096 boxes
cat >"$tmp/big.ini" <<'EOF'
[run]
seed = 1
stages = 24
micro_batches = 4096
batch = 4096
steps = 1
eval = no
[data]
source = synthetic
shape = 4
classes = 4
samples = 4096
test_samples = 16
[optimizer]
type = sgd
lr = 0.01
[partition]
type = uniform
cost = flops
[schedule]
type = 1f1b
[layer l]
type = linear
units = 4
repeat = 30
[layer loss]
type = softmax_xent
EOF

# one past the limit: 25 x 4096 x 2 = 204800 boxes
printf 'an older drawing\n' >"$tmp/keep.svg"
expect_error "--svg of 204800 boxes" \
	"^pipehost: --svg $tmp/keep.svg: the timeline would draw 204800 boxes \(about 33 MB of SVG\), past the limit of 200000; lower \[run\] micro_batches \(4096\) or stages \(25\), or use --trace FILE \(Chrome trace JSON, for Perfetto\)$" \
	-c "$tmp/big.ini" --simulate --set run.stages=25 --svg "$tmp/keep.svg" --trace "$tmp/t.json"
if [ "$(cat "$tmp/keep.svg")" = "an older drawing" ] && [ ! -e "$tmp/t.json" ] && ! grep -q "step time" "$tmp/out" &&
	[ -z "$(ls "$tmp" | grep -v '^big.ini$\|^keep.svg$\|^out$\|^err$')" ]; then
	ok "... the file there left as it was, no trace, no report, no temporary file"
else
	not_ok "... left $(ls "$tmp" | tr '\n' ' ') keep.svg: $(head -c 40 "$tmp/keep.svg"), report: $(grep 'step time' "$tmp/out")"
fi

# at the limit's side: 24 x 4096 x 2 = 196608 boxes, drawn
if "$PIPEHOST" -c "$tmp/big.ini" --simulate --svg "$tmp/edge.svg" >"$tmp/out" 2>"$tmp/err" &&
	grep -q "timeline written to $tmp/edge.svg" "$tmp/out" && tail -1 "$tmp/edge.svg" | grep -q '</svg>'; then
	boxes=$(grep -c '^<g><title>' "$tmp/edge.svg")
	[ "$boxes" -eq 196608 ] && ok "--svg of 196608 boxes is drawn" || not_ok "--svg at the limit drew $boxes boxes"
else
	not_ok "--svg of 196608 boxes: $(head -c 300 "$tmp/err")"
fi
rm -f "$tmp/edge.svg"

# a schedule without a flush draws 4 steps: 7 x 4096 x 2 a step (57344)
# is 229376 boxes; 6 stages (196608) are drawn
expect_error "--svg of a 2bw stream of 229376 boxes" \
	"^pipehost: --svg $tmp/s.svg: the timeline would draw 229376 boxes \(about 37 MB of SVG\), past the limit of 200000; lower \[run\] micro_batches \(4096\) or stages \(7\)" \
	-c "$tmp/big.ini" --simulate --set run.stages=7 --set schedule.type=2bw --svg "$tmp/s.svg"
[ ! -e "$tmp/s.svg" ] && ok "... and writes no file" || not_ok "... and wrote $tmp/s.svg"
finish
