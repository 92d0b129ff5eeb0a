#!/bin/sh
# SPDX-License-Identifier: MIT
# schedule = pipedream: an update after every backward, with weight
# stashing (p - r versions on rank r).  Two code paths must agree:
#   - on 1 stage (one version, no staleness) it is 1f1b with one
#     micro-batch a step, 4x the steps;
#   - on 2 stages with every parameter on rank 0 (K = 2: micro-batch n
#     runs on the weights after n - 1 updates) it is 2bw on 1 stage with one
#     micro-batch a step: W(n+1) = W(n) - lr grad f_n(W(n-1));
# and run to run the weights are byte-identical, a resume is exact, the
# refusals are clear.  tests/test-twobw-reference.sh also checks it
# against NumPy on 2 and 3 stages.
. "$top_srcdir/tests/lib.sh"
tiny="$fixtures/tiny.ini"
nodrop="--set layer.drop.rate=0 --set optimizer.warmup=0 --set optimizer.lr_schedule=constant"
# shellcheck disable=SC2086
pd() { "$PIPEHOST" -c "$tiny" $nodrop --set schedule.type=pipedream "$@"; }
# shellcheck disable=SC2086
other() { "$PIPEHOST" -c "$tiny" $nodrop "$@"; }

pd --set run.stages=1 --save-weights "$tmp/p1.st" >/dev/null 2>"$tmp/err" || not_ok "pipedream, 1 stage: $(cat "$tmp/err")"
other --set run.stages=1 --set run.micro_batches=1 --set run.batch=8 --set run.steps=80 \
	--save-weights "$tmp/f1.st" >/dev/null 2>&1
[ -s "$tmp/p1.st" ] && cmp -s "$tmp/p1.st" "$tmp/f1.st" &&
	ok "1 stage: = 1f1b with 1 micro-batch a step over 4x the steps, bitwise" ||
	not_ok "1 stage: differs from 1f1b with 1 micro-batch a step"

pd --set run.stages=2 --set partition.type=explicit --set partition.bounds=0,8 --save-weights "$tmp/p2.st" \
	>/dev/null 2>"$tmp/err" || not_ok "pipedream, 2 stages: $(cat "$tmp/err")"
other --set schedule.type=2bw --set run.stages=1 --set run.micro_batches=1 --set run.batch=8 --set run.steps=80 \
	--save-weights "$tmp/b1.st" >/dev/null 2>"$tmp/err"
[ -s "$tmp/p2.st" ] && cmp -s "$tmp/p2.st" "$tmp/b1.st" &&
	ok "2 stages, all parameters on rank 0: = 2bw with 1 micro-batch a step (stash of 2), bitwise" ||
	not_ok "2 stages, parameters on rank 0: differs from 2bw per micro-batch $(cat "$tmp/err")"
cmp -s "$tmp/p2.st" "$tmp/p1.st" && not_ok "2 stages: the stash changes nothing" ||
	ok "2 stages: stale weights give other weights than 1 stage"

# the stream (up to [run] window = 16 steps without a drain, the default)
# against a drain every step: the same updates in the same order
for p in 2 3; do
	if pd --set run.stages=$p --save-weights "$tmp/st-a.st" >"$tmp/out" 2>&1 &&
		grep -q '^pipedream: up to 16 steps run as one stream' "$tmp/out" &&
		pd --set run.stages=$p --set run.window=1 --save-weights "$tmp/st-b.st" >/dev/null 2>&1 &&
		cmp -s "$tmp/st-a.st" "$tmp/st-b.st"; then
		ok "$p stages: the stream = a drain every step, byte-identical"
	else
		not_ok "$p stages: the stream differs from a drain every step: $(tail -2 "$tmp/out")"
	fi
done

# run to run; resume
pd --set run.stages=3 --save-weights "$tmp/ref.st" >/dev/null 2>"$tmp/err" || not_ok "3 stages: $(cat "$tmp/err")"
pd --set run.stages=3 --save-weights "$tmp/again.st" >/dev/null 2>&1
cmp -s "$tmp/ref.st" "$tmp/again.st" && ok "3 stages, run to run: byte-identical" || not_ok "3 stages: run to run differs"
if pd --set run.stages=3 --set "checkpoint.dir=$tmp/ck" --set checkpoint.every=7 >/dev/null 2>"$tmp/err" &&
	grep -q '"conv1.weight.stash2of3"' "$tmp/ck/step-00000007/optimizer.safetensors" &&
	pd --set run.stages=3 --resume "$tmp/ck/step-00000007" --save-weights "$tmp/r.st" >/dev/null 2>>"$tmp/err" &&
	cmp -s "$tmp/ref.st" "$tmp/r.st"; then
	ok "3 stages: checkpoints hold the stash (conv1: 3 versions on rank 0); resume at 7 is byte-identical"
else
	not_ok "3 stages, resume: $(cat "$tmp/err")"
fi
# SIGKILL in the middle of a window (as soon as a random checkpoint of
# every 5 steps appears), then a resume: the uninterrupted run's bytes
# shellcheck disable=SC2086
kargs="$nodrop --set schedule.type=pipedream --set run.stages=3 --set run.steps=200 --set checkpoint.every=5"
# shellcheck disable=SC2086
"$PIPEHOST" -c "$tiny" $kargs --save-weights "$tmp/k-ref.st" >/dev/null 2>&1
r=$(od -An -N2 -tu2 /dev/urandom | tr -d ' ')
at=$(printf 'step-%08d' $((5 * (2 + r % 30))))
# shellcheck disable=SC2086
"$PIPEHOST" -c "$tiny" $kargs --set "checkpoint.dir=$tmp/kill" >/dev/null 2>&1 &
pid=$!
w=0
while [ ! -d "$tmp/kill/$at" ] && [ $w -lt 3000 ]; do sleep 0.005; w=$((w + 1)); done
kill -KILL "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
# shellcheck disable=SC2086
if "$PIPEHOST" -c "$tiny" $kargs --resume "$tmp/kill" --save-weights "$tmp/k.st" >"$tmp/out" 2>"$tmp/err" &&
	! grep -q '^resumed from .* at step 200 of 200' "$tmp/out" && cmp -s "$tmp/k-ref.st" "$tmp/k.st"; then
	ok "SIGKILL once $at was written, $(sed -n 's/^resumed from .*\(step-[0-9]*\).*/resumed from \1/p' "$tmp/out"): byte-identical"
else
	not_ok "SIGKILL once $at was written, resume: $(grep -v '^epoch' "$tmp/out" "$tmp/err" | tail -3)"
fi
# another stage count keeps other versions: refused, never read wrongly
# shellcheck disable=SC2086
expect_error "a 3-stage stash resumed on 2 stages" \
	"holds another number of pipedream weight versions of layer conv1 than the 2 this run keeps; resume with the stages and partition that wrote it, or its \[schedule\] delay" \
	-c "$tiny" $nodrop --set schedule.type=pipedream --set run.stages=2 --resume "$tmp/ck/step-00000007"

# vertical sync ([schedule] delay = D): every rank runs micro-batch n on
# the weights after n - D updates, so the partition no longer matters
vs_ok=1
for cut in "1 uniform" "2 uniform" "3 uniform" "4 uniform" "2 parameters" "3 parameters"; do
	# shellcheck disable=SC2086
	set -- $cut
	pd --set schedule.delay=3 --set run.stages="$1" --set partition.type="$2" --save-weights "$tmp/vs-$1-$2.st" \
		>/dev/null 2>"$tmp/err" || { vs_ok=0; not_ok "delay = 3 on $1 stages ($2): $(cat "$tmp/err")"; }
	[ -s "$tmp/vs-$1-$2.st" ] && cmp -s "$tmp/vs-1-uniform.st" "$tmp/vs-$1-$2.st" || vs_ok=0
done
[ $vs_ok = 1 ] && ok "delay = 3 (vertical sync): 1, 2, 3, 4 stages, uniform and parameter cuts, byte-identical" ||
	not_ok "delay = 3 (vertical sync): the weights depend on the partition"
cmp -s "$tmp/vs-1-uniform.st" "$tmp/p1.st" && not_ok "delay = 3 gives the weights of no delay" ||
	ok "delay = 3: other weights than no delay"
# a second code path: delay = 1 is W(n+1) = W(n) - lr grad f_n(W(n-1)),
# 2bw with one micro-batch a step, on 1 and on 2 stages
for p in 1 2; do
	pd --set schedule.delay=1 --set run.stages=$p --save-weights "$tmp/d1-$p.st" >/dev/null 2>"$tmp/err"
	cmp -s "$tmp/d1-$p.st" "$tmp/b1.st" && ok "delay = 1 on $p stage(s): = 2bw with 1 micro-batch a step, bitwise" ||
		not_ok "delay = 1 on $p stage(s) differs from 2bw per micro-batch: $(cat "$tmp/err")"
done
# the same versions on every stage count: a resume may change it
if pd --set schedule.delay=3 --set run.stages=3 --set "checkpoint.dir=$tmp/ckv" --set checkpoint.every=7 \
	>/dev/null 2>"$tmp/err" &&
	grep -q '"conv1.weight.stash3of4"' "$tmp/ckv/step-00000007/optimizer.safetensors" &&
	pd --set schedule.delay=3 --set run.stages=2 --resume "$tmp/ckv/step-00000007" --save-weights "$tmp/vr.st" \
		>/dev/null 2>>"$tmp/err" && cmp -s "$tmp/vs-1-uniform.st" "$tmp/vr.st"; then
	ok "delay = 3: written on 3 stages, resumed at 7 on 2: byte-identical"
else
	not_ok "delay = 3, resume on another stage count: $(cat "$tmp/err")"
fi
if pd --set schedule.delay=3 --set run.stages=3 --plan >"$tmp/plan" 2>&1 &&
	grep -q '^weight versions per rank (in est. MiB): 4 4 4' "$tmp/plan"; then
	ok "delay = 3, --plan: $(grep '^weight versions' "$tmp/plan")"
else
	not_ok "delay = 3, --plan: $(tail -2 "$tmp/plan")"
fi
expect_error "delay below stages - 1" \
	"pipedream: delay = 1 is less than stages - 1 = 2: rank 0 runs micro-batch n's forward before version n - 1 \(the weights after n - 1 updates\) exists; set \[schedule\] delay >= 2 \(vertical sync\) or 0 \(weight stashing\)" \
	-c "$tiny" --set schedule.type=pipedream --set schedule.delay=1 --set run.stages=3 --set optimizer.clip=0

if pd --set run.stages=3 --plan >"$tmp/plan" 2>&1 && grep -q '^weight versions per rank (in est. MiB): 3 2 1' "$tmp/plan"; then
	ok "--plan: $(grep '^weight versions' "$tmp/plan")"
else
	not_ok "--plan: $(tail -2 "$tmp/plan")"
fi

expect_error "pipedream with a clip norm" \
	"schedule pipedream updates after every micro-batch on its own rank: the global clip norm cannot apply; set \[optimizer\] clip = 0" \
	-c "$tiny" --set schedule.type=pipedream --set optimizer.clip=1
expect_error "pipedream with replicas" "set \[run\] replicas = 1" \
	-c "$tiny" --set schedule.type=pipedream --set run.replicas=2
# the same refusals from --plan, before the profiler measures: the key's
# place, or the tied layer's name
expect_error "--plan: pipedream with a clip norm" \
	"^pipehost: --set: schedule pipedream updates after every micro-batch on its own rank: the global clip norm cannot apply" \
	-c "$tiny" --set schedule.type=pipedream --set optimizer.clip=1 --plan
expect_error "--plan: pipedream with replicas" "^pipehost: --set: .*set \[run\] replicas = 1" \
	-c "$tiny" --set schedule.type=pipedream --set run.replicas=2 --plan
expect_error "--plan: pipedream on the shipped GPT (clip = 1.0 at its line)" \
	"^pipehost: [^ ]*etc/gpt-fortunes.ini:[0-9]+: schedule pipedream .*set \[optimizer\] clip = 0" \
	-c "$top_srcdir/etc/gpt-fortunes.ini" --set schedule.type=pipedream --plan
expect_error "--plan: pipedream with a tied head" \
	"^pipehost: layer head: schedule pipedream .*tied weights \(tie =\) would drift apart; remove the tie" \
	-c "$top_srcdir/etc/gpt-fortunes.ini" --set schedule.type=pipedream --set optimizer.clip=0 --plan
finish
