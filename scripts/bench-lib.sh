# Shared by the peer benchmark scripts (sourced): the median of numbers, the tokens per
# second of a run's metrics file over the steps after the first, and the PyTorch peers
# (../shared/peers' Python scripts) run with troupe's own torch unless PEERS_VENV names
# another environment.
export PEERS_VENV=${PEERS_VENV:-$(bash "$(dirname "${BASH_SOURCE[0]}")/torch-env.sh" venv)}
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

metrics_tokens_per_s() {  # METRICS.jsonl
  python3 - "$1" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])][1:]
print(sum(r["tokens"] for r in rows) / (sum(r["step_ms"] for r in rows) / 1000))
PY
}
