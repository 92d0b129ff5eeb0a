#!/bin/sh
# SPDX-License-Identifier: MIT
# core/bpe.c with GPT-2's own vocabulary: tests/reference/bpe_tiktoken.py
# writes tiktoken's r50k_base (GPT-2's tokenizer) out as vocab.json and
# merges.txt, and tests/bpe-tool's ids must equal tiktoken's on the
# fortunes corpus and on 40 random multilingual texts.  Skipped (77)
# where $PH_REFERENCE_PYTHON (default python3) cannot import tiktoken, or
# tiktoken has no GPT-2 ranks (no cache, no network): give a copy of the
# ranks file as $PH_GPT2_TIKTOKEN (tiktoken's r50k_base.tiktoken or
# openai-whisper's whisper/assets/gpt2.tiktoken).  Never required.
: "${PIPEHOST:?run through make check, which sets PIPEHOST}"
py=${PH_REFERENCE_PYTHON:-python3}
if ! "$py" -c "import tiktoken" >/dev/null 2>&1; then
	echo "SKIP: $py cannot import tiktoken (set PH_REFERENCE_PYTHON)"
	exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
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
	${PH_GPT2_TIKTOKEN:+--ranks "$PH_GPT2_TIKTOKEN"} "$@"
