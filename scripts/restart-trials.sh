#!/usr/bin/env bash
# Restart trials: runs of a checkpointed job, each with a random rank killed (SIGKILL) at a
# random time, some of them during a save. With [train] max_restarts the launcher starts
# every rank again from the last complete checkpoint; each run must end with the final
# parameters of an uninterrupted run, bit for bit, and every complete checkpoint it left
# must load and continue to those same parameters.
#
#   scripts/restart-trials.sh [TRIALS] [STAGE] [OFFLOAD] [SEED]   (default 20, ZeRO 2, cpu)
#
# Needs a build (BUILD=build by default). Prints one line per trial and a summary; exits
# non-zero when any trial ends with other parameters or a checkpoint loads wrongly.
set -uo pipefail
trials=${1:-20}
stage=${2:-2}
offload=${3:-cpu}
RANDOM=${4:-$$}
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
source scripts/free-port.sh
troupe=${BUILD:-build}/troupe
[[ -x $troupe ]] || { echo "restart-trials: $troupe not built" >&2; exit 2; }
work=$(mktemp -d "${TMPDIR:-/tmp}/troupe-restart-XXXXXX")
trap 'rm -rf "$work"' EXIT

# The pid of rank $2 of the job whose command line holds marker $1 (its checkpoint folder).
rank_pid() {
  for pid in $(pgrep -f -- "$1" || true); do
    if tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "TROUPE_RANK=$2" &&
      tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q ' rank '; then
      echo "$pid"
      return
    fi
  done
}

# The job: the tiny GPT on 2 ranks, 30 steps, a checkpoint every 5.
job() {  # job DIR [more arguments]
  local dir=$1
  shift
  hold_free_port || exit 2
  "$troupe" run "$here/configs/tiny-gpt.toml" --set train.steps=30 --set train.log_interval=100 \
    --set cluster.world_size=2 --set parallel.dp=2 --set zero.stage="$stage" \
    --set batch.micro_batch_size=4 --set batch.gradient_accumulation_steps=2 \
    --set batch.global_batch_size=16 --set offload.optimizer=\""$offload"\" \
    --set offload.nvme_path=\""$dir"\" --set checkpoint.dir=\""$dir/ckpt"\" \
    --set checkpoint.every_steps=5 --set checkpoint.keep_last=3 \
    --set cluster.coordinator=\"127.0.0.1:$port\" "$@"
}

mkdir -p "$work/clean"
job "$work/clean" --parameters-out "$work/clean.bin" >"$work/clean.log" 2>&1 || {
  cat "$work/clean.log"
  exit 1
}
echo "uninterrupted run: $(wc -c <"$work/clean.bin") bytes of parameters"

failed=0
restarts_seen=0
for ((t = 1; t <= trials; t++)); do
  dir="$work/trial$t"
  mkdir -p "$dir"
  # Each save lingers 300 ms in its staging folder (a slow disk), so some kills land in one.
  TROUPE_CHECKPOINT_WRITE_DELAY_MS=300 job "$dir" --set train.max_restarts=3 --parameters-out "$dir/out.bin" \
    >"$dir/log" 2>&1 &
  launcher=$!
  delay="$((1 + RANDOM % 4)).$((RANDOM % 10))"  # start-up, training or a save
  sleep "$delay"
  victim_rank=$((RANDOM % 2))
  victim=$(rank_pid "$dir/ckpt" "$victim_rank")
  [[ -n "$victim" ]] && kill -KILL "$victim" 2>/dev/null
  during=""
  compgen -G "$dir/ckpt/*.partial" >/dev/null && during=", during a save"
  status=0
  wait "$launcher" || status=$?
  restarted=$(grep -c "restart [0-9]* of" "$dir/log" || true)
  from=$(grep -o "resumed from .*step-[0-9]*" "$dir/log" | sed 's|.*/||' | tr '\n' ' ' || true)
  restarts_seen=$((restarts_seen + restarted))
  verdict="equal"
  if [[ $status -ne 0 ]]; then
    verdict="FAILED (exit $status)"
  elif ! cmp -s "$dir/out.bin" "$work/clean.bin"; then
    verdict="DIFFERENT PARAMETERS"
  fi
  # Every complete checkpoint left behind loads and continues to the same end.
  for ckpt in "$dir"/ckpt/step-*; do
    [[ -d "$ckpt" && "$ckpt" != *.partial ]] || continue
    if ! job "$dir" --resume "$ckpt" --set checkpoint.every_steps=0 --parameters-out "$dir/again.bin" \
      >"$dir/again.log" 2>&1 || ! cmp -s "$dir/again.bin" "$work/clean.bin"; then
      verdict="$verdict; $(basename "$ckpt") LOADS WRONGLY"
    fi
  done
  [[ "$verdict" == "equal" ]] || failed=$((failed + 1))
  echo "trial $t: killed rank $victim_rank after ${delay} s$during, restarts $restarted (resumed from: ${from:-the start}): $verdict"
  [[ "$verdict" == "equal" ]] || tail -5 "$dir/log"
done
echo "restart trials: $((trials - failed)) of $trials ended with the uninterrupted run's parameters ($restarts_seen restarts)"
[[ $failed -eq 0 ]]
