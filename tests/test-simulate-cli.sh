#!/bin/sh
# SPDX-License-Identifier: MIT
# --simulate from the command line writes only the files asked for: a plain
# --simulate prints its report and leaves the current directory as it was;
# --svg FILE draws the timeline into FILE; --svg without --simulate is refused.
. "$top_srcdir/tests/lib.sh"
tiny="$fixtures/tiny.ini"
mkdir "$tmp/cwd"

# plain --simulate: the report on stdout, nothing new in the directory it ran in
if (cd "$tmp/cwd" && "$PIPEHOST" -c "$tiny" --simulate >"$tmp/plain.out" 2>"$tmp/plain.err"); then
	if grep -q '^  step time ' "$tmp/plain.out"; then
		ok "--simulate prints the step time"
	else
		not_ok "--simulate: no step time in $(head -c 400 "$tmp/plain.out")"
	fi
else
	not_ok "--simulate failed: $(head -c 400 "$tmp/plain.err")"
fi
left=$(ls -A "$tmp/cwd")
if [ -z "$left" ]; then
	ok "--simulate without --svg writes nothing into the current directory"
else
	not_ok "--simulate without --svg left $left in the current directory"
fi

# --svg FILE: the timeline there, and the report says where
if (cd "$tmp/cwd" && "$PIPEHOST" -c "$tiny" --simulate --svg "$tmp/t.svg" >"$tmp/svg.out" 2>"$tmp/svg.err") &&
	grep -q '^<svg xmlns="http://www.w3.org/2000/svg"' "$tmp/t.svg" && grep -q '</svg>' "$tmp/t.svg" &&
	grep -q "timeline written to $tmp/t.svg" "$tmp/svg.out"; then
	ok "--simulate --svg FILE writes the timeline to FILE"
else
	not_ok "--simulate --svg: $(head -c 400 "$tmp/svg.err")"
fi
left=$(ls -A "$tmp/cwd")
[ -z "$left" ] && ok "--simulate --svg FILE writes nothing else" || not_ok "--simulate --svg FILE also left $left"

expect_error "--svg without --simulate" \
	"^pipehost: --svg $tmp/u.svg needs --simulate \(it draws the simulated timeline\); add --simulate, or use --trace for a real run's timeline$" \
	-c "$tiny" --svg "$tmp/u.svg"
[ ! -e "$tmp/u.svg" ] && ok "--svg without --simulate writes no file" || not_ok "--svg without --simulate wrote $tmp/u.svg"

# --plan and --simulate stop before training: the flags only training
# reads are refused, not dropped (each once ran and wrote nothing)
expect_error "--plan --save-weights" \
	"^pipehost: --plan stops before training, so --save-weights $tmp/w.st would write nothing: drop it, or drop --plan to train$" \
	-c "$tiny" --plan --save-weights "$tmp/w.st"
expect_error "--simulate --save-weights" \
	"^pipehost: --simulate stops before training, so --save-weights $tmp/w.st would write nothing: drop it, or drop --simulate to train$" \
	-c "$tiny" --simulate --save-weights "$tmp/w.st"
expect_error "--plan --resume" \
	"^pipehost: --plan stops before training and reads no checkpoint, so --resume $tmp would do nothing: drop it, or drop --plan to resume$" \
	-c "$tiny" --plan --resume "$tmp"
expect_error "--simulate --resume" "^pipehost: --simulate stops before training and reads no checkpoint" \
	-c "$tiny" --simulate --resume "$tmp"
expect_error "--plan --trace" \
	"^pipehost: --plan stops before training, so --trace $tmp/t2.json would write nothing: add --simulate for the simulated timeline, or drop --plan to trace a real run$" \
	-c "$tiny" --plan --trace "$tmp/t2.json"
[ ! -e "$tmp/w.st" ] && [ ! -e "$tmp/t2.json" ] && ok "... and none of them wrote a file" || not_ok "a refused run wrote a file"
if "$PIPEHOST" -c "$tiny" --plan --simulate --trace "$tmp/t3.json" >/dev/null 2>"$tmp/err" && [ -s "$tmp/t3.json" ]; then
	ok "--plan --simulate --trace still writes the simulated trace"
else
	not_ok "--plan --simulate --trace: $(head -c 300 "$tmp/err")"
fi

# A step no report or trace can show: link_bandwidth = 1e-300 GB/s (in
# range: 0..1e6) made a step of 2e294 s, and the trace's microseconds
# overflowed int64 ("ts":-9223372036854775.-808, exit 0).  Refused with
# one line naming the bandwidth, before the report or any file; 1e-16
# (2e10 s a step) too, and 1e-14 (2e8 s) still simulates.
for bw in 1e-300 1e-16; do
	expect_error "link_bandwidth = $bw GB/s" \
		"^pipehost: simulate: a step would take [0-9.e+]+ s, past the 1e\+09 s .*\[partition\] link_bandwidth = $bw GB/s take most of it; give at least [0-9.e+-]+ GB/s, or 0 for free links$" \
		-c "$tiny" --simulate --set partition.cost=flops --set partition.link_bandwidth=$bw --trace "$tmp/slow.json" \
		--svg "$tmp/slow.svg"
	if [ ! -e "$tmp/slow.json" ] && [ ! -e "$tmp/slow.svg" ] && ! grep -q "step time\|inf s\|nan" "$tmp/out"; then
		ok "link_bandwidth = $bw: no trace, no timeline, no report"
	else
		not_ok "link_bandwidth = $bw: left $(ls "$tmp" | grep slow) and printed $(grep 'step time' "$tmp/out")"
	fi
done
if "$PIPEHOST" -c "$tiny" --simulate --set partition.cost=flops --set partition.link_bandwidth=1e-14 \
	--trace "$tmp/slow.json" >"$tmp/out" 2>"$tmp/err" && grep -q "^  step time [0-9.e+]* s" "$tmp/out" &&
	! grep -q '"ts":-\|"dur":-\|[0-9]\.-' "$tmp/slow.json"; then
	ok "link_bandwidth = 1e-14: a step of $(sed -n 's/^  step time \([^ ]* s\).*/\1/p' "$tmp/out"), its trace written"
else
	not_ok "link_bandwidth = 1e-14: $(head -c 300 "$tmp/err") $(grep 'step time' "$tmp/out")"
fi

# A profile cache whose time for fc1 was edited to 1e308 s: once a cache
# hit, and --simulate printed "step time inf s ... -nan% of the step" and
# the same broken trace.  Now a damaged file, as NaN and negative times
# are: a note with its file:line, measured afresh.
cache="$tmp/cache"
if "$PIPEHOST" -c "$tiny" --plan --set partition.cost=profile --set "partition.profile_cache=$cache" >"$tmp/out" 2>"$tmp/err" &&
	file=$(sed -n 's/^profile: cached in //p' "$tmp/out") && [ -f "$file" ]; then
	sed 's/^layer 4 linear [^ ]*/layer 4 linear 1e308/' "$file" >"$file.new" && mv "$file.new" "$file"
	line=$(grep -n '^layer 4 ' "$file" | cut -d: -f1)
	if "$PIPEHOST" -c "$tiny" --simulate --set partition.cost=profile --set "partition.profile_cache=$cache" \
		--trace "$tmp/c.json" >"$tmp/out" 2>"$tmp/err" &&
		grep -q "^profile: ignoring the cache: $file:$line: layer 4 (fc1): forward time 1e+308 s is not a measurement (0 to 1e+06 s)$" "$tmp/out" &&
		grep -q "^profile: measuring 9 layers" "$tmp/out" && ! grep -q "inf s\|nan" "$tmp/out" &&
		! grep -q '"ts":-\|"dur":-\|[0-9]\.-' "$tmp/c.json"; then
		ok "a cached time of 1e308 s: $(grep '^profile: ignoring' "$tmp/out" | sed "s|$tmp/||")"
	else
		not_ok "a cached time of 1e308 s: exit $?, $(head -c 300 "$tmp/err") $(grep 'profile:\|step time' "$tmp/out")"
	fi
else
	not_ok "cost = profile wrote no cache: $(head -c 300 "$tmp/err") $(head -3 "$tmp/out")"
fi

# --plan with an allowed but huge batch (--plan loads no data, so nothing
# says the training set is smaller): cost = auto took the FLOPs of one
# sample for those of a micro-batch of 4194304, measured for minutes and
# held 10+ GB.  Now it plans on the FLOPs and says why, at once: the time
# it would take or, on a machine with less than ~22 GB free, the memory.
# One BLAS thread, so that the estimate is the same on every machine.
if timeout 60 "$PIPEHOST" -c "$tiny" --plan --set run.batch=16777216 --set run.threads=1 \
	--set partition.profile_cache=off >"$tmp/out" 2>"$tmp/err" &&
	grep -Eq '^cost: flops \(\[partition\] cost = auto: (measuring would take about [0-9]+ s; cost = profile measures anyway|measuring a layer needs ~[0-9.]+ MiB but .* leaves [0-9.]+ MiB)\)$' "$tmp/out" &&
	! grep -q '^profile: measuring' "$tmp/out"; then
	ok "--plan, batch 16777216, cost = auto: $(grep '^cost:' "$tmp/out")"
else
	not_ok "--plan, batch 16777216, cost = auto: exit $?, $(head -c 300 "$tmp/err") $(head -2 "$tmp/out")"
fi
# cost = profile, asked for, at a micro-batch that does not fit (90 GB
# under an 8 GB ulimit -v): one line with both figures, nothing allocated
if [ -z "${ASAN_OPTIONS:-}" ] && (ulimit -v 8000000) 2>/dev/null; then
	(
		ulimit -v 8000000
		"$PIPEHOST" -c "$tiny" --plan --set run.batch=16777216 --set run.micro_batches=1 --set run.threads=1 \
			--set partition.cost=profile --set partition.profile_cache=off >"$tmp/out" 2>"$tmp/err"
		echo $? >"$tmp/rc"
	)
	if [ "$(cat "$tmp/rc")" = 1 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] &&
		grep -Eq "^pipehost: profile: measuring layer [a-z0-9]+ at micro-batch 16777216 needs ~[0-9.]+ MiB but .* leaves [0-9.]+ MiB; lower \[run\] batch \(or raise micro_batches\), or set \[partition\] cost = flops$" "$tmp/err"; then
		ok "cost = profile too big to measure: $(cat "$tmp/err")"
	else
		not_ok "cost = profile too big to measure: exit $(cat "$tmp/rc"), $(head -c 400 "$tmp/err")"
	fi
fi
# the activation column is what the run allocates: each rank's figure
# equals the real run's "activation memory per rank", schedule by
# schedule, recompute too (it once counted only outputs and saved bytes,
# 1.5 to 2.5 times under the run, and ranked interleaved below gpipe)
for sched in "gpipe" "1f1b" "interleaved --set run.chunks=2" "zb-h1" "1f1b --set run.recompute=yes"; do
	# shellcheck disable=SC2086
	set -- -c "$tiny" --set run.stages=4 --set run.micro_batches=8 --set run.batch=512 --set schedule.type=$sched \
		--set run.steps=1 --set run.threads=1
	"$PIPEHOST" "$@" --simulate >"$tmp/s" 2>&1
	"$PIPEHOST" "$@" >"$tmp/r" 2>&1
	sim=$(awk '/act\. MiB/ { f = 1; next } f && /^  [0-9]/ { printf "%s ", $NF } /mean bubble/ { f = 0 }' "$tmp/s")
	real=$(sed -n 's/^activation memory per rank://p' "$tmp/r" | sed 's/ (recompute on)//' | tr -d ',' |
		awk '{ for (i = 2; i <= NF; i += 3) printf "%s ", $i }')
	if [ -n "$sim" ] && [ "$sim" = "$real" ]; then
		ok "--simulate's act. MiB, $sched: $sim= the run's"
	else
		not_ok "--simulate's act. MiB, $sched: '$sim' against the run's '$real'"
	fi
done

# recompute: each recomputed backward reruns its forward, so the step is
# longer, by one forward a micro-batch on the busiest rank at most
set -- -c "$tiny" --set run.stages=2 --set run.threads=1 --set partition.cost=flops --simulate
"$PIPEHOST" "$@" >"$tmp/rc0" 2>&1
"$PIPEHOST" "$@" --set run.recompute=yes >"$tmp/rc1" 2>&1
t0=$(sed -n 's/^  step time \([0-9.e+-]*\) .*/\1/p' "$tmp/rc0")
t1=$(sed -n 's/^  step time \([0-9.e+-]*\) .*/\1/p' "$tmp/rc1")
if [ -n "$t0" ] && [ -n "$t1" ] && awk "BEGIN { exit !($t1 > $t0 * 1.1) }" && grep -q 'recompute on' "$tmp/rc1"; then
	ok "--simulate under recompute = yes: step $t0 -> $t1 (the forwards run again)"
else
	not_ok "--simulate ignores recompute: step '$t0' -> '$t1' $(tail -2 "$tmp/rc1")"
fi

# replicas share the cores with the pipeline: 2 stages x 2 replicas on 2
# cores give each pipeline one core, as 2 stages alone on 1 core (each
# replica takes half the batch: 64 over 2 replicas, 32 alone)
set -- -c "$tiny" --set run.stages=2 --set partition.cost=flops --simulate
PIPEHOST_SIM_CORES=2 "$PIPEHOST" "$@" --set run.replicas=2 --set run.batch=64 >"$tmp/rep2" 2>&1
PIPEHOST_SIM_CORES=1 "$PIPEHOST" "$@" >"$tmp/rep1" 2>&1
PIPEHOST_SIM_CORES=2 "$PIPEHOST" "$@" >"$tmp/rep0" 2>&1
a=$(sed -n 's/^  step time //p' "$tmp/rep2") b=$(sed -n 's/^  step time //p' "$tmp/rep1")
c=$(sed -n 's/^  step time //p' "$tmp/rep0")
if [ -n "$a" ] && [ "$a" = "$b" ] && [ "$a" != "$c" ] && grep -q '2 replicas of this pipeline, so 1 core(s) a replica' "$tmp/rep2"; then
	ok "--simulate with 2 replicas on 2 cores: step $(echo "$a" | cut -d' ' -f1,2), as one pipeline on 1 core"
else
	not_ok "--simulate with replicas: '$a' (2 replicas, 2 cores), '$b' (1 core), '$c' (2 cores) $(grep '^simulate' "$tmp/rep2")"
fi
PIPEHOST_SIM_CORES=abc expect_error "PIPEHOST_SIM_CORES=abc" \
	'^pipehost: PIPEHOST_SIM_CORES=abc: not a count of cores from 1 to 65536; unset it to simulate this machine.s [0-9]+$' \
	-c "$tiny" --simulate

# a no-flush schedule's timeline is 4 steps: its title gives the steady
# step, not the 4 steps' span, and each box names its step
if "$PIPEHOST" -c "$tiny" --set run.stages=2 --set schedule.type=2bw --simulate --svg "$tmp/2bw.svg" >"$tmp/2bw" 2>&1 &&
	st=$(sed -n 's/^  steady state, no flush (.*): \([0-9.]* [a-z]*\) a step.*/\1/p' "$tmp/2bw") && [ -n "$st" ] &&
	grep -q "4 steps of 4 micro-batches as one stream; steady state $st a step" "$tmp/2bw.svg" &&
	grep -q 'micro-batch 3 of step 3,' "$tmp/2bw.svg"; then
	ok "--simulate --svg under 2bw: the title's step is the steady state's, $st"
else
	not_ok "--simulate --svg under 2bw: $(grep -o 'bold">[^<]*' "$tmp/2bw.svg") / $(grep 'steady state' "$tmp/2bw")"
fi
finish
