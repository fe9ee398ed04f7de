#!/usr/bin/env bash
# The test suite (README's second command): lint gates (gofmt, vet, the converter's expert-order
# probe), every package with the race detector, the scripted engine's test build, the kernels
# again without assembly, the arm64 kernels under qemu user emulation when
# qemu-aarch64-static is installed (.ci/run installs it), and the GPU kernels' tests on the CPU through
# cudaemu (tools/cudaemu: an emulated CUDA driver; needs g++).
# It ends by saying how many tests skipped, and how many of those needed the reference fixtures
# (../shared/fixtures, which a clone from GitHub does not have), also when a test failed.
# Arguments, when given, replace ./... as the packages of the race run (.ci/run gives none).
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN="${GOTOOLCHAIN:-auto}" # go.mod pins the toolchain; images whose go.env says "local" would refuse it
scratch=$(mktemp -d)
# The skip summary comes last whatever happened; bash keeps the exit status through the trap, which
# also waits for the arm64 runs (below) if a section failed while they ran.
qemu_pid=
cudaemu_pid=
trap 'if [ -n "$qemu_pid" ]; then wait "$qemu_pid" || true; fi
if [ -n "$cudaemu_pid" ]; then wait "$cudaemu_pid" || true; fi
if [ -s "$scratch/skips" ]; then echo "== skipped tests"; cat "$scratch/skips"; fi; rm -rf "$scratch"' EXIT
packages=("$@")
[ ${#packages[@]} -gt 0 ] || packages=(./...)
# The web page's browser test (pkg/server/webui) needs headless Chromium (Debian's package chromium,
# .ci/run installs it): it skips without one, unless CI or NVMAI_BROWSER=1 makes it required.
echo "== prerequisites"
chrome=${NVMAI_CHROME:-$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)}
if [ -n "$chrome" ]; then
  echo "browser: $("$chrome" --version 2>/dev/null || echo "$chrome")"
elif [ -n "${CI:-}" ] || [ "${NVMAI_BROWSER:-}" = 1 ]; then
  echo "FAIL: Chromium is required (CI or NVMAI_BROWSER=1) for the browser test: apt-get install chromium"; exit 1
else
  echo "SKIPPED: Chromium is not installed (apt-get install chromium); the browser test of the web page skips"
fi
echo "== lint gates"; scripts/lint.sh
# The arm64 runs under qemu emulate on one core: they run in the background from here on, beside the
# race run (which leaves a core idle about a third of its time: links, stretches of one package) and
# the sections after it, their output kept for their own section at the end.
if command -v qemu-aarch64-static >/dev/null 2>&1; then
  (
    bin=$scratch/kernels.arm64
    GOARCH=arm64 go test -c -o "$bin" ./pkg/kernels/
    (cd pkg/kernels && qemu-aarch64-static "$bin" -test.count=1)
    # arm64 fuses multiply-adds where amd64 does not: sample.Exp must not.
    GOARCH=arm64 go test -c -o "$scratch/sample.arm64" ./pkg/sample/
    (cd pkg/sample && qemu-aarch64-static "$scratch/sample.arm64" -test.count=1 -test.run 'Exp|Finish|Step')
  ) > "$scratch/qemu.log" 2>&1 &
  qemu_pid=$!
fi
# The GPU kernels' own tests (pkg/gpu/gpukernels, bitwise against their Go references) and the
# emulator's selftest, run on the CPU through cudaemu: one core, in the background as well.
if command -v "${CXX:-g++}" >/dev/null 2>&1; then
  (tools/cudaemu/selftest.sh && scripts/cudaemu.sh test ./pkg/gpu/gpukernels) > "$scratch/cudaemu.log" 2>&1 &
  cudaemu_pid=$!
fi
go build -o "$scratch/testsummary" ./scripts/internal/testsummary
# -json lets testsummary count the skips; it prints what plain go test would, and fails with it.
echo "== go test -race"
go test -race -count=1 -timeout 20m -json "${packages[@]}" | "$scratch/testsummary" -summary "$scratch/skips"
# Under the race detector (testfix.Quick) the long single-goroutine matrices take a subset: the
# concurrent cases of the bitwise ones on shorter prompts, 3 of the 20 forced-tool-call seeds per
# protocol, a few head and position counts of the attention kernels, the short JSON-constraint walks
# and format samples, a few seeds of the sampled tool calls (Mask checked every fourth step), one
# cache size of the hit-rate simulations, one qwen3.8 layout against transformers, 200 of the 1000
# EncodeLimit texts. This runs them whole.
echo "== the long matrices without the race detector"
long='BitwiseInvisible|TinyModelForced|AttendBitwise|AttendKVBitwise|RandomWalks|FormatSamplesValidate'
long+='|ForcedCallsValidate|PatternCallsValidate|TestHitRates$|Qwen38SixteenBitMatchesTransformers|EncodeLimitIsEncode'
go test -count=1 -run "$long" ./pkg/runtime/ ./pkg/models/qwen35/ ./pkg/server/openai/ ./pkg/server/responses/ \
  ./pkg/server/anthropic/ ./pkg/kernels/ ./pkg/jsonconstrain/ ./pkg/toolconstrain/ ./pkg/expertcache/ ./pkg/tokenizer/
echo "== the scripted engine (a test build: -tags nvmai_scripted)"
go vet -tags nvmai_scripted ./pkg/server/scripted/ ./cmd/nvmai-run/
go test -tags nvmai_scripted -count=1 ./pkg/server/scripted/
echo "== go test -tags purego (no assembly)"; go test -tags purego -count=1 ./pkg/kernels/... ./pkg/quant/...
# collect waits for a background section (the name of its pid variable, its log, the line to print
# when it never started), prints its log and fails the script with it.
collect() {
  local pid=${!1} status=0
  if [ -z "$pid" ]; then echo "$3"; return 0; fi
  wait "$pid" || status=$?
  printf -v "$1" '%s' "" # the EXIT trap need not wait for it any more
  cat "$2"
  [ "$status" = 0 ] || exit "$status"
}
echo "== arm64 kernels and sampler under qemu"
collect qemu_pid "$scratch/qemu.log" "SKIPPED: qemu-aarch64-static is not installed (Debian package qemu-user-static)"
echo "== the GPU kernels on the CPU (cudaemu)"
collect cudaemu_pid "$scratch/cudaemu.log" "SKIPPED: no C++ compiler (Debian package g++): the GPU kernels' tests under cudaemu do not run"
