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
finish
