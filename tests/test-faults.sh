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
steps=8

preload_shim faultfs || exit 77
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

# --- reads: an EIO while loading a step is not damage ----------------------
# Every read of the checkpoint dir's files in turn fails with EIO, during a
# resume and during --generate from the dir: the run stops in one line
# naming the error, nothing is set aside and no older step is taken (a
# read error once moved a sound step to damaged-step-N and resumed from
# the one before, exit 0).
read_trial() { # N CMD...: the command under the shim failing read N; $rc
	rn=$1
	shift
	rm -rf "$tmp/t" && mkdir "$tmp/t" && cp -r "$base" "$tmp/t/run"
	FAULTFS_DIR="$tmp/t/run" FAULTFS_MODE=readeio FAULTFS_N=$rn FAULTFS_COUNT="$tmp/count" LD_PRELOAD="$shim" \
		"$@" >"$tmp/out" 2>"$tmp/err"
	rc=$?
}
# an LM's checkpoints (steps 2 and 4) for --generate; a corpus every tree has
head -c 20000 "$top_srcdir/README.md" >"$tmp/corpus.txt"
lm() { "$PIPEHOST" -c "$fixtures/tiny-lm.ini" --set "data.path=$tmp/corpus.txt" --set run.steps=4 "$@"; }
lm --set "checkpoint.dir=$tmp/lmck" --set checkpoint.every=2 --set checkpoint.keep=2 >/dev/null 2>"$tmp/err" ||
	not_ok "LM checkpoints: $(cat "$tmp/err")"
for what in resume generate; do
	if [ $what = resume ]; then
		base=$tmp/base
		set -- "$PIPEHOST" -c "$tiny" --set run.steps=$steps --resume "$tmp/t/run" --save-weights "$tmp/r.st"
	else
		base=$tmp/lmck
		set -- "$PIPEHOST" -c "$fixtures/tiny-lm.ini" --set "data.path=$tmp/corpus.txt" --set run.steps=4 \
			--set "checkpoint.dir=$tmp/t/run" --generate The --max-new-tokens 2
	fi
	read_trial 0 "$@"
	calls=$(cat "$tmp/count" 2>/dev/null || echo 0)
	bad=
	i=1
	while [ "$i" -le "$calls" ]; do
		read_trial "$i" "$@"
		if [ "$rc" -eq 0 ]; then
			if [ $what = resume ] && ! cmp -s "$tmp/ref.st" "$tmp/r.st"; then
				bad="$bad [read $i: exit 0 with other weights: $(head -c 200 "$tmp/err")]"
			fi
		elif [ "$rc" -ne 1 ] || [ "$(wc -l <"$tmp/err")" -ne 1 ] || ! grep -q "Input/output error" "$tmp/err"; then
			bad="$bad [read $i: exit $rc: $(head -c 200 "$tmp/err")]"
		fi
		if ls "$tmp/t/run" | grep -q damaged || grep -q "WARNING" "$tmp/err"; then
			bad="$bad [read $i: a step passed over: $(ls "$tmp/t/run" | tr '\n' ' ')]"
		fi
		i=$((i + 1))
	done
	if [ "$calls" -gt 3 ] && [ -z "$bad" ]; then
		ok "$what: EIO at each of its $calls reads of the checkpoint dir: one line naming it, nothing set aside or skipped"
	else
		not_ok "$what, $calls reads:$bad"
	fi
done

# --- inputs cut while being read -------------------------------------------
# The config and a text corpus, each cut in half by its first read (the
# rest reads as the end of the file): the run says so and stops; it once
# trained on the first half of the corpus, or the config's first sections,
# with exit 0.
mkdir -p "$tmp/in"
cp "$tiny" "$tmp/in/run.ini"
cp "$tmp/corpus.txt" "$tmp/in/corpus.txt"
cut_run() { # DESC REGEX ARGS...
	desc=$1 re=$2
	shift 2
	expect_fault "$desc cut while being read" "$tmp/in" readeof 1 "$re" "" "$@"
}
cut_run "the config" "config $tmp/in/run.ini shrank while being read \([0-9]+ of [0-9]+ bytes\); run again" \
	-c "$tmp/in/run.ini" --set run.steps=2
cut_run "a text corpus" "text: $tmp/in/corpus.txt shrank while being read \([0-9]+ of [0-9]+ bytes\); run again" \
	-c "$fixtures/tiny-lm.ini" --set "data.path=$tmp/in/corpus.txt" --set run.steps=2
finish
