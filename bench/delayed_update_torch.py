#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Why 2bw's delayed update trails 1f1b with AdamW on etc/gpt-fortunes.ini,
and what the known remedies recover (docs/delayed-update.md).  A reference
script: PyTorch on the CPU, never part of the build or of `make check`.

The model, data, init and AdamW are bench/gpt_fortunes_torch.py's (the
INI's hyper-parameters; the whole batch in one pass, the same mean loss as
pipehost's micro-batches).  --update picks where each step's gradient is
taken and what the optimizer is given:

  plain     grad f_t(W(t))                                  (1f1b)
  delayed   grad f_t(W(t-1))                                (2bw); --only
            names the tensors to delay, the rest fresh
  predict   grad f_t(W(t-1) + c (W(t-1) - W(t-2)))          weight prediction
                                                            (SpecTrain/PipeOptim-like), c = --coef
  secant    delayed, plus h * (W(t) - W(t-1)), with h a per-weight secant
            curvature EMA(dg * dw) / EMA(dw^2) (>= 0), rate --coef
            (a delay-compensated gradient, DC-ASGD's idea with a measured
            curvature in place of g*g)
  gradx     delayed g plus c (g - g_prev): the gradient extrapolated, c = --coef
  partial   the first --stale micro-batches (2 sequences each) at W(t-1),
            the rest at W(t): what a pipeline gets if it updates as soon
            as the step's gradients are in

--stop N ends after N steps of the full run's learning-rate schedule and
reports the validation loss there.  --stability prints the largest
(learning rate x curvature) for which an EMA momentum beta1 is stable on a
quadratic, fresh and delayed by one step, and exits (no torch needed).

    python3 bench/delayed_update_torch.py --update delayed --stop 300
    python3 bench/delayed_update_torch.py --update secant --warmup 400 --threads 1
    python3 bench/delayed_update_torch.py --stability

The last line: "RESULT update=delayed coef=1 stale=0 lr=0.003 warmup=50 stop=300 of 1194 val_loss=... ".
"""
import argparse
import math
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def stable(a, beta, lag, coef=0.0, steps=4000):
    """x' = x - m, m' = beta m + (1 - beta) a e, e the point the gradient is
    taken at: x (lag 0), the previous x (lag 1), or lag 1 extrapolated."""
    xs, m = [1.0, 1.0, 1.0], 0.0
    for _ in range(steps):
        e = xs[-1] if lag == 0 else xs[-2] + coef * (xs[-2] - xs[-3])
        m = beta * m + (1 - beta) * a * e
        xs.append(xs[-1] - m)
        if abs(xs[-1]) > 1e6:
            return False
    return abs(xs[-1]) < 1e3


def threshold(beta, lag, coef=0.0):
    lo, hi = 0.0, 100.0
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if stable(mid, beta, lag, coef) else (lo, mid)
    return lo


def print_stability():
    print("largest lr*curvature a quadratic stays stable at (EMA momentum, as Adam's first moment)")
    print("%-6s %10s %10s %18s" % ("beta1", "fresh", "delayed 1", "delayed+predict"))
    for beta in (0.0, 0.5, 0.8, 0.9, 0.95):
        print("%-6g %10.2f %10.2f %18.2f" % (beta, threshold(beta, 0), threshold(beta, 1), threshold(beta, 1, 1.0)))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ini", default=os.path.join(HERE, "..", "etc", "gpt-fortunes.ini"))
    ap.add_argument("--update", choices=["plain", "delayed", "predict", "secant", "gradx", "partial"],
                    default="delayed")
    ap.add_argument("--coef", type=float, default=-1, help="predict/gradx: c (default 1); secant: EMA rate (0.99)")
    ap.add_argument("--stale", type=int, default=1, help="partial: stale micro-batches of 2 sequences")
    ap.add_argument("--only", default="", help="delayed: take only the tensors whose names hold one of these "
                    "comma-separated strings at W(t-1), the rest at W(t)")
    ap.add_argument("--lr", type=float, default=0, help="peak learning rate in place of the INI's (0: the INI's)")
    ap.add_argument("--warmup", type=int, default=-1, help="warm-up steps in place of the INI's (-1: the INI's)")
    ap.add_argument("--stop", type=int, default=0, help="stop after N steps of the full schedule (0: all)")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--log-every", type=int, default=50)
    ap.add_argument("--cos", action="store_true",
                    help="at each log step, the cosine between the gradients at W(t) and W(t-1) on the same batch")
    ap.add_argument("--stability", action="store_true", help="print the quadratic's stability limits and exit")
    args = ap.parse_args()
    if args.stability:
        print_stability()
        return 0

    import torch
    sys.path.insert(0, HERE)
    from fashion_mnist_torch import ini_get, lr_at, read_ini
    from gpt_cpu_torch import GPT
    from gpt_fortunes_torch import (FORTUNES, batch_at, init_like_pipehost, no_decay, read_corpus, sequences,
                                    validation_loss)

    cp = read_ini(args.ini)
    B, T = ini_get(cp, "run", "batch", 32, int), ini_get(cp, "data", "seq_len", 128, int)
    seed, epochs = ini_get(cp, "run", "seed", 1, int), ini_get(cp, "run", "epochs", 1, int)
    lr, wd = ini_get(cp, "optimizer", "lr", 0.01, float), ini_get(cp, "optimizer", "weight_decay", 0.0, float)
    b1, b2 = ini_get(cp, "optimizer", "beta1", 0.9, float), ini_get(cp, "optimizer", "beta2", 0.999, float)
    eps = ini_get(cp, "optimizer", "eps", 1e-8, float)
    warmup, min_lr = ini_get(cp, "optimizer", "warmup", 0, int), ini_get(cp, "optimizer", "min_lr", 0.0, float)
    cosine = ini_get(cp, "optimizer", "lr_schedule", "constant") == "cosine"
    clip, holdout = ini_get(cp, "optimizer", "clip", 0.0, float), ini_get(cp, "data", "holdout", 0.1, float)
    if args.lr > 0:
        lr = args.lr
    if args.warmup >= 0:
        warmup = args.warmup
    coef = args.coef if args.coef >= 0 else (0.99 if args.update == "secant" else 1.0)

    torch.set_num_threads(args.threads)
    torch.manual_seed(seed)
    buf = read_corpus(ini_get(cp, "data", "path", FORTUNES))
    cut = int(len(buf) * (1.0 - holdout))
    xtr, ytr = sequences(buf, 0, cut, T)
    xva, yva = sequences(buf, cut, len(buf), T)
    spe = len(xtr) // B
    total = epochs * spe
    stop = args.stop or total
    model = GPT(ini_get(cp, "layer embed", "vocab", 256, int), T, ini_get(cp, "layer embed", "dim", 128, int),
                ini_get(cp, "layer block", "heads", 4, int), ini_get(cp, "layer block", "repeat", 1, int))
    init_like_pipehost(model)
    nd = no_decay(model)
    dec = [p for p in model.parameters() if not any(p is q for q in nd)]
    opt = torch.optim.AdamW([{"params": dec, "weight_decay": wd}, {"params": nd, "weight_decay": 0.0}],
                            lr=lr, betas=(b1, b2), eps=eps)
    params = list(model.parameters())
    gen = torch.Generator().manual_seed(seed)
    prev = [p.detach().clone() for p in params]   # W(t-1)
    prev2 = [p.detach().clone() for p in params]  # W(t-2)
    g_prev = e_prev = num = den = perm = None

    def at(ws):  # run the model at these weights (the tied head shares the token table)
        for p, w in zip(params, ws):
            p.data = w

    t0 = time.time()
    for s in range(stop):
        x, y, perm = batch_at(s, spe, B, xtr, ytr, gen, perm)
        for g in opt.param_groups:
            g["lr"] = lr_at(s, lr, warmup, min_lr, total, cosine)
        opt.zero_grad(set_to_none=True)
        cur = [p.data for p in params]
        if args.cos and (s + 1) % args.log_every == 0:
            gs = []
            for ws in (prev, cur):
                at(ws)
                model.zero_grad(set_to_none=True)
                model(x, y).backward()
                gs.append([p.grad.clone() for p in params])
            dot = sum(float((a * b).sum()) for a, b in zip(*gs))
            n0, n1 = (math.sqrt(sum(float((a * a).sum()) for a in g)) for g in gs)
            print("step %d cos(grad at W(t), grad at W(t-1)) %.3f |grad at W(t)| %.3f" % (s + 1, dot / (n0 * n1), n1),
                  flush=True)
            model.zero_grad(set_to_none=True)
            at(cur)
        if args.update == "partial":
            ns = 2 * args.stale
            at(prev)
            stale = model(x[:ns], y[:ns]) * (ns / B)
            stale.backward()
            at(cur)
            fresh = model(x[ns:], y[ns:]) * ((B - ns) / B)
            fresh.backward()
            loss = stale.detach() + fresh.detach()
        else:
            if args.update == "predict":
                at([w + coef * (w - w2) for w, w2 in zip(prev, prev2)])
            elif args.update == "delayed" and args.only:
                keys = args.only.split(",")
                at([w if any(k in nm for k in keys) else c
                    for (nm, _), w, c in zip(model.named_parameters(), prev, cur)])
            elif args.update != "plain":
                at(prev)
            ept = [p.data for p in params]
            loss = model(x, y)
            loss.backward()
            at(cur)
        with torch.no_grad():
            if args.update == "secant":
                if g_prev is None:
                    g_prev = [p.grad.clone() for p in params]
                    num = [torch.zeros_like(p) for p in params]
                    den = [torch.zeros_like(p) for p in params]
                else:
                    for i, p in enumerate(params):
                        dw = ept[i] - e_prev[i]
                        num[i].mul_(coef).add_((1 - coef) * (p.grad - g_prev[i]) * dw)
                        den[i].mul_(coef).add_((1 - coef) * dw * dw)
                        g_prev[i].copy_(p.grad)
                        h = (num[i] / (den[i] + 1e-30)).clamp(min=0)
                        p.grad.add_(h * (cur[i] - ept[i]))
                e_prev = [w.clone() for w in ept]
            elif args.update == "gradx":
                g_now = [p.grad.clone() for p in params]
                if g_prev is not None:
                    for p, gn, gp in zip(params, g_now, g_prev):
                        p.grad.add_(coef * (gn - gp))
                g_prev = g_now
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(params, clip)
        prev2, prev = prev, [w.clone() for w in cur]
        opt.step()
        if (s + 1) % args.log_every == 0:
            print("step %d loss %.4f" % (s + 1, loss.item()), flush=True)
    v = validation_loss(model, xva, yva, T, 64)
    print("RESULT update=%s coef=%g stale=%d lr=%g warmup=%d stop=%d of %d val_loss=%.4f train_s=%.0f threads=%d "
          "torch=%s"
          % (args.update, coef, args.stale if args.update == "partial" else 0, lr, warmup, stop, total, v,
             time.time() - t0,
             torch.get_num_threads(), torch.__version__), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
