#!/usr/bin/env bash
# troupe's tensor parallelism against PyTorch 2.x DTensor's on the same GPT shape (4 blocks,
# d_model 256, 4 heads, seq 128, 8 sequences per step, AdamW, untied head, 1 thread per
# rank): tp = 2 on 2 processes, alternated REPEATS times with the peer
# (scripts/peer-dtensor-tp.py, with troupe's own torch, scripts/bench-lib.sh), medians of
# tokens/s over the steps after the first. Each side's single-process rate on the same
# shape is measured in the same run too (troupe: tp 1 on one rank; PyTorch 2.x: the peers'
# torch2-gpt.py on one rank), to show what the 2-way split gains over one process.
#
# usage: scripts/bench-tp-peer.sh [STEPS=20] [REPEATS=3] [SEQUENCE_PARALLEL=false]
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-20}
repeats=${2:-3}
sequence=${3:-false}
peers=${TROUPE_PEERS:-../shared/peers}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source scripts/free-port.sh
source scripts/bench-lib.sh

troupe_tokens_per_s() {  # TP
  hold_free_port || exit 2
  build/troupe run configs/tiny-gpt.toml --set cluster.world_size="$1" --set parallel.dp=1 --set parallel.tp="$1" \
    --set parallel.sequence_parallel="$([ "$1" = 1 ] && echo false || echo "$sequence")" \
    --set model.n_layers=4 --set model.d_model=256 --set model.n_heads=4 --set model.seq_len=128 \
    --set model.tie_embeddings=false --set batch.micro_batch_size=8 --set batch.gradient_accumulation_steps=1 \
    --set train.steps=$((steps + 1)) --set train.threads=1 --set train.log_interval=1000 --set optimizer.lr=3e-4 \
    --set cluster.coordinator=127.0.0.1:"$port" --metrics "$work/m.jsonl" > "$work/out" 2>&1 ||
    { tail -5 "$work/out" >&2; exit 1; }
  metrics_tokens_per_s "$work/m.jsonl"
}

peer_tokens_per_s() {
  scripts/peer-dtensor-tp.py --tp 2 --layers 4 --hidden 256 --heads 4 --seq 128 --micro 8 --steps "$steps" \
    --threads 1 2>/dev/null | tail -1 | sed -n 's/.*tokens_per_s=\([0-9.]*\).*/\1/p'
}

peer_single_tokens_per_s() {
  "$peers/torch2-gpt.py" --ranks 1 --layers 4 --hidden 256 --heads 4 --seq 128 --micro 8 --steps "$steps" \
    --threads 1 2>/dev/null | tail -1 | sed -n 's/.*tokens_per_s=\([0-9.]*\).*/\1/p'
}

ours=() theirs=() ours1=() theirs1=()
for i in $(seq "$repeats"); do
  ours+=("$(troupe_tokens_per_s 2)")
  theirs+=("$(peer_tokens_per_s)")
  ours1+=("$(troupe_tokens_per_s 1)")
  theirs1+=("$(peer_single_tokens_per_s)")
  echo "run $i: troupe ${ours[-1]} tok/s, DTensor ${theirs[-1]} tok/s; one process: troupe ${ours1[-1]}," \
    "torch ${theirs1[-1]}" >&2
done
t=$(median "${ours[@]}")
p=$(median "${theirs[@]}")
t1=$(median "${ours1[@]}")
p1=$(median "${theirs1[@]}")
python3 - "$t" "$p" "$t1" "$p1" "$sequence" <<'PY'
import sys
t, p, t1, p1 = map(float, sys.argv[1:5])
sp = " (troupe with sequence parallelism)" if sys.argv[5] == "true" else ""
print("| job | processes | troupe tok/s | torch tok/s | ratio |")
print("|---|---|---|---|---|")
print(f"| tp 2{sp} (torch: DTensor ColwiseParallel/RowwiseParallel, loss_parallel) | 2 | {t:,.0f} | {p:,.0f} | {t / p:.2f}x |")
print(f"| one process, same shape | 1 | {t1:,.0f} | {p1:,.0f} | {t1 / p1:.2f}x |")
print(f"| tp 2 over one process | - | {t / t1:.2f}x | {p / p1:.2f}x | - |")
PY
