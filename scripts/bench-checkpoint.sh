#!/usr/bin/env bash
# What checkpointing costs a run: the same job trained without checkpoints, with a save
# every 10 steps written in the background (async = true) and with the step waiting for
# each save (async = false), ROUNDS times in turn (the machine is shared: the modes
# alternate so drift hits each alike). The figure is the training wall time (every step,
# every snapshot, and the wait for the last save at the end), as the run's summary line
# gives it, per step; the checkpoint's size is what one save writes.
#
#   scripts/bench-checkpoint.sh [ROUNDS] [STEPS]      (default 5 rounds of 45 steps: saves
#                                                     after steps 10-40, the last one under
#                                                     the steps that follow it)
set -uo pipefail
rounds=${1:-5}
steps=${2:-45}
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
source scripts/free-port.sh
troupe=${BUILD:-build}/troupe
[[ -x $troupe ]] || { echo "bench-checkpoint: $troupe not built" >&2; exit 2; }
work=$(mktemp -d "${TMPDIR:-/tmp}/troupe-ckpt-bench-XXXXXX")
trap 'rm -rf "$work"' EXIT

# A GPT of about 13 M parameters on 2 ranks, ZeRO 1, one sequence of 64 tokens per rank and
# step, so a step is short beside a save: each save writes ~155 MB (fp32 values and Adam's
# two moments), half from each rank.
run() {  # run MODE ROUND -> prints the training wall time in seconds
  local mode=$1 dir="$work/$1-$2" extra=()
  mkdir -p "$dir"
  case $mode in
    async) extra=(--set checkpoint.dir=\""$dir/ckpt"\" --set checkpoint.every_steps=10 --set checkpoint.async=true) ;;
    sync) extra=(--set checkpoint.dir=\""$dir/ckpt"\" --set checkpoint.every_steps=10 --set checkpoint.async=false) ;;
  esac
  hold_free_port || exit 2
  "$troupe" run configs/tiny-gpt.toml --set train.steps="$steps" --set train.log_interval=1000 \
    --set model.d_model=512 --set model.n_layers=4 --set model.n_heads=8 --set model.seq_len=64 \
    --set cluster.world_size=2 --set parallel.dp=2 --set zero.stage=1 --set batch.micro_batch_size=1 \
    --set batch.gradient_accumulation_steps=1 --set checkpoint.keep_last=1 \
    --set cluster.coordinator=\"127.0.0.1:$port\" "${extra[@]}" >"$dir/log" 2>&1 || {
    tail -3 "$dir/log" >&2
    exit 1
  }
  grep -o "wall [0-9.]* s" "$dir/log" | tail -1 | awk '{print $2}'
  if [[ $mode != none && ! -f $work/size ]]; then du -sb "$dir"/ckpt/step-* | tail -1 | awk '{print $1}' >"$work/size"; fi
}

declare -A times
for mode in none async; do run "$mode" 0 >/dev/null; done  # warm-up: the page cache, the CPU's clocks
for ((r = 1; r <= rounds; r++)); do
  for mode in none async sync; do
    t=$(run "$mode" "$r")
    times[$mode]+="$t "
    echo "round $r: $mode: $t s for $steps steps"
  done
done
median() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
none=$(echo "${times[none]}" | median)
async=$(echo "${times[async]}" | median)
sync=$(echo "${times[sync]}" | median)
size=$(cat "$work/size")
python3 - "$none" "$async" "$sync" "$size" "$steps" <<'PY'
import json, sys
none, asyn, syn, size, steps = map(float, sys.argv[1:])
print(json.dumps({"steps": int(steps), "checkpoint_bytes": int(size),
                  "ms_per_step_none": round(1000 * none / steps, 1),
                  "ms_per_step_async": round(1000 * asyn / steps, 1),
                  "ms_per_step_sync": round(1000 * syn / steps, 1),
                  "async_over_none": round(asyn / none, 3), "sync_over_none": round(syn / none, 3)}))
PY
