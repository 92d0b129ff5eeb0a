#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""An independent GPT-2 byte-level BPE, to check core/bpe.c against.

It is OpenAI's encoder.py algorithm (bytes_to_unicode, the pre-tokenising
regex run by the `regex` module, the merge loop by rank) in pure Python.
Reads GPT-2's vocab.json + merges.txt and a file, prints one id a line:

    python3 tests/reference/bpe_reference.py vocab.json merges.txt FILE

Bytes that are not UTF-8 are carried through as surrogate escapes, so any
file encodes.  Without the `regex` module it says so and exits 77 (skip).
"""
import json
import sys

try:
    import regex
except ImportError:
    print("SKIP: the Python module `regex` is not installed (pip install regex)", file=sys.stderr)
    sys.exit(77)

PATTERN = regex.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def get_pairs(word):
    return {(word[i], word[i + 1]) for i in range(len(word) - 1)}


class Encoder:
    def __init__(self, vocab_path, merges_path):
        with open(vocab_path, encoding="utf-8") as f:
            self.encoder = json.load(f)
        with open(merges_path, encoding="utf-8") as f:
            lines = f.read().split("\n")
        if lines and lines[0].startswith("#version"):
            lines = lines[1:]
        merges = [tuple(line.split()) for line in lines if line.strip()]
        self.ranks = dict(zip(merges, range(len(merges))))
        self.byte_encoder = bytes_to_unicode()
        self.cache = {}

    def bpe(self, token):
        if token in self.cache:
            return self.cache[token]
        word = tuple(token)
        pairs = get_pairs(word)
        while pairs:
            bigram = min(pairs, key=lambda p: self.ranks.get(p, float("inf")))
            if bigram not in self.ranks:
                break
            first, second = bigram
            new_word = []
            i = 0
            while i < len(word):
                try:
                    j = word.index(first, i)
                except ValueError:
                    new_word.extend(word[i:])
                    break
                new_word.extend(word[i:j])
                i = j
                if word[i] == first and i < len(word) - 1 and word[i + 1] == second:
                    new_word.append(first + second)
                    i += 2
                else:
                    new_word.append(word[i])
                    i += 1
            word = tuple(new_word)
            pairs = get_pairs(word)
        self.cache[token] = word
        return word

    def encode(self, text):
        ids = []
        for chunk in PATTERN.findall(text):
            raw = chunk.encode("utf-8", "surrogateescape")
            ids.extend(self.encoder[t] for t in self.bpe("".join(self.byte_encoder[b] for b in raw)))
        return ids


def main():
    if len(sys.argv) != 4:
        print("usage: bpe_reference.py vocab.json merges.txt FILE", file=sys.stderr)
        return 2
    enc = Encoder(sys.argv[1], sys.argv[2])
    with open(sys.argv[3], "rb") as f:
        text = f.read().decode("utf-8", "surrogateescape")
    sys.stdout.write("".join("%d\n" % i for i in enc.encode(text)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
