#!/usr/bin/env bash
# Measures the converter on a bf16 checkpoint of real 35B-A3B shape: writes a Hugging Face-format
# snapshot with LAYERS decoder layers (random weights, fused experts, one shard per layer), converts
# it to 4- and 8-bit from one read, and reports time, throughput and peak RSS (the converter's memory
# must not grow with the model: it holds one 16 MiB block of one tensor at a time).
# Usage: scripts/convert-bench.sh [LAYERS] [WORKDIR]     (defaults: 4, /work/synth)
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN="${GOTOOLCHAIN:-auto}" # go.mod pins the toolchain; images whose go.env says "local" would refuse it
layers=${1:-4}
work=${2:-/work/synth}
snap="$work/hf-35b-l$layers"
out="$work/conv-35b-l$layers"
go build -o bin/ ./cmd/nvmai-convert ./cmd/nvmai-verify
if [ ! -f "$snap/model.safetensors.index.json" ]; then
  echo "== writing a bf16 snapshot of qwen3.5-35b-a3b with $layers layers to $snap"
  go run ./scripts/internal/hfsnapshot --geometry qwen3.5-35b-a3b --layers "$layers" --output "$snap"
fi
src_bytes=$(du -sb "$snap" | cut -f1)
echo "== converting $(numfmt --to=iec "$src_bytes") of bf16 to 4- and 8-bit (one read)"
sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true
/usr/bin/time -f "%e %M" -o /tmp/convert-bench.time \
  bin/nvmai-convert --input "$snap" --output "$out" --bits 4,8 --overwrite --quiet
read -r secs rss_kb </tmp/convert-bench.time
bin/nvmai-verify --verify-install "$out-4bit" >/dev/null
bin/nvmai-verify --verify-install "$out-8bit" >/dev/null
printf '| source | layers | widths | time | source read rate | peak RSS |\n|---|---|---|---|---|---|\n'
printf '| %s bf16 | %s | 4,8 | %.1f s | %.0f MB/s | %s |\n' "$(numfmt --to=iec "$src_bytes")" "$layers" "$secs" \
  "$(echo "$src_bytes / $secs / 1000000" | bc -l)" "$(numfmt --to=iec $((rss_kb * 1024)))"
echo "(both installs verified; remove $snap and $out-* when done)"
