#!/usr/bin/env bash
# All-reduce from 1 KiB to 256 MiB on 2 and 4 ranks: troupe beside Open MPI's
# MPI_Allreduce (../shared/peers/mpi-allreduce.sh), each size measured for both in the
# same run. Writes docs/figures/allreduce.jsonl and draws docs/figures/allreduce.svg.
#
# usage: scripts/bench-collectives.sh [RANKS...]   (default: 2 4)
set -euo pipefail
cd "$(dirname "$0")/.."
peers=${TROUPE_PEERS:-../shared/peers}
out=docs/figures/allreduce.jsonl
ranks_list=("${@:-2 4}")
: > "$out"
for ranks in ${ranks_list[@]}; do
  for ((bytes = 1024; bytes <= 268435456; bytes *= 4)); do
    build/troupe bench allreduce --ranks "$ranks" --bytes "$bytes" --seconds 0.3 --json |
      sed 's/^{/{"system":"troupe",/' >> "$out"
    iters=$(( bytes <= 1048576 ? 200 : (bytes <= 16777216 ? 20 : 5) ))
    "$peers/mpi-allreduce.sh" "$ranks" "$bytes" "$iters" 2>/dev/null | tail -1 |
      awk -v r="$ranks" '{for (i = 1; i <= NF; i++) {split($i, kv, "="); v[kv[1]] = kv[2]}
        printf "{\"system\":\"openmpi\",\"bench\":\"allreduce\",\"ranks\":%d,\"bytes\":%d,\"seconds\":%s,\"algbw_GBps\":%s,\"busbw_GBps\":%s}\n",
               r, v["bytes"], v["seconds"], v["algbw_GBps"], v["busbw_GBps"]}' >> "$out"
    echo "ranks $ranks bytes $bytes done" >&2
  done
done
python3 scripts/plot_bandwidth.py "$out" docs/figures/allreduce.svg
