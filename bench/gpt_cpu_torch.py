#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""PyTorch twin of etc/gpt-fortunes.ini for bench/gpt-cpu.sh: the same model
(byte-level GPT: token + position embedding, pre-LN blocks with causal
attention and a tanh-GELU MLP, final layernorm, head tied to the token
table, mean cross-entropy), the same AdamW (betas 0.9/0.99, weight decay 0.01
on everything but gains and biases), gradient clipping at 1.0, in float32 on
the CPU with torch.set_num_threads(THREADS).  Written the way a PyTorch user
would (nn.Linear, nn.LayerNorm, F.scaled_dot_product_attention), not as a
copy of pipehost's kernels.

    python3 bench/gpt_cpu_torch.py [--micro-batches 8] [--steps 30] [--profile]

prints one line "median_ms=... min_ms=... steps=..." (the step: zero_grad,
forward and backward of every micro-batch, clip_grad_norm_, AdamW), and with
--profile a per-layer table (forward / backward ms at the micro-batch size,
median of repeats) comparable with pipehost's `partition.cost = profile`.
"""
import argparse
import math
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d, heads, r, sdpa):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.fc_proj = nn.Linear(d, r * d), nn.Linear(r * d, d)
        self.heads, self.sdpa = heads, sdpa

    def attention(self, x):
        B, T, d = x.shape
        H = self.heads
        q, k, v = self.qkv(x).split(d, dim=-1)
        q, k, v = (t.view(B, T, H, d // H).transpose(1, 2) for t in (q, k, v))
        if self.sdpa:
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            s = (q @ k.transpose(-2, -1)) / math.sqrt(d // H)
            s = s.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
            a = s.softmax(-1) @ v
        return self.proj(a.transpose(1, 2).reshape(B, T, d))

    def forward(self, x):
        x = x + self.attention(self.ln1(x))
        return x + self.fc_proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, V, T, d, heads, n_blocks, r=4, sdpa=True):
        super().__init__()
        self.tokens = nn.Embedding(V, d)
        self.positions = nn.Parameter(torch.randn(T, d) * 0.01)
        nn.init.normal_(self.tokens.weight, std=0.02)
        self.blocks = nn.ModuleList(Block(d, heads, r, sdpa) for _ in range(n_blocks))
        self.lnf = nn.LayerNorm(d)

    def forward(self, x, y):
        h = self.tokens(x) + self.positions[: x.shape[1]]
        for b in self.blocks:
            h = b(h)
        logits = F.linear(self.lnf(h), self.tokens.weight)  # tied head
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


def optimizer(model, lr, wd):
    # pipehost's no-decay set: layernorm gains and biases, every bias
    nd = [p for n, p in model.named_parameters() if n.endswith("bias") or ".ln" in n or n.startswith("lnf")]
    dec = [p for n, p in model.named_parameters() if not any(p is q for q in nd)]
    return torch.optim.AdamW([{"params": dec, "weight_decay": wd}, {"params": nd, "weight_decay": 0.0}],
                             lr=lr, betas=(0.9, 0.99), eps=1e-8)


def median_ms(fn, reps, warm):
    for _ in range(warm):
        fn()
    t = []
    for _ in range(reps):
        a = time.perf_counter()
        fn()
        t.append(1000 * (time.perf_counter() - a))
    return statistics.median(t), min(t)


def profile(model, mb, T, V, d, reps):
    """Forward and backward of each layer alone at the micro-batch size."""
    x = torch.randint(0, V, (mb, T))
    y = torch.randint(0, V, (mb, T))
    h = torch.randn(mb, T, d)
    rows = []

    def layer(name, f, inp, grad_out_shape=None):
        inp = inp.detach().requires_grad_(inp.is_floating_point())
        fwd = median_ms(lambda: f(inp), reps, 2)[0]
        g = torch.randn(grad_out_shape) if grad_out_shape else None

        def fb():
            out = f(inp)
            (out.backward(g) if g is not None else out.backward())
        fb_ms = median_ms(fb, reps, 2)[0]
        rows.append((name, fwd, fb_ms - fwd))

    layer("embed", lambda t: model.tokens(t) + model.positions[:T], x, (mb, T, d))
    for i, b in enumerate(model.blocks):
        layer("block%d" % i, b, h, (mb, T, d))
    layer("lnf", model.lnf, h, (mb, T, d))
    layer("head", lambda t: F.linear(t, model.tokens.weight), h, (mb, T, V))
    logits = torch.randn(mb, T, V)
    layer("loss", lambda t: F.cross_entropy(t.reshape(-1, V), y.reshape(-1)), logits)
    opt = optimizer(model, 1e-3, 0.01)
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    params = list(model.parameters())
    clip = median_ms(lambda: torch.nn.utils.clip_grad_norm_(params, 1.0), reps, 2)[0]
    step = median_ms(opt.step, reps, 2)[0]
    print("PyTorch per layer, micro-batch %d, %d thread(s) (bwd = fwd+bwd - fwd; median of %d)"
          % (mb, torch.get_num_threads(), reps))
    print("  %-8s %9s %9s" % ("layer", "fwd ms", "bwd ms"))
    for n, f, b in rows:
        print("  %-8s %9.3f %9.3f" % (n, f, b))
    print("  %-8s %9.3f %9.3f" % ("total", sum(r[1] for r in rows), sum(r[2] for r in rows)))
    print("  clip_grad_norm_ %.3f ms, AdamW step %.3f ms (per optimizer step)" % (clip, step))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--micro-batches", type=int, default=8, help="gradient accumulation over this many")
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--blocks", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=30, help="timed steps")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps first")
    ap.add_argument("--attention", choices=["sdpa", "manual"], default="sdpa")
    ap.add_argument("--profile", action="store_true", help="also time each layer alone")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    V, T, d, B, m = args.vocab, args.seq_len, args.dim, args.batch, args.micro_batches
    if B % m:
        raise SystemExit("batch %d is not a multiple of micro-batches %d" % (B, m))
    mb = B // m
    model = GPT(V, T, d, args.heads, args.blocks, sdpa=args.attention == "sdpa")
    opt = optimizer(model, 3e-3, 0.01)
    params = list(model.parameters())
    x = torch.randint(0, V, (B, T))
    y = torch.randint(0, V, (B, T))

    def step():
        opt.zero_grad(set_to_none=True)
        for i in range(m):
            loss = model(x[i * mb : (i + 1) * mb], y[i * mb : (i + 1) * mb]) / m
            loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()

    med, lo = median_ms(step, args.steps, args.warmup)
    print("median_ms=%.2f min_ms=%.2f steps=%d threads=%d micro_batches=%d attention=%s torch=%s"
          % (med, lo, args.steps, torch.get_num_threads(), m, args.attention, torch.__version__))
    if args.profile:
        profile(model, mb, T, V, d, max(args.steps // 3, 7))


if __name__ == "__main__":
    main()
