#!/bin/sh
# SPDX-License-Identifier: MIT
# Corrupted configs and data files from the command line: one clear line on
# stderr, exit 1, nothing trained.  (test-errors.sh has the common config
# mistakes, test-checkpoint.sh the corrupted checkpoints, test-weights.c and
# test-data.c the same faults at the API; docs/corrupted-inputs.md lists all.)
. "$top_srcdir/tests/lib.sh"
tiny="$fixtures/tiny.ini"

# --- configs --------------------------------------------------------------
sed 's/^steps = 20$/steps = twenty/' "$tiny" >"$tmp/type.ini"
line=$(grep -n '^steps = twenty' "$tmp/type.ini" | cut -d: -f1)
expect_error "integer key with text" "$tmp/type.ini:$line: \[run\] steps = twenty is not an integer" -c "$tmp/type.ini"
expect_error "integer past 64 bits" "--set: \[run\] steps = 99999999999999999999999 is out of range \(past 64-bit integers\)" \
	-c "$tiny" --set run.steps=99999999999999999999999
expect_error "float that is not a number" "--set: \[layer drop\] rate = nan is not a number" -c "$tiny" --set "layer drop.rate=nan"
expect_error "boolean that is not one" "--set: \[run\] eval = maybe is not a boolean; use yes or no" -c "$tiny" --set run.eval=maybe
expect_error "choice not offered" "--set: \[optimizer\] type = adam is not one of sgd\|adamw\|lion" -c "$tiny" --set optimizer.type=adam
printf '[run]\nstages = 1\n[run]\nseed = 2\n' >"$tmp/dups.ini"
expect_error "section twice" "$tmp/dups.ini:3: section \[run\] appears twice \(first at line 1\)" -c "$tmp/dups.ini"
# spaces inside the brackets: [ run ] is [run] (its keys were once
# dropped unread, the run going on with the defaults)
sed 's/^\[run\]/[  run ]/' "$tiny" >"$tmp/spaced.ini"
"$PIPEHOST" -c "$tiny" --plan=json >"$tmp/plain.json" 2>&1
if "$PIPEHOST" -c "$tmp/spaced.ini" --plan=json >"$tmp/spaced.json" 2>&1 && grep -q "^\[  run \]" "$tmp/spaced.ini" &&
	cmp -s "$tmp/plain.json" "$tmp/spaced.json"; then
	ok "[  run ] reads as [run]: the same plan"
else
	not_ok "[  run ] is not [run]: $(head -c 300 "$tmp/spaced.json")"
fi
printf '[run]\n[ run ]\n' >"$tmp/dups2.ini"
expect_error "section twice, once with spaces" "$tmp/dups2.ini:2: section \[run\] appears twice \(first at line 1\)" -c "$tmp/dups2.ini"
printf 'seed = 1\n[run]\n' >"$tmp/before.ini"
expect_error "key before any section" "$tmp/before.ini:1: seed = ... comes before any \[section\]" -c "$tmp/before.ini"
printf '[run]\nseed\n' >"$tmp/noeq.ini"
expect_error "line without =" "$tmp/noeq.ini:2: cannot parse this line; expected \[section\] or key = value" -c "$tmp/noeq.ini"
printf '[run\nseed = 1\n' >"$tmp/unclosed.ini"
expect_error "unclosed section header" "$tmp/unclosed.ini:1: cannot parse this line" -c "$tmp/unclosed.ini"
printf '[run]\nseed = 1\000junk\n[layer l]\ntype = softmax_xent\n' >"$tmp/nul.ini"
expect_error "NUL byte inside a line" "$tmp/nul.ini:2: line holds a NUL byte; the config must be a text file" -c "$tmp/nul.ini"
printf '\177ELF\002\001\001\000\000\000\000\000\000\000\000\000\003\000>\000\n' >"$tmp/elf.ini"
expect_error "a binary (ELF header)" "$tmp/elf.ini:1: line holds a NUL byte" -c "$tmp/elf.ini"
: >"$tmp/empty.ini"
expect_error "empty file" "$tmp/empty.ini: the model has no layers; add \[layer NAME\] sections" -c "$tmp/empty.ini"
mkdir -p "$tmp/adir"
expect_error "a directory as the config" "cannot read config $tmp/adir: Is a directory; pass an INI file with -c" -c "$tmp/adir"
expect_error "--set without =" "--set run.steps: expected section.key=value" -c "$tiny" --set run.steps
expect_error "--set without a section" "--set steps=3: expected section.key=value, e.g. run.steps=100" -c "$tiny" --set steps=3
if "$PIPEHOST" --help 2>&1 | grep -q -- "--resume"; then
	expect_error "[checkpoint] every below 0" "--set: \[checkpoint\] every = -1 is out of range; allowed: >= 0" \
		-c "$tiny" --set checkpoint.every=-1
fi

# --- Fashion-MNIST IDX files ------------------------------------------------
# Tiny valid sets: 3 labels, 3 images of 28x28, gzip'ed like Debian's files.
pixels() { head -c $((3 * 784)) /dev/zero | tr '\0' '\100'; }
labels3() { printf '\000\000\010\001\000\000\000\003\001\002\003'; }
images3() { printf '\000\000\010\003\000\000\000\003\000\000\000\034\000\000\000\034'; pixels; }
set_files() { # DIR: valid train and test splits
	mkdir -p "$1"
	for s in train t10k; do
		labels3 | gzip -c >"$1/$s-labels-idx1-ubyte.gz"
		images3 | gzip -c >"$1/$s-images-idx3-ubyte.gz"
	done
}
fm() { expect_error "$1" "$2" -c "$tiny" --set data.source=fashion-mnist --set "data.path=$tmp/fm" \
	--set run.batch=2 --set run.micro_batches=1 --set run.steps=1; }
I="$tmp/fm/train-images-idx3-ubyte.gz" L="$tmp/fm/train-labels-idx1-ubyte.gz"

set_files "$tmp/fm"
if "$PIPEHOST" -c "$tiny" --set data.source=fashion-mnist --set "data.path=$tmp/fm" --set run.batch=2 \
	--set run.micro_batches=1 --set run.steps=1 >"$tmp/out" 2>"$tmp/err"; then
	ok "a valid 3-image set trains (the refusals below are the files' fault)"
else
	not_ok "valid set refused: $(cat "$tmp/err")"
fi
expect_error "data directory missing" "fashion-mnist: $tmp/none/train-images-idx3-ubyte.gz not found; install Debian's dataset-fashion-mnist package" \
	-c "$tiny" --set data.source=fashion-mnist --set "data.path=$tmp/none"
rm -rf "$tmp/fm" && set_files "$tmp/fm" && rm "$L"
fm "labels file missing" "fashion-mnist: $L not found"
rm -rf "$tmp/fm" && set_files "$tmp/fm" && { printf '\000\000\010\001\000\000\000\003\000\000\000\034\000\000\000\034'; pixels; } | gzip -c >"$I"
fm "labels where the images should be (magic)" "fashion-mnist: $I: magic 0x00000801, expected 0x00000803 \(IDX unsigned-byte images\): not an image file"
rm -rf "$tmp/fm" && set_files "$tmp/fm" && images3 | head -c 1000 | gzip -c >"$I"
fm "pixels end early" "fashion-mnist: $I: truncated: expected 2352 bytes of pixels, got 984; reinstall the file"
rm -rf "$tmp/fm" && set_files "$tmp/fm" && { labels3; printf '\004'; } | gzip -c >"$L"
fm "bytes after the count" "fashion-mnist: $L has bytes after the count its header gives: not an IDX file"
rm -rf "$tmp/fm" && set_files "$tmp/fm" && printf '\000\000\010\001\000\000\000\003\001\012\003' | gzip -c >"$L"
fm "label outside 0..9" "fashion-mnist: $L: label 10 at index 1 is outside 0..9: corrupt file"
rm -rf "$tmp/fm" && set_files "$tmp/fm" && printf '\000\000\010\003\000\001\206\240\000\000\047\020\000\000\047\020' | gzip -c >"$I"
fm "absurd sizes in the header" "fashion-mnist: $I: header says 100000 images of 10000x10000, outside 1..100000000 pixels in all: corrupt file"
rm -rf "$tmp/fm" && set_files "$tmp/fm" && printf '\000\000\010\001\000\000\000\002\001\002' | gzip -c >"$L"
fm "image and label counts disagree" "fashion-mnist: $I has 3 images but $L has 2 labels; the two files come from different sets"
rm -rf "$tmp/fm" && set_files "$tmp/fm" && printf '\000\000\010\001' | gzip -c >"$L"
fm "header cut short" "fashion-mnist: $L: truncated: expected 8 bytes of IDX header, got 4; reinstall the file"
# random pixels, so the gzip stream is long enough to cut
rand_images() { printf '\000\000\010\003\000\000\000\003\000\000\000\034\000\000\000\034'; head -c 2352 /dev/urandom; }
rm -rf "$tmp/fm" && set_files "$tmp/fm" && rand_images | gzip -c >"$tmp/full.gz"
size=$(wc -c <"$tmp/full.gz")
head -c $((size - 1000)) "$tmp/full.gz" >"$I"
fm "gzip stream cut in the middle" "fashion-mnist: $I: truncated: expected 2352 bytes of pixels, got [0-9]+; reinstall the file"
head -c $((size - 4)) "$tmp/full.gz" >"$I"
fm "gzip stream cut inside its trailer" "fashion-mnist: $I: truncated: the gzip stream ends before its checksum; reinstall the file"
cp "$tmp/full.gz" "$I" && printf 'x' | dd of="$I" bs=1 seek=$((size - 6)) conv=notrunc 2>/dev/null
fm "gzip checksum wrong" "fashion-mnist: $I: reading IDX header: .*incorrect data check; the file is damaged, reinstall it"
rm -rf "$tmp/fm" && set_files "$tmp/fm" && printf '\037\213\010\000\000\000\000\000\000\003garbage-deflate' >"$L"
fm "gzip header, then garbage" "fashion-mnist: $L: reading IDX header: .*invalid block type; the file is damaged, reinstall it"
rm -rf "$tmp/fm" && set_files "$tmp/fm" && { printf '\000\000\010\003\000\000\000\003\000\000\000\002\000\000\000\002'; head -c 12 /dev/zero; } | gzip -c >"$I"
fm "images of another size (2x2)" "fashion-mnist: $I holds 2x2 images, Fashion-MNIST's are 28x28: another data set"
rm -rf "$tmp/fm" && set_files "$tmp/fm" && rm "$I" && mkdir "$I"
fm "a directory where a file should be" "fashion-mnist: $I is not a regular file; point \[data\] path at the directory holding the .gz files"
rm -rf "$tmp/fm" && set_files "$tmp/fm" && images3 | gzip -c >"$L"
fm "images where the labels should be (magic)" \
	"fashion-mnist: $L: magic 0x00000803, expected 0x00000801 \(IDX unsigned-byte labels\): not a label file$"
# a whole gzip member, then one whose header is good and whose data is not
rm -rf "$tmp/fm" && set_files "$tmp/fm" &&
	{ labels3 | gzip -c; printf '\037\213\010\000\000\000\000\000\000\003garbage-deflate'; } >"$L"
fm "a broken gzip member after the labels" \
	"fashion-mnist: $L: after the last record: invalid block type; the file is damaged, reinstall it$"

# --- text corpora ([data] source = text) -------------------------------------
lm="$fixtures/tiny-lm.ini"
printf 'some text\000and a NUL byte, then more text than one sequence of 16 needs\n' >"$tmp/nul.txt"
expect_error "a text corpus with a NUL byte" "^pipehost: text: $tmp/nul.txt holds NUL bytes: not a text file$" \
	-c "$lm" --set "data.path=$tmp/nul.txt"
printf 'too short' >"$tmp/short.txt"
expect_error "a text corpus shorter than a sequence" \
	"^pipehost: text: $tmp/short.txt has 9 bytes, too few for one training sequence of 16; use more text or a shorter seq_len$" \
	-c "$lm" --set "data.path=$tmp/short.txt"
if [ -r /proc/self/mem ]; then
	expect_error "a text corpus whose read fails" \
		"^pipehost: text: error reading /proc/self/mem: .+; check the file or set \[data\] path to another$" \
		-c "$lm" --set data.path=/proc/self/mem
fi

# --- checkpoints: a named pipe where a file or a step is ----------------------
# open(2) of a FIFO nobody writes blocks for ever: the old code hung on each
# of these (--resume, and a fresh run's claim of the directory), so every
# run is under timeout, and each must end with its one line.
if "$PIPEHOST" --help 2>&1 | grep -q -- "--resume"; then
	"$PIPEHOST" -c "$tiny" --set run.steps=4 --set "checkpoint.dir=$tmp/ck0" --set checkpoint.every=2 >/dev/null 2>"$tmp/err" ||
		not_ok "checkpoints to break: $(cat "$tmp/err")"
	D="$tmp/ck" S="$tmp/ck/step-00000002"
	fifo_in() { # FILE: a copy of step 2 alone, FILE of it a FIFO
		rm -rf "$D" && mkdir "$D" && cp -R "$tmp/ck0/step-00000002" "$D/" && rm -f "$S/$1" && mkfifo "$S/$1"
	}
	for f in manifest.txt state.json; do
		fifo_in $f
		expect_error_t "--resume, $f a FIFO" "^pipehost: $S/$f is a named pipe, not a regular file: damaged checkpoint; resume from another step, or put the step's own file back$" \
			-c "$tiny" --set run.steps=4 --set checkpoint.every=2 --resume "$D"
	done
	for f in weights.safetensors optimizer.safetensors; do
		fifo_in $f
		expect_error_t "--resume, $f a FIFO" "^pipehost: $S/$f: not a regular file but a named pipe; give a safetensors file$" \
			-c "$tiny" --set run.steps=4 --set checkpoint.every=2 --resume "$D"
	done
	fifo_in manifest.txt
	expect_error_t "--resume of the step itself, its manifest a FIFO" "^pipehost: $S/manifest.txt is a named pipe, not a regular file" \
		-c "$tiny" --set run.steps=4 --set checkpoint.every=2 --resume "$S"
	expect_error_t "a fresh run over a step whose manifest is a FIFO" \
		"^pipehost: checkpoint dir $D holds 1 checkpoint\(s\) of another run \(run unknown, newest step-00000002\); resume it with --resume $D" \
		-c "$tiny" --set run.steps=4 --set checkpoint.every=2 --set "checkpoint.dir=$D"
	# (the old code trained, then failed to rename step 3 over it)
	rm -rf "$D" && mkdir "$D" && mkfifo "$D/step-00000003"
	expect_error_t "a FIFO named as a step" "^pipehost: checkpoint dir $D: step-00000003 is a named pipe, not a step directory; remove it, or set another \[checkpoint\] dir$" \
		-c "$tiny" --set run.steps=3 --set checkpoint.every=1 --set "checkpoint.dir=$D"
	# the newest step damaged by a FIFO: passed over, loudly, for the one before
	rm -rf "$D" && cp -R "$tmp/ck0" "$D" && rm "$D/step-00000004/optimizer.safetensors" &&
		mkfifo "$D/step-00000004/optimizer.safetensors"
	if timeout 20 "$PIPEHOST" -c "$tiny" --set run.steps=4 --set checkpoint.every=2 --resume "$D" >"$tmp/out" 2>"$tmp/err" &&
		grep -q "^resumed from $D/step-00000002 at step 2 of 4$" "$tmp/out" && [ "$(wc -l <"$tmp/err")" -eq 1 ] &&
		grep -q "^pipehost: WARNING: checkpoint $D/step-00000004 is damaged: $D/step-00000004/optimizer.safetensors: not a regular file but a named pipe" "$tmp/err" &&
		[ -p "$D/damaged-step-00000004/optimizer.safetensors" ]; then
		ok "a FIFO in the newest step: passed over for the one before, kept aside: $(cat "$tmp/err")"
	else
		not_ok "a FIFO in the newest step: exit $?, $(cat "$tmp/out" "$tmp/err" | tail -n 3)"
	fi
fi
finish
