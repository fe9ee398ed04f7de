#!/usr/bin/env bash
# The main job on the embedded default model (README's first command): build the four commands,
# convert testdata/tiny-moe-fused to 4-, 8- and 16-bit installs, verify each, generate from each,
# and check the generated text against the committed golden baselines. The gate checks only the
# demo's own three installs (--only): other installs in models/ (the README's examples,
# nvmai-install) are not the demo's business. MODELS_DIR and PROMPT override the defaults.
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN="${GOTOOLCHAIN:-auto}" # go.mod pins the toolchain; images whose go.env says "local" would refuse it
export PATH="/usr/local/go/bin:$PATH"
models=${MODELS_DIR:-models}
prompt=${PROMPT:-"Once upon a"}

echo "== build"
go build -o bin/ ./cmd/...

echo "== convert testdata/tiny-moe-fused (4, 8 and 16 bits)"
bin/nvmai-convert --input testdata/tiny-moe-fused --output "$models/tiny-moe" --bits 4,8 --overwrite --quiet
bin/nvmai-convert --input testdata/tiny-moe-fused --output "$models/tiny-moe-16bit" --bits 16 --overwrite --quiet

for bits in 4 8 16; do
  dir="$models/tiny-moe-${bits}bit"
  echo "== verify $dir"
  bin/nvmai-verify --verify-install "$dir"
  echo "== generate from $dir (greedy)"
  bin/nvmai-run --model "$dir" --prompt "$prompt" --temperature 0 --max-tokens 24
done

echo "== golden gate: the generated text must equal the committed baselines byte for byte"
bin/nvmai-verify golden --models-dir "$models" --golden-dir benchmark/golden \
  --only tiny-moe-4bit,tiny-moe-8bit,tiny-moe-16bit
