import re,sys,statistics as st
from collections import defaultdict
files=sys.argv[1:]
side=None
rates=defaultdict(lambda: defaultdict(list)); cpu=defaultdict(lambda: defaultdict(list)); ratios=defaultdict(list)
parts=defaultdict(lambda: defaultdict(list))
for f in files:
  for line in open(f):
    m=re.match(r'=== (?:side )?(\w) run',line)
    if m: side=m.group(1); continue
    m=re.match(r'(single_client_tasks_async|1_1_actor_calls_async)_events_(on|off) (\S+) \+-',line)
    if m: rates[(side,m.group(1))][m.group(2)].append(float(m.group(3))); continue
    m=re.match(r'# (single_client_tasks_async|1_1_actor_calls_async)_events_(on|off) CPU per unit \(us\): driver (\S+), head\+node daemon (\S+), workers (\S+)',line)
    if m:
      parts[(side,m.group(1))][m.group(2)].append(tuple(float(m.group(i)) for i in (3,4,5))); continue
    m=re.match(r'# (single_client_tasks_async|1_1_actor_calls_async), events on / off rate by round: (.*) \(median',line)
    if m: ratios[(side,m.group(1))]+= [float(x) for x in m.group(2).split()]
for k in sorted(rates):
  on=rates[k]['on']; off=rates[k]['off']; r=ratios[k]
  p=parts[k]
  d=[st.mean(x[i] for x in p['on'])-st.mean(x[i] for x in p['off']) for i in range(3)]
  con=st.mean(sum(x) for x in p['on']); coff=st.mean(sum(x) for x in p['off'])
  print(f"{k[0]} {k[1]:28s} rounds {len(on)}: on {st.mean(on)/1e3:.1f}k off {st.mean(off)/1e3:.1f}k ratio of means {st.mean(on)/st.mean(off):.3f}; per-round median {st.median(r):.3f} (min {min(r):.3f} max {max(r):.3f}); CPU us on {con:.2f} off {coff:.2f} ({con/coff:.3f}); on-off us driver {d[0]:+.2f} node {d[1]:+.2f} workers {d[2]:+.2f}")
