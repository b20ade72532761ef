#!/bin/bash
# CPU time per async task of the whole process tree (driver, head, daemon,
# workers: perf stat follows forks), and the wall-clock rate, for a fixed
# workload: build/bench/syscalls_per_task with N = SMALL and LARGE no-op
# tasks (M actor calls each); the difference divided by LARGE - SMALL is the
# cost of one task without start-up and shutdown. Sides alternate (A B A B).
# CPU per task depends less on the machine's load than rates do, but spinning
# threads (the executor's 100 us, Get's 50 us) spin longer on a loaded
# machine: compare medians of several alternating runs. syscalls_per_task
# uses a 256 MiB store, so that the store's background reservation is over
# before the tasks start in either run.
#
#   bench/ab/cpu_per_task.sh OUT REPS SMALL LARGE M NAME=BIN [NAME=BIN ...]
#   bench/ab/cpu_per_task.sh /tmp/cpu.log 3 2000 52000 0 \
#       main=/work/main/build/bench/syscalls_per_task new=build/bench/syscalls_per_task
#
# Each line of OUT: side, the large run's task rate, CPU µs per task, context
# switches per task, load.
set -u
out=$1; reps=$2; small=$3; large=$4; m=$5; shift 5
run() {  # bin n -> "task_clock_ms ctx rate"
  local d; d=$(mktemp -d)
  local rate
  rate=$(TMPDIR=$d perf stat -x, -e task-clock,context-switches -o "$d/stat" "$1" "$2" "$m" \
           2>/dev/null | awk '/^tasks_per_s/ {print $2}')
  local tc cs
  tc=$(awk -F, '$3 ~ /task-clock/ {print $1}' "$d/stat")
  cs=$(awk -F, '$3 ~ /context-switches/ {print $1}' "$d/stat")
  rm -rf "$d"
  echo "$tc $cs $rate"
}
for r in $(seq 1 "$reps"); do
  for side in "$@"; do
    name=${side%%=*}; bin=${side#*=}
    read -r tc0 cs0 _ < <(run "$bin" "$small")
    read -r tc1 cs1 rate < <(run "$bin" "$large")
    awk -v n="$name" -v r="$r" -v a="$tc0" -v b="$tc1" -v c="$cs0" -v d="$cs1" -v rate="$rate" \
        -v k=$((large - small)) -v load="$(cut -d' ' -f1-3 /proc/loadavg)" \
        'BEGIN {printf "rep=%s side=%s rate=%s cpu_us_per_task=%.2f ctxsw_per_task=%.3f load=[%s]\n",
                r, n, rate, (b - a) * 1000 / k, (d - c) / k, load}' | tee -a "$out"
  done
done
