#!/usr/bin/env python3
# Usage: analyse.py LABEL  -- CPU per task by role within the window in which tasks ran.
import os, subprocess, sys, collections
L = sys.argv[1]; D = os.environ.get('RUNS', '.') + '/'
role = {}
for line in open(D + L + '.ps'):
    f = line.split()
    if f and f[0].isdigit() and len(f) >= 5:
        r = f[4].replace('LUMEN_ROLE=', '') if f[4].startswith('LUMEN_ROLE=') else ('client driver' if '--client' in line else 'driver')
        role[f[0]] = r
out = subprocess.run(['perf', 'script', '-i', D + L + '.perf.data', '-F', 'event,pid,time,period'],
                     capture_output=True, text=True).stdout
rows = []
for line in out.splitlines():
    f = line.replace(':', ' ').split()
    # pid time period event
    try:
        pid, t, period, ev = f[0], float(f[1]), int(f[2]), f[3] if len(f) > 3 else ''
    except (ValueError, IndexError):
        continue
    rows.append((pid, t, period, 'probe' if 'small' in line else 'cpu'))
pt = [r for r in rows if r[3] == 'probe']
t0, t1 = min(r[1] for r in pt), max(r[1] for r in pt)
tasks = sum(r[2] for r in pt)
exec_pids = {r[0] for r in pt}
cpu = collections.Counter()
for pid, t, period, ev in rows:
    if ev == 'cpu' and t0 <= t <= t1:
        r = role.get(pid, '?')
        if r == 'worker':
            r = 'worker(exec tasks)' if pid in exec_pids else 'worker(submitter/other)'
        cpu[r] += period
tot = sum(cpu.values())
print(f'{L}: t {t0:.3f},{t1:.3f} window {t1-t0:.2f} s, tasks ~{tasks}, cpu {tot/1e9:.2f} s, {tot/1e3/tasks:.1f} us/task')
for r, v in sorted(cpu.items(), key=lambda x: -x[1]):
    print(f'  {r:28s} {v/1e9:7.2f} s  {v/1e3/tasks:6.2f} us/task')
# per-pid detail
per = collections.Counter(); ptasks = collections.Counter()
for pid, t, period, ev in rows:
    if t0 <= t <= t1:
        (per if ev == 'cpu' else ptasks)[pid] += period
print('  pid role cpu_s tasks')
for pid, v in sorted(per.items(), key=lambda x: -x[1])[:14]:
    print(f'   {pid} {role.get(pid,"?"):14s} {v/1e9:6.2f} {ptasks[pid]}')
open(D + L + '.exec_pids', 'w').write(','.join(sorted(exec_pids)))
open(D + L + '.window', 'w').write(f'{t0:.3f},{t1:.3f}')
