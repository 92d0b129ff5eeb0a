#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Write pipehost GPT weights in Hugging Face GPT-2's layout, for tests.

    hf-gpt2-layout.py IN.safetensors OUT.safetensors [--dtype f32|f16|bf16]
        [--prefix transformer.] [--extra-positions N] [--rounded NATIVE.safetensors]
        [--blocks N] [--wte-dtype I64]

IN holds pipehost's names (embed.tokens, block0.qkv_weight, ..., lnf.weight);
OUT gets GPT-2's (wte.weight, h.0.attn.c_attn.weight [in, out], ..., ln_f.*,
no lm_head: tied), each rounded to DTYPE (nearest even).  --rounded also
writes IN with every value rounded the same way, under pipehost's names and
in F32: what pipehost must read OUT as, bit for bit.  --extra-positions adds
rows to wpe (n_positions > T); --blocks writes only the first N blocks.
Standard library only: make check runs it (the inverse of core/hf_gpt2.c).
"""
import argparse
import json
import math
import struct
import sys


def read_st(path):
    with open(path, "rb") as f:
        blob = f.read()
    n = struct.unpack("<Q", blob[:8])[0]
    head = json.loads(blob[8:8 + n])
    out = {}
    for name, e in head.items():
        if name == "__metadata__":
            continue
        assert e["dtype"] == "F32", name
        b, en = e["data_offsets"]
        vals = list(struct.unpack("<%df" % ((en - b) // 4), blob[8 + n + b:8 + n + en]))
        out[name] = (e["shape"], vals)
    return out


def bf16_bits(x):
    u = struct.unpack("<I", struct.pack("<f", x))[0]
    if (u & 0x7F800000) == 0x7F800000:
        return u >> 16
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF


def encode(vals, dtype):
    """(bytes, the values as they read back)"""
    if dtype == "F32":
        return struct.pack("<%df" % len(vals), *vals), vals
    if dtype == "F16":
        raw = struct.pack("<%de" % len(vals), *vals)
        return raw, list(struct.unpack("<%de" % len(vals), raw))
    if dtype == "BF16":
        bits = [bf16_bits(v) for v in vals]
        back = [struct.unpack("<f", struct.pack("<I", b << 16))[0] for b in bits]
        return struct.pack("<%dH" % len(bits), *bits), back
    if dtype == "I64":
        return struct.pack("<%dq" % len(vals), *[int(v) for v in vals]), vals
    raise ValueError(dtype)


def write_st(path, tensors):
    """tensors: list of (name, dtype, shape, raw bytes)"""
    head, off, data = {}, 0, []
    for name, dtype, shape, raw in tensors:
        head[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(raw)]}
        off += len(raw)
        data.append(raw)
    hj = json.dumps(head, separators=(",", ":")).encode()
    hj += b" " * (-len(hj) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hj)) + hj + b"".join(data))


def transpose(vals, rows, cols):
    return [vals[i * cols + j] for j in range(cols) for i in range(rows)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("dst")
    ap.add_argument("--dtype", default="f32")
    ap.add_argument("--prefix", default="")
    ap.add_argument("--extra-positions", type=int, default=0)
    ap.add_argument("--rounded")
    ap.add_argument("--blocks", type=int, default=-1)
    ap.add_argument("--wte-dtype")
    a = ap.parse_args()
    dt = a.dtype.upper()
    w = read_st(a.src)
    tokens_shape, tokens = w["embed.tokens"]
    V, d = tokens_shape
    T = w["embed.positions"][0][0]
    nblocks = sum(1 for k in w if k.endswith(".qkv_weight"))
    if a.blocks >= 0:
        nblocks = a.blocks
    hf, rounded = [], {}

    def put(name, shape, vals, dtype=dt):
        raw, back = encode(vals, dtype)
        hf.append((a.prefix + name, dtype, shape, raw))
        return back

    rounded["embed.tokens"] = put("wte.weight", [V, d], tokens, a.wte_dtype or dt)
    pos = w["embed.positions"][1]
    extra = [math.sin(i) * 0.01 for i in range(a.extra_positions * d)]
    rounded["embed.positions"] = put("wpe.weight", [T + a.extra_positions, d], pos + extra)[:T * d]
    for b in range(nblocks):
        p = lambda n: w["block%d.%s" % (b, n)][1]
        rd = w["block%d.fc_weight" % b][0][0]
        lnw, lnb, bias = p("ln_weight"), p("ln_bias"), p("biases")
        r = {}
        r["ln1w"] = put("h.%d.ln_1.weight" % b, [d], lnw[:d])
        r["ln1b"] = put("h.%d.ln_1.bias" % b, [d], lnb[:d])
        qkv = put("h.%d.attn.c_attn.weight" % b, [d, 3 * d], transpose(p("qkv_weight"), 3 * d, d))
        qkvb = put("h.%d.attn.c_attn.bias" % b, [3 * d], bias[:3 * d])
        proj = put("h.%d.attn.c_proj.weight" % b, [d, d], transpose(p("proj_weight"), d, d))
        projb = put("h.%d.attn.c_proj.bias" % b, [d], bias[3 * d:4 * d])
        r["ln2w"] = put("h.%d.ln_2.weight" % b, [d], lnw[d:])
        r["ln2b"] = put("h.%d.ln_2.bias" % b, [d], lnb[d:])
        fc = put("h.%d.mlp.c_fc.weight" % b, [d, rd], transpose(p("fc_weight"), rd, d))
        fcb = put("h.%d.mlp.c_fc.bias" % b, [rd], bias[4 * d:4 * d + rd])
        fcp = put("h.%d.mlp.c_proj.weight" % b, [rd, d], transpose(p("fc_proj_weight"), d, rd))
        fcpb = put("h.%d.mlp.c_proj.bias" % b, [d], bias[4 * d + rd:])
        # old checkpoints carry the causal mask as a buffer: it is ignored
        hf.append((a.prefix + "h.%d.attn.bias" % b, "F32", [1, 1, T, T], struct.pack("<%df" % (T * T), *([1.0] * (T * T)))))
        rounded["block%d.ln_weight" % b] = r["ln1w"] + r["ln2w"]
        rounded["block%d.ln_bias" % b] = r["ln1b"] + r["ln2b"]
        rounded["block%d.qkv_weight" % b] = transpose(qkv, d, 3 * d)
        rounded["block%d.proj_weight" % b] = transpose(proj, d, d)
        rounded["block%d.fc_weight" % b] = transpose(fc, d, rd)
        rounded["block%d.fc_proj_weight" % b] = transpose(fcp, rd, d)
        rounded["block%d.biases" % b] = qkvb + projb + fcb + fcpb
    rounded["lnf.weight"] = put("ln_f.weight", [d], w["lnf.weight"][1])
    rounded["lnf.bias"] = put("ln_f.bias", [d], w["lnf.bias"][1])
    rounded["head.weight"] = rounded["embed.tokens"]
    write_st(a.dst, hf)
    if a.rounded:
        # head.weight is stored once, as embed.tokens (tied): its shape is the table's
        shape = lambda k: w[k][0] if k in w else w["embed.tokens"][0]
        write_st(a.rounded, [(k, "F32", shape(k), struct.pack("<%df" % len(v), *v)) for k, v in rounded.items()])


if __name__ == "__main__":
    sys.exit(main())
