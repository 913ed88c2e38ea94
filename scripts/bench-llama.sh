#!/usr/bin/env bash
# LLaMA training throughput: troupe's LLaMA (configs/tiny-llama.toml at the E2E shape) against
# PyTorch's DistributedDataParallel and FSDP2 running transformers' LlamaForCausalLM
# (scripts/peer-llama.py, with troupe's own torch environment) on the same shape, run
# alternately REPEATS times so all see the same machine: troupe ZeRO 0 against DDP, troupe
# ZeRO 3 against FSDP2. Prints one line per run and the medians with their ratios.
#
# usage: scripts/bench-llama.sh [RANKS=2] [STEPS=30] [REPEATS=3]
# shape: 4 layers, d_model 256, 4 heads over 2 key/value heads, MLP 768 (LLaMA's rule),
# vocabulary 256, seq 128, micro-batch 8 per rank, 1 thread per rank.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/bench-lib.sh
ranks=${1:-2}
steps=${2:-30}
repeats=${3:-3}
python=$(bash scripts/torch-env.sh python)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

troupe_once() {  # ZERO_STAGE
  build/troupe run configs/tiny-llama.toml --set cluster.world_size="$ranks" --set parallel.dp="$ranks" \
    --set model.n_layers=4 --set model.d_model=256 --set model.n_heads=4 --set model.n_kv_heads=2 \
    --set model.vocab_size=256 --set model.seq_len=128 --set batch.micro_batch_size=8 \
    --set batch.gradient_accumulation_steps=1 --set zero.stage="$1" --set train.steps=$((steps + 1)) \
    --set train.threads=1 --set optimizer.lr=3e-4 --set cluster.coordinator=127.0.0.1:29591 \
    --metrics "$work/m.jsonl" > "$work/out" 2>&1
  metrics_tokens_per_s "$work/m.jsonl"  # step 1 warms up; the peer skips it too
}

peer_once() {  # MODE
  HF_HUB_OFFLINE=1 "$python" scripts/peer-llama.py --ranks "$ranks" --mode "$1" --steps "$steps" 2>/dev/null |
    tail -1 | sed -n 's/.*tokens_per_s=\([0-9.]*\).*/\1/p'
}

z0=() ddp=() z3=() fsdp=()
for i in $(seq "$repeats"); do
  a=$(troupe_once 0); b=$(peer_once ddp); c=$(troupe_once 3); d=$(peer_once fsdp2)
  echo "run $i: troupe_zero0=$a torch_ddp=$b troupe_zero3=$c torch_fsdp2=$d" >&2
  z0+=("$a"); ddp+=("$b"); z3+=("$c"); fsdp+=("$d")
done
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }
m0=$(median "${z0[@]}"); md=$(median "${ddp[@]}"); m3=$(median "${z3[@]}"); mf=$(median "${fsdp[@]}")
echo "bench=llama ranks=$ranks steps=$steps repeats=$repeats troupe_zero0=$m0 torch_ddp=$md ratio=$(ratio "$m0" "$md")" \
  "troupe_zero3=$m3 torch_fsdp2=$mf ratio=$(ratio "$m3" "$mf")"
