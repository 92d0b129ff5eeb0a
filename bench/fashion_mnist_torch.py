#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""PyTorch twin of etc/fashion-mnist.ini for bench/cpu-vs-torch.sh: the
whole job, as a PyTorch user would write it, in float32 on the CPU.

The same model (conv 3x3 32 pad 1, relu, maxpool 2, conv 3x3 64 pad 1,
relu, maxpool 2, flatten, fc 128, relu, dropout, fc 10, mean
cross-entropy; PyTorch's default initialisation, which pipehost's conv2d
and linear copy), the same data (Debian's gzip IDX files, pixels / 255),
the same epochs of floor(60000 / batch) steps over a fresh random order each
epoch (the last partial batch dropped, as core/train.c does), the same
AdamW (weight decay on weights only, never on biases) and the same
learning rate at every step (core/optim.c's ph_lr_at: linear warm-up
lr*(t+1)/warmup, then cosine from lr at t = warmup to min_lr at the last
step).  The test accuracy after each epoch, on the whole test set, as
pipehost's `eval = yes` does.

The hyper-parameters come from the INI (the keys this model reads; a key
the INI leaves out takes pipehost's default), so the twin follows the
shipped job when its INI changes.  What is not the same: the random
numbers (initial weights, epoch order, dropout masks), which no two
libraries share.

    python3 bench/fashion_mnist_torch.py [--ini etc/fashion-mnist.ini]
        [--threads N] [--steps N] [--epochs N] [--test-limit N]

The last line: "RESULT job=fashion-mnist accuracy=91.23 test_loss=0.25
steps=1872 train_s=... wall_s=... threads=2 torch=2.x" (wall_s from the
interpreter's start, measured inside; bench/cpu-vs-torch.sh times the
process from outside).
"""
import argparse
import configparser
import gzip
import math
import os
import struct
import sys
import time

T_START = time.time()

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def ini_get(cp, section, key, default, conv=str):
    """A value of the INI (inline ; comments stripped), or pipehost's default."""
    if not cp.has_section(section) or not cp.has_option(section, key):
        return default
    return conv(cp.get(section, key).split(";")[0].strip())


def read_ini(path):
    cp = configparser.ConfigParser(interpolation=None, inline_comment_prefixes=(";", "#"))
    cp.read(path)
    return cp


def lr_at(t, lr, warmup, min_lr, total, cosine):
    """core/optim.c's ph_lr_at, step for step."""
    wu = max(warmup, 0)
    t = max(t, 0)
    if t < wu:
        return lr * (t + 1) / wu
    if not cosine or total <= 0:
        return lr
    last = total - 1
    if t >= last:
        return min_lr
    p = (t - wu) / (last - wu)
    return min_lr + 0.5 * (lr - min_lr) * (1.0 + math.cos(math.pi * p))


def read_idx(path, magic):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    if struct.unpack(">I", raw[:4])[0] != magic:
        raise SystemExit("fashion_mnist_torch.py: %s: not an IDX file of the expected kind" % path)
    if magic == 0x803:
        n, r, c = struct.unpack(">III", raw[4:16])
        return np.frombuffer(raw, dtype=np.uint8, offset=16).reshape(n, 1, r, c)
    n = struct.unpack(">I", raw[4:8])[0]
    return np.frombuffer(raw, dtype=np.uint8, offset=8)[:n]


def load(directory, split):
    x = read_idx(os.path.join(directory, "%s-images-idx3-ubyte.gz" % split), 0x803)
    y = read_idx(os.path.join(directory, "%s-labels-idx1-ubyte.gz" % split), 0x801)
    # pixels in [0,1] as float(byte) / 255.f, as core/data_fashion_mnist.c
    return torch.from_numpy(x.astype(np.float32) / np.float32(255.0)), torch.from_numpy(y.astype(np.int64))


class Net(nn.Module):
    def __init__(self, f1, f2, units, rate, classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(1, f1, 3, padding=1)
        self.conv2 = nn.Conv2d(f1, f2, 3, padding=1)
        self.fc1 = nn.Linear(f2 * 7 * 7, units)
        self.fc2 = nn.Linear(units, classes)
        self.drop = nn.Dropout(rate)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = self.drop(F.relu(self.fc1(x.flatten(1))))
        return self.fc2(x)


def evaluate(model, x, y, batch):
    model.eval()
    loss, correct = 0.0, 0
    with torch.no_grad():
        for i in range(0, len(x), batch):
            out = model(x[i:i + batch])
            loss += F.cross_entropy(out, y[i:i + batch], reduction="sum").item()
            correct += (out.argmax(1) == y[i:i + batch]).sum().item()
    model.train()
    return loss / len(x), 100.0 * correct / len(x)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ini", default=os.path.join(HERE, "..", "etc", "fashion-mnist.ini"))
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="torch.set_num_threads (default: cores)")
    ap.add_argument("--epochs", type=int, default=0, help="override the INI's [run] epochs")
    ap.add_argument("--steps", type=int, default=0, help="optimizer steps in all (as [run] steps); 0 = epochs")
    ap.add_argument("--test-limit", type=int, default=0, help="evaluate on the first N test images only")
    ap.add_argument("--eval-batch", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=-1, help="default: the INI's [run] seed")
    args = ap.parse_args()

    cp = read_ini(args.ini)
    B = ini_get(cp, "run", "batch", 32, int)
    epochs = args.epochs or ini_get(cp, "run", "epochs", 1, int)
    seed = args.seed if args.seed >= 0 else ini_get(cp, "run", "seed", 1, int)
    do_eval = ini_get(cp, "run", "eval", "no").lower() in ("yes", "true", "1", "on")
    path = ini_get(cp, "data", "path", "/usr/share/datasets/fashion-mnist")
    if not os.path.isabs(path):  # INI-relative, as pipehost resolves it
        path = os.path.join(os.path.dirname(os.path.abspath(args.ini)), path)
    opt_type = ini_get(cp, "optimizer", "type", "sgd")
    lr = ini_get(cp, "optimizer", "lr", 0.01, float)
    wd = ini_get(cp, "optimizer", "weight_decay", 0.0, float)
    b1 = ini_get(cp, "optimizer", "beta1", 0.9, float)
    b2 = ini_get(cp, "optimizer", "beta2", 0.999, float)
    eps = ini_get(cp, "optimizer", "eps", 1e-8, float)
    warmup = ini_get(cp, "optimizer", "warmup", 0, int)
    min_lr = ini_get(cp, "optimizer", "min_lr", 0.0, float)
    cosine = ini_get(cp, "optimizer", "lr_schedule", "constant") == "cosine"
    clip = ini_get(cp, "optimizer", "clip", 0.0, float)
    f1 = ini_get(cp, "layer conv1", "filters", 32, int)
    f2 = ini_get(cp, "layer conv2", "filters", 64, int)
    units = ini_get(cp, "layer fc1", "units", 128, int)
    rate = ini_get(cp, "layer drop", "rate", 0.0, float)
    if opt_type != "adamw":
        raise SystemExit("fashion_mnist_torch.py: the INI's optimizer is %s; this twin knows adamw" % opt_type)

    torch.set_num_threads(args.threads)
    torch.manual_seed(seed)
    xtr, ytr = load(path, "train")
    xte, yte = load(path, "t10k")
    if args.test_limit:
        xte, yte = xte[:args.test_limit], yte[:args.test_limit]
    n = len(xtr)
    spe = n // B
    total = args.steps or epochs * spe
    model = Net(f1, f2, units, rate)
    decay = [p for nm, p in model.named_parameters() if not nm.endswith("bias")]
    nodecay = [p for nm, p in model.named_parameters() if nm.endswith("bias")]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": wd}, {"params": nodecay, "weight_decay": 0.0}],
                            lr=lr, betas=(b1, b2), eps=eps)
    gen = torch.Generator().manual_seed(seed)
    t0 = time.time()
    acc, tloss = float("nan"), float("nan")
    perm = None
    for s in range(total):
        epoch, pos = divmod(s, spe)
        if pos == 0:
            perm = torch.randperm(n, generator=gen)
        idx = perm[pos * B:(pos + 1) * B]
        for g in opt.param_groups:
            g["lr"] = lr_at(s, lr, warmup, min_lr, total, cosine)
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(xtr[idx]), ytr[idx])
        loss.backward()
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        last = s + 1 == total
        if (s + 1) % 100 == 0 or last:
            print("step %d/%d loss %.4f lr %.3g" % (s + 1, total, loss.item(), opt.param_groups[0]["lr"]), flush=True)
        if do_eval and (pos == spe - 1 or last):
            tloss, acc = evaluate(model, xte, yte, args.eval_batch)
            print("epoch %d: test loss %.4f, accuracy %.2f%% (%d samples)" % (epoch + 1, tloss, acc, len(xte)),
                  flush=True)
    train_s = time.time() - t0
    print("RESULT job=fashion-mnist accuracy=%.2f test_loss=%.4f steps=%d train_s=%.1f wall_s=%.1f threads=%d "
          "torch=%s" % (acc, tloss, total, train_s, time.time() - T_START, torch.get_num_threads(),
                        torch.__version__))


if __name__ == "__main__":
    sys.exit(main())
