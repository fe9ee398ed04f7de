#!/usr/bin/env bash
# gpu-serve-check.sh: on a machine with an NVIDIA GPU, check `nvmai-run serve --engine gpu`
# (issue #36 item 4) and print a closing table with PASS/FAIL per acceptance line. Under
# 9 minutes on an H100 (each step is time-boxed; BUDGET=530 seconds in all).
#
#   scripts/gpu-serve-check.sh --build DIR       # here, with Go: build what it needs into DIR
#   NVMAI_GPU_BIN=DIR scripts/gpu-serve-check.sh  # there: DIR holds nvmai-convert, nvmai-run,
#                                                 # servebench, serveload and server.test
#   scripts/gpu-serve-check.sh                    # from a checkout with Go on the GPU machine
#
# Steps (logs in $OUT, default /tmp/nvmai-gpu-serve-check):
#   servetest  pkg/server's GPU tests (server.test -test.run GPU, NVMAI_GPU=1): the tiny
#              model served through the core over the GPU engine, every reply's tokens equal
#              to a cold runtime session's (greedy and seeded; resumed from RAM and, after a
#              restart, from disk), device memory steady, a CPU server beside it, --models-dir;
#   equal      `serve --engine gpu` on the tiny model against `nvmai-run --engine gpu --json`:
#              the same tokens for the same prompt, sampling and seed (servebench -mode equal);
#   synth      the 40-layer 4-bit synthetic 35B-A3B (nvmai-convert synth, as gpu-check.sh
#              SYNTH=40 makes it, in $WORK; reused when there), made in the background while
#              the two steps above run, then loaded once to fill the kernel cache;
#   overhead   scripts/serve-bench.sh --engine gpu --only overhead: the server's decode rate
#              against nvmai-run's, RUNS (default 3) interleaved pairs, a fresh server each;
#   ttft       scripts/serve-bench.sh --engine gpu --only ttft: a second turn reusing a
#              ~4,000-token prefix against the same turn cold, TTFT_RUNS (default 3) pairs;
#   load       scripts/serve-load.sh --engine gpu for LOAD_DURATION (default 40s): every request
#              answered, goroutines back to the baseline, device memory (nvidia-smi) before the
#              server, ready, at the baseline, at the peak and settled.
# STEPS (default all) names the steps to run, in this order.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

build() { # DIR: the binaries this script needs, stripped (they travel to the GPU machine)
	mkdir -p "$1" && (cd "$root" && export CGO_ENABLED=0 GOTOOLCHAIN=${GOTOOLCHAIN:-auto} &&
		go build -trimpath -ldflags='-s -w' -o "$1/" ./cmd/nvmai-convert ./cmd/nvmai-run ./scripts/internal/servebench ./scripts/internal/serveload &&
		go test -trimpath -ldflags='-s -w' -c -o "$1/server.test" ./pkg/server)
}
if [ "${1:-}" = --build ]; then
	[ -n "${2:-}" ] || { echo "usage: scripts/gpu-serve-check.sh --build DIR" >&2; exit 2; }
	build "$2" || { echo "build failed"; exit 1; }
	du -sh "$2"
	exit 0
fi

OUT=${OUT:-/tmp/nvmai-gpu-serve-check}
WORK=${WORK:-/tmp/nvmai-gpu-work}
BUDGET=${BUDGET:-530}
mkdir -p "$OUT" "$WORK"
export NVMAI_GPU=1 NVMAI_GPU_FIXTURES=${NVMAI_GPU_FIXTURES:-$root/.fixtures}
export NVMAI_CUBIN_CACHE=${NVMAI_CUBIN_CACHE:-$WORK/cubin}
t0=$(date +%s)
stamp() { echo "[$(($(date +%s) - t0))s] $*"; }
left() { echo $((t0 + BUDGET - $(date +%s))); }
STEPS=${STEPS:-all}
want() { [ "$STEPS" = all ] || [[ " $STEPS " == *" $1 "* ]]; }

nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader 2>&1 | tee "$OUT/gpu.txt"
bin=${NVMAI_GPU_BIN:-}
if [ -z "$bin" ]; then
	bin=$WORK/serve-bin
	stamp "building"
	build "$bin" || { echo "build failed"; exit 1; }
fi
bin=$(cd "$bin" && pwd)
for f in nvmai-convert nvmai-run servebench serveload server.test; do
	[ -x "$bin/$f" ] || { echo "$bin/$f is missing: build with scripts/gpu-serve-check.sh --build $bin"; exit 1; }
done

export root bin WORK OUT
declare -A rc
# step NAME CAP CMD…: runs CMD (a program, or a function exported with export -f) with its
# output in $OUT/NAME.log, within CAP seconds and what is left of the budget; rc[NAME] is its
# exit status (124: out of time, "skip": no time left).
step() {
	local name=$1 cap=$2 t
	shift 2
	want "$name" || return 0
	t=$(($(left) - 5))
	[ "$t" -lt "$cap" ] && cap=$t
	if [ "$cap" -lt 20 ]; then
		rc[$name]=skip
		stamp "$name: skipped, $(left)s of the budget left"
		return 0
	fi
	stamp "$name (at most ${cap}s)"
	timeout -k 10 "$cap" bash -c '"$@"' _ "$@" >"$OUT/$name.log" 2>&1
	rc[$name]=$?
	[ "${rc[$name]}" = 0 ] || { echo "$name: exit ${rc[$name]} (log $OUT/$name.log)"; tail -25 "$OUT/$name.log"; }
}

# The synthetic install, made in the background while the tiny model's checks run.
synth=$WORK/synth-35b-a3b-4bit-40
synth_pid=
if { want overhead || want ttft || want load; } && [ ! -f "$synth/manifest.json" ]; then
	stamp "nvmai-convert synth (40 layers, 4-bit) in the background"
	timeout 330 "$bin/nvmai-convert" synth --geometry qwen3.5-35b-a3b --bits 4 --quiet --overwrite -o "$synth" >"$OUT/synth.log" 2>&1 &
	synth_pid=$!
fi

servetest() { cd "$root/pkg/server" && "$bin/server.test" -test.run GPU -test.v -test.timeout 190s; }
export -f servetest
step servetest 200 servetest
grep -hE '^(--- |ok|FAIL|PASS|panic)' "$OUT/servetest.log" 2>/dev/null

equal_check() {
	local tiny=$WORK/tiny-moe-fused-8bit port=$((20000 + RANDOM % 20000)) pid rc=0
	[ -f "$tiny/manifest.json" ] || "$bin/nvmai-convert" --input "$root/testdata/tiny-moe-fused" --output "$tiny" --bits 8 --overwrite >/dev/null || return 1
	"$bin/nvmai-run" serve --engine gpu --model "$tiny" --port "$port" 2>"$OUT/equal-server.log" &
	pid=$!
	for _ in $(seq 600); do
		curl -fs "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
		kill -0 "$pid" 2>/dev/null || { cat "$OUT/equal-server.log"; return 1; }
		sleep 0.2
	done
	grep -h 'ready at' "$OUT/equal-server.log"
	"$bin/servebench" -mode equal -url "http://127.0.0.1:$port" -nvmai-run "$bin/nvmai-run" -model "$tiny" -tokens 48 -run-flags "--engine gpu" || rc=$?
	kill "$pid"
	wait "$pid"
	return $rc
}
export -f equal_check
step equal 90 equal_check
cat "$OUT/equal.log" 2>/dev/null | grep -E '^equal|RESULT|ready at'

if [ -n "$synth_pid" ]; then
	stamp "waiting for nvmai-convert synth"
	wait "$synth_pid" || { echo "nvmai-convert synth failed (log $OUT/synth.log)"; tail -5 "$OUT/synth.log"; }
	stamp "synth done: $(du -sh "$synth" 2>/dev/null | cut -f1)"
fi
if [ -f "$synth/manifest.json" ]; then
	# One load fills the kernel cache and the page cache, so that every timed run starts alike.
	step warm 120 "$bin/nvmai-run" --engine gpu -m "$synth" --prompt-ids 1,2,3,4 -n 4 --ignore-eos
	step overhead 200 "$root/scripts/serve-bench.sh" --engine gpu --install "$synth" --bin "$bin" --only overhead --runs "${RUNS:-3}"
	grep -hE '^(pair|overhead|server.s own)' "$OUT/overhead.log" 2>/dev/null
	step ttft 120 "$root/scripts/serve-bench.sh" --engine gpu --install "$synth" --bin "$bin" --only ttft --ttft-runs "${TTFT_RUNS:-3}"
	grep -hE "^(pair|TTFT|nvmai-run serve: ready|20[0-9][0-9]-)" "$OUT/ttft.log" 2>/dev/null | cut -c1-220
	step load 150 "$root/scripts/serve-load.sh" --engine gpu --install "$synth" --bin "$bin" --duration "${LOAD_DURATION:-40s}"
	grep -hE '^(VRAM|baseline|requests=|after:|peak|settled|RESULT|FAIL)' "$OUT/load.log" 2>/dev/null
else
	echo "no synthetic install: overhead, ttft and load not run"
fi

# The closing table.
verdict() { [ "$1" = 1 ] && echo PASS || echo FAIL; }
ran() { [ "${rc[$1]:-unset}" != unset ] && [ "${rc[$1]}" != skip ]; }
row() { printf '%-4s  %s\n' "$1" "$2"; }
echo
echo "== closing table ($(($(date +%s) - t0))s) =="
overall=0
check() { # NAME VERDICT TEXT
	if ! want "$1"; then return; fi
	if ! ran "$1"; then
		row "FAIL" "$3: not run (${rc[$1]:-no install})"
		overall=1
		return
	fi
	row "$2" "$3"
	[ "$2" = PASS ] || overall=1
}
ok=0
[ "${rc[servetest]:-}" = 0 ] && grep -q -- '--- PASS: TestGPUServedTokensEqualTheRuntimes' "$OUT/servetest.log" && grep -q -- '--- PASS: TestGPUServeDiskCacheSurvivesRestart' "$OUT/servetest.log" && ok=1
check servetest "$(verdict $ok)" "served tokens equal a cold runtime session's on the GPU (greedy, seeded; RAM and disk prompt cache bit for bit; --models-dir; device memory steady) [servetest.log]"
ok=0
[ "${rc[equal]:-}" = 0 ] && grep -q '^RESULT: served tokens equal' "$OUT/equal.log" && ok=1
check equal "$(verdict $ok)" "serve --engine gpu serves the tokens of nvmai-run --engine gpu (tiny model, greedy and 2 seeded settings, each sent twice) [equal.log]"
line=$(grep -h '^TTFT second turn' "$OUT/ttft.log" 2>/dev/null | tail -1)
speedup=$(sed -nE 's/.*speed-up ([0-9.]+)×.*/\1/p' <<<"$line")
reused=$(sed -nE 's/.*reusing ([0-9]+) of ([0-9]+) tokens.*/\1/p' <<<"$line")
server_speedup=$(sed -nE 's/^TTFT server-side.*speed-up ([0-9.]+)×.*/\1/p' "$OUT/ttft.log" 2>/dev/null | tail -1)
ok=0
# The synthetic install's tokens decode to no text, so the client sees its first text only at the
# reply's end: the server's own TTFT (arrival to first token) is the measure; the client's is shown.
awk -v s="${server_speedup:-0}" -v r="${reused:-0}" 'BEGIN { exit !(s >= 10 && r >= 3500) }' && ok=1
check ttft "$(verdict $ok)" "second-turn TTFT reusing a ${reused:-?}-token prefix ${server_speedup:-?}× faster than cold as the server measures it, arrival to first token (≥ 10×); ${speedup:-?}× to the client's first text, which a synthetic install sends only at the reply's end [ttft.log]"
over=$(sed -nE 's/^overhead per token \(server-side decode vs nvmai-run\): median (-?[0-9.]+)%.*/\1/p' "$OUT/overhead.log" 2>/dev/null | tail -1)
work=$(sed -nE "s/^server's own per-token work.*: median ([0-9.]+)% of decode.*/\1/p" "$OUT/overhead.log" 2>/dev/null | tail -1)
ok=0
[ "${rc[overhead]:-}" = 0 ] && awk -v o="${over:-99}" 'BEGIN { exit !(o < 3) }' && ok=1
check overhead "$(verdict $ok)" "server overhead per token ${over:-?}% of decode, median of ${RUNS:-3} pairs (< 3%); the server's own per-token work ${work:-?}% [overhead.log]"
req=$(grep -h '^requests=' "$OUT/load.log" 2>/dev/null | tail -1)
lost=$(awk '{ for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] } } END { if (v["requests"] == "") print "?"; else print v["requests"] - v["ok"] - v["rejected_4xx"] - v["cancelled_by_client"] - v["failed"] }' <<<"$req")
failed=$(sed -nE 's/.* failed=([0-9]+).*/\1/p' <<<"$req")
ok=0
[ "$lost" = 0 ] && [ "${failed:-1}" = 0 ] && ok=1
check load "$(verdict $ok)" "load test: every request answered (${req:-no report}; lost $lost) [load.log]"
g=$(sed -nE 's/^after: goroutines=([0-9]+) \(baseline ([0-9]+)\).*/\1 \2/p' "$OUT/load.log" 2>/dev/null | tail -1)
ok=0
[ -n "$g" ] && [ "${g% *}" -le $((${g#* } + 2)) ] && ok=1
check load "$(verdict $ok)" "load test: goroutines back to the baseline (after ${g% *}, baseline ${g#* }) [load.log]"
v=$(grep -h '^RESULT: VRAM' "$OUT/load.log" 2>/dev/null | tail -1)
ok=0
grep -q 'no device memory leaked' <<<"$v" && ok=1
check load "$(verdict $ok)" "load test: no VRAM leaked: $(grep -h '^VRAM' "$OUT/load.log" 2>/dev/null | sed -E 's/^VRAM //; s/ MiB in use/ MiB/; s/, server / (server /; s/ MiB$/ MiB)/' | paste -sd ';' | sed 's/;/; /g') [load.log]"
rss=$(grep -h '^after: goroutines' "$OUT/load.log" 2>/dev/null | sed -E 's/.*(rss=.*)/\1/')
[ -n "$rss" ] && echo "      (host memory after the load: $rss; serveload's own verdict: $(grep -h '^RESULT: \(PASS\|FAIL\)' "$OUT/load.log" | tail -1))"
[ $overall = 0 ] && echo "gpu-serve-check: all passed" || echo "gpu-serve-check: FAILURES (logs in $OUT)"
exit $overall
