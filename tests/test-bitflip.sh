#!/bin/sh
# SPDX-License-Identifier: MIT
# Any one changed byte of a checkpoint is found on load: 100 positions drawn
# with a fixed seed over all its files (manifest.txt, state.json, the two
# safetensors), each byte xor-ed with a nonzero value; each time the resume
# exits 1 with one line naming the damaged checkpoint, never trains on it.
. "$top_srcdir/tests/lib.sh"
tiny="$fixtures/tiny.ini"
flips=${BITFLIP_TRIALS:-100}

"$PIPEHOST" -c "$tiny" --set run.steps=8 --set "checkpoint.dir=$tmp/good" >/dev/null 2>"$tmp/err" ||
	not_ok "base run: $(cat "$tmp/err")"
good="$tmp/good/step-00000008"
files=
for f in manifest.txt state.json weights.safetensors optimizer.safetensors; do
	[ -f "$good/$f" ] && files="$files $f"
done
total=0
for f in $files; do total=$((total + $(wc -c <"$good/$f"))); done

# "FILE OFFSET XOR" lines, from awk's generator under a fixed seed
awk -v n="$flips" -v total="$total" -v sizes="$(for f in $files; do printf '%s:%s ' "$f" "$(wc -c <"$good/$f")"; done)" '
BEGIN {
	srand(20261125)
	k = split(sizes, s, " ")
	for (i = 0; i < n; i++) {
		pos = int(rand() * total)
		x = 1 + int(rand() * 255)
		for (j = 1; j <= k; j++) {
			split(s[j], fs, ":")
			if (pos < fs[2]) { print fs[1], pos, x; break }
			pos -= fs[2]
		}
	}
}' >"$tmp/flips"

bad=
caught=0
per=
while read -r f off x; do
	rm -rf "$tmp/d" && mkdir "$tmp/d" && cp -r "$good" "$tmp/d/"
	b=$(od -An -tu1 -j"$off" -N1 "$good/$f" | tr -d ' ')
	# shellcheck disable=SC2059
	printf "$(printf '\\%03o' $((b ^ x)))" | dd of="$tmp/d/step-00000008/$f" bs=1 seek="$off" conv=notrunc 2>/dev/null
	cmp -s "$good/$f" "$tmp/d/step-00000008/$f" && { bad="$bad [$f@$off unchanged by the flip]"; continue; }
	"$PIPEHOST" -c "$tiny" --set run.steps=8 --resume "$tmp/d" >"$tmp/out" 2>"$tmp/err"
	rc=$?
	lines=$(wc -l <"$tmp/err")
	if [ "$rc" -ne 0 ] && [ "$lines" -eq 1 ] && grep -q "$tmp/d/step-00000008" "$tmp/err" &&
		! grep -q "^resumed" "$tmp/out"; then
		caught=$((caught + 1))
		case " $per " in *" $f "*) ;; *) per="$per $f" ;; esac
	else
		bad="$bad [$f byte $off ^ $x: exit $rc, $lines line(s): $(head -c 300 "$tmp/err")]"
	fi
done <"$tmp/flips"
if [ -z "$bad" ] && [ "$caught" -eq "$flips" ]; then
	ok "$flips flipped bytes (in$per): each one refused on load, one line naming the checkpoint"
else
	not_ok "$caught of $flips caught:$bad"
fi
# one example of each kind, for people reading the log
grep -m1 . "$tmp/err" | sed 's/^/# last: /'
finish
