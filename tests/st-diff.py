# SPDX-License-Identifier: MIT
# st-diff.py A.st B.st: the largest relative difference between the float32
# tensors of two safetensors files (max |a - b| / max |b| per tensor), and
# the tensor it is in; exit 2 when their names or shapes differ.
import json, struct, sys

def load(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    head = json.loads(raw[8:8 + n])
    body = raw[8 + n:]
    out = {}
    for name, t in head.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        out[name] = (tuple(t["shape"]), struct.unpack("<%df" % ((b - a) // 4), body[a:b]))
    return out

A, B = load(sys.argv[1]), load(sys.argv[2])
if sorted(A) != sorted(B) or any(A[k][0] != B[k][0] for k in A):
    print("different tensors")
    sys.exit(2)
worst, where = 0.0, ""
for k in sorted(A):
    a, b = A[k][1], B[k][1]
    scale = max(abs(v) for v in b) or 1.0
    d = max(abs(x - y) for x, y in zip(a, b)) / scale
    if d > worst:
        worst, where = d, k
print("%.3g %s" % (worst, where))
