#!/usr/bin/env bash
# Time to first token of a freshly started `nvmai-run serve` for an agent-shaped request (a
# ~20k-token system prompt + tool definitions, then a short user turn), (a) over an empty
# --prompt-cache-dir (a full prefill) against (b) over a directory an earlier server process
# populated with the same prefix (a disk hit); interleaved rounds, each with a new user turn,
# a new server process for every request. Prints each round, medians, ranges and the ratio.
#
#   scripts/disk-cache-ttft.sh [--install DIR] [--layers N] [--tokens N] [--rounds N]
#                              [--threads N] [--ram-budget 8G] [--work DIR] [--template FILE]
#                              [--keep] [--no-build]
#
# --install defaults to $work/synth-l$layers, created (and deleted at the end) with
#   nvmai-convert synth --geometry qwen3.5-35b-a3b --bits 4 --layers $layers
# (--layers 12 by default: 9 Gated DeltaNet + 3 attention layers, the 35B-A3B pattern; 6.3 GiB).
# The chat template is the real Qwen3.6 one (shared fixtures), so tools render as an agent's do.
# Everything this script writes lives under --work (default /tmp/nvmai-disk-cache-ttft) and is
# removed at the end unless --keep is given.
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN="${GOTOOLCHAIN:-auto}"
install= layers=12 tokens=20000 rounds=3 threads=2 budget=8G work=/tmp/nvmai-disk-cache-ttft keep= build=1
template=../shared/fixtures/templates/qwen36.jinja
while [ $# -gt 0 ]; do
  case $1 in
    --install) install=$2; shift 2 ;;
    --layers) layers=$2; shift 2 ;;
    --tokens) tokens=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --ram-budget) budget=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    --template) template=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    --no-build) build=; shift ;;
    *) echo "disk-cache-ttft.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -f "$template" ] || { echo "disk-cache-ttft.sh: no chat template at $template (give --template FILE)" >&2; exit 2; }
mkdir -p "$work"
made_install=
cleanup() {
  rm -rf "$work/warm" "$work"/cold-*
  if [ -z "$keep" ] && [ -n "$made_install" ]; then rm -rf "$install"; fi
  if [ -z "$keep" ]; then rmdir "$work" 2>/dev/null || true; fi
}
trap cleanup EXIT
if [ -n "$build" ]; then go build -o bin/ ./cmd/nvmai-convert ./cmd/nvmai-run ./scripts/internal/diskttft; fi
if [ -z "$install" ]; then
  install=$work/synth-l$layers
  if [ ! -d "$install" ]; then
    made_install=1
    bin/nvmai-convert synth --geometry qwen3.5-35b-a3b --bits 4 --layers "$layers" --output "$install" --quiet
  fi
fi
rm -rf "$work/warm" "$work"/cold-*
echo "== install $install; template $template; $threads threads, --ram-budget $budget; $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
bin/diskttft -nvmai-run bin/nvmai-run -model "$install" -work "$work" -tokens "$tokens" -rounds "$rounds" \
  -run-flags "--threads $threads --ram-budget $budget --max-context 32768 --chat-template $template"
