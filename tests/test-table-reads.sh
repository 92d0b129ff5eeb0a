#!/bin/sh
# SPDX-License-Identifier: MIT
# A table schedule (schedule.type = table) reads its file once for a plan,
# not once for its check and again for each rank, and once for the host's
# search for a micro-batch count it takes, not once per count tried (a
# 64-rank plan of 4096 micro-batches spent 3.3 of its 7.6 s re-reading a
# 35 MB table, and a typo in it took 14 s to report).  The reads of the table are
# counted through the shim tests/faultfs.c (FAULTFS_COUNT); the plugin's
# messages are test-bad-schedules.sh's and test-simulate's.
. "$top_srcdir/tests/lib.sh"
tiny="$fixtures/tiny.ini"   # 9 layers, 4 micro-batches
preload_shim faultfs || exit 77

# reads DIR ARGS...: pipehost ARGS with the reads of files under DIR
# counted; the count in $reads, the exit status in $rc
reads() {
	dir=$1
	shift
	rm -f "$tmp/count"
	FAULTFS_DIR="$dir" FAULTFS_MODE=readeio FAULTFS_COUNT="$tmp/count" LD_PRELOAD="$shim" "$PIPEHOST" "$@" \
		>"$tmp/out" 2>"$tmp/err"
	rc=$?
	reads=$(cat "$tmp/count" 2>/dev/null || echo none)
}

# A table just written (the plugin trusts no earlier reading of a file
# changed less than 2 s before it, as one written again within the
# clock's tick keeps its times, but a plan's ranks share the plan's
# reading): no more reads for 8 ranks than for 2.
mkdir "$tmp/t"
for p in 2 8; do
	for r in $(seq $p); do echo "F0, F1, F2, F3, B0, B1, B2, B3"; done >"$tmp/t/gpipe-p$p.csv"
done
reads "$tmp/t" -c "$tiny" --plan --set run.stages=2 --set schedule.type=table --set "schedule.file=$tmp/t/gpipe-p2.csv"
r2=$reads rc2=$rc
reads "$tmp/t" -c "$tiny" --plan --set run.stages=8 --set schedule.type=table --set "schedule.file=$tmp/t/gpipe-p8.csv"
if [ "$rc2" -eq 0 ] && [ "$rc" -eq 0 ] && [ "$reads" != none ] && [ "$r2" != none ] && [ "$reads" -le "$r2" ]; then
	ok "a plan of 8 ranks reads its table no more often than one of 2 ($reads and $r2 reads)"
else
	not_ok "a plan of 8 ranks read its table $reads times (exit $rc), one of 2 $r2 times (exit $rc2): $(head -c 300 "$tmp/err")"
fi

# Tables unchanged for a while (the fixtures; a fresh copy of the source
# tree waits until they are 3 s old): a table with a typo is read no more
# often than a good one, though the host tries one micro-batch count after
# another before it reports the typo.
sched="$fixtures/schedules"
age=$(($(date +%s) - $(stat -c %Z "$sched/malformed.csv")))
[ "$age" -lt 3 ] && sleep $((3 - age))
age=$(($(date +%s) - $(stat -c %Z "$sched/1f1b-p2-m4.csv")))
[ "$age" -lt 3 ] && sleep $((3 - age))
reads "$sched" -c "$tiny" --plan --set schedule.type=table --set "schedule.file=$sched/1f1b-p2-m4.csv"
good=$reads rcg=$rc
reads "$sched" -c "$tiny" --plan --set schedule.type=table --set "schedule.file=$sched/malformed.csv"
if [ "$rcg" -eq 0 ] && [ "$rc" -eq 1 ] && [ "$reads" != none ] && [ "$good" != none ] && [ "$reads" -le "$good" ] &&
	grep -q "^pipehost: $sched/malformed.csv:4: 'BB2' is not an action" "$tmp/err"; then
	ok "a table with a typo: $reads read(s), a good one $good; $(cat "$tmp/err")"
else
	not_ok "a table with a typo: $reads reads (exit $rc), a good one $good (exit $rcg): $(head -c 300 "$tmp/err")"
fi
finish
