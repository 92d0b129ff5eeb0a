#!/bin/sh
# SPDX-License-Identifier: MIT
# Data people already have: .npy arrays ([data] source = npy) and token
# files as nanoGPT and llm.c write them ([data] source = tokens).  Each
# trains (the loss falls); bad files are one line naming the file.  The
# files are written here with printf: no numpy needed.
. "$top_srcdir/tests/lib.sh"
tiny="$fixtures/tiny.ini"
lm="$fixtures/tiny-lm.ini"

# octal escapes of the bytes awk's program prints, one number a line
bytes() { printf "$(awk "BEGIN { $1 }" | awk '{ printf "\\%03o", $1 % 256 }')"; }

# npy FILE DESCR SHAPE: a version 1.0 header, padded to 64 bytes as numpy does
npy() { npy_dict "$1" "{'descr': '$2', 'fortran_order': ${4:-False}, 'shape': $3, }"; }
# npy_dict FILE DICT: the same with the header's dict as given
npy_dict() {
	dict=$2
	hl=$((${#dict} + 1))
	pad=$(((64 - (10 + hl) % 64) % 64))
	hl=$((hl + pad))
	{
		printf '\223NUMPY\001\000'
		printf "\\$(printf %03o $((hl % 256)))\\$(printf %03o $((hl / 256)))"
		printf '%s%*s\n' "$dict" "$pad" ""
	} >"$1"
}

# n 1x8x8 uint8 images: class c (i mod 4) lights row pairs 2c, 2c+1, with noise
images() { bytes "for (i = 0; i < $1; i++) for (j = 0; j < 64; j++) print (int(j / 16) == i % 4 ? 200 : 20) + (i * 7 + j * 13) % 30"; }
labels() { bytes "for (i = 0; i < $1; i++) print i % 4"; }
npy "$tmp/tx.npy" '|u1' '(256, 1, 8, 8)'; images 256 >>"$tmp/tx.npy"
npy "$tmp/tl.npy" '|u1' '(256,)'; labels 256 >>"$tmp/tl.npy"
npy "$tmp/vx.npy" '|u1' '(64, 1, 8, 8)'; images 64 >>"$tmp/vx.npy"
npy "$tmp/vl.npy" '|u1' '(64,)'; labels 64 >>"$tmp/vl.npy"
set -- --set data.source=npy --set "data.train_images=$tmp/tx.npy" --set "data.train_labels=$tmp/tl.npy" \
	--set "data.test_images=$tmp/vx.npy" --set "data.test_labels=$tmp/vl.npy"
if "$PIPEHOST" -c "$tiny" --plan=json "$@" >"$tmp/plan.json" 2>"$tmp/err" &&
	tr -d ' \t\n' <"$tmp/plan.json" | grep -qF '"input":[1,8,8]'; then
	ok "npy: --plan takes the input [1,8,8] from train_images' header"
else
	not_ok "npy: --plan: $(head -c 300 "$tmp/err")"
fi
if "$PIPEHOST" -c "$tiny" "$@" --set run.metrics="$tmp/m.jsonl" --set run.log_every=1 --set run.eval=yes \
	>"$tmp/out" 2>&1; then
	first=$(sed -n 's/.*"step":1,.*"loss":\([0-9.]*\).*/\1/p' "$tmp/m.jsonl")
	last=$(sed -n 's/.*"step":20,.*"loss":\([0-9.]*\).*/\1/p' "$tmp/m.jsonl")
	if [ -n "$first" ] && [ -n "$last" ] && awk "BEGIN{exit !($last < $first - 0.5)}" &&
		grep -q "test accuracy .* on 64 samples" "$tmp/out"; then
		ok "npy: trains 20 steps from uint8 .npy files, loss $first -> $last; $(grep -o 'test accuracy.*' "$tmp/out")"
	else
		not_ok "npy: loss did not fall: '$first' -> '$last'; $(tail -2 "$tmp/out")"
	fi
else
	not_ok "npy run failed: $(tail -3 "$tmp/out")"
fi
# never evaluated: the test files are not needed (named, they are still read)
if "$PIPEHOST" -c "$tiny" --set data.source=npy --set "data.train_images=$tmp/tx.npy" \
	--set "data.train_labels=$tmp/tl.npy" --set run.eval=no --set run.steps=2 >"$tmp/out" 2>&1 &&
	! grep -q "test accuracy" "$tmp/out"; then
	ok "npy: eval = no trains without test_images and test_labels"
else
	not_ok "npy: eval = no without test files: $(tail -2 "$tmp/out")"
fi
expect_error "npy: eval = no, test_labels named without test_images" \
	"^pipehost: npy: \[data\] test_images is not set; give the .npy file$" \
	-c "$tiny" --set data.source=npy --set "data.train_images=$tmp/tx.npy" --set "data.train_labels=$tmp/tl.npy" \
	--set "data.test_labels=$tmp/vl.npy" --set run.eval=no --set run.steps=2
expect_error "npy: eval = yes without test files" \
	"^pipehost: npy: \[data\] test_images is not set; give the .npy file$" \
	-c "$tiny" --set data.source=npy --set "data.train_images=$tmp/tx.npy" --set "data.train_labels=$tmp/tl.npy" \
	--set run.eval=yes --set run.steps=2
npy "$tmp/fort.npy" '|u1' '(256, 1, 8, 8)' True; images 256 >>"$tmp/fort.npy"
npy "$tmp/short.npy" '|u1' '(256,)'; labels 255 >>"$tmp/short.npy"
mkfifo "$tmp/fifo.npy"
expect_error "npy: Fortran order" "^pipehost: npy: $tmp/fort.npy is in Fortran order; save numpy.ascontiguousarray" \
	-c "$tiny" "$@" --set "data.train_images=$tmp/fort.npy"
expect_error "npy: truncated labels" "^pipehost: npy: $tmp/short.npy is truncated: its shape needs" \
	-c "$tiny" "$@" --set "data.train_labels=$tmp/short.npy"
expect_error "npy: labels of another set" "^pipehost: npy: $tmp/tx.npy has 256 samples but $tmp/vl.npy has 64 labels" \
	-c "$tiny" "$@" --set "data.train_labels=$tmp/vl.npy"
expect_error "npy: a FIFO is refused before any read" "^pipehost: npy: $tmp/fifo.npy \(train_images\) is not a regular file" \
	-c "$tiny" "$@" --set "data.train_images=$tmp/fifo.npy"
expect_error "npy: no files given" "^pipehost: npy: \[data\] train_images is not set" -c "$tiny" --set data.source=npy
# broken headers, each as train_images (its header is read first, for the plan)
bad_npy() { # DESC FILE REGEX ARGS...: refused naming the file
	d=$1 f=$2 r=$3
	shift 3
	expect_error "npy: $d" "^pipehost: npy: $tmp/$f$r" -c "$tiny" "$@" --set "data.train_images=$tmp/$f"
}
# headers numpy reads and writes as Python literals: a tab after a colon
# (once "is in Fortran order") and Python 2's 256L (once "unreadable shape")
npy_dict "$tmp/tab.npy" "{'descr':	'|u1', 'fortran_order':	False, 'shape': (256L,	1L, 8l, 8L	), }"; images 256 >>"$tmp/tab.npy"
if "$PIPEHOST" -c "$tiny" "$@" --set "data.train_images=$tmp/tab.npy" --plan >/dev/null 2>"$tmp/err"; then
	ok "npy: a header with tabs and Python 2's 256L, as numpy reads it"
else
	not_ok "npy: tabs and 256L: $(cat "$tmp/err")"
fi
npy "$tmp/fo0.npy" '|u1' '(256, 1, 8, 8)' 0; images 256 >>"$tmp/fo0.npy"
bad_npy "fortran_order: 0 (not a bool)" fo0.npy ": fortran_order is neither True nor False; the file is corrupt$" "$@"
printf '\223NUMPY\001' >"$tmp/magcut.npy"
bad_npy "a file cut inside the magic" magcut.npy " is truncated: 7 bytes, inside the .npy magic and version$" "$@"
{ printf '\223NUMPY\001\001'; tail -c +9 "$tmp/tx.npy"; } >"$tmp/v11.npy"
bad_npy "version 1.1" v11.npy " is .npy format version 1.1; numpy writes 1.0, 2.0 and 3.0: save it again with numpy.save$" "$@"
printf '\223NUMPY\002\000\100\000' >"$tmp/v2cut.npy"
bad_npy "a 2.0 header cut inside its length" v2cut.npy ": header cut short; the file is truncated$" "$@"
printf '\223NUMPY\002\000\377\377\377\177' >"$tmp/hlen.npy"
bad_npy "a header length of 2 GiB" hlen.npy ": header of 2147483647 bytes; the file is corrupt$" "$@"
printf "\\223NUMPY\\001\\000\\100\\000{'descr': '|u1'" >"$tmp/hcut.npy"
bad_npy "a header cut short" hcut.npy ": header cut short; the file is truncated$" "$@"
npy "$tmp/nodescr.npy" '|u1' '(4, 1, 2, 2)' && sed -i "s/'descr'/'dtype'/" "$tmp/nodescr.npy"
bad_npy "a header without descr" nodescr.npy ": header lacks 'descr'; the file is corrupt$" "$@"
npy "$tmp/word.npy" 'float32' '(4, 1, 2, 2)'
bad_npy "a dtype written as a word" word.npy " has dtype 'float32'; use float32, uint8, int32 or int64 \('<f4', '\|u1', '<i4', '<i8'\)$" "$@"
npy "$tmp/shape.npy" '|u1' '(4, x, 2)'
bad_npy "a shape that is no number" shape.npy ": unreadable shape; the file is corrupt$" "$@"
npy "$tmp/dims.npy" '|u1' '(1, 1, 1, 1, 1, 1, 1)'
bad_npy "7 dimensions" dims.npy " has more than 5 dimensions; reshape it$" "$@"
npy "$tmp/huge.npy" '|u1' '(100000, 100000, 100000)'
bad_npy "10^15 values (refused from the header)" huge.npy " holds more than 100000000 values; use a smaller set$" "$@"
npy "$tmp/none.npy" '|u1' '(0, 1, 8, 8)'
bad_npy "no samples" none.npy " holds no samples$" "$@"
bad_npy "labels given as the inputs" tl.npy " \(train_images\) must be \[N, \.\.\.\] inputs; it has 1 dimension\(s\)$" "$@"
# float32 inputs, 4 samples of 1x2x2, all 0.5 but input 2 of sample 1 (element 6): NaN
npy "$tmp/nan.npy" '<f4' '(4, 1, 2, 2)'
bytes "for (i = 0; i < 16; i++) { if (i == 6) { print 0; print 0; print 192; print 127 } else { print 0; print 0; print 0; print 63 } }" >>"$tmp/nan.npy"
npy "$tmp/nanl.npy" '|u1' '(4,)'; labels 4 >>"$tmp/nanl.npy"
npy "$tmp/fin.npy" '<f4' '(4, 1, 2, 2)'
bytes "for (i = 0; i < 16; i++) { print 0; print 0; print 0; print 63 }" >>"$tmp/fin.npy"
expect_error "npy: a NaN input is named, not left to the loss" \
	"^pipehost: npy: $tmp/nan.npy \(train_images\): input 2 of sample 1 is NaN; the inputs must be finite" \
	-c "$tiny" "$@" --set "data.train_images=$tmp/nan.npy" --set "data.train_labels=$tmp/nanl.npy" \
	--set "data.test_images=$tmp/fin.npy" --set "data.test_labels=$tmp/nanl.npy" --set run.batch=4
# the whole dtype is quoted, however long, not cut after a few characters
npy_dict "$tmp/rec.npy" "{'descr': [('a', '<f4'), ('b', '<i4')], 'fortran_order': False, 'shape': (4,), }"
bad_npy "a structured dtype" rec.npy " has dtype \[\('a', '<f4'\), \('b', '<i4'\)\]; use float32, uint8, int32 or int64" "$@"
npy "$tmp/be.npy" '>f4' '(4, 1, 2, 2)'
bad_npy "big-endian" be.npy " is big-endian \('>f4'\); save it as little-endian" "$@"

# A label past the model's classes is refused when the data load, naming
# the file, the label and its place, the model's count and the key that
# sets it, before step 1 and before the checkpoint directory is made: a
# batch that happens to hold it would have stopped the run later.
npy "$tmp/l99.npy" '|u1' '(256,)'
bytes "for (i = 0; i < 256; i++) print i == 50 ? 99 : i % 4" >>"$tmp/l99.npy"
expect_error "npy: a label past the model's classes, at load" \
	"^pipehost: npy: $tmp/l99.npy \(train_labels\): label 99 at index 50 \(training sample 50\) is past the model's 10 classes \(\[layer fc2\] units\); give labels below 10 or raise it\$" \
	-c "$tiny" "$@" --set "data.train_labels=$tmp/l99.npy" --set run.steps=2 --set "checkpoint.dir=$tmp/ck99" \
	--set checkpoint.every=1
if [ -e "$tmp/ck99" ]; then not_ok "npy: the checkpoint directory was made before the refusal"; else
	ok "npy: nothing written before the refusal (no $tmp/ck99)"; fi
expect_error "npy: a test label past the model's classes, when the run evaluates" \
	"^pipehost: npy: $tmp/l99.npy \(test_labels\): label 99 at index 50 \(test sample 50\) is past the model's 10 classes" \
	-c "$tiny" "$@" --set "data.test_images=$tmp/tx.npy" --set "data.test_labels=$tmp/l99.npy" --set run.steps=2 \
	--set run.eval=yes
if "$PIPEHOST" -c "$tiny" "$@" --set "data.test_images=$tmp/tx.npy" --set "data.test_labels=$tmp/l99.npy" \
	--set run.steps=2 --set run.eval=no >"$tmp/out" 2>&1; then
	ok "npy: test labels a run never evaluates (eval = no) are not held against it"
else
	not_ok "npy: eval = no, a bad test label: $(tail -2 "$tmp/out")"
fi

# tokens: a sequence of period 7 over ids 100..106 (vocab 256), as
# nanoGPT's train.bin (raw uint16) and as llm.c's (its header, then uint16)
toks() { bytes "for (i = 0; i < $1; i++) { print 100 + (i * 3) % 7; print 0 }"; }
toks 4000 >"$tmp/train.bin"
toks 600 >"$tmp/val.bin"
{
	bytes "print 136; print 216; print 52; print 1; print 1; print 0; print 0; print 0; print 184; print 11; print 0; print 0"
	head -c 1012 /dev/zero
	toks 3000
} >"$tmp/llmc.bin"
set -- --set data.source=tokens --set data.vocab_size=256 --set run.metrics="$tmp/t.jsonl" --set run.log_every=1
for f in "train.bin:--set data.test_tokens=$tmp/val.bin" "llmc.bin:"; do
	file=${f%%:*} more=${f#*:}
	rm -f "$tmp/t.jsonl"
	if "$PIPEHOST" -c "$lm" "$@" --set "data.tokens=$tmp/$file" $more --set run.eval=yes >"$tmp/out" 2>&1; then
		first=$(sed -n 's/.*"step":1,.*"loss":\([0-9.]*\).*/\1/p' "$tmp/t.jsonl")
		last=$(sed -n 's/.*"step":20,.*"loss":\([0-9.]*\).*/\1/p' "$tmp/t.jsonl")
		if [ -n "$first" ] && [ -n "$last" ] && awk "BEGIN{exit !($last < $first - 0.5)}"; then
			ok "tokens: a tiny LM trains 20 steps on $file, loss $first -> $last; $(grep -o 'test loss.*' "$tmp/out" | head -1)"
		else
			not_ok "tokens ($file): loss did not fall: '$first' -> '$last'"
		fi
	else
		not_ok "tokens ($file) run failed: $(tail -3 "$tmp/out")"
	fi
done
{ toks 50; bytes "print 44; print 1"; toks 50; } >"$tmp/big.bin"
head -c 3001 "$tmp/train.bin" >"$tmp/odd.bin"
head -c 2000 "$tmp/llmc.bin" >"$tmp/cut.bin"
expect_error "tokens: an id past the vocabulary" \
	"^pipehost: tokens: $tmp/big.bin: token 300 at position 50 is not below vocab_size 256; set \[data\] vocab_size" \
	-c "$lm" "$@" --set "data.tokens=$tmp/big.bin"
expect_error "tokens: a cut raw file" "^pipehost: tokens: $tmp/odd.bin is truncated: 3001 bytes is not a whole number of uint16 ids" \
	-c "$lm" "$@" --set "data.tokens=$tmp/odd.bin"
expect_error "tokens: a cut llm.c file" "^pipehost: tokens: $tmp/cut.bin is truncated: its header says 3000 tokens" \
	-c "$lm" "$@" --set "data.tokens=$tmp/cut.bin"
expect_error "tokens: missing file" "^pipehost: tokens: $tmp/none.bin not found" -c "$lm" "$@" --set "data.tokens=$tmp/none.bin"
# uint16 ids read as uint32: the width is named, not vocab_size
expect_error "tokens: uint16 ids read as uint32" \
	"^pipehost: tokens: $tmp/train.bin: token 6750308 at position 0 is not below vocab_size 50257, and most are not, but read as uint16 every id is: set \[data\] token_type = uint16\$" \
	-c "$lm" "$@" --set "data.tokens=$tmp/train.bin" --set data.token_type=uint32 --set data.vocab_size=50257
# An id below vocab_size (50257) but past the model's 256: refused at load,
# with its place in the file, before step 1 and before any checkpoint.
{ toks 3000; bytes "print 44; print 1"; toks 999; } >"$tmp/rare.bin"
expect_error "tokens: an id past the model's vocabulary, at load" \
	"^pipehost: tokens: $tmp/rare.bin: id 300 at token 3000 \(training sample 187, position 8\) is past the model's 256 ids \(\[layer embed\] vocab, \[layer head\] units\); give ids below 256 or raise both\$" \
	-c "$lm" "$@" --set "data.tokens=$tmp/rare.bin" --set data.vocab_size=50257 --set run.steps=2 \
	--set "checkpoint.dir=$tmp/ckrare" --set checkpoint.every=1
if [ -e "$tmp/ckrare" ]; then not_ok "tokens: the checkpoint directory was made before the refusal"; else
	ok "tokens: nothing written before the refusal (no $tmp/ckrare)"; fi
# a BPE vocabulary larger than the embedding's: the same check, on its ids
awk 'BEGIN { for (i = 0; i < 300; i++) print "the quick brown fox jumps over the lazy dog " i }' >"$tmp/fox.txt"
if "$top_builddir/tests/bpe-tool" train 60 "$tmp/fox.txt" "$tmp" >"$tmp/bpe.out" 2>&1; then
	expect_error "text: BPE ids past the model's vocabulary, at load" \
		"^pipehost: text \(bpe of \[data\] vocab\): $tmp/fox.txt: id [0-9]+ at token [0-9]+ \(training sample [0-9]+, position [0-9]+\) is past the model's 256 ids" \
		-c "$lm" --set "data.path=$tmp/fox.txt" --set data.tokenizer=bpe --set "data.vocab=$tmp/vocab.json" \
		--set "data.merges=$tmp/merges.txt" --set run.steps=2
else
	not_ok "bpe-tool train: $(cat "$tmp/bpe.out")"
fi
truncate -s 500M "$tmp/huge.bin"
expect_error "tokens: 500 MB (sparse), past 10^8 tokens" \
	"^pipehost: tokens: $tmp/huge.bin holds more than 100000000 tokens; use a smaller file$" \
	-c "$lm" "$@" --set "data.tokens=$tmp/huge.bin"
rm -f "$tmp/huge.bin"
# --- a read error: the system's, named, not the file's format --------------
# Each file's first read fails with EIO (the LD_PRELOAD shim
# tests/faultfs.c): one line naming the error and what to do; it once read
# "not a .npy file", "header cut short", or "error reading X" with no cause.
if preload_shim faultfs; then
	mkdir -p "$tmp/eio"
	cp "$tmp/tx.npy" "$tmp/tl.npy" "$tmp/train.bin" "$tmp/eio/"
	eio() { # DESC ARGS...
		desc=$1
		shift
		expect_fault "$desc, EIO on the first read" "$tmp/eio" readeio 1 \
			"Input/output error; check the disk and run again" "" "$@" --set run.steps=2
	}
	eio "npy" -c "$tiny" --set data.source=npy --set "data.train_images=$tmp/eio/tx.npy" \
		--set "data.train_labels=$tmp/eio/tl.npy" --set run.eval=no
	eio "tokens" -c "$lm" --set data.source=tokens --set data.vocab_size=256 --set "data.tokens=$tmp/eio/train.bin" \
		--set run.eval=no
fi
finish
