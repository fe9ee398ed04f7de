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
#   scripts/serve-load.sh [--clients N] [--duration 60s] [--hogs | --compare-hogs] [--stream-write-timeout 5s]
#                         [--parallel N] [--engine gpu --install DIR] [--bin DIR] [-- serveload flags]
#
# --parallel N is passed to the server (up to N generations decoded together; the CPU engine
# only): the same checks then cover batched serving (every request answered, nothing leaked).
# Without it the server runs --parallel 1 (not serve's default chosen from memory), so the queue,
# 429 and hostile-client figures stay those of one generation at a time.
#
# --engine gpu serves --install DIR (e.g. the 40-layer 4-bit synthetic gpu-check.sh makes) on the
# GPU with --max-context 4096 (the oversize prompts are refused) and a 256 MiB prompt cache, and
# records the device memory (nvidia-smi memory.used, all processes, and the server's own) before
# the server starts, once it is ready, at serveload's baseline (after its warm-up requests), at
# the peak during the load and after the load settled: the settled figure above the baseline by
# more than 32 MiB fails the run ("RESULT: VRAM …"). --bin DIR takes nvmai-convert, nvmai-run and
# serveload from DIR instead of building them (a machine without Go).
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN="${GOTOOLCHAIN:-auto}"
clients=32 duration=60s hogs=0 compare=0 swt=() extra=() engine=cpu install= bin= parallel=(--parallel 1)
while [ $# -gt 0 ]; do
  case $1 in
    --clients) clients=$2; shift 2 ;;
    --duration) duration=$2; shift 2 ;;
    --hogs) hogs=1; shift ;;
    --compare-hogs) compare=1; shift ;;
    --stream-write-timeout) swt=(--stream-write-timeout "$2"); shift 2 ;;
    --parallel) parallel=(--parallel "$2"); shift 2 ;;
    --engine) engine=$2; shift 2 ;;
    --install) install=$2; shift 2 ;;
    --bin) bin=$2; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    *) echo "serve-load.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
case $engine in
  cpu) ;;
  gpu) [ -n "$install" ] || { echo "serve-load.sh: --engine gpu needs --install DIR" >&2; exit 2; } ;;
  *) echo "serve-load.sh: --engine $engine: use cpu or gpu" >&2; exit 2 ;;
esac
work=$(mktemp -d /tmp/nvmai-serve-load.XXXXXX)
server_pid=
cleanup() {
  if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
if [ -z "$bin" ]; then
  go build -o "$work/" ./cmd/nvmai-convert ./cmd/nvmai-run ./scripts/internal/serveload
  bin=$work
fi
# vram: the device memory in use, MiB (all processes), and the server's own.
vram() {
  local all own
  all=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null | head -1 | tr -d ' ')
  own=$(nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits 2>/dev/null | awk -F', *' -v p="$server_pid" '$1 == p { print $2 }')
  echo "${all:-?} ${own:-0}"
}
note_vram() { # label: appends "label all own" to $work/vram and prints it
  local v
  v=$(vram)
  echo "$1 $v" >>"$work/vram"
  echo "VRAM $1: ${v% *} MiB in use, server ${v#* } MiB"
}
if [ "$engine" = gpu ]; then
  model=$install
  serve_flags=(--engine gpu --max-context 4096 --prompt-cache 256M)
  note_vram before_server
else
  "$bin/nvmai-convert" --input testdata/tiny-moe-fused --output "$work/tiny" --bits 8 >/dev/null
  model=$work/tiny
  serve_flags=(--prompt-cache 32M --threads 1)
fi
port=$(( 20000 + RANDOM % 20000 ))
"$bin/nvmai-run" serve --model "$model" --host 127.0.0.1 --port "$port" "${serve_flags[@]}" "${parallel[@]}" --log-json "${swt[@]}" 2>"$work/server.log" &
server_pid=$!
for _ in $(seq 1200); do
  curl -fs "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
  kill -0 "$server_pid" 2>/dev/null || { cat "$work/server.log"; exit 1; }
  sleep 0.1
done
[ "$engine" = gpu ] && { grep -h 'ready at' "$work/server.log" || true; note_vram ready; }
status=0
load() { # extra serveload flags...; prints its report, keeps it in $work/report
  if [ "$engine" != gpu ]; then
    "$bin/serveload" -url "http://127.0.0.1:$port" -clients "$clients" -duration "$duration" -pid "$server_pid" "$@" | tee "$work/report" || status=$?
  else
    # Device memory at serveload's baseline (its warm-up done), at the peak
    # (sampled each second) and once the load settled.
    "$bin/serveload" -url "http://127.0.0.1:$port" -clients "$clients" -duration "$duration" -pid "$server_pid" "$@" >"$work/report" 2>&1 &
    local lp=$! based=0 peak=0 own=0 v
    while kill -0 "$lp" 2>/dev/null; do
      if [ $based = 0 ] && grep -q '^baseline:' "$work/report"; then note_vram baseline; based=1; fi
      v=$(vram)
      [[ ${v% *} =~ ^[0-9]+$ ]] && [ "${v% *}" -gt "$peak" ] && peak=${v% *}
      [[ ${v#* } =~ ^[0-9]+$ ]] && [ "${v#* }" -gt "$own" ] && own=${v#* }
      sleep 1
    done
    wait "$lp" || status=$?
    cat "$work/report"
    echo "peak $peak $own" >>"$work/vram"
    echo "VRAM peak: $peak MiB in use, server $own MiB"
    note_vram settled
    local b s
    b=$(awk '$1 == "baseline" { print $2 }' "$work/vram")
    s=$(awk '$1 == "settled" { print $2 }' "$work/vram")
    if [[ $b =~ ^[0-9]+$ && $s =~ ^[0-9]+$ ]] && [ "$s" -le $((b + 32)) ]; then
      echo "RESULT: VRAM settled at $s MiB, baseline $b MiB: no device memory leaked"
    else
      echo "RESULT: VRAM FAIL: settled at ${s:-?} MiB, baseline ${b:-?} MiB (more than 32 MiB above)"
      status=1
    fi
  fi
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
