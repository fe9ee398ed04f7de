#!/usr/bin/env bash
# scripts/vs-llamacpp-gpu.sh --selftest: no GPU needed. The Go tests of gpucompare (parsing,
# table, apply, on the canned llama-bench and nvmai-run JSON of testdata/), then the device steps
# on stubs (nvidia-smi, cmake, nvcc, llama-bench, nvmai-run, nvmai-convert, ggufsynth) over
# several calls: the background build, a call that runs out of budget and the next that resumes,
# the alternating order, a llama.cpp that fails, the 8-bit pair placed on /dev/shm or cut to fewer
# layers, and the docs blocks rewritten in copies of docs/gpu.md and README.md.
set -euo pipefail
cd "$(dirname "$0")/../../.."
root=$(pwd)
export GOTOOLCHAIN="${GOTOOLCHAIN:-auto}"
td=$root/scripts/internal/gpucompare/testdata
S=$(mktemp -d)
trap '[ -n "${SELFTEST_KEEP:-}" ] || rm -rf "$S"' EXIT
fail() { echo "selftest: FAIL: $*" >&2; exit 1; }
expect() { # FILE PATTERN WHAT
	grep -qE -- "$2" "$1" || { echo "--- $1:"; cat "$1"; fail "$3"; }
}

echo "== go test ./scripts/internal/gpucompare"
go test -count=1 ./scripts/internal/gpucompare

echo "== stubs"
mkdir -p "$S/path" "$S/bin" "$S/prep" "$S/src/tools"
CGO_ENABLED=0 go build -o "$S/bin/gpucompare" ./scripts/internal/gpucompare
cat >"$S/path/nvidia-smi" <<'EOF'
#!/usr/bin/env bash
echo "NVIDIA H100 80GB HBM3, 580.159.04, 9.0"
EOF
cat >"$S/path/nvcc" <<'EOF'
#!/usr/bin/env bash
exit 0
EOF
cat >"$S/path/cmake" <<'EOF'
#!/usr/bin/env bash
# configure: nothing; --build: llama-bench after STUB_BUILD_SLEEP seconds
if [ "$1" = --build ]; then
	sleep "${STUB_BUILD_SLEEP:-0}"
	mkdir -p build/bin && cp "$STUB_LLAMA_BENCH" build/bin/llama-bench && chmod +x build/bin/llama-bench
fi
EOF
cat >"$S/llama-bench" <<'EOF'
#!/usr/bin/env bash
[ "${STUB_LLAMA_FAIL:-0}" = 1 ] && { echo "CUDA error: out of memory" >&2; exit 1; }
case " $* " in *" -n 0 "*) cat "$STUB_TESTDATA/llama-prefill-4bit-r1.json" ;; *) cat "$STUB_TESTDATA/llama-decode-4bit-r1.json" ;; esac
echo "$(date +%s.%N) llama-bench $*" >>"$STUB_ORDER"
EOF
cat >"$S/bin/nvmai-run" <<'EOF'
#!/usr/bin/env bash
p=""; while [ $# -gt 0 ]; do [ "$1" = --prompt-tokens ] && p=$2; shift; done
cat "$STUB_TESTDATA/nvmai-4bit-p$p-r1.json"
echo "$(date +%s.%N) nvmai-run $p" >>"$STUB_ORDER"
EOF
# Sizes: a billion bytes a layer for either writer, so the placement logic has something to fit.
cat >"$S/bin/ggufsynth" <<'EOF'
#!/usr/bin/env bash
out="" layers=0 dry=0
while [ $# -gt 0 ]; do case $1 in --output) out=$2 ;; --layers) layers=$2 ;; --dry-run) dry=1 ;; esac; shift; done
if [ $dry = 1 ]; then echo "9 tensors, header 635 B, file ${layers}000000000 B"; exit 0; fi
sleep 1; cp "$STUB_TESTDATA/tiny.gguf" "$out"
EOF
cat >"$S/bin/nvmai-convert" <<'EOF'
#!/usr/bin/env bash
out="" layers=0 dry=0
while [ $# -gt 0 ]; do case $1 in -o) out=$2 ;; --layers) layers=$2 ;; --dry-run) dry=1 ;; esac; shift; done
if [ $dry = 1 ]; then echo "synthetic: ${layers}000000000 bytes ... (${layers}000000000 bytes): nothing written"; exit 0; fi
sleep 1; mkdir -p "$out" && echo '{}' >"$out/manifest.json"
EOF
chmod +x "$S"/path/* "$S"/bin/* "$S/llama-bench"
tar cJf "$S/prep/bin.tar.xz" -C "$S/bin" .
echo "stub" >"$S/src/tools/CMakeLists.txt"
tar cJf "$S/prep/llama-src.tar.xz" -C "$S/src" .
echo "abc1234 (selftest)" >"$S/prep/commit.txt"
echo "v0.5.0 (stub)" >"$S/prep/llama-version.txt"
export PATH="$S/path:$PATH" NVMAI_VS_DIR=$S/prep STUB_TESTDATA=$td STUB_LLAMA_BENCH=$S/llama-bench STUB_ORDER=$S/order
# Free space the placement sees (the real df would do, but the stubs' sizes are made up).
export NVMAI_VS_DISK_FREE=$((200 * 1000000000)) NVMAI_VS_SHM_FREE=0
vs() { # LOG ARGS...: one "device call"
	local log=$1
	shift
	local rc=0
	OUT=$S/out-$(basename "$log") bash scripts/vs-llamacpp-gpu.sh "$@" >"$log" 2>&1 || rc=$?
	[ "$rc" = 0 ] || { cat "$log"; fail "vs-llamacpp-gpu.sh $* exited $rc"; }
}
records() { grep -c . "$1" || true; }

echo "== call 1: build in the background beside models4; the call ends before the build does"
W=$S/w1
STUB_BUILD_SLEEP=12 vs "$S/c1" --work "$W" --steps build,models4 --background --budget 26
expect "$S/c1" 'started in the background' "the build did not start in the background"
expect "$S/c1" 'models4: done' "models4 did not finish while the build ran"
expect "$S/c1" 'build: still running; call again' "the call did not say the build was still running"
[ -f "$W/done.models4" ] && [ ! -f "$W/done.build" ] || fail "call 1's markers"

echo "== call 2: waits for the build, benches both widths, 2 rounds, deletes the pairs"
vs "$S/c2" --work "$W" --steps all --rounds 2
expect "$S/c2" 'build: llama-bench built' "call 2 did not wait for the build"
expect "$S/c2" 'deleted the 4-bit pair this script made' "models8 did not delete the 4-bit pair first"
expect "$S/c2" 'all steps done' "call 2 did not finish"
expect "$S/c2" '\| 4-bit, 40 layers \| decode 128 after 16,384 tok/s \|' "no table printed"
[ "$(records "$W/runs.jsonl")" = 56 ] || fail "runs.jsonl has $(records "$W/runs.jsonl") records, want 56 (2 widths × 2 rounds × (6 nvmai + 8 llama.cpp))"
grep -q '"round":2,"first":"llama.cpp"' "$W/runs.jsonl" && grep -q '"round":1,"first":"nvmai"' "$W/runs.jsonl" || fail "rounds do not alternate"
# The order the engines really ran in: round 1 nvmai first, round 2 llama-bench first.
awk '{ print $2 }' "$S/order" | uniq | tr '\n' ' ' | grep -q '^nvmai-run llama-bench nvmai-run llama-bench nvmai-run ' || fail "engine order: $(awk '{print $2}' "$S/order" | uniq | tr '\n' ' ')"
[ ! -e "$W/m4/nvmai-l40-4bit" ] && [ ! -e "$W/m8/nvmai-l40-8bit" ] || fail "the pairs were not deleted"
[ -f "$S/out-c2/runs.jsonl" ] && [ -f "$S/out-c2/table.md" ] && [ -f "$S/out-c2/vs-llamacpp-gpu-logs.tgz" ] || fail "\$OUT lacks runs.jsonl, table.md or the logs"

echo "== call 3: nothing left to do"
vs "$S/c3" --work "$W"
expect "$S/c3" 'all steps done' "call 3 redid or missed something"
[ "$(records "$W/runs.jsonl")" = 56 ] || fail "call 3 changed runs.jsonl"

echo "== a budget too short for a round, then the call that resumes it"
W=$S/w2
vs "$S/c4" --work "$W" --steps build,models4,bench4 --budget 120
expect "$S/c4" 'round 1 of 2 skipped for now: [0-9]+ s left, a round takes ~208 s; call again' "the short call did not skip the round, saying so"
[ "$(records "$W/runs.jsonl")" = 0 ] || fail "the short call wrote records"
vs "$S/c5" --work "$W" --steps build,models4,bench4
expect "$S/c5" 'all steps done' "the resumed call did not finish"
[ "$(records "$W/runs.jsonl")" = 28 ] || fail "the resumed call wrote $(records "$W/runs.jsonl") records, want 28"

echo "== llama.cpp failing: nvmai's figures stay, the table says how llama.cpp failed"
W=$S/w3
STUB_LLAMA_FAIL=1 vs "$S/c6" --work "$W" --steps build,models4,bench4 --rounds 1
expect "$S/c6" 'failed: exit 1: CUDA error: out of memory' "the table does not show llama.cpp's failure"
[ "$(grep -c '"failed"' "$W/runs.jsonl")" = 4 ] || fail "want 4 failed llama.cpp records"

echo "== the 8-bit pair: GGUF on /dev/shm when only it fits there; fewer layers when nothing fits"
W=$S/w4
NVMAI_VS_DISK_FREE=$((50 * 1000000000)) NVMAI_VS_SHM_FREE=$((45 * 1000000000)) vs "$S/c7" --work "$W" --steps models8
expect "$S/c7" 'the GGUF goes to /dev/shm' "the GGUF was not placed on /dev/shm"
grep -q '^gg=/dev/shm/nvmai-vs-llamacpp-gpu/llama-l40-q8_0' "$W/m8.env" || fail "m8.env: $(cat "$W/m8.env")"
bash -c ". '$W/m8.env'; rm -f \"\$gg\"; rmdir /dev/shm/nvmai-vs-llamacpp-gpu 2>/dev/null" || true
W=$S/w5
NVMAI_VS_DISK_FREE=$((50 * 1000000000)) NVMAI_VS_SHM_FREE=$((10 * 1000000000)) vs "$S/c8" --work "$W" --steps build,models8,bench8 --rounds 1
expect "$S/c8" 'NOTE: 20 layers, not 40' "the cut to 20 layers was not said"
expect "$S/c8" '^8-bit: 20 layers, not 40' "the table does not carry the note"
expect "$S/c8" '\| 8-bit, 20 layers \|' "the table does not name the 20 layers"

echo "== a machine that went back: earlier-runs.jsonl in DIR starts the new work directory's runs.jsonl"
cp "$S/w2/runs.jsonl" "$S/prep/earlier-runs.jsonl"
W=$S/w6
vs "$S/c9" --work "$W" --steps build,models8,bench8 --rounds 1
rm "$S/prep/earlier-runs.jsonl"
expect "$S/c9" 'runs.jsonl starts from .*earlier-runs.jsonl \(28 records\)' "earlier-runs.jsonl was not taken"
[ "$(records "$W/runs.jsonl")" = 42 ] || fail "want the 28 earlier records and 14 new ones, got $(records "$W/runs.jsonl")"

echo "== apply on copies of docs/gpu.md and README.md"
cp docs/gpu.md "$S/gpu.md"
cp README.md "$S/README.md"
"$S/bin/gpucompare" apply "$S/w1/runs.jsonl" "$S/gpu.md" "$S/README.md" >/dev/null
expect "$S/gpu.md" '^\| 8-bit, 40 layers \| prefill 4,096 tok/s \|' "docs/gpu.md's block was not rewritten"
expect "$S/README.md" 'nvmai `--engine gpu` ÷ llama.cpp.s CUDA backend .*4-bit \(40 layers\): prefill 512 0\.57×' "README.md's line was not rewritten"
strip() { sed '/<!-- vs-llamacpp-gpu:start -->/,/<!-- vs-llamacpp-gpu:end -->/d' "$1"; }
diff <(strip docs/gpu.md) <(strip "$S/gpu.md") >/dev/null || fail "apply changed docs/gpu.md outside its block"
diff <(strip README.md) <(strip "$S/README.md") >/dev/null || fail "apply changed README.md outside its block"

echo "selftest: all passed"
