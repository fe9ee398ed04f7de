#!/usr/bin/env bash
# Load test of nvmai-run serve against the embedded tiny model, loopback only:
# 32 concurrent clients for 60 s mixing streamed and plain chats, completions,
# client cancellations, malformed bodies and oversize prompts. Checks that every
# request is answered (200 or a 4xx error envelope), none is lost, the server
# does not crash, and its goroutines and RSS come back to baseline; prints the numbers.
#
#   scripts/serve-load.sh [--clients N] [--duration 60s]
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN="${GOTOOLCHAIN:-auto}"
clients=32 duration=60s
while [ $# -gt 0 ]; do
  case $1 in
    --clients) clients=$2; shift 2 ;;
    --duration) duration=$2; shift 2 ;;
    *) echo "serve-load.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
work=$(mktemp -d /tmp/nvmai-serve-load.XXXXXX)
server_pid=
cleanup() {
  if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
go build -o "$work/" ./cmd/nvmai-convert ./cmd/nvmai-run ./scripts/internal/serveload
"$work/nvmai-convert" --input testdata/tiny-moe-fused --output "$work/tiny" --bits 8 >/dev/null
port=$(( 20000 + RANDOM % 20000 ))
"$work/nvmai-run" serve --model "$work/tiny" --host 127.0.0.1 --port "$port" --prompt-cache 32M --threads 1 --log-json 2>"$work/server.log" &
server_pid=$!
for _ in $(seq 100); do
  curl -fs "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
  kill -0 "$server_pid" 2>/dev/null || { cat "$work/server.log"; exit 1; }
  sleep 0.1
done
status=0
"$work/serveload" -url "http://127.0.0.1:$port" -clients "$clients" -duration "$duration" -pid "$server_pid" || status=$?
if ! kill -0 "$server_pid" 2>/dev/null; then echo "serve-load: the server died"; tail -20 "$work/server.log"; exit 1; fi
echo "server log lines: $(wc -l <"$work/server.log")"
exit $status
