#!/usr/bin/env bash
# Lint gates: formatting, vet, and the converter's expert-order probe (an accumulator that appends
# experts in arrival order instead of filing each at its index fails it).
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN="${GOTOOLCHAIN:-auto}" # go.mod pins the toolchain; images whose go.env says "local" would refuse it
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then echo "gofmt would change:"; echo "$unformatted"; exit 1; fi
go vet ./...
go test -count=1 -run 'TestExpertOrderProbe' ./pkg/convert/
echo "lint: ok"
