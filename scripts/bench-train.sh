#!/usr/bin/env bash
# End-to-end training throughput: troupe's data-parallel GPT against PyTorch 2.15's
# DistributedDataParallel (gloo, ../shared/peers/torch2-gpt.py, run with the torch of
# troupe's own environment, scripts/torch-env.sh) on the same shape, run alternately
# REPEATS times so both see the same machine. With BEFORE=DIR, the troupe of build folder
# DIR (another commit's build) runs in each round too, for a before/after comparison.
# Prints one line per run and the medians with their ratios.
#
# usage: [BEFORE=DIR] scripts/bench-train.sh [RANKS=2] [STEPS=30] [REPEATS=3]
# shape: 4 layers, d_model 256, 4 heads, seq 128, micro-batch 8 per rank, 1 thread per rank.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/bench-lib.sh
ranks=${1:-2}
steps=${2:-30}
repeats=${3:-3}
peer=${TROUPE_PEERS:-../shared/peers}/torch2-gpt.py
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

troupe_once() {  # BUILD_DIR
  "$1"/troupe run configs/tiny-gpt.toml --set cluster.world_size="$ranks" --set parallel.dp="$ranks" \
    --set model.n_layers=4 --set model.d_model=256 --set model.n_heads=4 --set model.seq_len=128 \
    --set batch.micro_batch_size=8 --set batch.gradient_accumulation_steps=1 \
    --set train.steps=$((steps + 1)) --set train.threads=1 --set optimizer.lr=3e-4 \
    --set cluster.coordinator=127.0.0.1:29590 ${TROUPE_SET:-} --metrics "$work/m.jsonl" > "$work/out" 2>&1
  # Step 1 warms up (allocations, first connections); the peer skips it too.
  metrics_tokens_per_s "$work/m.jsonl"
}

peer_once() {
  python3 "$peer" --ranks "$ranks" --mode ddp --layers 4 --hidden 256 --heads 4 --seq 128 --micro 8 \
    --steps "$steps" --threads 1 2>/dev/null | tail -1 | sed -n 's/.*tokens_per_s=\([0-9.]*\).*/\1/p'
}

ours=() theirs=() before=()
for i in $(seq "$repeats"); do
  t=$(troupe_once build); p=$(peer_once)
  line="run $i: troupe_tokens_per_s=$t torch_ddp_tokens_per_s=$p"
  if [[ -n "${BEFORE:-}" ]]; then
    b=$(troupe_once "$BEFORE"); before+=("$b"); line+=" before_tokens_per_s=$b"
  fi
  echo "$line" >&2
  ours+=("$t"); theirs+=("$p")
done
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }
mo=$(median "${ours[@]}"); mt=$(median "${theirs[@]}")
summary="bench=train ranks=$ranks steps=$steps repeats=$repeats troupe_tokens_per_s=$mo torch_ddp_tokens_per_s=$mt ratio=$(ratio "$mo" "$mt")"
if [[ -n "${BEFORE:-}" ]]; then
  mb=$(median "${before[@]}")
  summary+=" before_tokens_per_s=$mb before_ratio=$(ratio "$mb" "$mt") after_over_before=$(ratio "$mo" "$mb")"
fi
echo "$summary"
