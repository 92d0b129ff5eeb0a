#!/bin/sh
# SPDX-License-Identifier: MIT
# --trace writes a Chrome trace whose slices of one track (pid, tid) never
# overlap: each ends at or before the next one starts, for --simulate (the
# cost model's back-to-back ops, whose ends used to be rounded apart from
# their starts and overlap by 1 ns) and for a real run; under mpirun the one
# trace holds every process's ranks, a pid per process.  python3 reads the
# JSON (skipped, 77, without it).
. "$top_srcdir/tests/lib.sh"
. "$top_srcdir/tests/mpi-lib.sh"
if ! command -v python3 >/dev/null 2>&1; then
	echo "SKIP: no python3 to read the trace JSON"
	exit 77
fi
# check_trace FILE: "overlaps=N slices=N tracks=pid:tid,..." with N counted
# both exactly (decimal) and as a reader adding ts + dur in doubles does
check_trace() {
	python3 - "$1" <<'PY'
import json, sys
from collections import defaultdict
from decimal import Decimal
tracks = defaultdict(list)
for e in json.load(open(sys.argv[1]), parse_float=Decimal)["traceEvents"]:
    if e.get("ph") == "X":
        tracks[(e["pid"], e["tid"])].append(e)
bad = n = 0
for evs in tracks.values():
    evs.sort(key=lambda e: (e["ts"], -e["dur"]))
    open_ends = []  # the ends of the slices that enclose this one
    for e in evs:
        n += 1
        s, t = e["ts"], e["ts"] + e["dur"]
        while open_ends and open_ends[-1] <= s:
            open_ends.pop()
        # nests in the enclosing slice, or else overlaps it; and in doubles
        if open_ends and (t > open_ends[-1] or float(e["ts"]) + float(e["dur"]) > float(open_ends[-1])):
            bad += 1
        open_ends.append(t)
print("overlaps=%d slices=%d tracks=%s" % (bad, n, ",".join("%d:%d" % k for k in sorted(tracks))))
PY
}

# --simulate --trace: plans whose rounded slices used to overlap
for cfg in "tiny.ini gpipe 12" "tiny-lm.ini 1f1b 12" "tied3.ini 1f1b 12" "tiny.ini 1f1b 4"; do
	set -- $cfg
	if "$PIPEHOST" -c "$fixtures/$1" --set schedule.type="$2" --set run.micro_batches="$3" --set run.batch=48 \
		--simulate --trace "$tmp/sim.json" >"$tmp/sim.out" 2>"$tmp/sim.err"; then
		res=$(check_trace "$tmp/sim.json")
		case $res in
		overlaps=0\ *) ok "--simulate --trace $1 $2 x$3: no slice overlaps the next ($res)" ;;
		*) not_ok "--simulate --trace $1 $2 x$3: $res" ;;
		esac
	else
		not_ok "--simulate --trace $1 failed: $(head -c 400 "$tmp/sim.err")"
	fi
done

# a real run's --trace
if "$PIPEHOST" -c "$fixtures/tiny.ini" --set run.steps=5 --trace "$tmp/run.json" >"$tmp/run.out" 2>"$tmp/run.err"; then
	res=$(check_trace "$tmp/run.json")
	case $res in
	"overlaps=0 "*" tracks=0:0,0:1") ok "a run's --trace: no slice overlaps the next ($res)" ;;
	*) not_ok "a run's --trace: $res" ;;
	esac
else
	not_ok "a run with --trace failed: $(head -c 400 "$tmp/run.err")"
fi

# mpirun: every process's ranks in process 0's file, a pid per process
if ! ph_have_mpi; then
	echo "# skipped under mpirun: $ph_mpi_why"
	finish
	exit
fi
for how in "a replica each:run.replicas=2:0:0,0:1,1:0,1:1" "a pipeline split over both:run.replicas=1:0:0,1:1"; do
	what=${how%%:*} rest=${how#*:}
	set=${rest%%:*} want=${rest#*:}
	rm -f "$tmp/mpi.json"
	if timeout 120 sh -c '. "$top_srcdir/tests/mpi-lib.sh"; ph_mpirun 2 -x PIPEHOST_PLUGIN_PATH "$@"' sh "$PIPEHOST" \
		-c "$fixtures/tiny.ini" --set run.steps=5 --set "$set" --trace "$tmp/mpi.json" >"$tmp/mpi.out" 2>"$tmp/mpi.err"; then
		res=$(check_trace "$tmp/mpi.json")
		case $res in
		"overlaps=0 "*" tracks=$want") ok "mpirun -np 2 ($what) --trace: every process's ranks ($res)" ;;
		*) not_ok "mpirun -np 2 ($what) --trace: $res, want tracks=$want" ;;
		esac
	else
		not_ok "mpirun -np 2 ($what) --trace failed: $(tail -3 "$tmp/mpi.err")"
	fi
done

# A long run: each rank keeps its first N events, and the run says how many
# it dropped and up to which step every rank is whole (it dropped them
# without a word past 2^20 events a rank).  N lowered from 2^20 to 200.
if PIPEHOST_TRACE_EVENTS=200 "$PIPEHOST" -c "$fixtures/tiny.ini" --set run.steps=30 --trace "$tmp/long.json" \
	>"$tmp/long.out" 2>&1 &&
	grep -q "^note: --trace $tmp/long.json keeps the first 200 events of each rank: [0-9]* later ones were dropped (every rank is whole up to step [0-9]*)" "$tmp/long.out"; then
	whole=$(sed -n 's/.*whole up to step \([0-9]*\).*/\1/p' "$tmp/long.out")
	got=$(python3 - "$tmp/long.json" "$whole" <<'PY'
import json, sys
ev = [x for x in json.load(open(sys.argv[1]))["traceEvents"] if x.get("ph") == "X"]
whole = int(sys.argv[2])
per = {}
for x in ev:
    per.setdefault(x["tid"], []).append(x["args"]["step"])
# steps are 0-based in the trace: every rank holds steps 0 .. whole - 1 and
# as many events in each of them as in step 0
ok = all(len(v) == 200 and all(v.count(s) == v.count(0) for s in range(whole)) for v in per.values())
print("ok" if ok and len(per) == 2 else "bad %s" % {k: len(v) for k, v in per.items()})
PY
)
	if [ "$got" = ok ]; then ok "a long run's trace: $(grep -o 'keeps.*whole up to step [0-9]*' "$tmp/long.out")"
	else not_ok "a long run's trace: $got"; fi
else
	not_ok "a long run's trace: $(grep -i trace "$tmp/long.out")"
fi
export PIPEHOST_TRACE_EVENTS=5
expect_error "PIPEHOST_TRACE_EVENTS out of range" "^pipehost: PIPEHOST_TRACE_EVENTS=5: not a count of events from 16 to 1048576; unset it$" \
	-c "$fixtures/tiny.ini" --set run.steps=2 --trace "$tmp/x.json"
unset PIPEHOST_TRACE_EVENTS
finish
