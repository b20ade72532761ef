#!/bin/bash
# Issue 13's placement_group_create/removal and actors_created_per_second, A
# against B: `lumen microbenchmark` with only those two metrics, interleaved
# A B B A A B (each run's output kept as OUTDIR/A1.out ... B3.out); then the
# CPU of the whole process tree per group and per actor for a fixed workload
# (build/bench/pg_actor_workload: R rounds of each minus 0 rounds, perf stat
# task-clock; steadier than rates on a shared machine), sides alternating.
#
#   bench/ab/pg_actor_ab.sh OUTDIR A_LUMEN B_LUMEN [A_WORKLOAD B_WORKLOAD [ROUNDS]]
set -u
out=$1; a=$2; b=$3; wa=${4:-}; wb=${5:-}; rounds=${6:-40}
mkdir -p "$out"
export LUMEN_BENCH_ONLY='^(placement_group_create/removal|actors_created_per_second)$'
na=0; nb=0
for side in A B B A A B; do
  if [ "$side" = A ]; then na=$((na + 1)); bin=$a; f="$out/A$na.out"
  else nb=$((nb + 1)); bin=$b; f="$out/B$nb.out"; fi
  echo "# load $(cut -d' ' -f1-3 /proc/loadavg) at $(date -u +%H:%M:%S)" > "$f"
  "$bin" microbenchmark >> "$f" 2>&1
  grep -E "^(placement|actors)" "$f" | sed "s|^|$(basename "$f") |"
done
[ -z "$wa" ] && exit 0
cpu() {  # bin pg_rounds actor_rounds -> task-clock ms
  local d; d=$(mktemp -d)
  TMPDIR=$d perf stat -x, -e task-clock -o "$d/stat" "$1" "$2" "$3" > /dev/null 2>&1
  awk -F, '$3 ~ /task-clock/ {print $1}' "$d/stat"
  rm -rf "$d"
}
for rep in 1 2 3; do
  for side in A B; do
    w=$wa; [ "$side" = B ] && w=$wb
    base=$(cpu "$w" 0 0); pg=$(cpu "$w" "$rounds" 0); ac=$(cpu "$w" 0 "$rounds")
    awk -v s="$side" -v r="$rep" -v b="$base" -v p="$pg" -v c="$ac" -v n="$rounds" \
        -v load="$(cut -d' ' -f1-3 /proc/loadavg)" \
        'BEGIN {printf "cpu rep=%s side=%s us_per_group=%.1f us_per_actor=%.1f load=[%s]\n",
                r, s, (p - b) * 1000 / (n * 100), (c - b) * 1000 / (n * 20), load}' | tee -a "$out/cpu.txt"
  done
done
