#!/bin/sh
# SPDX-License-Identifier: MIT
# The conventions a scheduler, a script or a terminal relies on
# (docs/conventions.md): exit statuses, metrics lines that are JSON,
# --progress, INI paths relative to the INI, torchrun/srun refused,
# a quiet configure.
. "$top_srcdir/tests/lib.sh"
tiny="$fixtures/tiny.ini"

# status DESC WANT ARGS...: pipehost ARGS exits WANT with one stderr line
status() {
	desc=$1 want=$2
	shift 2
	"$PIPEHOST" "$@" >"$tmp/out" 2>"$tmp/err"
	rc=$?
	if [ "$rc" -eq "$want" ] && [ "$(wc -l <"$tmp/err")" -eq 1 ]; then
		ok "$desc: exit $rc: $(cat "$tmp/err")"
	else
		not_ok "$desc: exit $rc (want $want): $(head -c 400 "$tmp/err")"
	fi
}

# --- 1. exit statuses -------------------------------------------------------
status "an unknown option is a usage error" 2 -c "$tiny" --no-such-flag
status "no -c is a usage error" 2 --set run.steps=1
status "an option without its value is a usage error" 2 -c
status "a bad --plan value is a usage error" 2 -c "$tiny" --plan=yaml
# an option whose value is missing took the next option as its value: the
# run trained and wrote its trace to a file named --simulate
(cd "$tmp" && status "--trace followed by another option is a usage error" 2 -c "$tiny" --trace --simulate)
[ -e "$tmp/--simulate" ] && not_ok "--trace --simulate wrote a file named --simulate"
status "--save-weights followed by another option is a usage error" 2 --save-weights --plan -c "$tiny"
status "-c followed by another option is a usage error" 2 -c --plan
status "a path that starts with - is a usage error" 2 -c "$tiny" --resume -x
status "--logits - is a usage error, as --trace - is" 2 -c "$tiny" --generate hi --logits -
status "an ambiguous option prefix is a usage error" 2 -c "$tiny" --pl
if grep -q "ambiguous option --pl: it could be --plan, --plan-json, --plugin-dir" "$tmp/err"; then
	ok "an ambiguous prefix names the options it could be"
else
	not_ok "an ambiguous prefix: $(cat "$tmp/err")"
fi
if "$PIPEHOST" --help | grep -q -- "-h, --help"; then ok "--help lists itself"; else not_ok "--help does not list -h, --help"; fi
status "a missing config file is a failure, not a usage error" 1 -c "$tmp/none.ini"
status "a bad key is a failure, not a usage error" 1 -c "$tiny" --set run.stepz=1

# SIGNAL: stopped after its checkpoint, the run exits 128 + the signal
stop_status() {
	sig=$1 want=$2 d="$tmp/stop-$1"
	env --default-signal=INT "$PIPEHOST" -c "$tiny" --set run.steps=100000 --set "checkpoint.dir=$d" \
		--set checkpoint.every=50 >"$tmp/stop.out" 2>"$tmp/stop.err" &
	pid=$!
	i=0
	while [ ! -d "$d/step-00000050" ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i + 1)); done
	kill -"$sig" "$pid"
	wait "$pid"
	rc=$?
	if [ "$rc" -eq "$want" ] && grep -q "^interrupted at step" "$tmp/stop.out"; then
		ok "SIG$sig after the checkpoint: exit $rc"
	else
		not_ok "SIG$sig: exit $rc (want $want), $(tail -1 "$tmp/stop.out") $(head -c 300 "$tmp/stop.err")"
	fi
}
stop_status INT 130
stop_status TERM 143

# --- 2. metrics lines are JSON, a non-finite figure null ------------------
# eps = 0 with a gradient of exactly 0 (a dead unit) makes the update 0/0:
# step 1's loss is finite, the evaluation after it is not
"$PIPEHOST" -c "$tiny" --set run.steps=1 --set optimizer.eps=0 --set run.eval=yes --set data.test_samples=64 \
	--set "run.metrics=$tmp/m.jsonl" >"$tmp/out" 2>"$tmp/err"
rc=$?
bad=""
while IFS= read -r line; do
	if command -v python3 >/dev/null 2>&1; then
		printf '%s\n' "$line" | python3 -m json.tool >/dev/null 2>&1 || bad="$bad [$line]"
	fi
	case $line in *nan* | *inf* | *NaN* | *Infinity*) bad="$bad [$line]" ;; esac
done <"$tmp/m.jsonl"
if [ "$rc" -eq 0 ] && [ -z "$bad" ] && grep -q '"test_loss":null' "$tmp/m.jsonl" &&
	grep -q '^{"step":1,"epoch":1,"loss":[0-9.]*,"lr":[0-9.e-]*,"samples_per_s":[0-9.]*,"elapsed_s":[0-9.]*}$' "$tmp/m.jsonl"; then
	ok "metrics: every line is JSON, a NaN test loss is null: $(tail -1 "$tmp/m.jsonl")"
else
	not_ok "metrics: exit $rc, not JSON:$bad $(head -c 300 "$tmp/m.jsonl") $(head -c 300 "$tmp/err")"
fi

# --- 3. --progress ----------------------------------------------------------
# not a terminal: lines (with lr), never a carriage return
"$PIPEHOST" -c "$tiny" --set run.log_every=5 >"$tmp/auto.out" 2>"$tmp/err"
"$PIPEHOST" -c "$tiny" --set run.log_every=5 --progress=lines >"$tmp/lines.out" 2>>"$tmp/err"
"$PIPEHOST" -c "$tiny" --progress=none >"$tmp/none.out" 2>>"$tmp/err"
if ! grep -q "$(printf '\r')" "$tmp/auto.out" "$tmp/lines.out" &&
	[ "$(grep -c '^epoch 1/1 step [0-9]*/20 loss [0-9.]* lr [0-9.e-]* samples/s' "$tmp/lines.out")" -eq 4 ] &&
	[ "$(grep -c '^epoch 1/1 step [0-9]*/20 loss [0-9.]* lr [0-9.e-]* samples/s' "$tmp/auto.out")" -eq 4 ]; then
	ok "--progress=lines and auto off a terminal: a line every log_every steps, with lr, no carriage return"
else
	not_ok "--progress=lines: $(od -c "$tmp/lines.out" | head -5) $(cat "$tmp/err")"
fi
if ! grep -q ' step ' "$tmp/none.out" && grep -q '^trained 20 steps' "$tmp/none.out"; then
	ok "--progress=none: no progress line, the summary stays"
else
	not_ok "--progress=none: $(head -c 400 "$tmp/none.out")"
fi
status "--progress=bogus is a usage error" 2 -c "$tiny" --progress=bogus

# a 40-column terminal: every redraw of the line fits in 39 columns
if script -qc true /dev/null >/dev/null 2>&1 </dev/null; then
	script -qc "stty cols 40; \"$PIPEHOST\" -c \"$tiny\" --set run.steps=3000" /dev/null </dev/null >"$tmp/tty.out" 2>&1
	how="a pseudo-terminal of 40 columns (script)"
else
	COLUMNS=40 "$PIPEHOST" -c "$tiny" --set run.steps=3000 --progress=tty >"$tmp/tty.out" 2>&1
	how="--progress=tty, COLUMNS=40"
fi
# the redraws: the text between carriage returns, less the clear-to-end
draws=$(tr '\r' '\n' <"$tmp/tty.out" | sed "s/$(printf '\033')\[K//g" | grep -E '^(epoch [0-9]+/[0-9]+ +)?(step )?[0-9]+/[0-9]+ +loss [0-9]')
long=$(printf '%s\n' "$draws" | awk 'length($0) > 39' | head -1)
if [ -n "$draws" ] && [ -z "$long" ] && ! printf '%s\n' "$draws" | grep -v -q ' lr '; then
	ok "$how: $(printf '%s\n' "$draws" | wc -l) redraws, each fits, with lr: '$(printf '%s\n' "$draws" | tail -1)'"
else
	not_ok "$how: a redraw too long or without lr: '$long' $(printf '%s\n' "$draws" | head -3)"
fi

# --- 4. relative paths in an INI: under the INI's directory ---------------
# an INI in run/ names its schedule table, metrics, checkpoints and weights
# relatively; it is run from another directory
mkdir -p "$tmp/run" "$tmp/elsewhere"
cp "$fixtures/schedules/1f1b-p2-m4.csv" "$tmp/run/table.csv"
sed -e 's/^type = 1f1b$/type = table\nfile = table.csv/' \
	-e 's/^eval = no$/eval = no\nmetrics = out\/m.jsonl\nsave_weights = w.st/' "$tiny" >"$tmp/run/run.ini"
printf '[checkpoint]\ndir = ck\n' >>"$tmp/run/run.ini"
mkdir -p "$tmp/run/out"
(cd "$tmp/elsewhere" && "$PIPEHOST" -c ../run/run.ini --set run.steps=4 >"$tmp/out" 2>"$tmp/err")
rc=$?
if [ "$rc" -eq 0 ] && [ -s "$tmp/run/out/m.jsonl" ] && [ -s "$tmp/run/w.st" ] && [ -d "$tmp/run/ck/step-00000004" ] &&
	[ -z "$(ls -A "$tmp/elsewhere")" ]; then
	ok "an INI's relative schedule file, metrics, save_weights and checkpoint dir are under its directory"
else
	not_ok "relative INI paths: exit $rc, run/ holds $(ls "$tmp/run" | tr '\n' ' '), elsewhere/ $(ls -A "$tmp/elsewhere" | tr '\n' ' '), $(head -c 300 "$tmp/err")"
fi
# init = a file beside the INI; a --set path stays the current directory's
printf '[run]\ninit = w.st\n' >"$tmp/run/init.ini"
sed -n '/^\[run\]/,$p' "$tmp/run/run.ini" | sed '1d' | grep -v -E '^(metrics|save_weights|dir|file) =' |
	sed 's/^type = table$/type = 1f1b/' >>"$tmp/run/init.ini"
(cd "$tmp/elsewhere" && "$PIPEHOST" -c "$tmp/run/init.ini" --set run.steps=1 --set run.metrics=here.jsonl \
	>"$tmp/out" 2>"$tmp/err")
rc=$?
if [ "$rc" -eq 0 ] && grep -q "^initial weights read from $tmp/run/w.st" "$tmp/out" && [ -s "$tmp/elsewhere/here.jsonl" ]; then
	ok "init = w.st is read beside the INI; --set run.metrics=here.jsonl is written in the current directory"
else
	not_ok "init beside the INI: exit $rc, $(grep initial "$tmp/out") $(ls -A "$tmp/elsewhere") $(head -c 300 "$tmp/err")"
fi

# --- 5. torchrun and a plain srun are refused, with how to launch ---------
launched() { # DESC WANT VAR=VALUE...
	desc=$1 want=$2
	shift 2
	env -u OMPI_COMM_WORLD_SIZE -u PMI_SIZE -u PMIX_RANK -u WORLD_SIZE -u RANK -u SLURM_PROCID \
		-u SLURM_STEP_NUM_TASKS -u SLURM_NTASKS "$@" "$PIPEHOST" -c "$tiny" --set run.steps=2 >"$tmp/out" 2>"$tmp/err"
	rc=$?
	if [ "$want" = refused ]; then
		if [ "$rc" -eq 1 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -q "mpirun -np [0-9]" "$tmp/err" &&
			! grep -q '^trained' "$tmp/out"; then
			ok "$desc: refused: $(cat "$tmp/err")"
		else
			not_ok "$desc: exit $rc, $(tail -1 "$tmp/out") $(head -c 300 "$tmp/err")"
		fi
	elif [ "$rc" -eq 0 ] && grep -q '^trained 2 steps' "$tmp/out"; then
		ok "$desc: runs"
	else
		not_ok "$desc: exit $rc, $(head -c 300 "$tmp/err")"
	fi
}
launched "torchrun (RANK, WORLD_SIZE=4, LOCAL_RANK)" refused RANK=1 WORLD_SIZE=4 LOCAL_RANK=1
launched "srun (SLURM_PROCID, SLURM_STEP_NUM_TASKS=2)" refused SLURM_PROCID=0 SLURM_STEP_NUM_TASKS=2 SLURM_NTASKS=2
launched "torchrun with one process" ok RANK=0 WORLD_SIZE=1
launched "an sbatch -n 4 script (SLURM_NTASKS alone)" ok SLURM_NTASKS=4 SLURM_PROCID=0
launched "WORLD_SIZE under an MPI launcher (one process)" ok OMPI_COMM_WORLD_SIZE=1 WORLD_SIZE=4 RANK=0

# --- 6. configure is quiet where a directory is named core ----------------
# configure runs out of tree in a build directory that holds core/ (as an
# in-tree build does); the source is seen through links, less this
# build's config.status (automake refuses a source tree already configured)
mkdir -p "$tmp/src" "$tmp/build/core"
for f in "$top_srcdir"/* "$top_srcdir"/.[!.]*; do
	case ${f##*/} in config.status | config.log | config.cache | Makefile | libtool | build-config.h | stamp-h1) ;;
	*) [ -e "$f" ] && ln -s "$f" "$tmp/src/${f##*/}" ;;
	esac
done
(cd "$tmp/build" && "$tmp/src/configure" --without-cuda >"$tmp/conf.out" 2>"$tmp/conf.err")
rc=$?
said=$(grep -c "cannot remove" "$tmp/conf.out" "$tmp/conf.err" | awk -F: '{ n += $2 } END { print n }')
if [ "$rc" -eq 0 ] && [ "$said" -eq 0 ] && [ ! -e "$tmp/build/confdefs.h" ]; then
	ok "configure beside a core/ directory: no 'cannot remove' line, no confdefs.h left"
else
	not_ok "configure: exit $rc, $said 'cannot remove' lines, $(ls "$tmp/build" | grep -c confdefs) confdefs.h left; $(grep -v 'cannot remove' "$tmp/conf.err" | head -c 300)"
fi

# --- 7. another compiler than GCC: one line from configure -----------------
# The layer plugins are GCC's (vector extensions, vectoriser flags, the
# bits the tests compare); clang failed in make's errors before.
if command -v clang >/dev/null 2>&1; then
	mkdir -p "$tmp/clang"
	(cd "$tmp/clang" && "$tmp/src/configure" --without-cuda CC=clang >"$tmp/cc.out" 2>"$tmp/cc.err")
	rc=$?
	if [ "$rc" -ne 0 ] && grep -q "^configure: error: clang is not GCC: .*; configure with CC=gcc$" "$tmp/cc.err" &&
		[ "$(grep -c "error" "$tmp/cc.err")" -eq 1 ]; then
		ok "configure CC=clang: refused in one line (exit $rc)"
	else
		not_ok "configure CC=clang: exit $rc, $(tail -c 300 "$tmp/cc.err")"
	fi
else
	ok "# SKIP configure CC=clang: no clang"
fi

finish
