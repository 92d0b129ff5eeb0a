#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""GPT-2 small's pieces timed one by one in PyTorch, eager, bf16 autocast:
the same table as `pipehost -c bench/gpt2-124m.ini --plan --set
partition.cost=profile` prints for pipehost's layers, so the two can be
read side by side (one block, the final layernorm, the tied head, the
loss), at the same micro-batch (default 1 sequence of 1024 tokens).

Each piece runs alone on a fixed input: forward, then backward from a
fixed output gradient (the loss from its own output), each timed to a
torch.cuda.synchronize(), the median of REPS after 3 warm-ups (as
core/profile.c does it).  The model is bench/gpt2_124m_torch.py's.

    python3 bench/gpt2_layers_torch.py [--batch 1] [--reps 7]
"""
import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as e:  # pragma: no cover
    sys.exit("gpt2_layers_torch.py: cannot import torch (%s)" % e)
from gpt2_124m_torch import Block, D, HEADS, T, V  # noqa: E402


def sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def timed(fwd, reps):
    """fwd() -> (output, backward closure); median forward and backward ms."""
    tf, tb = [], []
    for it in range(3 + reps):
        sync()
        t0 = time.perf_counter()
        out, bwd = fwd()
        sync()
        t1 = time.perf_counter()
        bwd(out)
        sync()
        t2 = time.perf_counter()
        if it >= 3:
            tf.append(1e3 * (t1 - t0))
            tb.append(1e3 * (t2 - t1))
    return statistics.median(tf), statistics.median(tb)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=1, help="sequences per micro-batch")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--cpu", action="store_true", help="run on the CPU (a smoke test of this script, not a figure)")
    a = ap.parse_args()
    if not a.cpu and not torch.cuda.is_available():
        print("gpt2_layers_torch.py: no GPU")
        return 77
    dev = torch.device("cpu" if a.cpu else "cuda")
    torch.manual_seed(0)
    B = a.batch
    rows = []
    ac = lambda: torch.autocast(dev.type, dtype=torch.bfloat16)  # noqa: E731

    tokens = nn.Embedding(V, D).to(dev)
    pos = nn.Parameter(torch.randn(T, D, device=dev) * 0.01)
    idx = torch.randint(0, 256, (B, T), device=dev)
    g_h = torch.randn(B, T, D, device=dev) * 1e-3

    def embed():
        with ac():
            h = tokens(idx) + pos
        return h, lambda o: o.backward(g_h)
    rows.append(("embed", "embedding") + timed(embed, a.reps))

    block = Block(D, HEADS).to(dev)
    x = torch.randn(B, T, D, device=dev, requires_grad=True)

    def blk():
        with ac():
            y = block(x)
        return y, lambda o: o.backward(g_h.to(o.dtype))
    rows.append(("block", "gpt_block") + timed(blk, a.reps))

    lnf = nn.LayerNorm(D).to(dev)

    def ln():
        with ac():
            y = lnf(x)
        return y, lambda o: o.backward(g_h.to(o.dtype))
    rows.append(("lnf", "layernorm") + timed(ln, a.reps))

    g_logits = torch.randn(B, T, V, device=dev) * 1e-6

    def head():
        with ac():
            y = F.linear(x, tokens.weight)
        return y, lambda o: o.backward(g_logits.to(o.dtype))
    rows.append(("head", "linear (tied)") + timed(head, a.reps))

    logits = torch.randn(B * T, V, device=dev, requires_grad=True)
    tgt = torch.randint(0, 256, (B * T,), device=dev)

    def loss():
        with ac():
            y = F.cross_entropy(logits.bfloat16(), tgt)
        return y, lambda o: o.backward()
    rows.append(("loss", "cross_entropy") + timed(loss, a.reps))

    print("PyTorch %s, %s, eager, bf16 autocast, micro-batch %d x %d tokens; median of %d after 3 warm-up"
          % (torch.__version__, "cpu" if a.cpu else torch.cuda.get_device_name(0), B, T, a.reps))
    print("  %-20s %-16s %10s %10s" % ("name", "type", "fwd ms", "bwd ms"))
    for n, t, f, b in rows:
        print("  %-20s %-16s %10.3f %10.3f" % (n, t, f, b))
    f12 = rows[0][2] + 12 * rows[1][2] + sum(r[2] for r in rows[2:])
    b12 = rows[0][3] + 12 * rows[1][3] + sum(r[3] for r in rows[2:])
    print("  %-20s %-16s %10.3f %10.3f" % ("total (12 blocks)", "", f12, b12))
    return 0


if __name__ == "__main__":
    sys.exit(main())
