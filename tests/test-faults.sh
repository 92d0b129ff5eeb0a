#!/bin/sh
# SPDX-License-Identifier: MIT
# A checkpoint save failing at every one of its write, fsync and rename calls
# in turn (short writes, EIO, ENOSPC; the LD_PRELOAD shim tests/faultfs.c
# counts the calls on files of the checkpoint dir and fails the Nth): each
# time the failure is said (an error and exit 1, or a warning line for a
# failed deletion of an old step), the newest complete checkpoint still loads
# and resuming to the end gives the uninterrupted run's weights, byte for
# byte.  A short write is no failure: the save completes.
. "$top_srcdir/tests/lib.sh"
tiny="$fixtures/tiny.ini"
shim="$top_builddir/tests/.libs/faultfs.so"
steps=8

if [ ! -f "$shim" ]; then
	echo "SKIP: $shim not built"
	exit 77
fi
# under ASan the shim comes before the ASan runtime: let it
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"
# durability is test-crash.sh's; here fsyncs would only cost a minute
export FAULTFS_NOSYNC=1

ph() { "$PIPEHOST" -c "$tiny" --set run.steps=$steps "$@"; }

ph --save-weights "$tmp/ref.st" >/dev/null 2>"$tmp/err" || not_ok "reference run: $(cat "$tmp/err")"
# step-4 is the previous checkpoint; each trial resumes from it and saves
# step-8 (the final one) and, keep = 1, deletes step-4
ph --set "checkpoint.dir=$tmp/base" --set checkpoint.every=4 >/dev/null 2>"$tmp/err" ||
	not_ok "base run: $(cat "$tmp/err")"
rm -rf "$tmp/base/step-00000008"

trial() { # MODE N: the run under the shim; exit status in $rc
	rm -rf "$tmp/t" && mkdir "$tmp/t" && cp -r "$tmp/base" "$tmp/t/run"
	FAULTFS_DIR="$tmp/t/run" FAULTFS_MODE=$1 FAULTFS_N=$2 FAULTFS_COUNT="$tmp/count" LD_PRELOAD="$shim" \
		"$PIPEHOST" -c "$tiny" --set run.steps=$steps --set checkpoint.keep=1 --resume "$tmp/t/run" \
		>"$tmp/out" 2>"$tmp/err"
	rc=$?
}

trial eio 0
calls=$(cat "$tmp/count" 2>/dev/null || echo 0)
if [ "$rc" -eq 0 ] && [ "$calls" -gt 10 ] && [ -d "$tmp/t/run/step-00000008" ] && [ ! -e "$tmp/t/run/step-00000004" ]; then
	ok "the save of step 8 and the deletion of step 4 make $calls write/fsync/rename calls"
else
	not_ok "counting run: exit $rc, $calls calls, $(ls -A "$tmp/t/run" | tr '\n' ' ') $(cat "$tmp/err")"
fi

for mode in short eio enospc; do
	case $mode in
	eio) says="Input/output error" ;;
	enospc) says="No space left on device" ;;
	*) says= ;;
	esac
	bad=
	failed_runs=0
	warned=0
	i=1
	while [ $i -le "$calls" ]; do
		trial $mode $i
		# said: an error (exit 1) or a warning, naming the errno
		if [ -n "$says" ]; then
			if ! grep -q "$says" "$tmp/err"; then
				bad="$bad [call $i: exit $rc, not said: $(head -c 200 "$tmp/err")]"
			elif [ "$rc" -ne 0 ]; then
				failed_runs=$((failed_runs + 1))
			else
				warned=$((warned + 1))
			fi
		elif [ "$rc" -ne 0 ] || [ -s "$tmp/err" ]; then
			bad="$bad [call $i: a short write failed the run: $(head -c 200 "$tmp/err")]"
		fi
		# only complete steps, and the newest resumes to the reference
		for s in "$tmp/t/run"/step-*; do
			[ -f "$s/manifest.txt" ] || bad="$bad [call $i: $s incomplete]"
		done
		if ! LD_PRELOAD="$shim" "$PIPEHOST" -c "$tiny" --set run.steps=$steps --resume "$tmp/t/run" --save-weights "$tmp/r.st" \
			>"$tmp/rout" 2>"$tmp/rerr" || ! cmp -s "$tmp/ref.st" "$tmp/r.st"; then
			bad="$bad [call $i: resume: $(cat "$tmp/rerr")]"
		fi
		i=$((i + 1))
	done
	if [ -z "$bad" ]; then
		if [ -n "$says" ]; then
			ok "$mode at each of the $calls calls: $failed_runs runs exit 1 naming it, $warned warn (old step not deleted); every time the newest checkpoint resumes byte-identical"
		else
			ok "a short write at each of the $calls calls: the save completes; resumes byte-identical"
		fi
	else
		not_ok "$mode:$bad"
	fi
done
finish
