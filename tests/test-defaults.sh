#!/bin/sh
# SPDX-License-Identifier: MIT
# The defaults of issue 24: [partition] type = dp on cost = auto (the
# layers measured, cached on disk), [run] threads = 0 (the cores over the
# ranks, printed); the profile cache used on a second run, a damaged one
# ignored with a note, profile_cache = off; the profiler on the run's own
# samples (random input when a layer refuses them); PIPEHOST_LAYER_TIMES.
# No timing is asserted: only what is printed, written and chosen.
. "$top_srcdir/tests/lib.sh"
# tiny.ini without its [partition] type: the defaults decide
sed '/^type = uniform$/d' "$fixtures/tiny.ini" >"$tmp/tiny.ini"
ini="$tmp/tiny.ini"
XDG_CACHE_HOME="$tmp/cache"
export XDG_CACHE_HOME
cores=$(getconf _NPROCESSORS_ONLN)

plan() { "$PIPEHOST" -c "$ini" --plan "$@" >"$tmp/out" 2>"$tmp/err"; }
# check DESC COMMAND...: ok when the command succeeds
check() {
	desc=$1
	shift
	if "$@"; then ok "$desc"; else not_ok "$desc: $(head -c 600 "$tmp/out") $(head -c 300 "$tmp/err")"; fi
}
has() { grep -q -- "$1" "$tmp/out"; }

# ---- the default cut: dp on measured costs --------------------------------
"$PIPEHOST" --list-options >"$tmp/out" 2>&1
check "--list-options: [partition] type defaults to dp" grep -Eq '^ *type .*dp' "$tmp/out"
check "--list-options: cost defaults to auto" grep -Eq '^ *cost .*auto' "$tmp/out"
plan
check "the default partitioner is dp" has "partitioner dp"
check "cost = auto measures a 2-stage model" has "^profile: measuring 9 layers on cpu.*training samples"
check "cost = auto prints no table" sh -c '! grep -q "fwd ms" "$1"' sh "$tmp/out"
file=$(ls "$tmp/cache/pipehost/"profile-*.txt 2>/dev/null | head -1)
check "the profile is cached under \$XDG_CACHE_HOME/pipehost" test -s "$file"
check "the cache file lists 9 layers" sh -c '[ "$(grep -c "^layer " "$1")" = 9 ]' sh "$file"
check "no temporary file is left" sh -c '[ "$(ls "$1" | wc -l)" = 1 ]' sh "$tmp/cache/pipehost"

# ---- the cache: a second run reads it --------------------------------------
plan
check "a second run reads the cache" has "^profile: cache hit $file"
check "a second run does not measure" sh -c '! grep -q "^profile: measuring" "$1"' sh "$tmp/out"
# cost = profile prints the table, from the cache too
plan --set partition.cost=profile
check "cost = profile prints the table from the cache" sh -c 'grep -q "cache hit" "$1" && grep -q "fwd ms" "$1"' sh "$tmp/out"

# ---- a damaged cache is a note, never a failure ----------------------------
printf 'pipehost-profile 1\nkey zz\nlayers\n\001\377garbage\n' >"$file"
if plan; then
	check "a damaged cache is ignored with a note" has "^profile: ignoring the cache: .*expected key"
	check "... and measured afresh" has "^profile: measuring"
	check "... and rewritten" grep -q "^layer 8 " "$file"
else
	not_ok "a damaged cache fails the run: $(cat "$tmp/err")"
fi
head -c 0 "$file" >"$file.t" && mv "$file.t" "$file" # empty: truncated
check "an empty cache file is ignored" sh -c '"$PIPEHOST" -c "$1" --plan | grep -q "^profile: ignoring the cache: .*truncated"' sh "$ini"
rm -f "$file"
mkdir "$file" # a directory where the file goes: cannot read, cannot write
if plan; then
	check "a cache path that is a directory is noted" has "^profile: not cached: "
else
	not_ok "a cache path that is a directory fails the run: $(cat "$tmp/err")"
fi
rmdir "$file"
# an unwritable cache directory: a note (root writes anywhere: skip then)
mkdir -p "$tmp/ro" && chmod 555 "$tmp/ro"
if [ ! -w "$tmp/ro" ]; then
	plan --set partition.profile_cache="$tmp/ro/sub"
	check "an unwritable cache directory is noted, the run goes on" has "^profile: not cached: cannot create"
else
	ok "# SKIP unwritable directory (running as root)"
fi
chmod 755 "$tmp/ro"
rm -rf "$tmp/cache"
plan --set partition.profile_cache=off
check "profile_cache = off measures" has "^profile: measuring"
check "profile_cache = off writes no file" test ! -e "$tmp/cache/pipehost"
check "profile_cache = off says nothing of a cache" sh -c '! grep -q "cache" "$1"' sh "$tmp/out"

# off in an INI is the word, not a directory named off beside the INI
mkdir -p "$tmp/inidir"
sed 's/^\[partition\]$/[partition]\nprofile_cache = off/' "$ini" >"$tmp/inidir/tiny.ini"
"$PIPEHOST" -c "$tmp/inidir/tiny.ini" --plan >"$tmp/out" 2>"$tmp/err"
check "profile_cache = off in an INI measures" has "^profile: measuring"
check "profile_cache = off in an INI makes no directory off" test ! -e "$tmp/inidir/off"
# a file where the cache directory goes: refused with the INI's line
: >"$tmp/inidir/afile"
sed 's/^\[partition\]$/[partition]\nprofile_cache = afile/' "$ini" >"$tmp/inidir/file.ini"
if "$PIPEHOST" -c "$tmp/inidir/file.ini" --plan --set partition.cost=flops >"$tmp/out" 2>"$tmp/err"; then
	not_ok "a profile_cache that is a file is accepted"
else
	check "a profile_cache that is a file: one line with file:line" \
		grep -q "file.ini:[0-9]*: \[partition\] profile_cache = .*afile is a file, not a directory" "$tmp/err"
fi

# ---- what auto leaves alone -------------------------------------------------
plan --set run.stages=1
check "one stage measures nothing" sh -c '! grep -q "^profile:" "$1"' sh "$tmp/out"
plan --set partition.cost=flops --set partition.profile_cache=off
check "cost = flops measures nothing" sh -c '! grep -q "^profile:" "$1"' sh "$tmp/out"

# ---- the profiler's input ----------------------------------------------------
# a layer that refuses the samples (a byte past the vocabulary): random
# input, and training reports the bad sample as it always did
LC_ALL=C awk 'BEGIN { for (i = 0; i < 4000; i++) printf "%c", i % 300 == 0 ? 200 : 97 + i % 26 }' >"$tmp/high.txt"
"$PIPEHOST" -c "$fixtures/tiny-lm.ini" --plan --set partition.type=dp --set partition.cost=auto \
	--set "data.path=$tmp/high.txt" --set "layer embed.vocab=128" --set "layer head.units=128" \
	--set partition.profile_cache=off >"$tmp/out" 2>"$tmp/err"
check "samples a layer refuses: random input instead" has "^profile: layer embed (embedding) forward: .*holds 200.*timing random input instead"
# a data set that does not load: random input, said why; --plan still plans
"$PIPEHOST" -c "$fixtures/tiny-lm.ini" --plan --set partition.type=dp --set partition.cost=auto \
	--set "data.path=$tmp/absent.txt" --set partition.profile_cache=off >"$tmp/out" 2>"$tmp/err"
check "no data: the profiler times random input and says why" has "^profile: measuring .*random input (.*absent.txt"

# ---- threads: the cores over the ranks ---------------------------------------
plan
want=$((cores / 2)); [ "$want" -ge 1 ] || want=1
check "threads = 0: $cores core(s) over 2 ranks is $want thread(s), printed" \
	has "^cpu: 2 rank(s) x $want BLAS thread(s) on $cores core(s) (\[run\] threads = 0"
plan --set run.stages=1
check "threads = 0: 1 rank gets every core" has "^cpu: 1 rank(s) x $cores BLAS thread(s) on $cores core(s)"
plan --set run.threads=3
check "threads = 3 is kept, without the auto remark" sh -c 'grep -q "^cpu: 2 rank(s) x 3 BLAS thread(s) on" "$1" && ! grep -q "threads = 0" "$1"' sh "$tmp/out"
over=$((cores + 1))
if [ "$over" -le 8 ]; then
	plan --set run.stages=$over --set partition.cost=flops
	check "$over ranks on $cores cores: a note" has "^note: $over ranks share $cores cores"
else
	ok "# SKIP more ranks than cores: $cores cores, the model has 9 layers"
fi

# ---- PIPEHOST_LAYER_TIMES: per-layer times inside the steps, results unchanged --
"$PIPEHOST" -c "$ini" --set run.steps=6 --progress=none --save-weights "$tmp/a.safetensors" >"$tmp/out" 2>&1
PIPEHOST_LAYER_TIMES="$tmp/lt.txt" "$PIPEHOST" -c "$ini" --set run.steps=6 --progress=none \
	--save-weights "$tmp/b.safetensors" >>"$tmp/out" 2>&1
check "PIPEHOST_LAYER_TIMES writes one line per layer" sh -c '[ "$(grep -c "^layer " "$1")" = 9 ]' sh "$tmp/lt.txt"
check "... with every layer called from step 3 on" \
	awk '$1 == "layer" && !($7 > 0 && $5 >= 0 && $6 >= 0) { bad = 1 } END { exit bad }' "$tmp/lt.txt"
check "... and the same weights, bit for bit" cmp -s "$tmp/a.safetensors" "$tmp/b.safetensors"
# ---- mpirun: every process cuts alike (process 0's measured costs) --------
. "$top_srcdir/tests/mpi-lib.sh"
if ph_have_mpi; then
	"$PIPEHOST" -c "$ini" --set run.steps=6 --set run.threads=1 --set partition.cost=flops \
		--save-weights "$tmp/one.st" >/dev/null 2>&1
	# a pipeline split over 2 processes (replicas = 1): a cut that differs
	# between them would not run
	if ph_mpirun 2 -x PIPEHOST_PLUGIN_PATH -x XDG_CACHE_HOME "$PIPEHOST" -c "$ini" --set run.steps=6 \
		--set run.threads=1 --set run.replicas=1 --set partition.profile_cache=off \
		--save-weights "$tmp/two.st" >"$tmp/out" 2>"$tmp/err" && cmp -s "$tmp/one.st" "$tmp/two.st"; then
		ok "mpirun -np 2, one pipeline split over both, cost = auto: runs, the same weights"
	else
		not_ok "mpirun -np 2 with cost = auto: $(tail -3 "$tmp/err")"
	fi
else
	ok "# SKIP mpirun: $ph_mpi_why"
fi
finish
