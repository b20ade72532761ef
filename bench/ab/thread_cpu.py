#!/usr/bin/env python3
"""CPU share of every thread of a running Lumen workload, by process role.

Starts CMD, waits DELAY seconds (start-up), then reads utime+stime of every
thread of every process whose executable is CMD's over WINDOW seconds, and
prints each thread's share of one CPU with its process's LUMEN_ROLE (driver
when unset) and its name. Where the CPU of a steady phase goes, without the
sampling profiler's overhead.

  bench/ab/thread_cpu.py [--delay 3] [--window 3] -- build/bench/syscalls_per_task 400000 0
"""
import argparse, os, subprocess, sys, time

ap = argparse.ArgumentParser()
ap.add_argument("--delay", type=float, default=3.0)
ap.add_argument("--window", type=float, default=3.0)
ap.add_argument("cmd", nargs="+")
a = ap.parse_args()
exe = os.path.realpath(a.cmd[0])
tick = os.sysconf("SC_CLK_TCK")


def snapshot():
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            if os.path.realpath(f"/proc/{pid}/exe") != exe:
                continue
            env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
            role = next((e[11:].decode() for e in env if e.startswith(b"LUMEN_ROLE=")), "") or "driver"
            for tid in os.listdir(f"/proc/{pid}/task"):
                st = open(f"/proc/{pid}/task/{tid}/stat").read()
                name = st[st.index("(") + 1:st.rindex(")")]
                f = st[st.rindex(")") + 2:].split()
                out[(pid, tid)] = (role, name, int(f[11]) + int(f[12]), int(f[11]), int(f[12]))
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            pass
    return out


p = subprocess.Popen(a.cmd, stdout=subprocess.DEVNULL)
time.sleep(a.delay)
s0, t0 = snapshot(), time.time()
time.sleep(a.window)
s1, t1 = snapshot(), time.time()
p.wait()
rows, by_role = [], {}
for k, v in s1.items():
    if k not in s0:
        continue
    d = (v[2] - s0[k][2]) / tick / (t1 - t0)
    du = (v[3] - s0[k][3]) / tick / (t1 - t0)
    rows.append((d, du, v[0], k[0], k[1], v[1]))
    by_role[v[0]] = by_role.get(v[0], 0) + d
for d, du, role, pid, tid, name in sorted(rows, reverse=True):
    if d > 0.005:
        print(f"{d*100:6.1f}% (user {du*100:5.1f}%)  {role:8s} pid {pid} tid {tid} {name}")
print("by role:", ", ".join(f"{r} {c*100:.1f}%" for r, c in sorted(by_role.items())))
print("load", open("/proc/loadavg").read().strip())
