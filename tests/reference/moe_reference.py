# SPDX-License-Identifier: MIT
"""An independent reference of the `moe` layer (docs/moe.md), in PyTorch
float64 with autograd, written from GShard's dense formulation (one-hot
masks, cumulative sums for the slot positions, dispatch and combine
tensors [G, S, E, C] and einsums) rather than from the C code's loops.

    python3 moe_reference.py DUMP B T d KEY=VALUE ...

DUMP is what tests/moe-dump wrote for the same arguments (x, the
parameters, dy, the second expert's draws u, and the layer's y, dx and
gradients).  The objective is sum(y * dy) + loss_scale * aux_coef *
sum over groups of S * l_g, l_g = E * sum_e mean_s(p[:, e]) * mean_s(top-1
one-hot[:, e]).  Prints the largest relative error per tensor
(max |a - b| / max |b|) and exits 1 above the tolerance (--tol, 1e-5).
Exits 77 when torch is missing."""
import math
import sys

try:
    import numpy as np
    import torch
except ImportError:
    print("moe_reference: needs numpy and torch; skipped")
    sys.exit(77)


def read_dump(path):
    out = {}
    with open(path, "rb") as f:
        while True:
            line = f.readline()
            if not line:
                break
            name, n = line.decode().split()
            n = int(n)
            out[name] = np.frombuffer(f.read(4 * n), dtype="<f4").copy()
    return out


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    tol = 1e-5
    for a in sys.argv[1:]:
        if a.startswith("--tol="):
            tol = float(a[6:])
    path, B, T, d = args[0], int(args[1]), int(args[2]), int(args[3])
    opt = dict(experts="8", top_k="2", hidden="0", capacity_factor="2", group_size="0",
               second_expert="random", aux_coef="0.01", residual="yes")
    for kv in args[4:]:
        k, v = kv.split("=", 1)
        opt[k] = v
    E, k = int(opt["experts"]), int(opt["top_k"])
    h = int(opt["hidden"]) or 4 * d
    S = int(opt["group_size"]) or T
    cf = float(opt["capacity_factor"])
    C = S if cf == 0 else min(S, max(1, math.ceil(cf * k * S / E - 1e-9)))
    random2 = opt["second_expert"] == "random" and k == 2
    coef = float(opt["aux_coef"])
    residual = opt["residual"] in ("yes", "true", "on", "1")
    loss_scale = 0.25
    D = read_dump(path)
    t = lambda a: torch.tensor(a, dtype=torch.float64)
    x = t(D["x"]).reshape(B * T // S, S, d).requires_grad_()   # [G, S, d]
    wg = t(D["gate_weight"]).reshape(E, d).requires_grad_()
    w1 = t(D["fc_weight"]).reshape(E, h, d).requires_grad_()
    w2 = t(D["fc_proj_weight"]).reshape(E, d, h).requires_grad_()
    bias = t(D["biases"]).requires_grad_()
    b1, b2 = bias[: E * h].reshape(E, h), bias[E * h:].reshape(E, d)
    dy = t(D["dy"]).reshape(B * T // S, S, d)
    u = t(D["u"]).reshape(B * T // S, S)
    G = x.shape[0]

    p = torch.softmax(torch.einsum("gsd,ed->gse", x, wg), dim=-1)   # [G, S, E]
    with torch.no_grad():
        i1 = p.argmax(-1)
        m1 = torch.nn.functional.one_hot(i1, E).double()              # before capacity
        density = m1.mean(1)                                          # [G, E]
        pos1 = torch.cumsum(m1, 1) - 1
        keep1 = m1 * (pos1 < C)
        if k == 2:
            i2 = p.masked_fill(m1.bool(), -1.0).argmax(-1)
            m2 = torch.nn.functional.one_hot(i2, E).double()
    if k == 2:
        g1 = (p * m1).sum(-1)
        g2 = (p * m2).sum(-1)
        c1, c2 = g1 / (g1 + g2), g2 / (g1 + g2)
        with torch.no_grad():
            if random2:
                m2 = m2 * (u < 2 * c2).double().unsqueeze(-1)
            pos2 = torch.cumsum(m2, 1) - 1 + keep1.sum(1, keepdim=True)
            keep2 = m2 * (pos2 < C)
    else:
        c1 = (p * m1).sum(-1)
    with torch.no_grad():
        oh = lambda pos: torch.nn.functional.one_hot(pos.clamp(0, C - 1).long(), C).double()
        disp = keep1.unsqueeze(-1) * oh((pos1 * keep1).sum(-1)).unsqueeze(2)     # [G,S,E,C]
        if k == 2:
            disp2 = keep2.unsqueeze(-1) * oh((pos2 * keep2).sum(-1)).unsqueeze(2)
    comb = c1[..., None, None] * disp
    if k == 2:
        comb = comb + c2[..., None, None] * disp2
        disp = disp + disp2
    xin = torch.einsum("gsec,gsd->egcd", disp, x)
    hid = torch.nn.functional.gelu(torch.einsum("egcd,ehd->egch", xin, w1) + b1[:, None, None, :],
                                   approximate="tanh")
    out = torch.einsum("egch,edh->egcd", hid, w2) + b2[:, None, None, :]
    y = torch.einsum("gsec,egcd->gsd", comb, out)
    if residual:
        y = y + x
    laux = E * (density * p.mean(1)).sum(-1)                         # [G]
    J = (y * dy).sum() + loss_scale * coef * S * laux.sum()
    J.backward()

    got = {"y": y.detach(), "dx": x.grad, "d_gate_weight": wg.grad, "d_fc_weight": w1.grad,
           "d_fc_proj_weight": w2.grad, "d_biases": bias.grad}
    worst = 0.0
    for name, ref in got.items():
        a = torch.tensor(D[name], dtype=torch.float64).reshape(-1)
        b = ref.reshape(-1)
        err = ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item()
        worst = max(worst, err)
        print(f"  {name:18s} max rel error {err:.2e}")
    drops = 1 - (keep1.sum() + (keep2.sum() if k == 2 else 0)) / (
        m1.sum() + (m2.sum() if k == 2 else 0))
    print(f"  (C = {C}, dropped {drops.item():.3f} of the choices, aux {laux.mean().item():.4f})")
    if worst > tol:
        print(f"moe_reference: worst relative error {worst:.2e} > {tol:.0e}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
