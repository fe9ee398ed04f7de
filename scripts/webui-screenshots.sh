#!/usr/bin/env bash
# Screenshots of serve's web page for docs/server.md: a streamed reply of a synthetic install whose
# experts stream through a small expert cache, in the light and the dark theme. For each theme,
# docs/img/webui-live-THEME.png is the live panel while the reply streams and
# docs/img/webui-chat-THEME.png the whole page once it is done.
#
# The install is a 4-layer cut of qwen3.5-35b-a3b at 4 bits (2.8 GiB; random weights, so the reply
# means nothing and its tokens mostly lie beyond the synthetic tokenizer), written with
# `nvmai-convert synth` into WORK when absent; --ram-budget 256M buys 37 expert slots a layer, far
# fewer than its 256 experts, so experts stream from disk at every token.
# Needs Chromium (apt-get install chromium, or NVMAI_CHROME=PATH); the page is driven by
# scripts/internal/webshot (chromedp).
#
# usage: scripts/webui-screenshots.sh [WORK]     (default /tmp/nvmai-webui-shots; PORT=18778)
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN="${GOTOOLCHAIN:-auto}"
export PATH="/usr/local/go/bin:$PATH"
work=${1:-/tmp/nvmai-webui-shots}
port=${PORT:-18778}
mkdir -p "$work/bin"
go build -o "$work/bin/" ./cmd/nvmai-run ./cmd/nvmai-convert ./scripts/internal/webshot
install=$work/qwen3.5-35b-a3b-4bit-4layers
[ -f "$install/manifest.json" ] || "$work/bin/nvmai-convert" synth --geometry qwen3.5-35b-a3b --bits 4 --layers 4 --output "$install" --quiet

log=$work/serve.log
"$work/bin/nvmai-run" serve --model "$install" --port "$port" --ram-budget 256M --max-context 4096 \
  --max-tokens 40 --temperature 0.7 >"$log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null || true' EXIT
for _ in $(seq 300); do
  curl -sf "localhost:$port/health" >/dev/null && break
  kill -0 $pid 2>/dev/null || { cat "$log"; exit 1; }
  sleep 0.2
done
grep -E "footprint|ready at" "$log" | sed 's/^/    /'
"$work/bin/webshot" -url "http://127.0.0.1:$port/" -out docs/img
