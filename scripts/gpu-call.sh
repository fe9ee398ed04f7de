#!/usr/bin/env bash
# gpu-call.sh: one device call's worth of GPU checks and measurements, in
# priority order, each step bounded by what is left of a deadline, so a
# ten-minute call returns whatever finished. Runs on the GPU machine from a
# checkout carrying a bundle of prebuilt binaries and the fixtures:
#
#   here:  CGO_ENABLED=0 go test -c (pkg/gpu, pkg/gpu/gpukernels, pkg/gpu/qwen38gpu,
#          pkg/gpu/cuda, pkg/server) and go build (nvmai-convert, nvmai-run,
#          nvmai-verify) into DIR/b; tar cJf bin/dev/b.tar.xz -C DIR b;
#          tar cJf bin/dev/fx.tar.xz .fixtures   (bin/ is git-ignored)
#   there: DEADLINE=570 scripts/gpu-call.sh      (carry bin/dev)
#
# Steps: A = gpu-check's cuda, kernels and fidelity-new (the opt-in switches
# on); the batched step and GPU serving (defaults, then with the switches);
# the 40-layer 4-bit synthetic against the CPU engine and its bench
# (BENCH_VARIANTS, default prev,reg512,nomma2,noatile); the streamed rows under
# the agent regime with the cross-layer read-ahead (distance 1), then gpu-
# check's fidelity, qwen38 and golden steps, then the streamed rows at
# distance 0. A device call returns only a few files, so everything small
# under $OUT also goes into $OUT/0-logs.txz (named to come back first).
set -u
cd "$(dirname "$0")/.."
T0=$(date +%s)
el() { echo $(($(date +%s) - T0)); }
left() { # the smaller of $1 and what is left of DEADLINE (at least 5 s)
	local l=$((${DEADLINE:-580} - $(el)))
	[ $l -gt "$1" ] && echo "$1" || echo $((l > 5 ? l : 5))
}
OUT=${OUT:-/tmp/nvmai-gpu-call}
[ -x /tmp/b/gpu.test ] || tar xJf bin/dev/b.tar.xz -C /tmp
[ -d .fixtures ] || tar xJf bin/dev/fx.tar.xz
export NVMAI_GPU_BIN=/tmp/b WORK=/tmp/nvmai-gpu-work NVMAI_GPU_FIXTURES=$PWD/.fixtures NVMAI_GPU=1
export NVMAI_CUBIN_CACHE=$WORK/cubin
mkdir -p "$OUT"/{a,s,st1,b,st0}
nvidia-smi >"$OUT/smi.txt" 2>&1
OPTIN="NVMAI_GPU_READAHEAD_DIST=1 NVMAI_GPU_NORMFOLD=1"
step() { echo "[$(el)s] $1" | tee -a "$OUT/times.txt"; }
step A
OUT=$OUT/a SYNTH=none STEPS="cuda kernels fidelity-new" timeout "$(left 240)" scripts/gpu-check.sh >"$OUT/a.txt" 2>&1
echo "A rc $?" >>"$OUT/a.txt"
step batch
timeout "$(left 90)" /tmp/b/gpu.test -test.v -test.run 'StepBatch|GPUEngineBatches|DecodeProfile|LiveFigures' >"$OUT/batch.txt" 2>&1
echo "batch rc $?" >>"$OUT/batch.txt"
env $OPTIN timeout "$(left 70)" /tmp/b/gpu.test -test.v -test.run 'StepBatch|GPUEngineBatches' >"$OUT/batch-optin.txt" 2>&1
echo "batch-optin rc $?" >>"$OUT/batch-optin.txt"
(cd pkg/server && timeout "$(left 50)" /tmp/b/server.test -test.v -test.run 'TestGPUParallelServingMatchesAlone' >"$OUT/server.txt" 2>&1
	echo "server rc $?" >>"$OUT/server.txt")
step "synthetic and bench"
OUT=$OUT/s SYNTH=40 STEPS="synthetic bench" SYNTH_CHECK_DIRS=first BENCH_VARIANTS=${BENCH_VARIANTS:-prev,reg512,nomma2,noatile} \
	timeout "$(left 220)" scripts/gpu-check.sh >"$OUT/s.txt" 2>&1
echo "S rc $?" >>"$OUT/s.txt"
step "stream, read-ahead distance 1"
OUT=$OUT/st1 SYNTH=40 STEPS=stream STREAM_ROUTING=${STREAM_ROUTING:-synthetic:agent} STREAM_BUDGETS=${STREAM_BUDGETS:-12G 6G 20G} \
	NVMAI_GPU_READAHEAD_DIST=1 timeout "$(left 150)" scripts/gpu-check.sh >"$OUT/st1.txt" 2>&1
echo "st1 rc $?" >>"$OUT/st1.txt"
step "fidelity, qwen38, golden"
OUT=$OUT/b SYNTH=none STEPS="fidelity qwen38 golden" timeout "$(left 200)" scripts/gpu-check.sh >"$OUT/b.txt" 2>&1
echo "B rc $?" >>"$OUT/b.txt"
step "stream, read-ahead distance 0"
OUT=$OUT/st0 SYNTH=40 STEPS=stream STREAM_ROUTING=${STREAM_ROUTING:-synthetic:agent} STREAM_BUDGETS=${STREAM_BUDGETS:-12G 6G 20G} \
	timeout "$(left 150)" scripts/gpu-check.sh >"$OUT/st0.txt" 2>&1
echo "st0 rc $?" >>"$OUT/st0.txt"
step done
(cd "$OUT" && find . -type f -size -3M \( -name '*.txt' -o -name '*.log' -o -name '*.json' \) | tar cJf 0-logs.txz -T -)
