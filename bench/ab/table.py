#!/usr/bin/env python3
"""The A/B table of doc/benchmark.md from a quiet-window.sh directory.

  bench/ab/table.py OUTDIR        # reads OUTDIR/<side><n>.out and loadavg.log

Sides are single letters (A, B, and C for a commit between them). For each
pair of sides present, in the order A, C, B, the ratio later/earlier is the
mean of the later side's runs over the mean of the earlier side's: for
init_seconds (a time) above 1 is slower, for every other metric (a rate) below
1 is slower. "A spread" is max/min of A's own runs, to read the ratios against.
"""
import os, re, sys

out = sys.argv[1]
runs = sorted((f[:-4] for f in os.listdir(out) if re.fullmatch(r"[A-Z]\d+\.out", f)),
              key=lambda r: (r[0], int(r[1:])))
sides = [s for s in "ACB" if any(r[0] == s for r in runs)]
vals, units, order = {}, {}, []
for r in runs:
    for line in open(f"{out}/{r}.out"):
        m = re.match(r"(\S+) (\S+)(?: \+- \S+)? (\S+)$", line.strip())
        if line.startswith("#") or not m:
            continue
        name, v, unit = m.group(1), float(m.group(2)), m.group(3)
        if name not in order:
            order.append(name)
        vals.setdefault(name, {})[r] = v
        units[name] = unit

def fmt(v):
    return "n/a" if v is None else f"{v:.4g}"

def mean(name, side):
    xs = [vals[name][r] for r in runs if r[0] == side and r in vals[name]]
    return sum(xs) / len(xs) if xs else None

pairs = [(sides[i], sides[j]) for i in range(len(sides)) for j in range(i + 1, len(sides))]
print("| metric | unit | " + " | ".join(runs) + " | " +
      " | ".join(f"{b}/{a}" for a, b in pairs) + " | A spread |")
print("|---|---|" + "---|" * (len(runs) + len(pairs) + 1))
for name in order:
    d = vals[name]
    ratios = []
    for a, b in pairs:
        ma, mb = mean(name, a), mean(name, b)
        ratios.append("n/a" if ma is None or mb is None or ma == 0 else f"{mb / ma:.2f}")
    a = [d[r] for r in runs if r[0] == "A" and r in d]
    spread = f"{max(a) / min(a):.2f}" if len(a) > 1 and min(a) > 0 else "n/a"
    print(f"| `{name}` | {units[name]} | " + " | ".join(fmt(d.get(r)) for r in runs) +
          " | " + " | ".join(ratios) + f" | {spread} |")

# Mean 1-minute load average per run, from the samples between START and END.
cur, loads = None, {}
for line in open(f"{out}/loadavg.log"):
    parts = line.split()
    if len(parts) >= 3 and parts[1] in ("START", "END"):
        cur = parts[2] if parts[1] == "START" else None
        continue
    if cur and len(parts) >= 2:
        loads.setdefault(cur, []).append(float(parts[1]))
print()
print("mean 1-minute load: " + ", ".join(
    f"{r} {sum(l)/len(l):.2f} (max {max(l):.2f}, {len(l)} samples)" for r, l in loads.items()))
