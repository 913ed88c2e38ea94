#!/usr/bin/env bash
# Kill trials: N times, start the tiny GPT job (a random ZeRO stage and optimizer tier),
# wait until it trains, then send a random signal (KILL, TERM, INT or STOP) at a random
# moment to a random rank or to the launcher itself, and check what a user relies on:
#   - the launcher exits within 10 s (a STOP: within peer_timeout_s + 10 s), non-zero;
#   - its output names the rank that was signalled (for a rank target);
#   - no process of the job is left behind.
# A stopped launcher is sent TERM and CONT 2 s later (a stopped program can do nothing
# until it runs again). Prints one line per trial and a summary; exits 1 if any failed.
# Usage: scripts/kill-trials.sh N [SEED]     (BUILD=build by default)
set -uo pipefail
trials=${1:?usage: kill-trials.sh N [SEED]}
# Job control on: a script's background job would otherwise start with SIGINT ignored.
set -m
RANDOM=${2:-$$}
cd "$(dirname "$0")/.."
source scripts/free-port.sh
troupe=${BUILD:-build}/troupe
[[ -x $troupe ]] || { echo "kill-trials: $troupe not built" >&2; exit 2; }
peer_timeout=5
signals=(KILL TERM INT STOP)
tiers=(none cpu nvme)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Pids whose command line holds the trial's marker (its metrics path).
job_pids() { pgrep -f -- "$1" || true; }
# The pid of rank $2 of the trial with marker $1.
rank_pid() {
  for pid in $(job_pids "$1"); do
    if tr '\0' '\n' < "/proc/$pid/environ" 2>/dev/null | grep -qx "TROUPE_RANK=$2" &&
       tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -q ' rank '; then echo "$pid"; return; fi
  done
}

failed=0
for ((t = 1; t <= trials; t++)); do
  stage=$((RANDOM % 4)); tier=${tiers[RANDOM % 3]}; signal=${signals[(t - 1) % 4]}
  target=$((RANDOM % 3)); target_name=$([[ $target == 2 ]] && echo launcher || echo "rank $target")
  [[ $tier == nvme && $stage == 0 ]] && tier=cpu
  dir=$work/trial$t; mkdir -p "$dir/nvme"
  marker=$dir/metrics.jsonl
  hold_free_port || exit 2
  settings="--set train.steps=100000 --set zero.stage=$stage --set offload.optimizer=$tier"
  settings+=" --set offload.nvme_path=$dir/nvme --set cluster.peer_timeout_s=$peer_timeout"
  settings+=" --set cluster.coordinator=127.0.0.1:$port"
  # shellcheck disable=SC2086
  "$troupe" run configs/tiny-gpt.toml $settings --metrics "$marker" > "$dir/output" 2>&1 &
  launcher=$!
  for _ in $(seq 600); do [[ -f $marker && $(wc -l < "$marker") -ge 2 ]] && break; sleep 0.1; done
  sleep "0.$((RANDOM % 10))"
  pid=$launcher
  [[ $target != 2 ]] && pid=$(rank_pid "$marker" "$target")
  if [[ -z $pid ]] || ! kill -0 "$launcher" 2>/dev/null; then
    echo "trial $t: stage $stage $tier: the job was not running when $signal was due: $(tail -2 "$dir/output")"
    failed=$((failed + 1)); kill -KILL "$launcher" 2>/dev/null; continue
  fi
  start=$(date +%s.%N)
  kill -"$signal" "$pid"
  if [[ $signal == STOP && $target == 2 ]]; then sleep 2; kill -TERM "$pid"; kill -CONT "$pid"; fi
  bound=10; [[ $signal == STOP ]] && bound=$((peer_timeout + 10))
  for _ in $(seq $((bound * 20 + 100))); do kill -0 "$launcher" 2>/dev/null || break; sleep 0.05; done
  kill -0 "$launcher" 2>/dev/null && { kill -CONT "$launcher"; kill -KILL "$launcher"; }  # over the bound: counted below
  wait "$launcher" 2>/dev/null; status=$?
  seconds=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
  sleep 1
  left=$(job_pids "$marker" | tr '\n' ' ')
  problems=()
  awk -v s="$seconds" -v b="$bound" 'BEGIN { exit !(s > b) }' && problems+=("took ${seconds}s, over ${bound}s")
  [[ $status == 0 ]] && problems+=("exit status 0")
  [[ $target != 2 ]] && ! grep -q "rank $target" "$dir/output" && problems+=("rank $target not named")
  [[ -n $left ]] && problems+=("left behind: $left") && kill -KILL $left 2>/dev/null
  message=$(grep -m1 -E "troupe: rank [0-9]+ (was|exited)|has not been heard|troupe: stopping|troupe: .*signal" "$dir/output" | cut -c1-140)
  printf 'trial %2d: stage %d %-4s %-4s to %-8s exit %3d in %5.2fs  %s  %s\n' "$t" "$stage" "$tier" "$signal" \
    "$target_name" "$status" "$seconds" "${problems[*]:-ok}" "$message"
  [[ ${#problems[@]} -gt 0 ]] && failed=$((failed + 1))
done
echo "kill trials: $trials run, $failed failed"
[[ $failed == 0 ]]
