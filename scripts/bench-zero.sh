#!/usr/bin/env bash
# ZeRO stages against each other and against PyTorch on the same GPT shape: for each
# stage, troupe's throughput (step 1 skipped) alternated REPEATS times with the nearest
# PyTorch 2.15 peer (../shared/peers/torch2-gpt.py with troupe's own torch, scripts/
# torch-env.sh: stage 0 ↔ DDP, stage 1 ↔ DDP + ZeroRedundancyOptimizer, stage 2 ↔
# fully_shard without resharding after forward, stage 3 ↔ fully_shard), then one
# traced run per stage, from which
# scripts/trace_overlap.py takes the exposed-communication fraction: the time in which
# communication runs and no compute does (forward, backward, optimizer), over the
# step time.
#
# usage: scripts/bench-zero.sh [RANKS=2] [STEPS=20] [REPEATS=2]
# shape: 4 layers, d_model 256, 4 heads, seq 128, micro-batch 8 per rank, 1 thread per
# rank; gradient rows of 524,288 elements (2 MiB) so backward has several to overlap;
# stage 3 prefetches up to 1,000,000 elements ahead (one block), frees each layer after
# use (max_reuse_distance 0) and keeps parameters under 100,000 elements whole.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/bench-lib.sh
ranks=${1:-2}
steps=${2:-20}
repeats=${3:-2}
peer=${TROUPE_PEERS:-../shared/peers}/torch2-gpt.py
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

troupe_run() {  # STAGE STEPS EXTRA...
  local stage=$1 n=$2
  shift 2
  build/troupe run configs/tiny-gpt.toml --set cluster.world_size="$ranks" --set parallel.dp="$ranks" \
    --set model.n_layers=4 --set model.d_model=256 --set model.n_heads=4 --set model.seq_len=128 \
    --set batch.micro_batch_size=8 --set batch.gradient_accumulation_steps=1 \
    --set train.steps="$n" --set train.threads=1 --set optimizer.lr=3e-4 \
    --set zero.stage="$stage" --set zero.reduce_bucket_size=524288 --set zero.prefetch_bucket_size=1000000 \
    --set zero.max_reuse_distance=0 \
    --set cluster.coordinator=127.0.0.1:29591 "$@" > "$work/out" 2>&1
}

peer_mode() { case $1 in 0) echo ddp ;; 1) echo zero1 ;; 2) echo fsdp2-zero2 ;; *) echo fsdp2 ;; esac; }

peer_once() {
  python3 "$peer" --ranks "$ranks" --mode "$1" --layers 4 --hidden 256 --heads 4 --seq 128 --micro 8 \
    --steps "$steps" --threads 1 2>/dev/null | tail -1 | sed -n 's/.*tokens_per_s=\([0-9.]*\).*/\1/p' || true
}

echo "stage | troupe tok/s | step ms | vs stage 0 | peer | peer tok/s | ratio | exposed comm | model state B/rank"
base=""
for stage in 0 1 2 3; do
  ours=() theirs=()
  for i in $(seq "$repeats"); do
    troupe_run "$stage" $((steps + 1)) --metrics "$work/m.jsonl"
    ours+=("$(metrics_tokens_per_s "$work/m.jsonl")")
    theirs+=("$(peer_once "$(peer_mode "$stage")")")
  done
  t=$(median "${ours[@]}")
  p=$(median "${theirs[@]:-0}")
  state=$(python3 -c "import json; print(json.loads(open('$work/m.jsonl').readlines()[-1])['model_state_bytes'])")
  troupe_run "$stage" 6 --set trace.path="$work/trace.json"
  exposed=$(python3 scripts/trace_overlap.py "$work/trace.json" 0 | sed -n 's/.*exposed_fraction=\([0-9.]*\).*/\1/p')
  base=${base:-$t}
  python3 - "$stage" "$t" "$base" "$(peer_mode "$stage")" "$p" "$exposed" "$state" "$ranks" <<'PY'
import sys
stage, t, base, mode, p, exposed, state, ranks = sys.argv[1:]
t, base, p = float(t), float(base), float(p or 0)
step_ms = int(ranks) * 8 * 128 / t * 1000
ratio = f"{t / p:.2f}x" if p > 0 else "n/a (peer did not run)"
print(f"{stage} | {t:,.0f} | {step_ms:.0f} | {base / t:.2f}x | torch {mode} | {p:,.0f} | {ratio} | "
      f"{float(exposed) * 100:.1f}% | {int(state):,}")
PY
done
