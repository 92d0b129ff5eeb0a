# GPT-2 in and out: pipehost --generate (docs/gpt2.md).
TESTS += tests/test-generate.sh
EXTRA_DIST += tests/test-generate.sh tests/gpt2.mk
