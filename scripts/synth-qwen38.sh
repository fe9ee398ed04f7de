#!/usr/bin/env bash
# Writes a synthetic Qwen3.8-Flash-Next 125B-A6B install (LAYERS decoder layers, BITS wide, the
# full-size n-gram table as a sparse file), reports its apparent and on-disk size, the write time,
# peak RSS and the time nvmai-verify --verify-install takes, then removes the install it wrote.
# Usage: scripts/synth-qwen38.sh [LAYERS] [BITS] [WORKDIR]     (defaults: 12, 4, /tmp/synth-qwen38)
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN="${GOTOOLCHAIN:-auto}"
layers=${1:-12}
bits=${2:-4}
work=${3:-/tmp/synth-qwen38}
out="$work/q38-l$layers-${bits}bit"
go build -o bin/ ./cmd/nvmai-convert ./cmd/nvmai-verify
mkdir -p "$work"
if [ -e "$out" ]; then echo "$out exists; remove it or choose another WORKDIR" >&2; exit 1; fi
bin/nvmai-convert synth --geometry qwen3.8-flash-next-125b-a6b --layers "$layers" --bits "$bits" --dry-run
/usr/bin/time -f "%e %M" -o "$work/write.time" \
  nice -n 10 bin/nvmai-convert synth --geometry qwen3.8-flash-next-125b-a6b --layers "$layers" --bits "$bits" \
  --output "$out" --quiet
read -r wsecs rss_kb <"$work/write.time"
apparent=$(du -sb --apparent-size "$out" | cut -f1)
ondisk=$(du -sb "$out" | cut -f1)
/usr/bin/time -f "%e" -o "$work/verify.time" nice -n 10 bin/nvmai-verify --verify-install "$out" >/dev/null
read -r vsecs <"$work/verify.time"
rm -rf "$out" "$work/write.time" "$work/verify.time"
printf '| layers | bits | apparent size | on disk | write | peak RSS | verify |\n|---|---|---|---|---|---|---|\n'
printf '| %s | %s | %s | %s | %.0f s | %s | %.0f s |\n' "$layers" "$bits" "$(numfmt --to=iec "$apparent")" \
  "$(numfmt --to=iec "$ondisk")" "$wsecs" "$(numfmt --to=iec $((rss_kb * 1024)))" "$vsecs"
echo "(install verified and removed)"
