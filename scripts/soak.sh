#!/usr/bin/env bash
# Soak: trains the tiny GPT job for STEPS steps on 2 ranks, sampling every rank's resident
# memory (VmRSS) each 0.2 s together with the step reached, and reports each rank's RSS
# at step FROM and at the end and its growth. A leak shows as growth; the bar is under
# 1% from step FROM (default 200: start-up and the first steps' allocations are over).
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
awk -v from="$from" -v steps="$steps" '
  $1 >= from && !($2 in start) { start[$2] = $3; start_step[$2] = $1 }
  { last[$2] = $3; last_step[$2] = $1 }
  END {
    bad = 0
    for (r in start) {
      growth = 100 * (last[r] - start[r]) / start[r]
      printf "rank %s: %d KB at step %d, %d KB at step %d: %+.2f%%\n", r, start[r], start_step[r], last[r], last_step[r], growth
      if (growth >= 1) bad = 1
    }
    if (length(start) == 0) { print "soak: no sample at or after step " from; bad = 1 }
    exit bad
  }' "$work/samples"
result=$?
echo "soak: $steps steps, $(wc -l < "$work/samples") samples; $([[ $result == 0 ]] && echo "growth under 1%" || echo "GROWTH of 1% or more")"
exit $result
