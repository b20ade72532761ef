#!/usr/bin/env python3
"""The A/B table of doc/benchmark.md from a quiet-window.sh directory.

  bench/ab/table.py OUTDIR        # reads OUTDIR/{A1,A2,B1,B2}.out and loadavg.log

B/A is mean(B runs) / mean(A runs); for init_seconds (a time) above 1 is
slower, for every other metric (a rate) below 1 is slower. A1/A2 is the spread
of A's own two runs (max/min), to read B/A against.
"""
import re, sys, os

out = sys.argv[1]
runs = [r for r in ("A1", "A2", "B1", "B2") if os.path.exists(f"{out}/{r}.out")]
vals, units, order = {}, {}, []
for r in runs:
    for line in open(f"{out}/{r}.out"):
        if line.startswith("#") or not line.strip():
            continue
        m = re.match(r"(\S+) (\S+)(?: \+- \S+)? (\S+)$", line.strip())
        if not m:
            continue
        name, v, unit = m.group(1), float(m.group(2)), m.group(3)
        if name not in order:
            order.append(name)
        vals.setdefault(name, {})[r] = v
        units[name] = unit

def fmt(v):
    return "n/a" if v is None else f"{v:.4g}"

print("| metric | unit | " + " | ".join(runs) + " | B/A | A spread |")
print("|---|---|" + "---|" * len(runs) + "---|---|")
for name in order:
    d = vals[name]
    a = [d[r] for r in runs if r[0] == "A" and r in d]
    b = [d[r] for r in runs if r[0] == "B" and r in d]
    ratio = (sum(b) / len(b)) / (sum(a) / len(a)) if a and b and sum(a) else None
    spread = max(a) / min(a) if len(a) > 1 and min(a) > 0 else None
    print(f"| `{name}` | {units[name]} | " + " | ".join(fmt(d.get(r)) for r in runs) +
          f" | {'n/a' if ratio is None else f'{ratio:.2f}'} | {'n/a' if spread is None else f'{spread:.2f}'} |")

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
