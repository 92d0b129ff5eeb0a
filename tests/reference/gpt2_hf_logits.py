#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""pipehost's logits against transformers' GPT2LMHeadModel on the same weights.

A GPT-2 config (n_layer 2, n_embd 64, n_head 4, vocab 256, n_positions 64,
gelu_new, no dropout) is initialised at random in transformers (weights
N(0, 0.1^2), so that the logits are of order 1-10), its layer
norms and biases moved away from 1 and 0 (so a packing slip shows), and
saved with save_pretrained as model.safetensors in F32, BF16 and F16.
pipehost reads each (--load-weights, core/hf_gpt2.c) into embedding,
gpt_block x 2, layernorm, linear tied to the token table, with [data]
seq_len 32 (so only the first 32 rows of wpe are used), and writes the
logits of a prompt (--generate PROMPT --max-new-tokens 0 --logits FILE).
transformers computes the logits of the same byte ids with the same
weights in float32 (the BF16/F16 model upcast, which is what pipehost
reads).  Exits 1 when the largest absolute difference passes --tol (1e-4),
77 when torch or transformers cannot be imported.

    PIPEHOST=build/core/pipehost PIPEHOST_PLUGIN_PATH=... python3 tests/reference/gpt2_hf_logits.py
"""
import argparse
import copy
import json
import os
import struct
import subprocess
import sys
import tempfile

try:
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel
except ImportError as e:  # never required by make check
    print("SKIP: %s" % e)
    sys.exit(77)

INI = """[run]
seed = 1
stages = 1
micro_batches = 1
batch = 1
steps = 1
[data]
source = text
path = {corpus}
seq_len = {T}
[optimizer]
type = sgd
lr = 0.1
[partition]
type = uniform
[schedule]
type = gpipe
[layer embed]
type = embedding
vocab = {V}
dim = {d}
[layer block]
type = gpt_block
heads = {H}
dropout = 0
repeat = {L}
[layer lnf]
type = layernorm
[layer head]
type = linear
units = {V}
bias = no
tie = embed.tokens
[layer loss]
type = seq_xent
"""


def read_logits(path):
    with open(path, "rb") as f:
        blob = f.read()
    n = struct.unpack("<Q", blob[:8])[0]
    e = json.loads(blob[8:8 + n])["logits"]
    b, en = e["data_offsets"]
    vals = struct.unpack("<%df" % ((en - b) // 4), blob[8 + n + b:8 + n + en])
    return torch.tensor(vals, dtype=torch.float32).reshape(e["shape"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pipehost", default=os.environ.get("PIPEHOST", "core/pipehost"))
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    L, d, H, V, NPOS, T = 2, 64, 4, 256, 64, 32
    torch.manual_seed(a.seed)
    cfg = GPT2Config(n_layer=L, n_embd=d, n_head=H, vocab_size=V, n_positions=NPOS, resid_pdrop=0.0,
                     embd_pdrop=0.0, attn_pdrop=0.0, activation_function="gelu_new", layer_norm_epsilon=1e-5,
                     tie_word_embeddings=True, initializer_range=0.1, bos_token_id=0, eos_token_id=0)
    model = GPT2LMHeadModel(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(".bias") or ".ln_" in name or "ln_f" in name:
                p.add_(0.1 * torch.randn_like(p))
    prompts = [b"pipehost reads GPT-2 weights in.", b"Hello, GPT"]  # T bytes, and fewer
    worst = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        corpus = os.path.join(tmp, "corpus.txt")
        with open(corpus, "wb") as f:
            f.write(bytes(range(256)) * 4)
        ini = os.path.join(tmp, "gpt2.ini")
        with open(ini, "w") as f:
            f.write(INI.format(corpus=corpus, T=T, V=V, d=d, H=H, L=L))
        for dtype in (torch.float32, torch.bfloat16, torch.float16):
            name = str(dtype).split(".")[1]
            out = os.path.join(tmp, name)
            m = copy.deepcopy(model).to(dtype)
            m.save_pretrained(out, safe_serialization=True)
            with open(os.path.join(out, "model.safetensors"), "rb") as f:
                n = struct.unpack("<Q", f.read(8))[0]
                head = json.loads(f.read(n))
            dtypes = sorted({e["dtype"] for k, e in head.items() if k != "__metadata__"})
            if dtype == torch.float32:
                print("tensors in model.safetensors: %s" % ", ".join(sorted(k for k in head if k != "__metadata__")[:6]))
            ref = m.to(torch.float32).eval()
            for prompt in prompts:
                lp = os.path.join(tmp, "logits.st")
                r = subprocess.run([a.pipehost, "-c", ini, "--load-weights", os.path.join(out, "model.safetensors"),
                                    "--generate", prompt.decode(), "--max-new-tokens", "0", "--logits", lp],
                                   capture_output=True)
                if r.returncode:
                    print("pipehost failed: %s" % r.stderr.decode().strip())
                    return 1
                got = read_logits(lp)
                with torch.no_grad():
                    want = ref(torch.tensor([list(prompt)])).logits[0]
                diff = (got - want).abs().max().item()
                worst = max(worst, diff)
                print("%-9s file dtypes %-12s prompt %2d bytes: logits %s, max |pipehost - transformers| = %.3g "
                      "(logits up to %.2f)" % (name, ",".join(dtypes), len(prompt), list(got.shape), diff,
                                               want.abs().max().item()))
            # greedy continuation: the same bytes (informative; near-ties may differ)
            ids = list(prompts[1])
            with torch.no_grad():
                for _ in range(20):
                    ids.append(int(ref(torch.tensor([ids])).logits[0, -1].argmax()))
            r = subprocess.run([a.pipehost, "-c", ini, "--load-weights", os.path.join(out, "model.safetensors"),
                                "--generate", prompts[1].decode(), "--max-new-tokens", "20", "--temperature", "0"],
                               capture_output=True)
            same = r.stdout.rstrip(b"\n") == bytes(ids)
            print("%-9s greedy 20 bytes: %s" % (name, "the same as transformers" if same else "DIFFERENT"))
    print("largest difference %.3g (tolerance %g): %s" % (worst, a.tol, "PASS" if worst <= a.tol else "FAIL"))
    return 0 if worst <= a.tol else 1


if __name__ == "__main__":
    sys.exit(main())
