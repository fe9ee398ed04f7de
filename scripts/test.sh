#!/usr/bin/env bash
# The test suite (README's second command): lint gates (gofmt, vet, the converter's expert-order
# probe), every package with the race detector, then kernels and quant again without assembly.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "== lint gates"; scripts/lint.sh
echo "== go test -race"; go test -race -count=1 -timeout 20m ./...
echo "== go test -tags purego (no assembly)"; go test -tags purego -count=1 ./pkg/kernels/... ./pkg/quant/...
