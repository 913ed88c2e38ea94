#!/usr/bin/env bash
# bf16 and fp16 against fp32 on one GPT shape, data-parallel under each ZeRO stage:
# troupe's throughput (step 1 skipped) and the payload bytes rank 0 sends per step (the
# metrics' sent_bytes: gradient reductions, parameter gathers), fp32, bf16 and fp16 (with
# its dynamic loss scaler) alternated REPEATS times in one run so all see the same machine.
# Prints one line per stage and the 16-bit/fp32 ratios of the medians.
#
# usage: scripts/bench-precision.sh [RANKS=2] [STEPS=20] [REPEATS=3]
# shape: 4 layers, d_model 256, 4 heads, seq 128, micro-batch 8 per rank, 1 thread per
# rank (the bench-zero.sh shape).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/bench-lib.sh
ranks=${1:-2}
steps=${2:-20}
repeats=${3:-3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

run() {  # STAGE DTYPE
  build/troupe run configs/tiny-gpt.toml --set cluster.world_size="$ranks" --set parallel.dp="$ranks" \
    --set model.n_layers=4 --set model.d_model=256 --set model.n_heads=4 --set model.seq_len=128 \
    --set batch.micro_batch_size=8 --set batch.gradient_accumulation_steps=1 \
    --set train.steps="$steps" --set train.threads=1 --set optimizer.lr=3e-4 \
    --set zero.stage="$1" --set zero.reduce_bucket_size=524288 --set zero.prefetch_bucket_size=1000000 \
    --set zero.max_reuse_distance=0 --set precision.dtype="\"$2\"" \
    --set cluster.coordinator=127.0.0.1:29593 --metrics "$work/m.jsonl" > "$work/out" 2>&1 ||
    { cat "$work/out" >&2; exit 1; }
}

sent_per_step() {
  python3 - "$1" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])][1:]
print(sum(r["sent_bytes"] for r in rows) // len(rows))
PY
}

echo "ranks $ranks, $steps steps, $repeats repeats; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
for stage in 0 1 2 3; do
  declare -A rate=() sent=()
  for ((r = 0; r < repeats; ++r)); do
    for dtype in fp32 bf16 fp16; do
      run "$stage" "$dtype"
      rate[$dtype]+="$(metrics_tokens_per_s "$work/m.jsonl") "
      sent[$dtype]=$(sent_per_step "$work/m.jsonl")
    done
  done
  f=$(median ${rate[fp32]}) b=$(median ${rate[bf16]}) h=$(median ${rate[fp16]})
  printf 'stage %d  fp32 %6.0f tok/s %9d B/step  bf16 %6.0f tok/s %9d B/step  fp16 %6.0f tok/s %9d B/step  speed bf16/fp32 %.2f fp16/fp32 %.2f  bytes %.3f %.3f\n' \
    "$stage" "$f" "${sent[fp32]}" "$b" "${sent[bf16]}" "$h" "${sent[fp16]}" "$(echo "$b / $f" | bc -l)" \
    "$(echo "$h / $f" | bc -l)" "$(echo "${sent[bf16]} / ${sent[fp32]}" | bc -l)" \
    "$(echo "${sent[fp16]} / ${sent[fp32]}" | bc -l)"
done
