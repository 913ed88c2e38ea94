#!/usr/bin/env bash
# Soak: trains the tiny GPT job for STEPS steps on 2 ranks, sampling every rank's resident
# memory (VmRSS) each 0.2 s together with the step reached, and reports each rank's RSS
# early and late after step FROM (default 200: start-up and the first steps' allocations are
# over) and its growth. A leak shows as growth; the bar is under 1%.
# Exits 1 when a rank grew by 1% or more, or the run failed.
# Usage: scripts/soak.sh STEPS [FROM]     (BUILD=build by default)
set -uo pipefail
steps=${1:?usage: soak.sh STEPS [FROM]}
from=${2:-200}
cd "$(dirname "$0")/.."
source scripts/free-port.sh
troupe=${BUILD:-build}/troupe
[[ -x $troupe ]] || { echo "soak: $troupe not built" >&2; exit 2; }
(( from < steps )) || { echo "soak: FROM ($from) must be below STEPS ($steps)" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
metrics=$work/metrics.jsonl
hold_free_port || exit 2
"$troupe" run configs/tiny-gpt.toml --set train.steps="$steps" --set train.log_interval=100 \
  --set cluster.coordinator=127.0.0.1:"$port" --metrics "$metrics" > "$work/output" 2>&1 &
launcher=$!
# One line per sample: step rank rss_kb
while kill -0 "$launcher" 2>/dev/null; do
  step=0; [[ -f $metrics ]] && step=$(wc -l < "$metrics")
  for pid in $(pgrep -f -- "$metrics"); do
    # A rank that ends between pgrep and here has no /proc entry: its redirection fails quietly.
    rank=$({ tr '\0' '\n' < "/proc/$pid/environ"; } 2>/dev/null | sed -n 's/^TROUPE_RANK=//p')
    rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status" 2>/dev/null)
    [[ -n $rank && -n $rss ]] && echo "$step $rank $rss"
  done
  sleep 0.2
done > "$work/samples"
wait "$launcher"; status=$?
if [[ $status != 0 ]]; then
  echo "soak: the run failed (exit $status):"; tail -5 "$work/output"; exit 1
fi
# One sample is noisy (the allocator returns and takes pages in bursts of ~1%), so each rank is
# judged on the median of its samples in the first and in the last quarter of steps FROM..STEPS:
# a leak raises the whole last quarter, a burst moves only a few samples.
quarter=$(( (steps - from) / 4 ))
median() { sort -n | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)] }'; }
result=0
ranks=$(awk '{ print $2 }' "$work/samples" | sort -un)
for r in $ranks; do
  early=$(awk -v r="$r" -v lo="$from" -v hi=$((from + quarter)) '$2 == r && $1 >= lo && $1 < hi { print $3 }' "$work/samples" | median)
  late=$(awk -v r="$r" -v lo=$((steps - quarter)) '$2 == r && $1 >= lo { print $3 }' "$work/samples" | median)
  if [[ -z $early || -z $late ]]; then
    echo "soak: rank $r has no sample in steps $from..$((from + quarter)) or after step $((steps - quarter))"; result=1; continue
  fi
  awk -v r="$r" -v a="$early" -v b="$late" -v from="$from" -v hi=$((from + quarter)) -v lo=$((steps - quarter)) -v steps="$steps" 'BEGIN {
    growth = 100 * (b - a) / a
    printf "rank %s: median %d KB in steps %d-%d, %d KB in steps %d-%d: %+.2f%%\n", r, a, from, hi, b, lo, steps, growth
    exit growth >= 1 }' || result=1
done
[[ -n $ranks ]] || { echo "soak: no samples"; result=1; }
echo "soak: $steps steps, $(wc -l < "$work/samples") samples; $([[ $result == 0 ]] && echo "growth under 1%" || echo "GROWTH of 1% or more")"
exit $result
