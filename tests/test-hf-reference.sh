#!/bin/sh
# SPDX-License-Identifier: MIT
# tests/reference/gpt2_hf_logits.py under make check: pipehost's logits of
# a random GPT-2 saved by transformers (F32, BF16, F16) against
# transformers' own, to 1e-4.  Skipped (77) where torch or transformers
# cannot be imported by $PH_REFERENCE_PYTHON (default python3): they are
# never required.
: "${PIPEHOST:?run through make check, which sets PIPEHOST}"
py=${PH_REFERENCE_PYTHON:-python3}
if ! "$py" -c "import torch, transformers" >/dev/null 2>&1; then
	echo "SKIP: $py cannot import torch and transformers (set PH_REFERENCE_PYTHON)"
	exit 77
fi
exec "$py" "$top_srcdir/tests/reference/gpt2_hf_logits.py" --pipehost "$PIPEHOST"
