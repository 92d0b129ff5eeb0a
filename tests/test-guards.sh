#!/bin/sh
# SPDX-License-Identifier: MIT
# Nothing lost, nothing silent: memory limits, FIFOs, a closed stdout, a
# file-size limit, plugins others could change or that report absurd sizes,
# a stop during evaluation, and the unclear messages of the INI reader.
# Every case ends with one clear line and a non-zero exit, or with the run
# going on; docs/reliability-guards.md lists them with their messages.
. "$top_srcdir/tests/lib.sh"
tiny="$fixtures/tiny.ini"

# --- 7. memory: refused before allocating, with both figures ---------------
# a 1e9-unit layer: ~1.2 TB of weights, gradients and Adam state
expect_error "a model larger than the machine" \
	"run needs ~[0-9.]+ GiB in this process \(--plan's estimate\) but (MemAvailable\+SwapFree|the cgroup limit \(memory\.(max|limit_in_bytes)\)|ulimit -[vd]) leaves [0-9.]+ [MG]iB; lower \[run\] batch" \
	-c "$tiny" --set "layer fc1.units=1000000000" --set run.steps=1
# RLIMIT_AS (ulimit -v, in KiB): 3 GiB for a 26 GB run.  ASan reserves
# terabytes of address space and cannot run under it.
if [ -z "${ASAN_OPTIONS:-}" ] && (ulimit -v 3000000) 2>/dev/null; then
	# uv_run MEMCHECK OPTIONS...: the 26 GB run (fc1 of 20M units) under
	# ulimit -v with PIPEHOST_MEMCHECK=MEMCHECK, its output, errors and
	# exit in $tmp/uv.out, uv.err and uv.rc
	uv_run() {
		(
			ulimit -v 3000000
			mc=$1
			shift
			PIPEHOST_MEMCHECK=$mc "$PIPEHOST" -c "$tiny" --set "layer fc1.units=20000000" --set run.steps=1 "$@" \
				>"$tmp/uv.out" 2>"$tmp/uv.err"
			echo $? >"$tmp/uv.rc"
		)
	}
	# uv_one_line PATTERN: exit 1 and one line of errors matching PATTERN
	uv_one_line() {
		[ "$(cat "$tmp/uv.rc")" = 1 ] && [ "$(wc -l <"$tmp/uv.err")" -eq 1 ] && grep -Eq "$1" "$tmp/uv.err"
	}
	uv_run 1
	if uv_one_line "run needs ~2[0-9.]+ GiB in this process \(--plan's estimate\) but ulimit -v leaves [0-9.]+ [MG]iB"; then
		ok "a run over ulimit -v: $(cat "$tmp/uv.err")"
	else
		not_ok "a run over ulimit -v: exit $(cat "$tmp/uv.rc"), $(cat "$tmp/uv.err")"
	fi
	# cost = auto measures the layers when that looks quick (many BLAS
	# threads): a layer too big to measure must not fail in the profiler
	# but fall back to the FLOPs, and the run be refused as above (it was
	# refused by the profiler's allocation on a 16-core machine)
	uv_run 1 --set run.threads=64
	if uv_one_line "run needs ~2[0-9.]+ GiB in this process \(--plan's estimate\) but ulimit -v leaves" &&
		grep -q "^cost: flops (\[partition\] cost = auto: measuring a layer needs ~[0-9.]* MiB but ulimit -v leaves" "$tmp/uv.out"; then
		ok "cost = auto with a layer too big to measure: $(grep '^cost:' "$tmp/uv.out"); $(cat "$tmp/uv.err")"
	else
		not_ok "cost = auto with a layer too big to measure: exit $(cat "$tmp/uv.rc"), $(cat "$tmp/uv.err")"
	fi
	# cost = profile, asked for: the profiler's failed allocation names its size
	uv_run 0 --set run.threads=1 --set partition.cost=profile
	if uv_one_line "^pipehost: profile: out of memory for the parameters of layer fc1 \(4882\.8 MiB asked\); free memory, or make the job smaller \(.*\): --plan estimates what a run needs$"; then
		ok "cost = profile under ulimit -v: $(cat "$tmp/uv.err")"
	else
		not_ok "cost = profile under ulimit -v: exit $(cat "$tmp/uv.rc"), $(cat "$tmp/uv.err")"
	fi
	# a model that fits, and BLAS threads whose buffers do not: refused at
	# once (OpenBLAS, denied a buffer, retried mmap forever: a hang)
	(
		ulimit -v 3000000
		# (timeout: before the check, this run hung in OpenBLAS)
		timeout 60 "$PIPEHOST" -c "$tiny" --set run.steps=1 --set run.threads=256 >"$tmp/uv.out" 2>"$tmp/uv.err"
		echo $? >"$tmp/uv.rc"
	)
	if uv_one_line "^pipehost: run needs ~[0-9.]+ GiB of address space \((the model, and )?BLAS buffers for [0-9]+ threads\) but ulimit -v leaves [0-9.]+ [MG]iB; lower \[run\] threads"; then
		ok "BLAS threads' buffers over ulimit -v: $(cat "$tmp/uv.err")"
	else
		not_ok "BLAS threads' buffers over ulimit -v: exit $(cat "$tmp/uv.rc"), $(cat "$tmp/uv.err")"
	fi
	# the same with cost = profile: refused before the profiler measures
	(
		ulimit -v 3000000
		timeout 60 "$PIPEHOST" -c "$tiny" --plan --set run.threads=256 --set partition.cost=profile >"$tmp/uv.out" \
			2>"$tmp/uv.err"
		echo $? >"$tmp/uv.rc"
	)
	if uv_one_line "^pipehost: run needs ~[0-9.]+ GiB of address space \(BLAS buffers for [0-9]+ threads\) but ulimit -v leaves"; then
		ok "cost = profile with BLAS threads' buffers over ulimit -v: $(cat "$tmp/uv.err")"
	else
		not_ok "cost = profile with BLAS threads' buffers over ulimit -v: exit $(cat "$tmp/uv.rc"), $(cat "$tmp/uv.err")"
	fi
	# the check skipped: the allocation that fails names its size
	uv_run 0
	if uv_one_line "out of memory for (the parameters of layer [a-z0-9]+ \([0-9.]+ MiB asked\)|the [0-9.]+ MiB of activations and buffers of chunk [0-9]+)"; then
		ok "PIPEHOST_MEMCHECK=0 under ulimit -v: the failed allocation names its size: $(cat "$tmp/uv.err")"
	else
		not_ok "PIPEHOST_MEMCHECK=0 under ulimit -v: exit $(cat "$tmp/uv.rc"), $(cat "$tmp/uv.err")"
	fi
else
	echo "# ulimit -v unavailable or ASan: RLIMIT_AS case skipped"
fi

# --- 8. a closed stdout (SIGPIPE) and a file-size limit (SIGXFSZ) ----------
rm -rf "$tmp/pipe"
{
	"$PIPEHOST" -c "$tiny" --set run.steps=2000 --set run.log_every=1 --set "checkpoint.dir=$tmp/pipe" \
		2>"$tmp/pipe.err"
	echo $? >"$tmp/pipe.rc"
} | head -1 >/dev/null
if [ "$(cat "$tmp/pipe.rc")" = 0 ] && [ -f "$tmp/pipe/step-00002000/state.json" ] &&
	[ "$(wc -l <"$tmp/pipe.err")" -eq 1 ] &&
	grep -q "^pipehost: standard output can no longer be written .*training goes on$" "$tmp/pipe.err"; then
	ok "pipehost | head: training goes on to its last checkpoint; one line: $(cat "$tmp/pipe.err")"
else
	not_ok "pipehost | head: exit $(cat "$tmp/pipe.rc"), $(ls "$tmp/pipe" 2>&1), $(cat "$tmp/pipe.err")"
fi

# ulimit -f (512-byte blocks in dash, 1 KiB in bash): the step-30 checkpoint
# cannot be written; the step-20 one stays whole and resumes
rm -rf "$tmp/fsz"
"$PIPEHOST" -c "$tiny" --set run.steps=40 --set "checkpoint.dir=$tmp/fsz" --set checkpoint.every=20 >/dev/null
rm -rf "$tmp/fsz/step-00000040"
(
	ulimit -f 10
	"$PIPEHOST" -c "$tiny" --set run.steps=40 --set checkpoint.every=10 --resume "$tmp/fsz" >/dev/null 2>"$tmp/fsz.err"
	echo $? >"$tmp/fsz.rc"
)
if [ "$(cat "$tmp/fsz.rc")" = 1 ] && [ "$(wc -l <"$tmp/fsz.err")" -eq 1 ] &&
	grep -q "safetensors: writing failed: file size limit reached (ulimit -f, .*the previous file is unchanged: raise the limit$" "$tmp/fsz.err" &&
	[ "$(ls "$tmp/fsz")" = step-00000020 ] &&
	"$PIPEHOST" -c "$tiny" --set run.steps=40 --resume "$tmp/fsz" >"$tmp/out" 2>&1 && grep -q "resumed from" "$tmp/out"; then
	ok "ulimit -f: exit 1, one line, the step-20 checkpoint intact and resumable: $(cat "$tmp/fsz.err")"
else
	not_ok "ulimit -f: exit $(cat "$tmp/fsz.rc"), dir: $(ls "$tmp/fsz"), $(cat "$tmp/fsz.err") $(tail -1 "$tmp/out")"
fi

# --- 9. a named pipe where a file is read ----------------------------------
mkfifo "$tmp/fifo"
# under timeout (expect_error_t): the old code blocked in open(2) for ever
expect_error_t "initial weights from a FIFO" "$tmp/fifo: not a regular file but a named pipe; give a safetensors file" \
	-c "$tiny" --set "run.init=$tmp/fifo"
expect_error_t "text data from a FIFO" "text: \[data\] path $tmp/fifo is a named pipe, not a regular file; set \[data\] path to a text file" \
	-c "$fixtures/tiny-lm.ini" --set "data.path=$tmp/fifo" --set run.steps=1
expect_error_t "schedule table from a FIFO" "schedule table $tmp/fifo is not a regular file .*set \[schedule\] file to a CSV file" \
	-c "$tiny" --plan --set schedule.type=table --set "schedule.file=$tmp/fifo"
expect_error_t "config from a FIFO nobody writes" "config $tmp/fifo is a named pipe that nothing was written to; start the program that writes it first" \
	-c "$tmp/fifo"
expect_error_t "config that is a character device" "cannot read config /dev/null: it is a character device; pass an INI file \(or a pipe\) with -c" \
	-c /dev/null
# a pipe is a fine config (-c /dev/stdin, -c <(...)): documented
if cat "$tiny" | timeout 20 "$PIPEHOST" -c /dev/stdin --plan >"$tmp/out" 2>&1 && grep -q "^plan:" "$tmp/out"; then
	ok "the config through a pipe (-c /dev/stdin)"
else
	not_ok "-c /dev/stdin from a pipe: $(tail -2 "$tmp/out")"
fi

# --- the INI reader's unclear messages --------------------------------------
# a NUL in the last line (no newline after it): inih cut the line silently
printf '[run]\nsteps = 20\n[layer x]\ntype = relu\000junk' >"$tmp/nul-last.ini"
expect_error "NUL byte in the last line" "$tmp/nul-last.ini:4: line holds a NUL byte; the config must be a text file" \
	-c "$tmp/nul-last.ini"
tr '\n' '\r' <"$tiny" >"$tmp/cr.ini"
expect_error "CR-only line endings" "$tmp/cr.ini:1: line ends with a carriage return alone \(old Mac line endings\); convert the file: tr" \
	-c "$tmp/cr.ini"
# CRLF stays accepted
sed 's/$/\r/' "$tiny" >"$tmp/crlf.ini"
if "$PIPEHOST" -c "$tmp/crlf.ini" --plan >/dev/null 2>"$tmp/err"; then
	ok "CRLF line endings still accepted"
else
	not_ok "CRLF: $(cat "$tmp/err")"
fi
expect_error "a float past the no-bound sentinel" "\[optimizer\] clip = 1e307 is out of range; allowed: >= 0, at most 1e\+300" \
	-c "$tiny" --set optimizer.clip=1e307

# --- 10. plugins that report absurd sizes or broken descriptors -------------
for p in bad_meta wild_descriptor endless_list ctor_marker; do
	mkdir -p "$tmp/$p" && cp "$TEST_PLUGIN_DIR/$p.so" "$tmp/$p/"
done
bad() { # FIELD REGEX
	expect_error "a layer reporting an absurd $1" "$2" -c "$tiny" --plugin-dir "$tmp/bad_meta" \
		--set "layer relu1.type=bad_meta" --set "layer relu1.field=$1" --set run.steps=1
}
bad saved "layer relu1 \(bad_meta\) reports saved_bytes = 9223372036854775807 per sample, over 1 PiB: its meta is broken; fix the plugin"
bad scratch "layer relu1 \(bad_meta\) reports scratch_bytes = 18446744073709551608, over 1 PiB"
bad shape "layer relu1 \(bad_meta\) reports the output shape \[1099511627776,1099511627776\]: a dimension below 1, or over 1 PiB"
bad param "layer relu1 \(bad_meta\): parameter weight has the shape \[1073741824,1073741824,1073741824\]"
# a wild pointer in the descriptor crashes; the line names the file
# (dash may add its own "Segmentation fault" line to the file: not ours)
"$PIPEHOST" -c "$tiny" --plugin-dir "$tmp/wild_descriptor" --plan >/dev/null 2>"$tmp/err.raw"
rc=$?
grep -v "^Segmentation fault" "$tmp/err.raw" >"$tmp/err"
if [ "$rc" -ne 0 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] &&
	grep -q "^pipehost: plugin $tmp/wild_descriptor/wild_descriptor.so crashed while being loaded" "$tmp/err"; then
	ok "a descriptor with a wild pointer: exit $rc, $(cat "$tmp/err")"
else
	not_ok "wild descriptor: exit $rc, $(cat "$tmp/err")"
fi
expect_error "a descriptor list without its NULL" "plugin $tmp/endless_list/endless_list.so: its schedule list has over 1024 entries" \
	-c "$tiny" --plugin-dir "$tmp/endless_list" --plan
mkdir -p "$tmp/empty" && : >"$tmp/empty/empty.so"
expect_error "an empty .so" "plugin $tmp/empty/empty.so is an empty file, not a shared library; rebuild it or remove it" \
	-c "$tiny" --plugin-dir "$tmp/empty" --plan

# --- 13. plugin trust: the real path and every directory above it -----------
relu="$(echo "$PIPEHOST_PLUGIN_PATH" | cut -d: -f1)/relu.so"
mkdir -p "$tmp/ww" "$tmp/link" && cp "$relu" "$tmp/ww/" && chmod 777 "$tmp/ww" && ln -s "$tmp/ww/relu.so" "$tmp/link/relu.so"
expect_error "a symlink to a .so in a world-writable directory" \
	"plugin file $tmp/link/relu.so: the directory $tmp/ww is writable by other users; fix it with chmod go-w" \
	-c "$tiny" --plugin-dir "$tmp/link" --plan
mkdir -p "$tmp/ww2" "$tmp/link2" && cp "$relu" "$tmp/ww2/" && chmod o+w "$tmp/ww2/relu.so" &&
	ln -s "$tmp/ww2/relu.so" "$tmp/link2/relu.so"
expect_error "a symlink to a world-writable .so" \
	"plugin file $tmp/link2/relu.so: its real path $tmp/ww2/relu.so is writable by other users; fix it with chmod go-w" \
	-c "$tiny" --plugin-dir "$tmp/link2" --plan
mkdir -p "$tmp/par/sub" && cp "$relu" "$tmp/par/sub/" && chmod 777 "$tmp/par"
expect_error "a plugin directory under a world-writable one" \
	"plugin directory $tmp/par/sub: the directory $tmp/par is writable by other users; fix it with chmod go-w $tmp/par" \
	-c "$tiny" --plugin-dir "$tmp/par/sub" --plan
if [ "$(id -u)" -eq 0 ]; then
	mkdir -p "$tmp/theirs" && cp "$relu" "$tmp/theirs/" && chown 65534 "$tmp/theirs/relu.so"
	expect_error "a .so owned by another user" \
		"plugin file $tmp/theirs/relu.so is owned by another user; give it to yourself or root \(chown\)" \
		-c "$tiny" --plugin-dir "$tmp/theirs" --plan
else
	echo "# not root: cannot give a file to another user; ownership case skipped"
fi

# only the plugins the INI needs are opened: ctor_marker's constructor
# writes a file when it is dlopen'ed
mark="$tmp/mark"
PH_TEST_CTOR_MARK="$mark" PIPEHOST_PLUGIN_PATH="$tmp/ctor_marker:$PIPEHOST_PLUGIN_PATH" \
	"$PIPEHOST" -c "$tiny" --set run.steps=2 >"$tmp/out" 2>&1
if [ ! -e "$mark" ] && grep -q "trained 2 steps" "$tmp/out"; then
	ok "a .so on the plugin path that the INI does not name is never dlopen'ed"
else
	not_ok "ctor_marker was loaded for a run that does not use it: $(tail -1 "$tmp/out")"
fi
PH_TEST_CTOR_MARK="$mark" PIPEHOST_PLUGIN_PATH="$tmp/ctor_marker:$PIPEHOST_PLUGIN_PATH" \
	"$PIPEHOST" -c "$tiny" --plan --set schedule.type=marker_schedule >"$tmp/out" 2>&1
if [ -e "$mark" ] && grep -q "marker_schedule: generates nothing" "$tmp/out"; then
	ok "the plugin the INI names is found on the path and loaded"
else
	not_ok "schedule = marker_schedule: $(tail -1 "$tmp/out")"
fi
rm -f "$mark"
PH_TEST_CTOR_MARK="$mark" PIPEHOST_PLUGIN_PATH="$tmp/ctor_marker:$PIPEHOST_PLUGIN_PATH" \
	"$PIPEHOST" --list-plugins >"$tmp/out" 2>&1
if [ -e "$mark" ] && grep -q "marker_schedule" "$tmp/out"; then
	ok "--list-plugins still loads every .so"
else
	not_ok "--list-plugins: $(tail -1 "$tmp/out")"
fi

# --- 12. SIGTERM during a long evaluation ----------------------------------
# 100000 test samples through 32 filters: seconds of evaluation after step
# 32; the metrics line of step 32 is written just before it starts
rm -rf "$tmp/ev" "$tmp/ev.jsonl"
"$PIPEHOST" -c "$tiny" --set run.steps=64 --set run.eval=yes --set data.test_samples=100000 \
	--set "layer conv1.filters=32" --set "checkpoint.dir=$tmp/ev" --set run.log_every=1 \
	--set "run.metrics=$tmp/ev.jsonl" >"$tmp/ev.out" 2>"$tmp/ev.err" &
pid=$!
i=0
while ! grep -q '"step":32,' "$tmp/ev.jsonl" 2>/dev/null && [ $i -lt 600 ]; do sleep 0.05; i=$((i + 1)); done
kill -TERM "$pid"
wait "$pid"
rc=$?
if [ "$rc" -eq 143 ] && ! grep -q "test loss" "$tmp/ev.out" &&
	grep -q "^interrupted at step 32: checkpoint written to $tmp/ev/step-00000032" "$tmp/ev.out" &&
	[ -f "$tmp/ev/step-00000032/state.json" ]; then
	ok "SIGTERM during evaluation: it stops at once, checkpoint at step 32, exit 143"
else
	not_ok "SIGTERM during evaluation: exit $rc, $(grep -E 'test loss|interrupted' "$tmp/ev.out") $(cat "$tmp/ev.err")"
fi
finish
