#!/bin/bash
# A = main before (ae2c306, /work/wt-s40-base), N = events in the reply (this stop).
# Alternating 3-round runs of `lumen microbenchmark --task-events`.
out=${1:-ab.txt}; reps=${2:-2}
for i in $(seq 1 $reps); do
  for side in A N; do
    bin=/work/main/build/bin/lumen; [ $side = A ] && bin=/work/wt-s40-base/build/bin/lumen
    echo "=== side $side run $i $(date -u +%H:%M:%S)" >> $out
    LUMEN_TASK_EVENTS_ROUNDS=3 $bin microbenchmark --task-events >> $out 2>&1
  done
done
echo "=== done $(date -u +%H:%M:%S)" >> $out
