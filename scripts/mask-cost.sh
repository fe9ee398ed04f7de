#!/usr/bin/env bash
# mask-cost.sh: issue #40's cost criterion. For every schema of the corpus
# (pkg/jsonconstrain/testdata/corpus) that nvmai compiles, what structured output adds to one
# generated token at Qwen3.5's vocabulary size (248,320 ids; the synthetic vocabulary of
# pkg/jsonconstrain/bench_test.go, as ../shared/fixtures has no full Qwen3.5 tokenizer): the mask
# (the automaton over the vocabulary trie, then Mask.Apply on the logit row) and the automaton's
# advance, per step of a document of that schema (BenchmarkCorpusMask248k: the median over the
# documents, beside the mean and the slowest single step). Each schema's median µs/step is set
# against a decode step and judged PASS under 5% of it.
#
#   scripts/mask-cost.sh [--benchtime 50x] [--step-ms 3.5] [--cpu-step-ms 57.6] [--threshold 5]
#
#   --step-ms MS      the decode step PASS/FAIL is judged against. Default 3.5 ms: the 40-layer
#                     35B-A3B on one GPU, greedy, 286.6 tok/s (docs/gpu.md, nvmai-run --engine gpu;
#                     306 tok/s in its first table), the fastest step nvmai takes, so the
#                     strictest test. A JSON constraint also copies the logit row to the host on
#                     the GPU engine (docs/gpu.md); that copy is not in these figures.
#   --cpu-step-ms MS  the CPU step shown beside it. Default 57.6 ms: the 40-layer synthetic
#                     35B-A3B, every expert in RAM, 2 threads, 17.36 tok/s (docs/performance.md,
#                     "Decode, every expert in RAM").
#   --benchtime N     go test -benchtime: documents generated per schema (default 50x).
#   --threshold PCT   the share of a step the mask may take (default 5).
#
# The figures are wall-clock: run it on an idle machine (on a loaded one, other processes'
# time lands in the steps). Exits 1 if any schema fails.
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN="${GOTOOLCHAIN:-auto}"
benchtime=50x step_ms=3.5 cpu_step_ms=57.6 threshold=5
while [ $# -gt 0 ]; do
  case "$1" in
    --benchtime) benchtime=$2; shift 2 ;;
    --step-ms) step_ms=$2; shift 2 ;;
    --cpu-step-ms) cpu_step_ms=$2; shift 2 ;;
    --threshold) threshold=$2; shift 2 ;;
    -h|--help) sed -n '2,26p' "$0"; exit 0 ;;
    *) echo "mask-cost.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
out=$(mktemp)
trap 'rm -f "$out"' EXIT
echo "== go test -bench CorpusMask248k -benchtime $benchtime ./pkg/jsonconstrain/ (building the 248k masker takes a few seconds)"
go test -run '^$' -bench 'CorpusMask248k' -benchtime "$benchtime" ./pkg/jsonconstrain/ | tee "$out" | grep -E '^(goos|goarch|cpu|ok|FAIL)' || true
grep -q '^ok' "$out" || { echo "mask-cost.sh: the benchmark failed:"; cat "$out"; exit 1; }
awk -v step="$step_ms" -v cpu="$cpu_step_ms" -v thr="$threshold" '
  /^BenchmarkCorpusMask248k\// {
    name = $1; sub(/^BenchmarkCorpusMask248k\//, "", name); sub(/-[0-9]+$/, "", name)
    us = ""; mean = ""; maxus = ""; steps = ""
    for (i = 2; i < NF; i++) {
      if ($(i+1) == "µs/step") us = $i
      if ($(i+1) == "mean-µs/step") mean = $i
      if ($(i+1) == "max-µs/step") maxus = $i
      if ($(i+1) == "steps") steps = $i
    }
    pct = us / (step * 1000) * 100
    verdict = pct < thr ? "PASS" : "FAIL"
    if (verdict == "PASS") pass++; else { fail++; failed = failed "\n  " name }
    if (us + 0 > worst + 0) { worst = us; worstname = name }
    total += us; n++
    printf "%-60s %8.1f %8.1f %8.1f %6d %8.2f%% %8.3f%%  %s\n", name, us, mean, maxus, steps, pct, us / (cpu * 1000) * 100, verdict
    next
  }
  BEGIN {
    printf "decode step: %.3g ms (PASS under %g%% = %.0f µs); CPU step shown beside it: %.3g ms\n\n", step, thr, step * 10 * thr, cpu
    printf "%-60s %8s %8s %8s %6s %9s %9s  %s\n", "schema", "µs/step", "mean", "max µs", "steps", "of step", "of CPU", "verdict"
  }
  END {
    if (n == 0) { print "no schema measured"; exit 1 }
    printf "\n%d schemas: %d PASS, %d FAIL; %.1f µs/step on average over the schemas, slowest %s at %.1f µs/step (%.2f%% of a %.3g ms step)\n", n, pass, fail, total / n, worstname, worst, worst / (step * 10), step
    if (fail > 0) { printf "FAIL:%s\n", failed; exit 1 }
  }' "$out"
