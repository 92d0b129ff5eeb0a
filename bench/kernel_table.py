#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Where a training step's GPU time goes, kernel by kernel, from Nsight
Compute's CSV: bench/gpt2-kernels.sh runs pipehost under

    ncu --csv --log-file FILE --metrics gpu__time_duration.sum ...

and this prints one line per kernel name (its launches, milliseconds and
share of the summed kernel time, per step), the heaviest first:

    python3 bench/kernel_table.py FILE --steps S [--top N] [--label NAME]

ncu's CSV comes in two shapes and both are read: the default "details"
page (a row per kernel and metric: "Kernel Name", "Metric Name", "Metric
Unit", "Metric Value") and "--page raw" (a row per kernel, a column per
metric, the units in the row under the header).  Numbers may carry
thousands separators; units are ns, us, ms or s in either spelling.
Lines before the header (ncu's ==PROF== messages, the program's output)
are skipped.  Exits 1 with one line when the file holds no kernel.

The summed kernel time is the GPU's busy time when kernels run one at a
time, as under ncu; set against the step time measured without ncu it
says how much of a step the GPU waits on the host.
"""
import argparse
import csv
import sys

METRIC = "gpu__time_duration.sum"
UNIT_MS = {"nsecond": 1e-6, "ns": 1e-6, "usecond": 1e-3, "us": 1e-3, "msecond": 1.0, "ms": 1.0,
           "second": 1e3, "s": 1e3}


def number(text):
    return float(text.replace(",", "").replace(" ", ""))


def to_ms(value, unit):
    unit = (unit or "nsecond").strip().lower()
    if unit not in UNIT_MS:
        raise ValueError("unknown time unit %r" % unit)
    return number(value) * UNIT_MS[unit]


def read_rows(path):
    """(header, rows) from the first line that names the kernel column on."""
    with open(path, newline="", errors="replace") as f:
        lines = f.read().splitlines()
    for i, line in enumerate(lines):
        if '"Kernel Name"' in line:
            rows = list(csv.reader(lines[i:]))
            return rows[0], rows[1:]
    return None, []


def kernel_times(path):
    """[(kernel name, ms)] in launch order."""
    header, rows = read_rows(path)
    if header is None:
        return []
    col = {name: k for k, name in enumerate(header)}
    name_at = col["Kernel Name"]
    out = []
    if "Metric Name" in col:  # details: one row per metric
        at, unit_at = col["Metric Value"], col.get("Metric Unit")
        for r in rows:
            if len(r) > at and r[col["Metric Name"]] == METRIC:
                out.append((r[name_at], to_ms(r[at], r[unit_at] if unit_at is not None else "nsecond")))
    elif METRIC in col:  # raw: a units row, then one row per kernel
        at = col[METRIC]
        unit = "nsecond"
        for r in rows:
            if len(r) <= at:
                continue
            if not r[name_at] and not r[0]:  # the units row
                unit = r[at] or unit
                continue
            try:
                out.append((r[name_at], to_ms(r[at], unit)))
            except ValueError:
                unit = r[at] or unit  # a units row with an ID
    return out


def print_table(label, times, steps, top, source):
    """times [(kernel name, ms)] over `steps` steps, as one line of totals
    per step (source: where they came from) and the `top` heaviest names;
    gpt2_124m_torch.py prints PyTorch's with it too."""
    by_name = {}
    for name, ms in times:
        n, t = by_name.get(name, (0, 0.0))
        by_name[name] = (n + 1, t + ms)
    total = sum(t for _, t in by_name.values())
    s = steps
    ranked = sorted(by_name.items(), key=lambda kv: -kv[1][1])
    print("%s: %d kernel launches and %.2f ms of kernel time per step (%s)"
          % (label, round(len(times) / s), total / s, source))
    print("  %-60s %9s %9s %9s %6s" % ("kernel", "calls", "ms", "us/call", "share"))
    for name, (n, t) in ranked[:top]:
        print("  %-60s %9.1f %9.3f %9.1f %5.1f%%" % (name[:60], n / s, t / s, 1000 * t / n, 100 * t / total))
    rest = ranked[top:]
    if rest:
        n = sum(v[0] for _, v in rest)
        t = sum(v[1] for _, v in rest)
        print("  %-60s %9.1f %9.3f %9s %5.1f%%" % ("(%d others)" % len(rest), n / s, t / s, "", 100 * t / total))
    sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv", help="ncu --csv output")
    ap.add_argument("--steps", type=float, default=1.0, help="training steps the profile covers (divides)")
    ap.add_argument("--top", type=int, default=25, help="kernel names listed; the rest are summed in one line")
    ap.add_argument("--label", default="pipehost", help="first word of the total line")
    args = ap.parse_args()
    times = kernel_times(args.csv)
    if not times:
        sys.exit("kernel_table.py: no kernel with %s in %s" % (METRIC, args.csv))
    print_table(args.label, times, args.steps, args.top,
                "%d launches over %g steps" % (len(times), args.steps))


if __name__ == "__main__":
    main()
