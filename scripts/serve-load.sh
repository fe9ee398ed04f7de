#!/usr/bin/env bash
# Load test of nvmai-run serve against the embedded tiny model, loopback only:
# 32 concurrent clients for 60 s mixing streamed and plain chats, completions,
# client cancellations, malformed bodies and oversize prompts. Checks that every
# request is answered (200 or a 4xx error envelope), none is lost, the server
# does not crash, and its goroutines and RSS come back to baseline; prints the numbers.
#
# --hogs adds hostile clients beside them: 2 slow readers (pipelined streams on a
# connection that reads 64 bytes a second) and 64 idle keep-alive connections (the
# default --max-connections), each opened with a GET /health. --compare-hogs runs
# the load without them, then with them, on one server, and prints the ratio of the
# other clients' median latencies (acceptance: all answered, ratio ≤ 2).
# --stream-write-timeout is passed to the server (default: the server's, 20s); arguments
# after -- go to serveload. A slow reader's answers first fill the ~3 MB the kernels
# buffer for its connection; only then does the server cut it off, so by default (32-token
# answers, many refused with 429) a short run shows the slow readers costing the others
# nothing rather than their cut-off. `-- -slow-tokens 4000 -slow-pipeline 40` fills the
# buffers within about a minute (look for "stream cut off" in the server log), at the
# engine cost of any client asking for long answers. While the hogs keep the server at its
# connection limit it answers with Connection: close, so a slow reader's connection often ends
# after its first answer (its other pipelined requests never run), and the other clients open a
# connection per request. A FAIL line names the connection a request failed on (new, or reused
# after how long idle): a POST failing on a reused one met the server closing it.
#
#   scripts/serve-load.sh [--clients N] [--duration 60s] [--hogs | --compare-hogs] [--stream-write-timeout 5s] [-- serveload flags]
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN="${GOTOOLCHAIN:-auto}"
clients=32 duration=60s hogs=0 compare=0 swt=() extra=()
while [ $# -gt 0 ]; do
  case $1 in
    --clients) clients=$2; shift 2 ;;
    --duration) duration=$2; shift 2 ;;
    --hogs) hogs=1; shift ;;
    --compare-hogs) compare=1; shift ;;
    --stream-write-timeout) swt=(--stream-write-timeout "$2"); shift 2 ;;
    --) shift; extra=("$@"); break ;;
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
"$work/nvmai-run" serve --model "$work/tiny" --host 127.0.0.1 --port "$port" --prompt-cache 32M --threads 1 --log-json "${swt[@]}" 2>"$work/server.log" &
server_pid=$!
for _ in $(seq 100); do
  curl -fs "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
  kill -0 "$server_pid" 2>/dev/null || { cat "$work/server.log"; exit 1; }
  sleep 0.1
done
status=0
load() { # extra serveload flags...; prints its report, keeps it in $work/report
  "$work/serveload" -url "http://127.0.0.1:$port" -clients "$clients" -duration "$duration" -pid "$server_pid" "$@" | tee "$work/report" || status=$?
  if ! kill -0 "$server_pid" 2>/dev/null; then echo "serve-load: the server died"; tail -20 "$work/server.log"; exit 1; fi
}
median_ok() { sed -n 's/^median_ms=[0-9.]* median_ok_ms=\([0-9.]*\)$/\1/p' "$work/report"; }
if [ "$compare" = 1 ]; then
  echo "== without hostile clients"
  load
  plain=$(median_ok)
  echo "== with hostile clients (-hogs)"
  load -hogs "${extra[@]}"
  hostile=$(median_ok)
  ratio=$(awk -v a="$plain" -v b="$hostile" 'BEGIN { if (a > 0) printf "%.2f", b / a; else print "n/a" }')
  echo "median latency of the other clients' completions: ${plain} ms without, ${hostile} ms with hostile clients: ratio ${ratio} (acceptance ≤ 2)"
  if [ "$ratio" = n/a ] || awk -v r="$ratio" 'BEGIN { exit !(r > 2) }'; then echo "RESULT: hostile clients slowed the others more than 2×"; status=1; fi
elif [ "$hogs" = 1 ]; then
  load -hogs "${extra[@]}"
else
  load "${extra[@]}"
fi
echo "server log lines: $(wc -l <"$work/server.log"), streams cut off for not reading: $(grep -c 'stream cut off' "$work/server.log" || true)"
exit $status
