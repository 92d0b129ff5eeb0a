#!/bin/sh
# SPDX-License-Identifier: MIT
# The plan's activation estimate (--plan=json, stages[].memory.activations)
# is what the engine allocates: both read one table of a chunk's buffers
# (core/engine-layout.h), so for every rank the estimate summed over its
# chunks must print as the engine's "activation memory per rank" figure
# after a one-step run.  Schedules and placements that add buffers:
#  - 1F1B (slots and output gradients), ZB-H1 (the split backward's inner
#    gradients and own input copies), interleaved with recompute =
#    except_last (work buffers, lean slots and one full one);
#  - a pipeline split over two processes (mpirun; interleaved, so that
#    process 0, the one that prints, runs a chunk fed by process 1): the
#    receiving chunk's own input and outgoing input gradient, which the
#    plan's old hand-kept mirror of the engine left out (skipped without
#    Open MPI).
# The micro-batches are large (batch 4096) so that each of those buffers
# shows at the figure's 0.01 MiB.  Skips (77) without python3 to read JSON.
# shellcheck disable=SC2154 # make check sets top_srcdir
. "$top_srcdir/tests/lib.sh"
. "$top_srcdir/tests/mpi-lib.sh"
command -v python3 >/dev/null 2>&1 || {
	echo "SKIP: no python3 to read the plan's JSON"
	exit 77
}
tiny="$fixtures/tiny.ini"
big="--set run.batch=4096 --set data.samples=4096 --set run.steps=1"

# plan_mib JSON: the estimate per rank in MiB, as main.c prints the engine's
plan_mib() {
	python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
per = [0] * d["p"]
for st in d["stages"]:
    per[st["rank"]] += st["memory"]["activations"]
print(" ".join("%d: %.2f MiB" % (r, b / 1048576.0) for r, b in enumerate(per)))' "$1"
}

# engine_mib LOG: the engine's figures, one "R: X MiB" a rank it ran
engine_mib() {
	sed -n 's/^activation memory per rank: //p' "$1" | tr ',' '\n' | sed 's/ (recompute on)//; s/^ *//' |
		grep 'MiB' | tr '\n' ' ' | sed 's/ $//'
}

# same NAME DESC ARGS...: the plan of ARGS against one step of ARGS
same() {
	name=$1 desc=$2
	shift 2
	# shellcheck disable=SC2086 # $big is a list of options
	if ! "$PIPEHOST" -c "$tiny" $big "$@" --plan=json >"$tmp/$name.json" 2>"$tmp/$name.err" ||
		! "$PIPEHOST" -c "$tiny" $big "$@" >"$tmp/$name.log" 2>>"$tmp/$name.err"; then
		not_ok "$desc: run failed: $(tail -2 "$tmp/$name.err")"
		return
	fi
	want=$(plan_mib "$tmp/$name.json") got=$(engine_mib "$tmp/$name.log")
	if [ -n "$got" ] && [ "$want" = "$got" ]; then
		ok "$desc: the plan's estimate is the engine's ($got)"
	else
		not_ok "$desc: the plan estimates $want, the engine holds $got"
	fi
}

same f1 "1F1B, 2 ranks" --set run.stages=2 --set schedule.type=1f1b
same zb "ZB-H1 (split backward), 2 ranks" --set run.stages=2 --set schedule.type=zb-h1
same il "interleaved 2 x 2 chunks, recompute = except_last" --set run.stages=2 --set run.chunks=2 \
	--set schedule.type=interleaved --set run.recompute=except_last

if ph_have_mpi; then
	# only process 0 prints: interleaved, so that its rank 0 holds chunk 2,
	# whose input comes from chunk 1 in process 1
	split="--set run.stages=2 --set run.chunks=2 --set schedule.type=interleaved --set run.replicas=1"
	# shellcheck disable=SC2086 # $big and $split are lists of options
	ph_mpirun 2 -x PIPEHOST_PLUGIN_PATH "$PIPEHOST" -c "$tiny" $big $split --plan=json >"$tmp/mp.json" 2>"$tmp/mp.err"
	# shellcheck disable=SC2086 # $big and $split are lists of options
	ph_mpirun 2 -x PIPEHOST_PLUGIN_PATH "$PIPEHOST" -c "$tiny" $big $split >"$tmp/mp.log" 2>>"$tmp/mp.err"
	want=$(plan_mib "$tmp/mp.json" | sed 's/ 1: .*//')
	got=$(sed -n 's/^activation memory per rank: \(0: [0-9.]* MiB\), 1: in another process$/\1/p' "$tmp/mp.log")
	if [ -n "$got" ] && [ "$want" = "$got" ]; then
		ok "interleaved over 2 processes: rank 0's estimate is the engine's ($got)"
	else
		not_ok "interleaved over 2 processes: the plan estimates $want for rank 0, the engine holds ${got:-nothing: $(tail -2 "$tmp/mp.err")}"
	fi
else
	echo "# skipped the mpirun case: $ph_mpi_why"
fi

# --plan=json's memory total is the table's est. MiB, chunk by chunk, for
# every schedule (2bw's JSON left out its second gradient buffer, which the
# table counted: 19.07 against 20.8 MiB, 2026-12-07), and its parts add up
# to the total
for conf in "$top_srcdir/etc/gpt-fortunes-2bw.ini" "$top_srcdir/etc/gpt-fortunes.ini --set run.chunks=2 --set schedule.type=interleaved"; do
	# shellcheck disable=SC2086 # the INI and its --set words
	if "$PIPEHOST" -c $conf --set partition.cost=flops --plan >"$tmp/t.out" 2>"$tmp/t.err" &&
		"$PIPEHOST" -c $conf --set partition.cost=flops --plan=json >"$tmp/t.json" 2>>"$tmp/t.err"; then
		table=$(awk '/^  [0-9]/ { printf "%s%s", sep, $NF; sep = " " }' "$tmp/t.out")
		json=$(python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
out = []
for st in d["stages"]:
    m = st["memory"]
    parts = sum(m.get(k, 0) for k in ("params", "grads", "optimizer", "older_versions", "second_grads",
                                      "activations", "scratch")) - m.get("shared", 0)
    out.append("%.1f" % (m["total"] / 1048576.0) if parts == m["total"] else "parts-%d-total-%d" % (parts, m["total"]))
print(" ".join(out))' "$tmp/t.json")
		label=$(basename "${conf%% *}")
		case $conf in *" "*) label="$label ${conf#* }" ;; esac
		[ -n "$table" ] && [ "$table" = "$json" ] && ok "$label: --plan=json's totals are the table's ($table MiB)" ||
			not_ok "$conf: the table says $table MiB, the JSON $json"
	else
		not_ok "$conf: --plan failed: $(head -c 300 "$tmp/t.err")"
	fi
done
finish
