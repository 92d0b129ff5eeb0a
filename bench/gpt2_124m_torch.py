#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""PyTorch twin of bench/gpt2-124m.ini for bench/gpt2-124m.sh: GPT-2 small
(124M) trained on one GPU in bf16 autocast, timed in tokens per second.

The model is pipehost's layer for layer (plugins/layers/embedding.c,
gpt_block.c, layernorm.c, linear.c, seq_xent.c):
  - nn.Embedding(50304, 768) plus learned positions [1024, 768];
  - 12 pre-LN blocks: ln1, qkv = nn.Linear(768, 3*768) (packed q | k | v),
    causal F.scaled_dot_product_attention, proj = nn.Linear(768, 768),
    residual; ln2, fc = nn.Linear(768, 4*768), GELU (tanh), fc_proj =
    nn.Linear(4*768, 768), residual; every Linear with a bias, every
    LayerNorm with gain and bias (eps 1e-5); dropout 0;
  - a final LayerNorm and a head tied to the token table, mean
    cross-entropy over the B*T targets.
That is 12 d^2 + 13 d = 7,087,872 parameters a block and 124,475,904 in
all (checked at start-up).  AdamW(fused=True) with the INI's settings (lr
6e-4, betas 0.9/0.95, eps 1e-8, weight decay 0.1 on the matrices only),
gradient clipping at 1.0; the learning rate stays constant (pipehost's
warm-up and cosine are one scalar a step).

A step: zero_grad, forward and backward of each of --micro-batches
micro-batches (gradient accumulation, as pipehost's 1 rank does), clip,
AdamW.  Batch 8 x 1024 random tokens, made once on the GPU.  --warmup steps
untimed (torch.compile compiles in the first), then --steps steps between
two torch.cuda.synchronize().

FLOPs per token, the standard count (Kaplan et al.; PaLM's appendix B;
nanoGPT's estimate_mfu):
    6 N + 12 L T d
N = parameters that take part in a matrix product: all but the position
table (a lookup), the tied token table counted once (the head's product);
N = 123,689,472.  12 L T d = the attention's q.k^T and P.v over the full
T x T square, forward and backward; causal kernels skip about half of it,
so this overstates the work by ~7%, for pipehost and PyTorch alike.  At
T = 1024: 855,383,040 FLOPs per token.

    python3 bench/gpt2_124m_torch.py --mode eager|compile [--micro-batches 8] [--steps 20] [--kernels N]

prints one line:
    torch-eager tokens/s=... tflops=... step_ms=... (and the settings), then
    peak_reserved_mib and peak_allocated_mib (its caching allocator's
    peaks) and held_mib: device memory in use at the end beyond what the
    context took, pipehost's measure (its 'peak GPU memory' line)
and with --kernels N, then one more step under torch.profiler and where
its GPU time went: the N heaviest kernel names with their launches,
milliseconds and share of the summed kernel time (bench/kernel_table.py's
layout, for bench/gpt2-kernels.sh to set beside pipehost's).
"""
import argparse
import sys
import time

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as e:
    sys.exit("gpt2_124m_torch.py: cannot import torch (%s); run it with a Python that has PyTorch" % e)

V, T, D, HEADS, LAYERS = 50304, 1024, 768, 12, 12


def flops_per_token(n_matmul, layers=LAYERS, t=T, d=D):
    return 6 * n_matmul + 12 * layers * t * d


class Block(nn.Module):
    def __init__(self, d, heads, r=4):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.fc_proj = nn.Linear(d, r * d), nn.Linear(r * d, d)
        self.heads = heads

    def forward(self, x):
        B, T_, d = x.shape
        H = self.heads
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (t.view(B, T_, H, d // H).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(B, T_, d))
        return x + self.fc_proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab=V, t=T, d=D, heads=HEADS, layers=LAYERS):
        super().__init__()
        self.tokens = nn.Embedding(vocab, d)
        self.positions = nn.Parameter(torch.randn(t, d) * 0.01)
        nn.init.normal_(self.tokens.weight, std=0.02)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.lnf = nn.LayerNorm(d)
        for n, p in self.named_parameters():
            if n.endswith("weight") and p.dim() == 2 and not n.startswith("tokens"):
                nn.init.normal_(p, std=0.02)
            elif n.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx, targets):
        h = self.tokens(idx) + self.positions[: idx.shape[1]]
        for b in self.blocks:
            h = b(h)
        logits = F.linear(self.lnf(h), self.tokens.weight)  # tied head
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def kernel_table(label, step, top):
    """One step under torch.profiler: its CUDA kernels by name, heaviest first."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    times = [(e.name, (e.time_range.end - e.time_range.start) / 1000.0) for e in prof.events()
             if str(getattr(e, "device_type", "")).endswith("CUDA") and e.time_range.end > e.time_range.start
             and "memcpy" not in e.name.lower() and "memset" not in e.name.lower()]  # ncu's table: kernels only
    if not times:
        print("%s: torch.profiler recorded no CUDA kernel (no CUPTI?)" % label, flush=True)
        return
    from kernel_table import print_table  # bench/, beside this script
    print_table(label, times, 1, top, "1 step under torch.profiler")


def optimizer(model, lr, wd):
    # pipehost's no-decay set: biases and layernorm gains (the 1-D tensors)
    dec = [p for p in model.parameters() if p.dim() >= 2]
    nd = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": dec, "weight_decay": wd}, {"params": nd, "weight_decay": 0.0}],
                             lr=lr, betas=(0.9, 0.95), eps=1e-8, fused=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", choices=["eager", "compile"], default="eager")
    ap.add_argument("--batch", type=int, default=8, help="sequences per step")
    ap.add_argument("--micro-batches", type=int, default=8, help="gradient accumulation over this many")
    ap.add_argument("--steps", type=int, default=20, help="timed steps")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps first (compilation happens here)")
    ap.add_argument("--clip", type=float, default=1.0, help="clip_grad_norm_ to this; 0 = off")
    ap.add_argument("--kernels", type=int, default=0, metavar="N",
                    help="then profile one step and list its N heaviest kernels (0: not)")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("gpt2_124m_torch.py: no CUDA device visible to PyTorch %s" % torch.__version__)
    B, m = args.batch, args.micro_batches
    if m < 1 or B % m:
        sys.exit("gpt2_124m_torch.py: batch %d is not a multiple of micro-batches %d" % (B, m))
    mb = B // m
    dev = torch.device("cuda", 0)
    torch.manual_seed(0)
    # device memory in use once the context exists: the zero of held_mib,
    # pipehost's measure (device.h mem_held)
    torch.cuda.init()
    torch.zeros(1, device=dev)
    free0, total = torch.cuda.mem_get_info(dev)
    used0 = total - free0 - torch.cuda.memory_reserved(dev)

    model = GPT().to(dev)
    n_all = sum(p.numel() for p in model.parameters())  # the tied table once
    want = V * D + T * D + LAYERS * (12 * D * D + 13 * D) + 2 * D
    if n_all != want:
        sys.exit("gpt2_124m_torch.py: %d parameters, expected pipehost's %d" % (n_all, want))
    n_matmul = n_all - model.positions.numel()
    fpt = flops_per_token(n_matmul)

    opt = optimizer(model, 6e-4, 0.1)
    params = list(model.parameters())
    run = torch.compile(model) if args.mode == "compile" else model
    data = torch.randint(0, V, (B, T + 1), device=dev)
    x, y = data[:, :-1].contiguous(), data[:, 1:].contiguous()

    def step():
        opt.zero_grad(set_to_none=True)
        for i in range(m):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = run(x[i * mb:(i + 1) * mb], y[i * mb:(i + 1) * mb]) / m
            loss.backward()
        if args.clip > 0:
            torch.nn.utils.clip_grad_norm_(params, args.clip)
        opt.step()

    for _ in range(args.warmup):
        step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        step()
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    tok_s = args.steps * B * T / dt
    free1, _ = torch.cuda.mem_get_info(dev)
    print("torch-%s tokens/s=%.0f tflops=%.1f step_ms=%.1f params=%d flops_per_token=%d batch=%d "
          "micro_batches=%d steps=%d torch=%s gpu=%s peak_reserved_mib=%.1f peak_allocated_mib=%.1f held_mib=%.1f"
          % (args.mode, tok_s, tok_s * fpt / 1e12, 1000 * dt / args.steps, n_all, fpt, B, m, args.steps,
             torch.__version__, torch.cuda.get_device_name(dev).replace(" ", "_"),
             torch.cuda.max_memory_reserved(dev) / 2**20, torch.cuda.max_memory_allocated(dev) / 2**20,
             (total - free1 - used0) / 2**20), flush=True)
    if args.kernels > 0:
        kernel_table("torch-%s" % args.mode, step, args.kernels)


if __name__ == "__main__":
    main()
