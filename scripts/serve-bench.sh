#!/usr/bin/env bash
# Measures nvmai-run serve on a synthetic 35B-A3B-geometry install (loopback only):
#   1. server overhead per token: decode rate of a streamed /v1/completions against
#      `nvmai-run --json` on the same prompt and token count, interleaved pairs;
#   2. time to first token of a second chat turn that reuses a ~4,000-token prefix
#      from the prompt cache, against the same turn cold, interleaved pairs;
#   3. (--only parallel, not run by default) --streams requests (default 4) sent at once to a
#      server started with --parallel N against the same requests one after another on that
#      server: aggregate tok/s (all tokens over the wall time, short prompts' prefill included)
#      and each stream's own decode rate (the server's predicted_per_second), --runs runs.
#      The server runs without a prompt cache, so no request resumes another's prompt.
#      --routing SPEC (e.g. synthetic:agent) or --routing-trace FILE makes the server replay that
#      routing instead of the router's (serve --routing: each slot its own seed or offset; read-ahead
#      off), the realistic locality random weights lack (issue #39's "agent routing regime").
#
#   scripts/serve-bench.sh [--only overhead|ttft|parallel] [--install DIR] [--runs N] [--ttft-runs N] [--ram-budget 2G|all]
#                          [--threads N] [--prefix-words N] [--streams N] [--tokens N] [--engine cpu|gpu] [--bin DIR]
#                          [--routing synthetic:agent | --routing-trace FILE]   (--only parallel)
#
# --ram-budget all gives the expert cache every expert (the "all in RAM" case). Acceptance of
# issue #39 on the 40-layer 4-bit synthetic (bin/nvmai-convert synth --geometry qwen3.5-35b-a3b
# --bits 4 -o DIR):
#   scripts/serve-bench.sh --only parallel --install DIR --ram-budget 8G --threads 16 --runs 3 --routing synthetic:agent
#   scripts/serve-bench.sh --only parallel --install DIR --ram-budget all --threads 16 --runs 3 --routing synthetic:agent
# and on the GPU (the device batched step; acceptance on an H200: aggregate >= 3x, each stream >= 0.5x):
#   scripts/serve-bench.sh --only parallel --engine gpu --install DIR --runs 3 --routing synthetic:agent
#
# --install defaults to models/synth-l4, created with
#   bin/nvmai-convert synth --geometry qwen3.5-35b-a3b --bits 4 --layers 4 --output DIR
# when missing. Prints the numbers; the VM is noisy, so compare the ratios of one run.
# --engine gpu serves and runs on the GPU (every weight on the device: --ram-budget and
# --threads do not apply, and the tiny model's overhead run is left out); give --install
# (e.g. the 40-layer 4-bit synthetic gpu-check.sh makes). --bin DIR takes nvmai-convert,
# nvmai-run and servebench from DIR instead of building them into bin/ (a machine without Go).
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN="${GOTOOLCHAIN:-auto}"
install=models/synth-l4 runs=5 ttft_runs=3 only= budget=2G threads=2 words=1780 engine=cpu bin= streams=4 tokens=64 routing=()
while [ $# -gt 0 ]; do
  case $1 in
    --install) install=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --ttft-runs) ttft_runs=$2; shift 2 ;;
    --ram-budget) budget=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --prefix-words) words=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    --streams) streams=$2; shift 2 ;;
    --tokens) tokens=$2; shift 2 ;;
    --engine) engine=$2; shift 2 ;;
    --bin) bin=$2; shift 2 ;;
    --routing | --routing-trace) routing=("$1" "$2"); shift 2 ;;
    *) echo "serve-bench.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
case $engine in cpu | gpu) ;; *) echo "serve-bench.sh: --engine $engine: use cpu or gpu" >&2; exit 2 ;; esac
case $only in "" | overhead | ttft | parallel) ;; *) echo "serve-bench.sh: --only $only: use overhead, ttft or parallel" >&2; exit 2 ;; esac
[ ${#routing[@]} -gt 0 ] && [ "$only" != parallel ] && { echo "serve-bench.sh: ${routing[0]} applies to --only parallel" >&2; exit 2; }
if [ -z "$bin" ]; then
  go build -o bin/ ./cmd/nvmai-convert ./cmd/nvmai-run ./scripts/internal/servebench
  bin=bin
fi
if [ ! -d "$install" ]; then
  "$bin/nvmai-convert" synth --geometry qwen3.5-35b-a3b --bits 4 --layers 4 --output "$install"
fi
work=$(mktemp -d /tmp/nvmai-serve-bench.XXXXXX)
server_pid=
stop_server() {
  if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  server_pid=
}
cleanup() { stop_server; rm -rf "$work"; }
trap cleanup EXIT
if [ "$budget" = all ]; then
  flags=(--threads "$threads" --expert-cache-slots "$(jq -r .geometry.num_experts "$install/manifest.json")" --max-context 8192)
else
  flags=(--threads "$threads" --ram-budget "$budget" --max-context 8192)
fi
[ "$engine" = gpu ] && flags=(--engine gpu --max-context 8192)
# start_server INSTALL [serve flags…]: serves INSTALL on a free loopback port, sets $url.
start_server() {
  port=$(( 20000 + RANDOM % 20000 ))
  local cache=2G
  [ "$only" = parallel ] && cache=0
  "$bin/nvmai-run" serve --model "$1" --port "$port" --prompt-cache "$cache" "${flags[@]}" "${@:2}" 2>"$work/server.log" &
  server_pid=$!
  for _ in $(seq 600); do
    curl -fs "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
    kill -0 "$server_pid" 2>/dev/null || { cat "$work/server.log"; exit 1; }
    sleep 0.2
  done
  grep ready "$work/server.log"
  url=http://127.0.0.1:$port
}
"$bin/nvmai-convert" --input testdata/tiny-moe-fused --output "$work/tiny" --bits 8 >/dev/null

if [ "$only" = parallel ]; then
echo "== $streams streams at once (--parallel $streams) vs one after another, $tokens tokens each, $(basename "$install") on the $engine ($runs runs)"
start_server "$install" --parallel "$streams" "${routing[@]}"
grep 'routing replayed' "$work/server.log" || true
"$bin/servebench" -mode parallel -url "$url" -runs "$runs" -streams "$streams" -tokens "$tokens"
stop_server
exit 0
fi

if [ "$only" != ttft ]; then
echo "== server overhead per token, $(basename "$install") on the $engine ($runs interleaved pairs, a fresh server per pair so both start with a cold expert cache and decode graph; its tokens decode to almost no text)"
port=$(( 20000 + RANDOM % 20000 ))
"$bin/servebench" -mode overhead -fresh-server -url "http://127.0.0.1:$port" -nvmai-run "$bin/nvmai-run" -model "$install" -runs "$runs" -tokens 128 -run-flags "${flags[*]}"

if [ "$engine" = cpu ]; then
echo "== server overhead per token, tiny model (every token streams text: the SSE cost in full; a fresh server per pair)"
port=$(( 20000 + RANDOM % 20000 ))
"$bin/servebench" -mode overhead -fresh-server -url "http://127.0.0.1:$port" -nvmai-run "$bin/nvmai-run" -model "$work/tiny" -runs "$runs" -tokens 256 -run-flags "${flags[*]}"
fi

fi
if [ "$only" != overhead ]; then
echo "== time to first token, second turn reusing the prefix vs cold, $(basename "$install") on the $engine ($ttft_runs interleaved pairs)"
start_server "$install"
"$bin/servebench" -mode ttft -url "$url" -runs "$ttft_runs" -prefix-words "$words"
echo "server's log lines (prefill rate, cached tokens, queue wait and TTFT as the server saw them):"
grep ' POST ' "$work/server.log" || true
# Each pair logs three requests: the first turn, the second turn, the cold turn. The server's ttft is
# from the request's arrival to its first generated token. The client's TTFT above is the first
# streamed text, which on a synthetic install (its tokens decode to no text) comes only with the
# reply's end, after the last decode step and the end-of-turn snapshot.
grep ' POST /v1/chat/completions 200 ' "$work/server.log" | sed -nE 's/.* ttft=([0-9.]+)s.*/\1/p' | awk '
  NR % 3 == 2 { w[++nw] = $1 } NR % 3 == 0 { c[++nc] = $1 }
  function med(a, n,   i, j, t) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t } return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
  END { if (nw && nc) { mw = med(w, nw); mc = med(c, nc); printf "TTFT server-side (arrival to first token): second turn median %.3fs (range %.3f … %.3f); cold median %.3fs (range %.3f … %.3f); speed-up %.1f×\n", mw, w[1], w[nw], mc, c[1], c[nc], mc / mw } }'
stop_server
fi
