#!/usr/bin/env bash
# ZeRO stage 3 with the parameter partition on NVMe ([offload] param = "nvme") against
# the same job with it in host memory, on the GPT shape of scripts/bench-zero.sh: 2 ranks,
# the optimizer in the offload manager ("cpu" tier) in both, then both tiers on NVMe (with
# the default swap buffers, and with two of 256 Ki elements).
# Alternated REPEATS times; prints the median tokens/s (step 1 skipped) and each rank's
# host bytes of parameters and optimizer state at the peak of the last step.
#
# usage: scripts/bench-param-offload.sh NVME_DIR [STEPS=20] [REPEATS=3]
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:?usage: scripts/bench-param-offload.sh NVME_DIR [STEPS] [REPEATS]}
steps=${2:-20}
repeats=${3:-3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$dir"

run() {  # METRICS EXTRA...
  local metrics=$1
  shift
  build/troupe run configs/tiny-gpt.toml --set cluster.world_size=2 --set parallel.dp=2 \
    --set model.n_layers=4 --set model.d_model=256 --set model.n_heads=4 --set model.seq_len=128 \
    --set batch.micro_batch_size=8 --set batch.gradient_accumulation_steps=1 \
    --set train.steps=$((steps + 1)) --set train.threads=1 --set optimizer.lr=3e-4 \
    --set zero.stage=3 --set zero.prefetch_bucket_size=1000000 --set zero.max_reuse_distance=0 \
    --set offload.nvme_path="$dir" --set cluster.coordinator=127.0.0.1:29592 --metrics "$metrics" "$@" \
    > "$work/out" 2>&1 || { cat "$work/out"; exit 1; }
}

summary() {  # METRICS -> "tokens/s parameter_bytes optimizer_state_bytes"
  python3 - "$1" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
timed = rows[1:]
print(sum(r["tokens"] for r in timed) / (sum(r["step_ms"] for r in timed) / 1000),
      rows[-1]["parameter_bytes"], rows[-1]["optimizer_state_bytes"])
PY
}

median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

declare -A tok
declare -A bytes
configs=("memory|--set offload.optimizer=cpu"
         "param-nvme|--set offload.optimizer=cpu --set offload.param=nvme"
         "both-nvme|--set offload.optimizer=nvme --set offload.param=nvme"
         "both-nvme-small|--set offload.optimizer=nvme --set offload.param=nvme --set offload.sub_group_size=262144 --set offload.buffer_count=2")
for i in $(seq "$repeats"); do
  for c in "${configs[@]}"; do
    name=${c%%|*}
    # shellcheck disable=SC2086
    run "$work/$name.jsonl" ${c#*|}
    read -r t p o < <(summary "$work/$name.jsonl")
    tok[$name]="${tok[$name]:-} $t"
    bytes[$name]="$p $o"
  done
done
base=$(median ${tok[memory]})
echo "config | tokens/s (median of $repeats) | vs in memory | host parameter B/rank | host optimizer state B/rank"
for c in "${configs[@]}"; do
  name=${c%%|*}
  m=$(median ${tok[$name]})
  read -r p o <<< "${bytes[$name]}"
  printf '%s | %.0f | %.2f | %s | %s\n' "$name" "$m" "$(echo "$m / $base" | bc -l)" "$p" "$o"
done
