#!/usr/bin/env bash
# The pipeline's bubble on real layers: `troupe bench pipeline --job` on the end-to-end GPT
# shape (4 blocks, d_model 256, 4 heads, seq 128, micro-batch 8, 8 micro-batches a step,
# AdamW, 1 thread per rank) for each schedule at pp PP (2 blocks per rank: 2·PP blocks,
# 16/PP sequences per micro-batch), STEPS measured steps after 2 warm-up steps: the
# measured bubble (the metrics' mean) beside the schedule's plan at unit costs and at the
# passes' measured costs (their medians in the run's trace), with those costs, the
# tokens per second and the median hop a stage waited on, as a markdown table.
#
# usage: scripts/bench-pipeline-real.sh [STEPS=8] [PP=2] [SCHEDULES="gpipe 1f1b zb_h1 interleaved_1f1b zbv"]
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-8}
pp=${2:-2}
schedules=${3:-gpipe 1f1b zb_h1 interleaved_1f1b zbv}
echo "| schedule | bubble measured | plan, unit costs | plan, measured costs | measured − plan (points) | F / B / I / W ms | tokens/s | hop ms |"
echo "|---|---|---|---|---|---|---|---|"
for s in $schedules; do
  build/troupe bench pipeline --job configs/tiny-gpt.toml --set cluster.world_size="$pp" --set parallel.dp=1 \
    --set parallel.pp="$pp" --set model.n_layers=$((2 * pp)) --set model.d_model=256 --set model.n_heads=4 \
    --set model.seq_len=128 --set batch.micro_batch_size=$((16 / pp)) --set batch.gradient_accumulation_steps=8 \
    --set optimizer.lr=3e-4 --set train.threads=1 --set pipeline.schedule=\""$s"\" --steps "$steps" --json |
    python3 -c "import json, sys
r = json.loads(sys.stdin.read().strip().splitlines()[-1])
print('| %s | %.3f | %.3f | %.3f | %+.1f | %.1f / %.1f / %.1f / %.1f | %s | %.2f |' % (r['schedule'], r['bubble'],
      r['bubble_plan'], r['bubble_plan_measured_costs'], 100 * (r['bubble'] - r['bubble_plan_measured_costs']),
      r['forward_ms'], r['backward_ms'], r['input_ms'], r['weight_ms'], format(round(r['tokens_per_s']), ','),
      r['hop_ms']))"
done
