#!/usr/bin/env python3
# Usage: symdiff.py LABEL_A LABEL_B ROLE  -- us/task per symbol (self) in ROLE's processes within the task window.
import os, subprocess, sys, collections, re
D = os.environ.get('RUNS', '.') + '/'
def load(L, want):
    role = {}
    for line in open(D + L + '.ps'):
        f = line.split()
        if f and f[0].isdigit() and len(f) >= 5:
            role[f[0]] = f[4].replace('LUMEN_ROLE=', '') if f[4].startswith('LUMEN_ROLE=') else ('client' if '--client' in line else 'driver')
    t0, t1 = map(float, open(D + L + '.window').read().split(','))
    ex = set(open(D + L + '.exec_pids').read().split(','))
    out = subprocess.run(['perf', 'script', '-i', D + L + '.perf.data', '-F', 'event,pid,time,period,ip,sym', '--max-stack', '1'], capture_output=True, text=True).stdout
    lines = out.splitlines(); merged = []
    for i, ln in enumerate(lines):
        if ln.startswith('\t'):
            if merged: merged[-1] += ' ' + ln.strip()
        elif ln.strip(): merged.append(ln)
    out = '\n'.join(merged)
    sym = collections.Counter(); tasks = 0
    for line in out.splitlines():
        m = re.match(r'\s*(\d+)\s+([\d.]+):\s+(\d+)\s+(\S+):\s*(.*)', line)
        if not m: 
            continue
        pid, t, period, ev, rest = m.group(1), float(m.group(2)), int(m.group(3)), m.group(4), m.group(5)
        if not (t0 <= t <= t1): continue
        if 'small' in ev: tasks += period; continue
        r = role.get(pid, '?')
        if r == 'worker': r = 'exec' if pid in ex else 'worker-other'
        if r != want and want != 'all': continue
        s = rest.strip().split(' ', 1)[-1] if rest.strip() else '?'
        s = re.sub(r'\(.*', '', s)[:90]
        sym[s] += period
    return sym, tasks
a, ta = load(sys.argv[1], sys.argv[3]); b, tb = load(sys.argv[2], sys.argv[3])
print(f'role {sys.argv[3]}: total A {sum(a.values())/1e3/ta:.2f} us/task, B {sum(b.values())/1e3/tb:.2f} us/task')
keys = set(a) | set(b)
rows = sorted(keys, key=lambda k: -(abs(b[k]/tb - a[k]/ta)))[:int(sys.argv[4]) if len(sys.argv) > 4 else 25]
print(f'{"A":>7} {"B":>7} {"B-A":>7}  symbol (us/task)')
for k in rows:
    print(f'{a[k]/1e3/ta:7.3f} {b[k]/1e3/tb:7.3f} {b[k]/1e3/tb - a[k]/1e3/ta:+7.3f}  {k}')
