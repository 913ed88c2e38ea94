#!/usr/bin/env bash
# The page `tensorboard --logdir DIR` serves, as headless Chromium renders it, into a PNG:
#   scripts/tensorboard-screenshot.sh DIR OUT.png [DASHBOARD]
# DASHBOARD is the page's fragment (default "scalars"). TensorBoard is the project's Python
# environment's (scripts/torch-env.sh); Chromium is Debian's (apt-get install chromium).
# docs/tensorboard.png (2026-12-06) was made this way:
#   troupe run configs/tiny-gpt.toml --set train.steps=300 --set data.split=[95,5] \
#     --set train.eval_interval=50 --set train.eval_steps=2 --set 'monitor.tensorboard="runs/tiny-gpt"'
#   scripts/tensorboard-screenshot.sh runs docs/tensorboard.png 'scalars&tagFilter=loss%7Clr%7Cgrad_norm%7Ctokens'
set -euo pipefail

dir=${1:?usage: tensorboard-screenshot.sh DIR OUT.png [DASHBOARD]}
out=${2:?usage: tensorboard-screenshot.sh DIR OUT.png [DASHBOARD]}
dashboard=${3:-scalars}
here=$(cd "$(dirname "$0")" && pwd)
python=$(bash "$here/torch-env.sh" python)
browser=$(command -v chromium || command -v chromium-browser || true)
[[ -n $browser ]] || { echo "tensorboard-screenshot: no chromium (apt-get install chromium)" >&2; exit 1; }

port=$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$python" -m tensorboard.main --logdir "$dir" --host 127.0.0.1 --port "$port" >/dev/null 2>&1 &
tensorboard=$!
trap 'kill $tensorboard 2>/dev/null || true' EXIT
for _ in $(seq 1 120); do
  curl -sf "http://127.0.0.1:$port/" >/dev/null 2>&1 && break
  sleep 0.5
done
curl -sf "http://127.0.0.1:$port/" >/dev/null || { echo "tensorboard-screenshot: TensorBoard did not answer on port $port" >&2; exit 1; }
# --virtual-time-budget lets the page's scripts fetch and draw the runs before the shot.
"$browser" --headless=new --no-sandbox --disable-gpu --hide-scrollbars --window-size=1600,1100 \
  --virtual-time-budget=20000 --screenshot="$out" "http://127.0.0.1:$port/?darkMode=false#$dashboard" 2>/dev/null
echo "tensorboard-screenshot: $out"
