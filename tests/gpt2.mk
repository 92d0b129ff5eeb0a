# SPDX-License-Identifier: MIT
# GPT-2 in and out: pipehost --generate, tokens/s, Hugging Face GPT-2
# weights (docs/gpt2.md).
TESTS += tests/test-generate.sh tests/test-hf-gpt2.sh tests/test-hf-reference.sh
EXTRA_DIST += tests/test-generate.sh tests/test-hf-gpt2.sh tests/test-hf-reference.sh tests/hf-gpt2-layout.py tests/gpt2.mk
