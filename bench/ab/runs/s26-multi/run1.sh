#!/bin/bash
# Usage: run1.sh LABEL BIN stat|record|base [METRIC] [PROBE]
# Runs METRIC of `BIN microbenchmark` under perf (stat: task-clock and the
# probe count; record: cpu-clock samples with call graphs and the probe), with a
# sampler of /proc writing each lumen process's role (LUMEN_ROLE) to $RUNS/LABEL.ps.
# PROBE: a uprobe on the task body lumen::bench::SmallValue of BIN, made once by
#   perf probe -x BIN -a 'smallA=_ZN5lumen5bench10SmallValueEv'
# so that the probe count is the number of tasks run. BIN must be named lumen
# (the sampler finds the processes by that name). analyse.py LABEL then gives CPU
# per task by role within the window the tasks ran in; symdiff.py LA LB ROLE N the
# symbols whose us/task differ most.
set -u
L=$1; BIN=$2; MODE=$3; MET=${4:-multi_driver_tasks_async|multi_client_tasks_async}; PR=${5:-smallA}
D=${RUNS:-$PWD}; cd /tmp
ONLY="^($MET)\$"
[ "$MODE" = base ] && ONLY='^nothing_at_all$'
( while true; do
    for p in $(pgrep -x lumen); do
      r=$(tr '\0' '\n' < /proc/$p/environ 2>/dev/null | grep '^LUMEN_ROLE=' | head -1)
      echo "$p $(cat /proc/$p/stat 2>/dev/null | awk '{print $4, $14, $15}') $r $(tr '\0' ' ' < /proc/$p/cmdline 2>/dev/null | cut -c1-80)"
    done; echo "--- $(date +%s.%N) $(cut -d' ' -f1 /proc/loadavg)"; sleep 0.5; done ) > $D/$L.ps 2>&1 &
S=$!
start=$(date +%s.%N)
if [ "$MODE" = record ]; then
  LUMEN_BENCH_ONLY="$ONLY" perf record -F 997 -e cpu-clock -e probe_lumen:$PR/call-graph=no/ -g -o $D/$L.perf.data -- $BIN microbenchmark > $D/$L.out 2> $D/$L.err
else
  LUMEN_BENCH_ONLY="$ONLY" perf stat -e task-clock,context-switches,probe_lumen:$PR -x, -o $D/$L.stat -- $BIN microbenchmark > $D/$L.out 2> $D/$L.err
fi
end=$(date +%s.%N)
kill $S
echo "$L wall $(echo "$end - $start" | bc) load $(cut -d' ' -f1-3 /proc/loadavg)" >> $D/$L.out
cat $D/$L.out; [ -f $D/$L.stat ] && grep -v '^#' $D/$L.stat
