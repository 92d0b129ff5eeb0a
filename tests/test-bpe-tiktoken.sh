#!/bin/sh
# SPDX-License-Identifier: MIT
# core/bpe.c with GPT-2's own vocabulary: tests/reference/bpe_tiktoken.py
# writes tiktoken's r50k_base (GPT-2's tokenizer) out as vocab.json and
# merges.txt, and tests/bpe-tool's ids must equal tiktoken's on the
# fortunes corpus and on 40 random multilingual texts.  Then a tiny GPT
# over GPT-2's 50,257 ids trains on the corpus twice, through the text
# source with tokenizer = bpe and through the tokens source reading
# tiktoken's ids as an llm.c .bin file: the weights must be the same
# bytes.  Skipped (77) where $PH_REFERENCE_PYTHON (default python3)
# cannot import tiktoken, or tiktoken has no GPT-2 ranks (no cache, no
# network): give a copy of the ranks file as $PH_GPT2_TIKTOKEN
# (tiktoken's r50k_base.tiktoken or openai-whisper's
# whisper/assets/gpt2.tiktoken).  Never required.
. "$top_srcdir/tests/lib.sh"
py=${PH_REFERENCE_PYTHON:-python3}
if ! "$py" -c "import tiktoken" >/dev/null 2>&1; then
	echo "SKIP: $py cannot import tiktoken (set PH_REFERENCE_PYTHON)"
	exit 77
fi
# the text source's corpus, as tests/test-bpe.sh cuts it
dir=/usr/share/games/fortunes
if [ -d "$dir" ]; then
	for f in $(LC_ALL=C ls "$dir"); do
		p="$dir/$f"
		case "$f" in *.dat) continue ;; esac
		[ -f "$p" ] && [ ! -L "$p" ] && tr -d '\000' <"$p" | cmp -s - "$p" && cat "$p"
	done >"$tmp/fortunes.txt"
	set -- "$tmp/fortunes.txt"
fi
"$py" "$top_srcdir/tests/reference/bpe_tiktoken.py" --tool "$top_builddir/tests/bpe-tool" \
	${PH_GPT2_TIKTOKEN:+--ranks "$PH_GPT2_TIKTOKEN"} --out "$tmp" "$@" >"$tmp/ref.out" 2>"$tmp/ref.err"
rc=$?
if [ $rc -eq 77 ]; then
	cat "$tmp/ref.err"
	exit 77
fi
# its lines, numbered on by ours
grep '^#' "$tmp/ref.out"
while IFS= read -r line; do
	case $line in
	"not ok "*) not_ok "${line#not ok * - }" ;;
	"ok "*) ok "${line#ok * - }" ;;
	esac
done <"$tmp/ref.out"
[ $rc -eq 0 ] || not_ok "bpe_tiktoken.py exited $rc: $(head -c 300 "$tmp/ref.err")"

if [ $rc -eq 0 ] && [ -s "$tmp/tokens.bin" ]; then
	set -- -c "$fixtures/tiny-lm.ini" --set "layer embed.vocab=50257" --set "layer head.units=50257" \
		--set run.steps=3 --set run.threads=1
	"$PIPEHOST" "$@" --set "data.path=$tmp/fortunes.txt" --set data.tokenizer=bpe \
		--set "data.vocab=$tmp/vocab.json" --set "data.merges=$tmp/merges.txt" \
		--save-weights "$tmp/text.st" >"$tmp/text.out" 2>&1
	"$PIPEHOST" "$@" --set data.source=tokens --set "data.tokens=$tmp/tokens.bin" --set data.vocab_size=50257 \
		--save-weights "$tmp/tokens.st" >"$tmp/tokens.out" 2>&1
	if [ -s "$tmp/text.st" ] && cmp -s "$tmp/text.st" "$tmp/tokens.st"; then
		ok "GPT-2's vocabulary: the text source with tokenizer = bpe and tiktoken's ids as an llm.c file train the same weights ($(grep -o 'final loss [0-9.]*' "$tmp/text.out"))"
	else
		not_ok "text + bpe and tiktoken's tokens.bin train different weights: $(tail -1 "$tmp/text.out") / $(tail -1 "$tmp/tokens.out")"
	fi
fi
finish
