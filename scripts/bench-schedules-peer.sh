#!/usr/bin/env bash
# troupe's pipeline schedules against torch.distributed.pipelining's of the same names on
# the GPT of ../shared/peers/torch-gpt.py's shape (d_model 256, 4 heads, seq 128, AdamW,
# 1 thread per rank, 8 micro-batches per step) cut into pp stages of 2 blocks each
# (2·pp blocks; one block per chunk with 2 chunks per rank), 16/pp sequences per
# micro-batch: at pp 2 the issue's end-to-end shape (4 blocks, micro-batch 8), at pp 4
# 8 blocks of micro-batch 4. For each schedule troupe and the peer (../shared/peers/
# torch2-pipe.py, run with troupe's own torch, scripts/bench-lib.sh) run back to back,
# REPEATS times, and the medians of tokens/s over the steps after the first are printed as
# a markdown table with their ratio and troupe's bubble (the metrics' mean, median of the
# repeats) beside its plan's at unit costs. ZB-H1 has no peer. With DP > 1 troupe runs
# pp × dp ranks with [zero] stage ZERO and the peer, which has no data parallelism, is
# left out.
#
# usage: scripts/bench-schedules-peer.sh [STEPS=10] [REPEATS=3] [PP=2] [DP=1] [ZERO=1]
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-10}
repeats=${2:-3}
pp=${3:-2}
dp=${4:-1}
zero=${5:-1}
layers=$((2 * pp))
micro=$((16 / pp))
peer_script=${TROUPE_PEERS:-../shared/peers}/torch2-pipe.py
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source scripts/free-port.sh
source scripts/bench-lib.sh

troupe_run() {  # SCHEDULE: prints "tokens/s bubble"
  hold_free_port || exit 2
  build/troupe run configs/tiny-gpt.toml --set cluster.world_size=$((pp * dp)) --set parallel.pp="$pp" \
    --set parallel.dp="$dp" --set zero.stage="$zero" --set model.n_layers="$layers" --set model.d_model=256 \
    --set model.n_heads=4 --set model.seq_len=128 --set batch.micro_batch_size="$micro" \
    --set batch.gradient_accumulation_steps=8 --set pipeline.schedule="$1" --set train.steps=$((steps + 1)) \
    --set train.threads=1 --set optimizer.lr=3e-4 --set cluster.coordinator=127.0.0.1:"$port" \
    --metrics "$work/m.jsonl" > "$work/out" 2>&1 || { tail -5 "$work/out" >&2; exit 1; }
  echo "$(metrics_tokens_per_s "$work/m.jsonl") $(python3 -c "import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])][1:]
print(sum(r['bubble'] for r in rows) / len(rows))" "$work/m.jsonl")"
}

peer_tokens_per_s() {  # SCHEDULE
  "$peer_script" --schedule "$1" --stages "$pp" --microbatches 8 --layers "$layers" --hidden 256 --heads 4 --seq 128 \
    --micro "$micro" --steps "$steps" --threads 1 2>/dev/null | tail -1 | sed -n 's/.*tokens_per_s=\([0-9.]*\).*/\1/p'
}

echo "| schedule (troupe / torch) | troupe tok/s | torch tok/s | ratio | troupe bubble | plan at unit costs |"
echo "|---|---|---|---|---|---|"
for pair in gpipe:gpipe 1f1b:1f1b zb_h1: interleaved_1f1b:interleaved1f1b zbv:zbv; do
  ours=() bubbles=() theirs=()
  name=${pair%%:*} theirs_name=${pair##*:}
  for i in $(seq "$repeats"); do
    read -r tps bubble <<< "$(troupe_run "$name")"
    ours+=("$tps") bubbles+=("$bubble")
    peer=-
    if [[ -n $theirs_name && $dp == 1 ]]; then
      peer=$(peer_tokens_per_s "$theirs_name")
      theirs+=("$peer")
    fi
    echo "$name: run $i: troupe $tps tok/s (bubble $bubble), torch $peer tok/s" >&2
  done
  t=$(median "${ours[@]}") b=$(median "${bubbles[@]}") p=$( ((${#theirs[@]})) && median "${theirs[@]}" || echo 0)
  plan=$(build/troupe schedule show --schedule "$name" --pp "$pp" --micro-batches 8 --json |
    python3 -c "import json, sys; print(json.load(sys.stdin)['bubble'])")
  python3 -c "import sys
name, theirs, t, p, b, plan = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4] or 0), float(sys.argv[5]), float(sys.argv[6])
print('| %s / %s | %s | %s | %s | %.3f | %.3f |' % (name, theirs or '-', format(round(t), ','),
      format(round(p), ',') if p else '-', '%.2fx' % (t / p) if p else '-', b, plan))" \
    "$name" "$theirs_name" "$t" "$p" "$b" "$plan"
done
