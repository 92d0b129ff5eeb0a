#!/bin/sh
# SPDX-License-Identifier: MIT
# A tied weight (`tie =`) is stored once: --save-weights and checkpoints
# leave the copies out and name them in __metadata__ "tied"
# ("b.weight=a.weight,c.weight=a.weight"); [run] init and resume fill the
# copies from their source, and a file written before, with every copy
# stored, still loads to the same bits.  python3 rewrites the files.
. "$top_srcdir/tests/lib.sh"
if ! command -v python3 >/dev/null 2>&1; then
	echo "SKIP: no python3 to rewrite safetensors files"
	exit 77
fi
tied="$fixtures/tied3.ini"
header() { head -c $((8 + $(od -An -tu8 -N8 "$1" | tr -d ' '))) "$1" | tail -c +9; }

"$PIPEHOST" -c "$tied" --save-weights "$tmp/w.st" >"$tmp/out" 2>&1 || not_ok "tied3 run failed: $(tail -2 "$tmp/out")"
h=$(header "$tmp/w.st")
case $h in
*'"b.weight"'* | *'"c.weight"'*) not_ok "--save-weights stores the tied copies: $h" ;;
*'"tied":"b.weight=a.weight,c.weight=a.weight"'*) ok "--save-weights stores a.weight once, the copies named in \"tied\"" ;;
*) not_ok "--save-weights: no \"tied\" metadata in $h" ;;
esac
# the line counts the file's tensors, the copies apart (it counted them
# in: 33 for a file of 32, 2026-12-07)
entries=$(printf '%s' "$h" | grep -o '"dtype"' | wc -l)
grep -q "^weights written to $tmp/w.st ($entries tensors, and 2 tied copies named in its metadata)$" "$tmp/out" &&
	ok "the written line counts the $entries tensors in the file and the 2 tied copies" ||
	not_ok "written line: $(grep 'weights written' "$tmp/out"), the file holds $entries"

# the file as a pipehost before wrote it: every copy stored in full
python3 - "$tmp/w.st" "$tmp/dup.st" "$tmp/untied.st" <<'PY'
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
hdr = json.loads(raw[8:8 + n]); data = raw[8 + n:]
def write(path, h, d):
    s = json.dumps(h, separators=(",", ":")).encode()
    s += b" " * (-len(s) % 8)
    open(path, "wb").write(struct.pack("<Q", len(s)) + s + d)
a = hdr["a.weight"]; b0, b1 = a["data_offsets"]
dup = dict(hdr); d = data
for copy in ("b.weight", "c.weight"):
    dup[copy] = {"dtype": "F32", "shape": a["shape"], "data_offsets": [len(d), len(d) + b1 - b0]}
    d += data[b0:b1]
del dup["__metadata__"]["tied"]
write(sys.argv[2], dup, d)
untied = dict(hdr); untied["__metadata__"] = {k: v for k, v in hdr["__metadata__"].items() if k != "tied"}
write(sys.argv[3], untied, data)
PY
if "$PIPEHOST" -c "$tied" --set "run.init=$tmp/w.st" --save-weights "$tmp/from-new.st" >"$tmp/new.out" 2>&1 &&
	"$PIPEHOST" -c "$tied" --set "run.init=$tmp/dup.st" --save-weights "$tmp/from-dup.st" >"$tmp/dup.out" 2>&1 &&
	cmp -s "$tmp/from-new.st" "$tmp/from-dup.st"; then
	ok "[run] init from the file with a.weight once trains to the same bits as from one with every copy"
else
	not_ok "[run] init: $(tail -1 "$tmp/new.out") / $(tail -1 "$tmp/dup.out")"
fi
expect_error "a copy left out without \"tied\" metadata" \
	"^pipehost: $tmp/untied.st: tensor b.weight missing; was the file written for another model\?$" \
	-c "$tied" --set "run.init=$tmp/untied.st"

# checkpoints: stored once, resumed bit for bit
"$PIPEHOST" -c "$tied" --set checkpoint.dir="$tmp/ck" --set checkpoint.every=5 --set checkpoint.keep=2 >/dev/null 2>&1
ckw=$(ls "$tmp"/ck/step-*5/weights.safetensors 2>/dev/null | head -1)
case $(header "$ckw" 2>/dev/null) in
*'"tied":"b.weight=a.weight,c.weight=a.weight"'*) ok "a checkpoint stores a.weight once" ;;
*) not_ok "checkpoint $ckw: $(header "$ckw" 2>/dev/null | head -c 300)" ;;
esac
if "$PIPEHOST" -c "$tied" --resume "${ckw%/*}" --save-weights "$tmp/resumed.st" >"$tmp/res.out" 2>&1 &&
	cmp -s "$tmp/w.st" "$tmp/resumed.st"; then
	ok "resuming from step 5 gives the same bits as the run without a break"
else
	not_ok "resume: $(tail -2 "$tmp/res.out")"
fi
finish
