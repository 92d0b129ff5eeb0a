#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""core/bpe.c with GPT-2's own vocabulary against OpenAI's tiktoken.

tiktoken's `r50k_base` is GPT-2's tokenizer (its ranks file is the token
ids of GPT-2's encoder.json, sha256 306cd27f...).  This script writes it
out as the vocab.json + merges.txt that pipehost reads (each merge found
by merging the token's bytes with the ranks below its own: exactly two
parts must be left), then encodes files with tests/bpe-tool (core/bpe.c)
and with tiktoken, and requires the same ids:

    python3 tests/reference/bpe_tiktoken.py --tool tests/bpe-tool \
        [--ranks gpt2.tiktoken] [--seeds 40] [--out DIR] FILE...

The ranks come from tiktoken's own cache or download
(`tiktoken.get_encoding("r50k_base")`), or from --ranks: a local copy of
the file (tiktoken's r50k_base.tiktoken, or openai-whisper's
whisper/assets/gpt2.tiktoken, the same bytes); tiktoken checks its hash.
Besides FILEs, --seeds random texts (Latin, Greek, Cyrillic, Hebrew,
Arabic, Devanagari, CJK, Hangul, numbers of many scripts, combining marks,
every kind of Unicode space, emoji with joiners, control bytes,
contractions, runs of spaces and newlines) are compared.  --out DIR
keeps vocab.json and merges.txt there, and the first FILE as tiktoken
encodes it in llm.c's token file format (DIR/tokens.bin: 256 int32 of
header, magic 20240520, version 1, the count; then uint16 ids).  Prints one
`ok`/`not ok` line each and exits 1 if any differ; exits 77 (skip) without
tiktoken or the ranks.
"""
import argparse
import hashlib
import os
import random
import shutil
import subprocess
import sys
import tempfile

R50K_URL = "https://openaipublic.blob.core.windows.net/encodings/r50k_base.tiktoken"


def skip(msg):
    print("SKIP: " + msg, file=sys.stderr)
    sys.exit(77)


def merge_of(ranks, token, rank):
    """The pair that made `token`: its bytes merged by the ranks below its own."""
    parts = [bytes([x]) for x in token]
    while True:
        best = None
        for i in range(len(parts) - 1):
            r = ranks.get(parts[i] + parts[i + 1])
            if r is not None and r < rank and (best is None or r < best[0]):
                best = (r, i)
        if best is None:
            return parts
        i = best[1]
        parts[i:i + 2] = [parts[i] + parts[i + 1]]


def write_gpt2_files(enc, outdir):
    import json
    # GPT-2's byte alphabet, from the other reference (tiktoken brings the
    # `regex` module it needs)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from bpe_reference import bytes_to_unicode
    ranks = enc._mergeable_ranks
    u = bytes_to_unicode()
    s = lambda b: "".join(u[x] for x in b)
    vocab = {s(t): r for t, r in ranks.items()}
    vocab.update(enc._special_tokens)
    merges = []
    for t, r in sorted(ranks.items(), key=lambda kv: kv[1]):
        if len(t) == 1:
            continue
        parts = merge_of(ranks, t, r)
        if len(parts) != 2:
            raise SystemExit(f"token {r} is not one merge of lower ranks: {parts}")
        merges.append(s(parts[0]) + " " + s(parts[1]))
    with open(os.path.join(outdir, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(os.path.join(outdir, "merges.txt"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n" + "\n".join(merges) + "\n")
    return len(vocab), len(merges)


POOLS = [
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ", "0123456789", " " * 8, "\n\t\r\x0b\x0c", "'",
    ".,;:!?-_()[]{}\"/\\@#$%^&*+=<>|~`",
    "\u00a0\u0085\u1680\u2000\u2001\u2005\u200a\u2028\u2029\u202f\u205f\u3000\u200b\ufeff",
    "éèêëàâäôöüçñßøåæœÉÀÇŁłŻźđ", "αβγδεζηθικλμνξοπρστυφχψωΑΒΓΔΩάέ",
    "абвгдежзийклмнопрстуфхцчшщъыьэюяАБВЁё", "אבגדהוזחטיכלמנסעפצקרשת", "ابتثجحخدذرزسشصضطظعغفقكلمنهوي",
    "कखगघङचछजझञटठडढणतथदधनपफबभमयरलवशषसह्ािीुूेैोौं", "日本語中文漢字東京大学人口国家", "ひらがなカタカナー",
    "한국어조선말훈민정음", "①②③½¾²³٠١٢٣४५६७௧௨Ⅻⅻ〇", "\u0301\u0308\u0327\u20dd\u0903\u093c",
    "😀😃🙏👍🏽🚀❤️\u200d🔥", "™©®€£¥§¶•…‰′″‹›«»“”‘’—–", "\x00\x01\x1b\x7f", "ǅǈǋʰʲˠ々〻ꜰ",
]
WORDS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "n't", "  ", "   x", " \n", "\n\n"]


def random_text(seed):
    # only characters assigned by Unicode 14 (core/bpe_unicode.h's tables;
    # tiktoken's may be newer)
    rng = random.Random(seed)
    out = []
    for _ in range(rng.randint(1, 400)):
        if rng.random() < 0.15:
            out.append(rng.choice(WORDS))
        else:
            pool = rng.choice(POOLS)
            out.append("".join(rng.choice(pool) for _ in range(rng.randint(1, 8))))
    return "".join(out).encode("utf-8")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", required=True)
    ap.add_argument("--ranks")
    ap.add_argument("--seeds", type=int, default=40)
    ap.add_argument("--out")
    ap.add_argument("files", nargs="*")
    a = ap.parse_args()
    try:
        import tiktoken
    except ImportError:
        skip(f"{sys.executable} cannot import tiktoken (pip install tiktoken)")
    work = tempfile.mkdtemp()
    try:
        if a.ranks:
            # tiktoken's cache: the file under the sha1 of its URL; it checks the hash
            cache = os.path.join(work, "cache")
            os.mkdir(cache)
            shutil.copy(a.ranks, os.path.join(cache, hashlib.sha1(R50K_URL.encode()).hexdigest()))
            os.environ["TIKTOKEN_CACHE_DIR"] = cache
        try:
            enc = tiktoken.get_encoding("r50k_base")
        except Exception as e:  # no cache and no network, or a file with another hash
            skip(f"tiktoken has no r50k_base (GPT-2) ranks: {str(e).splitlines()[0][:200]} (give a copy of the ranks file: --ranks, or PH_GPT2_TIKTOKEN in make check)")
        nv, nm = write_gpt2_files(enc, work)
        print(f"# GPT-2's tokenizer from tiktoken {tiktoken.__version__}: {nv} tokens, {nm} merges")
        vocab, merges = os.path.join(work, "vocab.json"), os.path.join(work, "merges.txt")
        cases = [(f, open(f, "rb").read()) for f in a.files]
        cases += [(f"random text {s}", random_text(s)) for s in range(1, a.seeds + 1)]
        n = failed = 0
        for name, data in cases:
            n += 1
            path = os.path.join(work, "in.txt")
            with open(path, "wb") as f:
                f.write(data)
            want = enc.encode_ordinary(data.decode("utf-8", errors="surrogateescape"))
            p = subprocess.run([a.tool, "encode", vocab, merges, path], capture_output=True)
            got = [int(x) for x in p.stdout.split()] if p.returncode == 0 else None
            if got == want:
                print(f"ok {n} - {name}: {len(data)} bytes, {len(want)} ids, equal to tiktoken's")
            else:
                failed += 1
                where = "" if got is None else next(
                    (f" first at id {i}: {got[i:i+3]} vs {want[i:i+3]}"
                     for i in range(min(len(got), len(want))) if got[i] != want[i]),
                    f" lengths {len(got)} vs {len(want)}")
                print(f"not ok {n} - {name}: ids differ from tiktoken's{where} {p.stderr.decode()[:200]}")
        print(f"{n - failed} of {n} equal")
        if a.out and not failed:
            import array
            import struct
            shutil.copy(vocab, a.out)
            shutil.copy(merges, a.out)
            if cases and a.files:
                ids = enc.encode_ordinary(cases[0][1].decode("utf-8", errors="surrogateescape"))
                with open(os.path.join(a.out, "tokens.bin"), "wb") as f:
                    f.write(struct.pack("<256i", 20240520, 1, len(ids), *([0] * 253)))
                    a16 = array.array("H", ids)
                    if sys.byteorder == "big":
                        a16.byteswap()
                    f.write(a16.tobytes())
        return 1 if failed else 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
