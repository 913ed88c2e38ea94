#!/usr/bin/env bash
# End-to-end training throughput: troupe's data-parallel GPT against PyTorch's
# DistributedDataParallel (gloo, ../shared/peers/torch-gpt.py) on the same shape, the two
# run alternately REPEATS times so both see the same machine. Prints one line per run and
# the medians with their ratio.
#
# usage: scripts/bench-train.sh [RANKS=2] [STEPS=30] [REPEATS=3]
# shape: 4 layers, d_model 256, 4 heads, seq 128, micro-batch 8 per rank, 1 thread per rank.
set -euo pipefail
cd "$(dirname "$0")/.."
ranks=${1:-2}
steps=${2:-30}
repeats=${3:-3}
peer=${TROUPE_PEERS:-../shared/peers}/torch-gpt.py
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

troupe_once() {
  build/troupe run configs/tiny-gpt.toml --set cluster.world_size="$ranks" --set parallel.dp="$ranks" \
    --set model.n_layers=4 --set model.d_model=256 --set model.n_heads=4 --set model.seq_len=128 \
    --set batch.micro_batch_size=8 --set batch.gradient_accumulation_steps=1 \
    --set train.steps=$((steps + 1)) --set train.threads=1 --set optimizer.lr=3e-4 \
    --set cluster.coordinator=127.0.0.1:29590 ${TROUPE_SET:-} --metrics "$work/m.jsonl" > "$work/out" 2>&1
  # Step 1 warms up (allocations, first connections); the peer skips it too.
  python3 - "$work/m.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])][1:]
print(sum(r["tokens"] for r in rows) / (sum(r["step_ms"] for r in rows) / 1000))
PY
}

peer_once() {
  /usr/bin/python3 "$peer" --ranks "$ranks" --mode ddp --layers 4 --hidden 256 --heads 4 --seq 128 --micro 8 \
    --steps "$steps" --threads 1 2>/dev/null | tail -1 | sed -n 's/.*tokens_per_s=\([0-9.]*\).*/\1/p'
}

ours=() theirs=()
for i in $(seq "$repeats"); do
  t=$(troupe_once); p=$(peer_once)
  echo "run $i: troupe_tokens_per_s=$t torch_ddp_tokens_per_s=$p" >&2
  ours+=("$t"); theirs+=("$p")
done
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
mo=$(median "${ours[@]}"); mt=$(median "${theirs[@]}")
echo "bench=train ranks=$ranks steps=$steps repeats=$repeats troupe_tokens_per_s=$mo torch_ddp_tokens_per_s=$mt ratio=$(awk -v a="$mo" -v b="$mt" 'BEGIN {printf "%.2f", a / b}')"
