#!/bin/bash
# A quiet window for an A/B microbenchmark (issue 8; doc/benchmark.md,
# "Restructuring before/after"). Creates /work/QUIET (the gate, /work/prompts/gate,
# holds everyone's builds and tests while it exists), waits until the machine
# has drained, runs the given sides alternately, each a full run with its own
# TMPDIR, and samples /proc/loadavg every 10 s. /work/QUIET is removed on any exit.
#
#   bench/ab/quiet-window.sh OUTDIR BUDGET_S A=/path/lumen B=/path/lumen -- A B A B [-- ARGS]
#
# Sides run in the order given, in pairs; before each pair it checks that the
# budget (seconds, the drain wait included) still leaves room for two runs at
# the mean length of the runs so far, and stops otherwise.
set -u
out=$1; budget=$2; shift 2
declare -A bin
while [ "$1" != "--" ]; do bin[${1%%=*}]=${1#*=}; shift; done
shift
order=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do order+=("$1"); shift; done
[ $# -gt 0 ] && shift
extra=("$@")
mkdir -p "$out"
log=$out/window.log
say() { echo "$(date -u +%H:%M:%S) $*" | tee -a "$log"; }

quiet=${QUIET_FILE:-/work/QUIET}  # another path only to try this script out
trap 'rm -f "$quiet"' EXIT
trap 'exit 130' INT TERM HUP
touch "$quiet"
t0=$(date +%s)
say "QUIET created; budget ${budget}s; lscpu: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs"

# Other engineers' CPU work still running: compilers, linkers, ctest, and any
# program started from some worktree's build/ (test binaries, their daemons and
# workers).
busy() {
  ps -eo pid=,comm=,args= | awk -v self=$$ '$1 != self && ($2 ~ /^(cc1plus|cc1|ld|ld\.bfd|ld\.gold|collect2|ctest|as)$/ || $3 ~ /^\/work\/[^ ]*\/build[^ \/]*\//) { printf " %s:%s", $1, ($2 ~ /^(cc1plus|ld|ctest)$/ ? $2 : $3) }'
}
drain_limit=${DRAIN_LIMIT_S:-720}
while :; do
  b=$(busy); load=$(cut -d' ' -f1 /proc/loadavg)
  waited=$(( $(date +%s) - t0 ))
  if [ -z "$b" ] && awk -v l="$load" 'BEGIN{exit !(l < 1.5)}'; then say "drained after ${waited}s, load $load"; break; fi
  if [ $waited -ge $drain_limit ]; then say "gave up waiting after ${waited}s: load $load, busy:$b"; break; fi
  echo "$(date -u +%H:%M:%S) waiting: load $load busy:$(echo $b | cut -c1-300)" >> "$log"
  sleep 10
done

# Each sample: the time, /proc/loadavg (the benchmark's own processes count in
# it), and any other engineer's work that runs anyway (see busy).
( while :; do echo "$(date -u +%H:%M:%S) $(cat /proc/loadavg) others:$(busy | cut -c1-200)"; sleep 10; done ) >> "$out/loadavg.log" &
sampler=$!
trap 'kill $sampler 2>/dev/null; rm -f "$quiet"' EXIT

declare -A count
total_run=0; runs=0
i=0
for side in "${order[@]}"; do
  i=$(( i + 1 ))
  count[$side]=$(( ${count[$side]:-0} + 1 ))
  name=$side${count[$side]}
  elapsed=$(( $(date +%s) - t0 ))
  if [ $runs -gt 0 ] && [ $(( i % 2 )) -eq 1 ]; then
    mean=$(( total_run / runs ))
    if [ $(( elapsed + 2 * mean )) -gt $budget ]; then say "stop before $name: ${elapsed}s used, a run takes ~${mean}s"; break; fi
  fi
  tmp=$(mktemp -d)
  echo "$(date -u +%H:%M:%S) START $name" >> "$out/loadavg.log"
  say "START $name (${bin[$side]} microbenchmark ${extra[*]:-}) TMPDIR=$tmp"
  s=$(date +%s)
  TMPDIR=$tmp "${bin[$side]}" microbenchmark "${extra[@]}" > "$out/$name.out" 2> "$out/$name.err"
  rc=$?
  d=$(( $(date +%s) - s )); total_run=$(( total_run + d )); runs=$(( runs + 1 ))
  echo "$(date -u +%H:%M:%S) END $name" >> "$out/loadavg.log"
  say "END $name rc=$rc ${d}s"
  rm -rf "$tmp"
done
say "window done after $(( $(date +%s) - t0 ))s"
