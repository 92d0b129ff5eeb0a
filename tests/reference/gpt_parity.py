#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Loss parity of pipehost's byte-level GPT with the same model in PyTorch.

Issue #5, "Done when": at each of the first 50 steps pipehost's training loss
and PyTorch's agree within 1e-4 relative.

The script
  1. writes a small GPT job (embedding, N gpt_blocks, layernorm, a head tied
     to the token table, seq_xent; dropout 0) as an INI file;
  2. builds the same model in PyTorch float32 from functional ops and writes
     its initial weights as safetensors under pipehost's names (LAYER.PARAM,
     the 7 packed tensors of gpt_block, the tied head.weight too);
  3. runs pipehost on it (--set run.init=FILE) once per stage layout asked
     for (1 stage; 4 stages with 1F1B and recompute by default) and reads the
     per-step losses and learning rates from the metrics file;
  4. reproduces pipehost's data: the corpus (core/data.c ph_data_load_text),
     the epoch permutation (Philox4x32-10 Fisher-Yates of
     ph_data_permutation) and the batches (core/train.c);
  5. trains the PyTorch model on those batches with torch.optim.AdamW (same
     betas, eps, weight decay and no-decay set), a LambdaLR that reproduces
     ph_lr_at, and clip_grad_norm_;
  6. prints both losses per step and their relative difference, and exits 1
     if any step differs by more than --tol (1e-4) relative.

Only torch and the standard library are needed (no numpy, no safetensors).
Run from a pipehost build tree (or pass --pipehost):
    PYTHONPATH=/path/to/torch python3 tests/reference/gpt_parity.py --pipehost ./pipehost
"""
import argparse
import ctypes
import json
import math
import os
import struct
import subprocess
import sys
import tempfile

import torch
import torch.nn.functional as F

M32 = 0xFFFFFFFF
M64 = 0xFFFFFFFFFFFFFFFF

# ---------------------------------------------------------------------------
# include/pipehost/rng.h


def philox4x32(key, ctr_hi, ctr_lo):
    """Philox4x32-10 exactly as ph_philox4x32 (key 64 bits, counter 128)."""
    k0, k1 = key & M32, (key >> 32) & M32
    c0, c1 = ctr_lo & M32, (ctr_lo >> 32) & M32
    c2, c3 = ctr_hi & M32, (ctr_hi >> 32) & M32
    for _ in range(10):
        p0 = 0xD2511F53 * c0
        p1 = 0xCD9E8D57 * c2
        n0 = (p1 >> 32) ^ c1 ^ k0
        n2 = (p0 >> 32) ^ c3 ^ k1
        c1 = p1 & M32
        c3 = p0 & M32
        c0, c2 = n0, n2
        k0 = (k0 + 0x9E3779B9) & M32
        k1 = (k1 + 0xBB67AE85) & M32
    return c0, c1, c2, c3


def mix64(x):
    """ph_mix64: the splitmix64 finaliser."""
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def rng_key(seed, step, mb, layer):
    """ph_rng_key(seed, step, micro-batch, layer)."""
    return mix64(mix64(mix64(mix64(seed) ^ step) ^ mb) ^ layer)


def permutation(seed, epoch, n):
    """ph_data_permutation: Fisher-Yates from the top, step i draws 64 bits
    (words 0 and 1 of Philox at counter i), j = floor(bits * (i+1) / 2^64)."""
    perm = list(range(n))
    key = rng_key(seed, epoch, 0xDA7A, 0)
    for i in range(n - 1, 0, -1):
        r = philox4x32(key, 0, i)
        bits = (r[0] << 32) | r[1]
        j = (bits * (i + 1)) >> 64
        perm[i], perm[j] = perm[j], perm[i]
    return perm


# ---------------------------------------------------------------------------
# core/data.c: ph_data_load_text


def load_text(path, seq_len, holdout):
    """The training sequences as (x, y) int64 tensors [n, T]: the corpus is
    one file, or the sorted (strcmp on the full path) regular files of a
    directory, skipping dot files, *.dat and anything holding a NUL byte;
    train = the first (size_t)(len * (1 - holdout)) bytes; sequence i =
    bytes [i*T, i*T+T), targets the next byte of each."""
    if os.path.isdir(path):
        names = []
        for nm in os.listdir(path):
            if nm.startswith(".") or (len(nm) > 4 and nm.endswith(".dat")):
                continue
            full = os.path.join(path, nm)
            if os.path.islink(full) or not os.path.isfile(full):
                continue
            names.append(os.fsencode(full))
        names.sort()
        chunks = []
        for full in names:
            with open(full, "rb") as f:
                b = f.read()
            if b"\0" not in b:
                chunks.append(b)
        buf = b"".join(chunks)
    else:
        with open(path, "rb") as f:
            buf = f.read()
    cut = int(len(buf) * (1.0 - holdout))
    nseq = (cut - 1) // seq_len if cut > seq_len else 0
    if nseq < 1:
        sys.exit("gpt_parity: %s: too little text for one sequence of %d" % (path, seq_len))
    raw = torch.frombuffer(bytearray(buf[: nseq * seq_len + 1]), dtype=torch.uint8).long()
    x = raw[: nseq * seq_len].view(nseq, seq_len)
    y = raw[1 : nseq * seq_len + 1].view(nseq, seq_len)
    return x, y


# ---------------------------------------------------------------------------
# core/optim.c: ph_lr_at


def lr_at(cfg, total, t):
    lr, wu, min_lr = cfg["lr"], max(cfg["warmup"], 0), cfg["min_lr"]
    t = max(t, 0)
    if t < wu:
        return lr * (t + 1) / wu
    if cfg["lr_schedule"] != "cosine" or total <= 0:
        return lr
    last = total - 1
    if t >= last:
        return min_lr
    p = (t - wu) / (last - wu)
    return min_lr + 0.5 * (lr - min_lr) * (1.0 + math.cos(math.pi * p))


# ---------------------------------------------------------------------------
# safetensors (F32 only), by hand


def read_safetensors(path):
    with open(path, "rb") as f:
        b = f.read()
    (n,) = struct.unpack("<Q", b[:8])
    hdr = json.loads(b[8 : 8 + n])
    out = {}
    for name, e in hdr.items():
        if name == "__metadata__":
            continue
        if e["dtype"] != "F32":
            sys.exit("gpt_parity: %s: %s is %s, expected F32" % (path, name, e["dtype"]))
        a, z = e["data_offsets"]
        out[name] = torch.frombuffer(bytearray(b[8 + n + a : 8 + n + z]), dtype=torch.float32).view(e["shape"])
    return out


def write_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for name, t in tensors:
        t = t.detach().to(torch.float32).contiguous().clone()
        b = ctypes.string_at(t.data_ptr(), t.numel() * 4)  # little-endian hosts only
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    header["__metadata__"] = {"format": "pt", "producer": "gpt_parity.py"}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


# ---------------------------------------------------------------------------
# The model, functionally, over pipehost's parameter tensors.


class GPT:
    """embed (tokens + positions) -> gpt_block x n -> lnf -> head (tied to
    embed.tokens, no bias) -> mean cross-entropy over B*T."""

    def __init__(self, V, T, d, H, n_blocks, r, gen, init, dtype, jitter=None):
        self.V, self.T, self.d, self.H, self.n, self.r = V, T, d, H, n_blocks, r
        rd = r * d

        def normal(shape, std):
            return torch.randn(shape, generator=gen, dtype=torch.float32) * std

        # name -> tensor; the plugins' init rules (see each plugin's meta),
        # or with init = "perturbed" gains and biases away from 1 and 0 so
        # that a mix-up in the packing shows from the very first step.
        pert = init == "perturbed"
        p = {}
        p["embed.tokens"] = normal((V, d), 0.02)
        p["embed.positions"] = normal((T, d), 0.01)
        for i in range(n_blocks):
            b = "block%d." % i
            p[b + "ln_weight"] = 1.0 + (normal((2, d), 0.1) if pert else torch.zeros(2, d))
            p[b + "ln_bias"] = normal((2, d), 0.02) if pert else torch.zeros(2, d)
            p[b + "qkv_weight"] = normal((3 * d, d), 0.02)
            p[b + "proj_weight"] = normal((d, d), 0.02)
            p[b + "fc_weight"] = normal((rd, d), 0.02)
            p[b + "fc_proj_weight"] = normal((d, rd), 0.02)
            p[b + "biases"] = normal(((5 + r) * d,), 0.02) if pert else torch.zeros((5 + r) * d)
        p["lnf.weight"] = 1.0 + (normal((d,), 0.1) if pert else torch.zeros(d))
        p["lnf.bias"] = normal((d,), 0.02) if pert else torch.zeros(d)
        self.init_f32 = dict(p)
        if jitter is not None:
            # every weight times (1 + u 2^-23), u uniform in [-1, 1): about one
            # ulp, to see how far float32 rounding alone carries PyTorch
            p = {k: v * (1 + (torch.rand(v.shape, generator=jitter) * 2 - 1) * 2.0**-23) for k, v in p.items()}
        self.p = {k: torch.nn.Parameter(v.to(dtype)) for k, v in p.items()}

    def safetensors_list(self):
        out = list(self.init_f32.items())
        out.append(("head.weight", self.init_f32["embed.tokens"]))  # the tied copy
        return out

    def param_groups(self, weight_decay):
        # no_decay as the plugins' meta says: layernorm weight/bias,
        # gpt_block ln_weight, ln_bias, biases (linear's bias; head has none).
        # Decayed: embed.tokens (= head.weight), embed.positions, the four
        # gpt_block weight matrices.
        nd = lambda k: k.endswith(("ln_weight", "ln_bias", "biases")) or k.startswith("lnf.")
        dec = [v for k, v in self.p.items() if not nd(k)]
        nod = [v for k, v in self.p.items() if nd(k)]
        return [{"params": dec, "weight_decay": weight_decay}, {"params": nod, "weight_decay": 0.0}]

    def block(self, i, x):
        P = self.p
        b = "block%d." % i
        d, H, rd = self.d, self.H, self.r * self.d
        hd = d // H
        B, T, _ = x.shape
        lnw, lnb, bias = P[b + "ln_weight"], P[b + "ln_bias"], P[b + "biases"]
        qkv_b, proj_b = bias[0 : 3 * d], bias[3 * d : 4 * d]
        fc_b, fcp_b = bias[4 * d : 4 * d + rd], bias[4 * d + rd : 5 * d + rd]
        h1 = F.layer_norm(x, (d,), lnw[0], lnb[0], 1e-5)
        qkv = F.linear(h1, P[b + "qkv_weight"], qkv_b)
        q, k, v = qkv.split(d, dim=-1)
        q, k, v = (t.view(B, T, H, hd).transpose(1, 2) for t in (q, k, v))
        S = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        S = S.masked_fill(~causal, float("-inf"))
        att = (S.softmax(dim=-1) @ v).transpose(1, 2).reshape(B, T, d)
        x1 = x + F.linear(att, P[b + "proj_weight"], proj_b)
        h2 = F.layer_norm(x1, (d,), lnw[1], lnb[1], 1e-5)
        g = F.gelu(F.linear(h2, P[b + "fc_weight"], fc_b), approximate="tanh")
        return x1 + F.linear(g, P[b + "fc_proj_weight"], fcp_b)

    def loss(self, xb, yb):
        P = self.p
        T = xb.shape[1]
        h = P["embed.tokens"][xb] + P["embed.positions"][:T]
        for i in range(self.n):
            h = self.block(i, h)
        h = F.layer_norm(h, (self.d,), P["lnf.weight"], P["lnf.bias"], 1e-5)
        logits = F.linear(h, P["embed.tokens"])  # head tied to the token table
        return F.cross_entropy(logits.reshape(-1, self.V), yb.reshape(-1))


# ---------------------------------------------------------------------------

INI = """\
; written by tests/reference/gpt_parity.py
[run]
seed = {seed}
stages = 1
micro_batches = {micro_batches}
batch = {batch}
steps = {steps}
eval = no
log_every = 1
[data]
source = text
path = {data}
seq_len = {T}
holdout = {holdout}
[optimizer]
type = {optimizer}
lr = {lr}
momentum = {momentum}
beta1 = {beta1}
beta2 = {beta2}
eps = {eps}
weight_decay = {weight_decay}
warmup = {warmup}
lr_schedule = {lr_schedule}
min_lr = {min_lr}
clip = {clip}
[partition]
type = uniform
[schedule]
type = 1f1b
[layer embed]
type = embedding
vocab = {V}
dim = {d}
[layer block]
type = gpt_block
heads = {heads}
mlp_ratio = {r}
dropout = 0.0
repeat = {blocks}
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


def pipehost(args, ini, init, stages, extra, tag, workdir):
    """Run pipehost with the initial weights; returns (losses, lrs) by step."""
    metrics = os.path.join(workdir, "m-%s-%d.jsonl" % (tag, stages))
    cmd = [args.pipehost, "-c", ini, "--set", "run.init=" + init, "--set", "run.metrics=" + metrics,
           "--set", "run.stages=%d" % stages]
    if stages > 1:
        cmd += ["--set", "schedule.type=" + args.schedule, "--set", "run.recompute=yes"]
    cmd += extra
    print("$ " + " ".join(cmd), flush=True)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        sys.stderr.write(p.stdout + p.stderr)
        sys.exit("gpt_parity: pipehost failed (exit %d)" % p.returncode)
    for line in p.stdout.splitlines():
        if line.startswith(("plan:", "  ")):
            print("    " + line.strip())
    rows = [json.loads(l) for l in open(metrics) if '"step"' in l and '"eval"' not in l]
    return {r["step"]: r["loss"] for r in rows}, {r["step"]: r["lr"] for r in rows}


def make_optimizer(cfg, model):
    groups = model.param_groups(cfg["weight_decay"])
    if cfg["optimizer"] == "sgd":
        opt = torch.optim.SGD(groups, lr=cfg["lr"], momentum=cfg["momentum"])
    else:
        opt = torch.optim.AdamW(groups, lr=cfg["lr"], betas=(cfg["beta1"], cfg["beta2"]), eps=cfg["eps"])
    total = cfg["steps"]
    return opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda t: lr_at(cfg, total, t) / cfg["lr"])


def run_torch(cfg, model, xs, ys):
    """Train as core/train.c does: batch i of epoch e = perm_e[i*B .. i*B+B)."""
    B, steps = cfg["batch"], cfg["steps"]
    opt, sched = make_optimizer(cfg, model)
    params = list(model.p.values())
    n = xs.shape[0]
    spe = n // B
    perm, perm_epoch = None, -1
    losses, lrs, norms = [], [], []
    for s in range(steps):
        epoch, pos = divmod(s, spe)
        if epoch != perm_epoch:
            perm, perm_epoch = permutation(cfg["seed"], epoch, n), epoch
        idx = torch.tensor(perm[pos * B : pos * B + B])
        lrs.append(opt.param_groups[0]["lr"])
        opt.zero_grad(set_to_none=True)
        loss = model.loss(xs[idx], ys[idx])
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(params, cfg["clip"]) if cfg["clip"] > 0 else None
        opt.step()
        sched.step()
        losses.append(loss.item())
        norms.append(float(norm) if norm is not None else float("nan"))
    return losses, lrs, norms


def grad_check(args, cfg, ini, init, stages, workdir, model, xs, ys, tol):
    """The gradient of every tensor on the first batch.  pipehost cannot dump
    gradients, but one plain SGD step (lr 10, no momentum, decay, clipping or
    warm-up) from the same weights gives g = (w0 - w1) / lr exactly up to the
    rounding of w1, which is reported as the floor.  Adam is blind to a
    per-element scale error in a gradient; this check is not."""
    lr = 10.0
    extra = ["--set", "run.steps=1", "--set", "optimizer.type=sgd", "--set", "optimizer.lr=%g" % lr,
             "--set", "optimizer.momentum=0", "--set", "optimizer.weight_decay=0", "--set", "optimizer.clip=0",
             "--set", "optimizer.warmup=0", "--set", "optimizer.lr_schedule=constant"]
    perm = permutation(cfg["seed"], 0, xs.shape[0])
    idx = torch.tensor(perm[: cfg["batch"]])
    loss = model.loss(xs[idx], ys[idx])
    loss.backward()
    ref = {k: v.grad.detach().double() for k, v in model.p.items()}
    ref["head.weight"] = ref["embed.tokens"]
    w0 = dict(model.safetensors_list())
    ok = True
    for s in stages:
        wfile = os.path.join(workdir, "sgd-step1-%d.safetensors" % s)
        pipehost(args, ini, init, s, extra + ["--save-weights", wfile], "grad", workdir)
        w1 = read_safetensors(wfile)
        print("\ngradients on the first batch, pipehost %d stage(s) vs PyTorch (relative L2 error):\n" % s)
        print("| tensor | shape | PyTorch L2 norm | rel. error | rounding floor |")
        print("|---|---|---:|---:|---:|")
        for name, a in w0.items():
            if name not in w1 and name == "head.weight":
                continue  # a tied tensor is saved once, as embed.tokens
            b = w1[name]
            g = (a.double() - b.double()) / lr
            r = ref[name]
            rn = r.norm().item()
            err = (g - r).norm().item() / rn
            # half an ulp of w1 per element, in gradient units
            ulp = (torch.nextafter(b, torch.full_like(b, float("inf"))) - b).double()
            floor = (ulp / 2 / lr).norm().item() / rn
            bad = err > max(tol, 3 * floor)
            ok &= not bad
            print("| %s | %s | %.4e | %.2e%s | %.1e |" % (name, "x".join(map(str, a.shape)), rn, err,
                                                         " FAIL" if bad else "", floor))
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pipehost", default=os.environ.get("PIPEHOST", "./pipehost"),
                    help="pipehost binary or build-tree wrapper (default ./pipehost or $PIPEHOST)")
    ap.add_argument("--data", default="/usr/share/games/fortunes", help="text file or directory")
    ap.add_argument("--stages", default="1,4", help="comma-separated stage counts to run (default 1,4)")
    ap.add_argument("--schedule", default="1f1b", help="schedule for the multi-stage runs (recompute on)")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--tol", type=float, default=1e-4, help="largest relative loss difference allowed")
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--blocks", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--micro-batches", type=int, default=4)
    ap.add_argument("--seed", type=int, default=7, help="pipehost's run.seed (the data order)")
    ap.add_argument("--lr", type=float, default=0.003)
    ap.add_argument("--optimizer", choices=["adamw", "sgd"], default="adamw",
                    help="sgd (momentum 0.9) is sensitive to gradient scale errors that adamw hides")
    ap.add_argument("--init", choices=["perturbed", "plugin"], default="perturbed",
                    help="initial gains/biases: perturbed away from 1/0 (default) or the plugins' 1/0")
    ap.add_argument("--dtype", choices=["float32", "float64"], default="float32",
                    help="PyTorch precision (float64: how far pipehost's float32 is from exact)")
    ap.add_argument("--no-noise", action="store_true",
                    help="skip the second PyTorch run from weights jittered by ~1 ulp (float32's own spread)")
    ap.add_argument("--no-grad-check", action="store_true", help="skip the per-tensor gradient check")
    ap.add_argument("--keep", metavar="DIR", help="write the INI, weights and metrics here and keep them")
    args = ap.parse_args()

    cfg = dict(seed=args.seed, micro_batches=args.micro_batches, batch=args.batch, steps=args.steps,
               data=args.data, T=args.seq_len, holdout=0.05, optimizer=args.optimizer, lr=args.lr,
               momentum=0.9, beta1=0.9, beta2=0.99, eps=1e-8, weight_decay=0.1, warmup=10,
               lr_schedule="cosine", min_lr=args.lr / 10, clip=1.0,
               V=256, d=args.dim, heads=args.heads, r=4, blocks=args.blocks)
    dtype = getattr(torch, args.dtype)
    torch.set_num_threads(1)  # the same reference bits every run

    def model(jitter=None):
        return GPT(cfg["V"], cfg["T"], cfg["d"], cfg["heads"], cfg["blocks"], cfg["r"],
                   torch.Generator().manual_seed(12345), args.init, dtype,
                   torch.Generator().manual_seed(jitter) if jitter is not None else None)

    workdir = args.keep or tempfile.mkdtemp(prefix="gpt-parity.")
    os.makedirs(workdir, exist_ok=True)
    ini = os.path.join(workdir, "gpt-parity.ini")
    with open(ini, "w") as f:
        f.write(INI.format(**cfg))
    init = os.path.join(workdir, "init.safetensors")
    write_safetensors(init, model().safetensors_list())

    stages = [int(s) for s in args.stages.split(",") if s]
    xs, ys = load_text(args.data, cfg["T"], cfg["holdout"])
    print("corpus %s: %d training sequences of %d bytes; %d steps of %d sequences (%d micro-batches)"
          % (args.data, xs.shape[0], cfg["T"], cfg["steps"], cfg["batch"], cfg["micro_batches"]))

    ok = True
    if not args.no_grad_check:
        ok &= grad_check(args, cfg, ini, init, stages, workdir, model(), xs, ys, args.tol)
        print()

    ph = {}
    for s in stages:
        loss, lr = pipehost(args, ini, init, s, [], "loss", workdir)
        if sorted(loss) != list(range(1, cfg["steps"] + 1)):
            sys.exit("gpt_parity: pipehost's metrics lack some of steps 1..%d" % cfg["steps"])
        ph[s] = ([loss[i] for i in range(1, cfg["steps"] + 1)], [lr[i] for i in range(1, cfg["steps"] + 1)])
    t_loss, t_lr, t_norm = run_torch(cfg, model(), xs, ys)
    noise = None if args.no_noise else run_torch(cfg, model(jitter=1), xs, ys)[0]

    print()
    hdr = "| step | lr | grad norm | PyTorch (%s) |" % args.dtype
    sep = "|---:|---:|---:|---:|"
    if noise:
        hdr += " PyTorch, init +-1 ulp: rel. diff |"
        sep += "---:|"
    for s in stages:
        hdr += " pipehost %d stage%s | rel. diff |" % (s, "s" if s > 1 else "")
        sep += "---:|---:|"
    print(hdr)
    print(sep)
    worst = {s: (0.0, 0) for s in stages}
    nworst = (0.0, 0)
    lr_bad = []
    for i in range(cfg["steps"]):
        row = "| %d | %.6g | %.4f | %.6f |" % (i + 1, t_lr[i], t_norm[i], t_loss[i])
        if noise:
            rel = abs(noise[i] - t_loss[i]) / abs(t_loss[i])
            nworst = max(nworst, (rel, i + 1))
            row += " %.2e |" % rel
        for s in stages:
            pl, plr = ph[s][0][i], ph[s][1][i]
            rel = abs(pl - t_loss[i]) / abs(t_loss[i])
            worst[s] = max(worst[s], (rel, i + 1))
            ok &= rel <= args.tol
            row += " %.6f | %.2e%s |" % (pl, rel, "" if rel <= args.tol else " FAIL")
            if abs(plr - t_lr[i]) > 1e-5 * max(abs(t_lr[i]), 1e-12):  # metrics print %.6g
                lr_bad.append((s, i + 1, plr, t_lr[i]))
        print(row)
    print()
    if noise:
        print("PyTorch vs PyTorch from weights jittered by ~1 ulp: largest relative difference %.2e (step %d)"
              % nworst)
    for s in stages:
        print("pipehost %d stage(s): largest relative loss difference %.2e (step %d); tolerance %.0e: %s"
              % (s, worst[s][0], worst[s][1], args.tol, "pass" if worst[s][0] <= args.tol else "FAIL"))
    if len(stages) > 1:
        same = all(ph[s][0] == ph[stages[0]][0] for s in stages)
        print("pipehost losses identical across stage counts %s: %s" % (args.stages, "yes" if same else "NO"))
    if lr_bad:
        ok = False
        for s, st, a, b in lr_bad[:5]:
            print("learning rate differs: %d stage(s), step %d: pipehost %.6g, ph_lr_at here %.6g" % (s, st, a, b))
    if not args.keep:
        for f in os.listdir(workdir):
            os.unlink(os.path.join(workdir, f))
        os.rmdir(workdir)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
