#!/usr/bin/env bash
# troupe's pipeline schedules against torch.distributed.pipelining's of the same names on
# the same GPT shape (8 blocks, d_model 256, 4 heads, seq 128, 4 sequences per
# micro-batch, 8 micro-batches per step, AdamW, 1 thread per rank), pp = 4 on 4 processes:
# gpipe, 1f1b, interleaved 1F1B (2 chunks per rank, round-robin) and ZBV (2 chunks per rank
# in a V, split backwards). For each schedule troupe and the peer (../shared/peers/
# torch2-pipe.py, run with troupe's own torch, scripts/bench-lib.sh) run back to back, REPEATS times,
# and the medians of tokens/s over the steps after the first are printed as a markdown
# table with their ratio.
#
# usage: scripts/bench-schedules-peer.sh [STEPS=6] [REPEATS=1]
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-6}
repeats=${2:-1}
peer=${TROUPE_PEERS:-../shared/peers}/torch2-pipe.py
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source scripts/free-port.sh
source scripts/bench-lib.sh

troupe_tokens_per_s() {  # SCHEDULE
  hold_free_port || exit 2
  build/troupe run configs/tiny-gpt.toml --set cluster.world_size=4 --set parallel.pp=4 --set parallel.dp=1 \
    --set pipeline.partition=\"parameters\" --set model.n_layers=8 --set model.d_model=256 --set model.n_heads=4 \
    --set model.seq_len=128 --set batch.micro_batch_size=4 --set batch.gradient_accumulation_steps=8 \
    --set pipeline.schedule="$1" --set train.steps=$((steps + 1)) --set train.threads=1 \
    --set optimizer.lr=3e-4 --set cluster.coordinator=127.0.0.1:"$port" --metrics "$work/m.jsonl" \
    > "$work/out" 2>&1 || { tail -5 "$work/out" >&2; exit 1; }
  metrics_tokens_per_s "$work/m.jsonl"
}

peer_tokens_per_s() {  # SCHEDULE
  "$peer" --schedule "$1" --stages 4 --microbatches 8 --layers 8 --hidden 256 --heads 4 --seq 128 --micro 4 \
    --steps "$steps" --threads 1 2>/dev/null | tail -1 | sed -n 's/.*tokens_per_s=\([0-9.]*\).*/\1/p'
}

echo "| schedule (troupe / torch) | troupe tok/s | torch tok/s | ratio |"
echo "|---|---|---|---|"
for pair in gpipe:gpipe 1f1b:1f1b interleaved_1f1b:interleaved1f1b zbv:zbv; do
  ours=() theirs=()
  for i in $(seq "$repeats"); do
    ours+=("$(troupe_tokens_per_s "${pair%%:*}")")
    theirs+=("$(peer_tokens_per_s "${pair##*:}")")
    echo "${pair}: run $i: troupe ${ours[-1]} tok/s, torch ${theirs[-1]} tok/s" >&2
  done
  t=$(median "${ours[@]}") p=$(median "${theirs[@]}")
  python3 -c "import sys; t, p = float(sys.argv[2]), float(sys.argv[3] or 0)
print('| %s / %s | %s | %s | %s |' % (sys.argv[1].split(':')[0], sys.argv[1].split(':')[1], format(round(t), ','),
      format(round(p), ',') if p else 'failed', '%.2fx' % (t / p) if p else '-'))" "$pair" "$t" "$p"
done
