# Shared by the peer benchmark scripts (sourced): the median of numbers, and the tokens per
# second of a run's metrics file over the steps after the first.
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

metrics_tokens_per_s() {  # METRICS.jsonl
  python3 - "$1" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])][1:]
print(sum(r["tokens"] for r in rows) / (sum(r["step_ms"] for r in rows) / 1000))
PY
}
