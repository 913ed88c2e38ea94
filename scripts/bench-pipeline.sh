#!/usr/bin/env bash
# The pipeline's bubble: `troupe bench pipeline` at pp 2 and 4, m 4, 8 and 16, measured
# beside the schedule's formula at equal costs (1f1b: (pp − 1)/(m + pp − 1)), as the
# markdown table docs/PERFORMANCE.md quotes; then one traced run of the first schedule
# drawn as a timeline (scripts/trace_timeline.py → docs/pipeline-timeline.svg).
#
# usage: scripts/bench-pipeline.sh [LAYER_MS=100] [STEPS=3] [SCHEDULES="1f1b"]
# Each chunk's layer sleeps LAYER_MS in forward, in the input half of its backward and in
# its weight half (a whole backward sleeps both), so the ranks do not compete for this
# machine's cores; what the bubble measures beyond the formula is the runtime's: the hops
# between stages, the step's reduction and update.
set -euo pipefail
cd "$(dirname "$0")/.."
layer_ms=${1:-100}
steps=${2:-3}
schedules=${3:-1f1b}
schedule=${schedules%% *}
echo "| pp | m | schedule | bubble measured | formula | difference (points) | step ms |"
echo "|---|---|---|---|---|---|---|"
for pp in 2 4; do
  for m in 4 8 16; do
    for schedule in $schedules; do
      build/troupe bench pipeline --pp "$pp" --micro-batches "$m" --schedule "$schedule" --layer-ms "$layer_ms" \
        --steps "$steps" --json |
        python3 -c 'import json,sys; j=json.loads(sys.stdin.read())
print("| %d | %d | %s | %.4f | %.4f | %+.1f | %.0f |" % (j["pp"], j["micro_batches"], j["schedule"], j["bubble"],
      j["bubble_formula"], 100 * (j["bubble"] - j["bubble_formula"]), j["step_ms"]))'
    done
  done
done
schedule=${schedules%% *}
trace=$(mktemp -d)/pipeline.json
build/troupe bench pipeline --pp 4 --micro-batches 8 --schedule "$schedule" --layer-ms "$layer_ms" --steps 1 \
  --trace "$trace" > /dev/null
python3 scripts/trace_timeline.py "$trace" docs/pipeline-timeline.svg
echo "timeline of pp 4, m 8, $schedule: docs/pipeline-timeline.svg"
