#!/bin/bash
# System calls by kind, context switches and CPU over all processes of a
# `lumen microbenchmark` run (perf stat follows forks: head, daemons,
# workers), for one metric: each side runs twice, once with the metric and
# once with set-up only, so that the difference is the metric's own work.
# Load-independent where rates are not (doc/benchmark.md, "Stop 27").
#
#   bench/ab/syscalls_by_kind.sh OUT METRIC REPS NAME=BIN [NAME=BIN ...]
#   bench/ab/syscalls_by_kind.sh /tmp/sync.log single_client_tasks_sync 1 \
#       A=/work/ab-bin/Af/lumen M=build/bin/lumen
#
# Each line of OUT: side, metric or set-up, its rate, and the counts. For the
# sync task metric two `sendto` are one task (the push and the reply).
set -u
out=$1; metric=$2; reps=$3; shift 3
ev=task-clock,context-switches
for s in futex epoll_wait sendmsg recvmsg sendto recvfrom write read sched_yield; do
  ev="$ev,syscalls:sys_enter_$s"
done
for r in $(seq 1 "$reps"); do
  for side in "$@"; do
    name=${side%%=*}; bin=${side#*=}
    for only in '^(none)$' "^($metric)\$"; do
      d=$(mktemp -d)
      res=$(LUMEN_BENCH_ONLY=$only TMPDIR=$d perf stat -x, -e "$ev" -o "$d/stat" "$bin" microbenchmark \
              2>/dev/null | grep -v '^#' | awk '{printf "%s=%s ", $1, $2}')
      st=$(grep -v '^#' "$d/stat" | awk -F, 'NF>2 {sub("syscalls:sys_enter_","",$3); printf "%s=%s ", $3, $1}')
      rm -rf "$d"
      echo "$(date -u +%H:%M:%S) rep=$r side=$name only=$only load=[$(cut -d' ' -f1 /proc/loadavg)] $res $st" | tee -a "$out"
    done
  done
done
