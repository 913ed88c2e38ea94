#!/usr/bin/env bash
# ZeRO memory per rank: for stages 0-3 × dp 1, 2, 4, the model-state bytes a rank holds
# (parameters + gradients + optimizer state, the largest rank's peak of the last step)
# measured by `troupe run --metrics`, beside `troupe estimate --json` and the ZeRO
# paper's bytes per parameter. Prints a Markdown table; the same job as
# tests/integration/memory_test.cpp (GPT of d_model 128, 2 blocks, 470,528 parameters;
# 3 steps of 4 sequences per rank; AdamW, fp32).
#
# usage: scripts/memory-table.sh          (extra flags for every run: TROUPE_SET="--set ...")
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

flags() {  # STAGE DP
  echo "--set train.steps=3 --set cluster.world_size=$2 --set parallel.dp=$2" \
    "--set batch.micro_batch_size=4 --set batch.gradient_accumulation_steps=1" \
    "--set batch.global_batch_size=$((4 * $2)) --set zero.stage=$1" \
    "--set model.d_model=128 --set zero.reduce_bucket_size=65536 --set zero.param_persistence_threshold=1000" \
    "--set zero.max_reuse_distance=0 --set zero.max_live_parameters=210000 ${TROUPE_SET:-}"
}

echo "| stage | dp | measured model-state bytes/rank | bytes/param | troupe estimate | ZeRO formula bytes/param |"
echo "|---|---|---|---|---|---|"
port=29980  # 29980-29991
for stage in 0 1 2 3; do
  for dp in 1 2 4; do
    # shellcheck disable=SC2046  # the flags are words
    if ! build/troupe run configs/tiny-gpt.toml $(flags "$stage" "$dp") \
      --set cluster.coordinator=127.0.0.1:$port --metrics "$work/m.jsonl" > "$work/out" 2>&1; then
      echo "memory-table: stage $stage, dp $dp failed:" >&2
      cat "$work/out" >&2
      exit 1
    fi
    port=$((port + 1))
    # shellcheck disable=SC2046
    build/troupe estimate configs/tiny-gpt.toml $(flags "$stage" "$dp") --json > "$work/estimate.json"
    python3 - "$work/m.jsonl" "$work/estimate.json" <<'PY'
import json, sys
last = [json.loads(l) for l in open(sys.argv[1]) if l.strip()][-1]
e = json.load(open(sys.argv[2]))
stage, dp, params = e["stage"], e["dp"], last["params"]
measured = last["model_state_bytes"]
formula = f"{e['formula']} = {e['formula_bytes_per_param']:.2f}"
if stage == 3:
    formula += f", + {4 * e['live_window_elements'] / params:.2f} live window ({e['live_window_elements']:,} elements)"
print(f"| {stage} | {dp} | {measured:,} | {measured / params:.2f} | {e['model_state_bytes']:,} | {formula} |")
PY
  done
done
