#!/usr/bin/env bash
# troupe's pipeline against torch.distributed.pipelining's Schedule1F1B on the same GPT
# shape (4 blocks, d_model 256, 4 heads, seq 128, 8 sequences per micro-batch, 8
# micro-batches per step, AdamW, 1 thread per rank): pp = 2 on 2 processes, alternated
# REPEATS times with the peer (../shared/peers/torch2-pipe.py, run with troupe's own torch,
# scripts/bench-lib.sh), medians of tokens/s over the steps after the first; then troupe at
# pp × dp = 2 × 2 on 4 processes (the peer has no data parallelism to pair it with).
# Each side's single-process rate on the same shape (troupe: the whole model on one rank,
# 8 micro-batches a step; the peer: torch2-gpt.py on one rank, one micro-batch a step) is
# measured in the same run too, for each pipeline's ceiling on this machine: two processes
# at the single-process rate less the 1F1B bubble, 2 x single x m / (m + pp - 1).
#
# usage: scripts/bench-pipeline-peer.sh [STEPS=20] [REPEATS=3]
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-20}
repeats=${2:-3}
peer=${TROUPE_PEERS:-../shared/peers}/torch2-pipe.py
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source scripts/free-port.sh
source scripts/bench-lib.sh

troupe_tokens_per_s() {  # PP DP
  hold_free_port || exit 2
  build/troupe run configs/tiny-gpt.toml --set cluster.world_size=$(($1 * $2)) --set parallel.pp="$1" \
    --set pipeline.partition=\"uniform\" \
    --set parallel.dp="$2" --set model.n_layers=4 --set model.d_model=256 --set model.n_heads=4 \
    --set model.seq_len=128 --set batch.micro_batch_size=8 --set batch.gradient_accumulation_steps=8 \
    --set pipeline.schedule=1f1b --set train.steps=$((steps + 1)) --set train.threads=1 \
    --set optimizer.lr=3e-4 --set cluster.coordinator=127.0.0.1:"$port" --metrics "$work/m.jsonl" \
    > "$work/out" 2>&1 || { tail -5 "$work/out" >&2; exit 1; }
  metrics_tokens_per_s "$work/m.jsonl"
}

peer_tokens_per_s() {
  "$peer" --schedule 1f1b --stages 2 --microbatches 8 --layers 4 --hidden 256 --heads 4 --seq 128 --micro 8 \
    --steps "$steps" --threads 1 2>/dev/null | tail -1 | sed -n 's/.*tokens_per_s=\([0-9.]*\).*/\1/p'
}

peer_single_tokens_per_s() {
  "${peer%/*}/torch2-gpt.py" --ranks 1 --layers 4 --hidden 256 --heads 4 --seq 128 --micro 8 --steps "$steps" \
    --threads 1 2>/dev/null | tail -1 | sed -n 's/.*tokens_per_s=\([0-9.]*\).*/\1/p'
}

ours=() theirs=() ours1=() theirs1=()
for i in $(seq "$repeats"); do
  ours+=("$(troupe_tokens_per_s 2 1)")
  theirs+=("$(peer_tokens_per_s)")
  ours1+=("$(troupe_tokens_per_s 1 1)")
  theirs1+=("$(peer_single_tokens_per_s)")
  echo "run $i: troupe ${ours[-1]} tok/s, torch.distributed.pipelining ${theirs[-1]} tok/s;" \
    "one process: troupe ${ours1[-1]}, torch ${theirs1[-1]}" >&2
done
t=$(median "${ours[@]}")
p=$(median "${theirs[@]}")
t1=$(median "${ours1[@]}")
p1=$(median "${theirs1[@]}")
wide=$(troupe_tokens_per_s 2 2)
python3 - "$t" "$p" "$t1" "$p1" "$wide" <<'PY'
import sys
t, p, t1, p1, wide = map(float, sys.argv[1:])
ceiling = lambda single: 2 * single * 8 / (8 + 2 - 1)
print("| job | processes | troupe tok/s | torch tok/s | ratio |")
print("|---|---|---|---|---|")
print(f"| pp 2, m 8 (torch: Schedule1F1B) | 2 | {t:,.0f} | {p:,.0f} | {t / p:.2f}x |")
print(f"| one process, same shape | 1 | {t1:,.0f} | {p1:,.0f} | {t1 / p1:.2f}x |")
print(f"| 1F1B ceiling: 2 x one process x 8/9 | 2 | {ceiling(t1):,.0f} | {ceiling(p1):,.0f} | - |")
print(f"| pp 2, m 8 as a share of its own ceiling | 2 | {t / ceiling(t1):.0%} | {p / ceiling(p1):.0%} | - |")
print(f"| pp 2 x dp 2, m 8 | 4 | {wide:,.0f} | - | - |")
PY
