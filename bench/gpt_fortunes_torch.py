#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""PyTorch twin of etc/gpt-fortunes.ini for bench/cpu-vs-torch.sh: the
whole job (training and validation), in float32 on the CPU.

The model is bench/gpt_cpu_torch.py's GPT (byte-level: token + position
embedding, pre-LN blocks with causal attention and a tanh-GELU MLP, final
layernorm, head tied to the token table), initialised as pipehost's
gpt_block and embedding do (linear weights N(0, 0.02), biases 0, tokens
N(0, 0.02), positions N(0, 0.01)).  The data are read as core/data_text.c
reads them: the regular files of the directory (no .dat, no file holding a
NUL byte, no symlinks), sorted by name, concatenated; the first
(1 - holdout) of the bytes train, the rest validate; sequence i is bytes
[i*T, i*T+T) in and each next byte out, non-overlapping.  Each epoch is
floor(sequences / batch) steps over a fresh random order; AdamW (decay on
weights, not on biases or layernorm gains), clip_grad_norm_, and core/
optim.c's learning rate at every step (linear warm-up, cosine to min_lr).
After each epoch, as pipehost's `eval = yes`: the validation loss, the mean
cross-entropy over every held-out byte, in nats per byte.

The full batch goes through in one pass by default (what a PyTorch user
writes; the same mean loss as pipehost's micro-batches); --micro-batches M
accumulates over M passes instead.  Hyper-parameters come from the INI (a
key the INI leaves out takes pipehost's default).

--delayed is PipeDream-2BW's delayed update: each step's gradient is taken at
the previous weights, W(t+1) = W(t) - lr * AdamW(clip(grad f(W(t-1)))), W(-1) = W(0).

--optimizer muon: Muon (Keller Jordan's reference) on every 2-D weight matrix
inside the blocks (qkv, proj, fc, fc_proj): B = mu*B + G, U = G + mu*B
(Nesterov, mu 0.95), X = 5 quintic Newton-Schulz steps on U/(|U|_F + 1e-7),
W -= lr_m * wd * W, W -= lr_m * X * max(1, rows/cols)**0.5; lr_m has the
INI's schedule scaled to peak --muon-lr.  Everything else keeps AdamW.

    python3 bench/gpt_fortunes_torch.py [--ini etc/gpt-fortunes.ini]
        [--threads N] [--steps N] [--micro-batches M] [--delayed] [--log-every N]
        [--optimizer adamw|muon] [--muon-lr 0.02]

The last line: "RESULT job=gpt-fortunes val_loss=1.8419 steps=1194
train_s=... wall_s=... threads=2 torch=2.x".
"""
import argparse
import os
import stat
import sys
import time

T_START = time.time()

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fashion_mnist_torch import ini_get, lr_at, read_ini  # noqa: E402
from gpt_cpu_torch import GPT  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
FORTUNES = "/usr/share/games/fortunes"


def read_corpus(path):
    """core/data_text.c's read_corpus."""
    if not os.path.isdir(path):
        return open(path, "rb").read()
    names = []
    for nm in os.listdir(path):
        if nm.startswith(".") or (len(nm) > 4 and nm.endswith(".dat")):
            continue
        full = os.path.join(path, nm)
        if stat.S_ISREG(os.lstat(full).st_mode):
            names.append(full)
    out = bytearray()
    for full in sorted(names, key=lambda s: s.encode()):
        b = open(full, "rb").read()
        if b"\0" not in b:
            out += b
    return bytes(out)


def newton_schulz5(G, steps=5, eps=1e-7):
    """Keller Jordan's quintic Newton-Schulz orthogonalisation (in float32 here)."""
    a, b, c = (3.4445, -4.7750, 2.0315)
    X = G / (G.norm() + eps)
    tr = G.size(0) > G.size(1)
    if tr:
        X = X.T
    for _ in range(steps):
        A = X @ X.T
        Bm = b * A + c * A @ A
        X = a * X + Bm @ X
    return X.T if tr else X


class Muon(torch.optim.Optimizer):
    """Muon with Nesterov momentum and decoupled weight decay (2-D weights only)."""

    def __init__(self, params, lr=0.02, momentum=0.95, weight_decay=0.0, ns_steps=5):
        super().__init__(params, dict(lr=lr, momentum=momentum, weight_decay=weight_decay, ns_steps=ns_steps))

    @torch.no_grad()
    def step(self):
        for g in self.param_groups:
            lr, mu, wd = g["lr"], g["momentum"], g["weight_decay"]
            for p in g["params"]:
                if p.grad is None:
                    continue
                st = self.state[p]
                if "buf" not in st:
                    st["buf"] = torch.zeros_like(p)
                buf = st["buf"]
                buf.mul_(mu).add_(p.grad)
                u = p.grad.add(buf, alpha=mu)
                x = newton_schulz5(u, g["ns_steps"])
                p.mul_(1.0 - lr * wd)
                p.add_(x, alpha=-lr * max(1.0, p.size(0) / p.size(1)) ** 0.5)


def sequences(buf, a, b, T):
    n = (b - a - 1) // T if b - a > T else 0
    t = torch.frombuffer(bytearray(buf[a:a + n * T + 1]), dtype=torch.uint8).long()
    return t[:n * T].view(n, T), t[1:n * T + 1].view(n, T)


def init_like_pipehost(model):
    """gpt_block's init: linear weights N(0, 0.02), biases 0 (GPT() draws the tables)."""
    for mod in model.modules():
        if isinstance(mod, nn.Linear):
            nn.init.normal_(mod.weight, std=0.02)
            nn.init.zeros_(mod.bias)


def no_decay(model):
    """pipehost's no-decay set: biases and layernorm gains (gpt_cpu_torch.optimizer's rule)."""
    return [p for nm, p in model.named_parameters() if nm.endswith("bias") or ".ln" in nm or nm.startswith("lnf")]


def batch_at(s, spe, B, xtr, ytr, gen, perm):
    """Step s's batch: a fresh random order each epoch (perm carries it over)."""
    pos = s % spe
    if pos == 0:
        perm = torch.randperm(len(xtr), generator=gen)
    idx = perm[pos * B:(pos + 1) * B]
    return xtr[idx], ytr[idx], perm


def validation_loss(model, xva, yva, T, eval_batch):
    """The mean cross-entropy over every held-out byte, in nats."""
    model.eval()
    tot = 0.0
    with torch.no_grad():
        for i in range(0, len(xva), eval_batch):
            # model() gives the mean over the slice; weight it by its bytes
            k = min(eval_batch, len(xva) - i)
            tot += model(xva[i:i + k], yva[i:i + k]).item() * k * T
    model.train()
    return tot / (len(xva) * T)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ini", default=os.path.join(HERE, "..", "etc", "gpt-fortunes.ini"))
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="torch.set_num_threads (default: cores)")
    ap.add_argument("--epochs", type=int, default=0, help="override the INI's [run] epochs")
    ap.add_argument("--steps", type=int, default=0, help="optimizer steps in all (as [run] steps); 0 = epochs")
    ap.add_argument("--micro-batches", type=int, default=1, help="gradient accumulation over this many passes")
    ap.add_argument("--delayed", action="store_true",
                    help="PipeDream-2BW: gradient at W(t-1), applied to W(t) (W(-1) = W(0))")
    ap.add_argument("--optimizer", choices=["adamw", "muon"], default="adamw",
                    help="muon: Muon on the blocks' 2-D weights, AdamW on the rest")
    ap.add_argument("--muon-lr", type=float, default=0.02, help="Muon's peak learning rate (the INI's schedule)")
    ap.add_argument("--log-every", type=int, default=100, help="print the training loss every N steps")
    ap.add_argument("--eval-batch", type=int, default=64)
    ap.add_argument("--seed", type=int, default=-1, help="default: the INI's [run] seed")
    args = ap.parse_args()

    cp = read_ini(args.ini)
    B = ini_get(cp, "run", "batch", 32, int)
    epochs = args.epochs or ini_get(cp, "run", "epochs", 1, int)
    seed = args.seed if args.seed >= 0 else ini_get(cp, "run", "seed", 1, int)
    do_eval = ini_get(cp, "run", "eval", "no").lower() in ("yes", "true", "1", "on")
    path = ini_get(cp, "data", "path", FORTUNES)
    if not os.path.isabs(path):
        path = os.path.join(os.path.dirname(os.path.abspath(args.ini)), path)
    T = ini_get(cp, "data", "seq_len", 128, int)
    holdout = ini_get(cp, "data", "holdout", 0.1, float)
    lr = ini_get(cp, "optimizer", "lr", 0.01, float)
    wd = ini_get(cp, "optimizer", "weight_decay", 0.0, float)
    b1 = ini_get(cp, "optimizer", "beta1", 0.9, float)
    b2 = ini_get(cp, "optimizer", "beta2", 0.999, float)
    eps = ini_get(cp, "optimizer", "eps", 1e-8, float)
    warmup = ini_get(cp, "optimizer", "warmup", 0, int)
    min_lr = ini_get(cp, "optimizer", "min_lr", 0.0, float)
    cosine = ini_get(cp, "optimizer", "lr_schedule", "constant") == "cosine"
    clip = ini_get(cp, "optimizer", "clip", 0.0, float)
    V = ini_get(cp, "layer embed", "vocab", 256, int)
    d = ini_get(cp, "layer embed", "dim", 128, int)
    heads = ini_get(cp, "layer block", "heads", 4, int)
    nblocks = ini_get(cp, "layer block", "repeat", 1, int)
    if ini_get(cp, "layer block", "dropout", 0.0, float) != 0.0:
        raise SystemExit("gpt_fortunes_torch.py: this twin has no attention dropout; the INI asks for some")
    if ini_get(cp, "optimizer", "type", "sgd") != "adamw":
        raise SystemExit("gpt_fortunes_torch.py: this twin knows adamw only")
    m = args.micro_batches
    if B % m:
        raise SystemExit("batch %d is not a multiple of micro-batches %d" % (B, m))

    torch.set_num_threads(args.threads)
    torch.manual_seed(seed)
    buf = read_corpus(path)
    cut = int(len(buf) * (1.0 - holdout))
    xtr, ytr = sequences(buf, 0, cut, T)
    xva, yva = sequences(buf, cut, len(buf), T)
    spe = len(xtr) // B
    total = args.steps or epochs * spe

    model = GPT(V, T, d, heads, nblocks)
    init_like_pipehost(model)
    nd = no_decay(model)
    # --optimizer muon: the blocks' matrices (blocks.N.{qkv,proj,fc,fc_proj}.weight)
    mu_named = [(nm, p) for nm, p in model.named_parameters()
                if args.optimizer == "muon" and nm.startswith("blocks.") and p.dim() == 2]
    mu = [p for _, p in mu_named]
    dec = [p for p in model.parameters() if not any(p is q for q in nd) and not any(p is q for q in mu)]
    opt = torch.optim.AdamW([{"params": dec, "weight_decay": wd}, {"params": nd, "weight_decay": 0.0}],
                            lr=lr, betas=(b1, b2), eps=eps)
    muon = Muon(mu, lr=args.muon_lr, momentum=0.95, weight_decay=wd) if mu else None
    if muon is not None:
        cnt = lambda ps: "%d tensors / %d values" % (len(ps), sum(p.numel() for p in ps))  # noqa: E731
        print("optimizer groups: muon %s (%s); adamw decay %s; adamw no-decay %s"
              % (cnt(mu), ", ".join(sorted({nm.split(".", 2)[2] for nm, _ in mu_named})), cnt(dec), cnt(nd)),
              flush=True)
    assert sum(p.numel() for p in dec + nd + mu) == sum(p.numel() for p in model.parameters())
    params = list(model.parameters())
    gen = torch.Generator().manual_seed(seed)
    mb = B // m
    # --delayed: W(t-1), the weights the next forward and backward run at
    prev = [p.detach().clone() for p in params] if args.delayed else None

    t0 = time.time()
    vloss = float("nan")
    perm = None
    for s in range(total):
        epoch, pos = divmod(s, spe)
        x, y, perm = batch_at(s, spe, B, xtr, ytr, gen, perm)
        for g in opt.param_groups:
            g["lr"] = lr_at(s, lr, warmup, min_lr, total, cosine)
        if muon is not None:  # the same shape, peak --muon-lr
            for g in muon.param_groups:
                g["lr"] = lr_at(s, lr, warmup, min_lr, total, cosine) * args.muon_lr / lr
        opt.zero_grad(set_to_none=True)
        if muon is not None:
            muon.zero_grad(set_to_none=True)
        lsum = 0.0
        if prev is not None:  # run at W(t-1): swap it in (the tied head shares tokens.weight)
            cur = [p.data for p in params]
            for p, w in zip(params, prev):
                p.data = w
        for i in range(m):
            loss = model(x[i * mb:(i + 1) * mb], y[i * mb:(i + 1) * mb]) / m
            loss.backward()
            lsum += loss.item()
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(params, clip)
        if prev is not None:  # back to W(t); W(t) becomes the next step's W(t-1)
            for p, w in zip(params, cur):
                p.data = w
            prev = [w.clone() for w in cur]
        opt.step()
        if muon is not None:
            muon.step()
        last = s + 1 == total
        if (s + 1) % args.log_every == 0 or last:
            print("step %d/%d loss %.4f lr %.3g" % (s + 1, total, lsum, opt.param_groups[0]["lr"]), flush=True)
        if do_eval and (pos == spe - 1 or last):
            vloss = validation_loss(model, xva, yva, T, args.eval_batch)
            print("epoch %d: validation loss %.4f nats/byte (%.4f bits/byte) (%d sequences)"
                  % (epoch + 1, vloss, vloss / 0.6931471805599453, len(xva)), flush=True)
    train_s = time.time() - t0
    print("RESULT job=gpt-fortunes val_loss=%.4f steps=%d train_s=%.1f wall_s=%.1f threads=%d micro_batches=%d "
          "delayed=%d optimizer=%s%s torch=%s" % (vloss, total, train_s, time.time() - T_START, torch.get_num_threads(), m,
                                   int(args.delayed), args.optimizer,
                                   " muon_lr=%g" % args.muon_lr if muon is not None else "", torch.__version__))


if __name__ == "__main__":
    sys.exit(main())
