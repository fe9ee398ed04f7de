#!/usr/bin/env bash
# routing-policy-table.sh: the hit rate of nvmai's expert cache (its own placement code and default
# policy, replayed without I/O) beside a plain LRU and Belady's optimum, on 512-token synthetic
# traces of the 40-layer 35B-A3B geometry, at 4 and 8 bits and --ram-budget 4G, 8G and 12G, as the
# markdown table of docs/routing.md (issue #37 item 4). Seconds; needs no install.
#
#   scripts/routing-policy-table.sh [--seed S] [--tokens N]
set -euo pipefail
export GOTOOLCHAIN=${GOTOOLCHAIN:-auto}
root=$(cd "$(dirname "$0")/.." && pwd)
seed=1 tokens=512
while [ $# -gt 0 ]; do
	case $1 in
	--seed) seed=$2; shift 2 ;;
	--tokens) tokens=$2; shift 2 ;;
	*) echo "usage: $0 [--seed S] [--tokens N]" >&2; exit 2 ;;
	esac
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$root" && go build -o "$tmp/nvmai-run" ./cmd/nvmai-run)
echo "| bits | budget (slots) | regime | cache | LRU | Belady |"
echo "|---|---|---|---|---|---|"
for bits in 4 8; do
	for regime in uniform diverse agent; do
		"$tmp/nvmai-run" route-trace gen -g qwen3.5-35b-a3b --regime "$regime" --tokens "$tokens" --seed "$seed" -o "$tmp/$regime.trace" 2>/dev/null
		# Rows: SIZE=SLOTS residency cache (min– max%) LRU (min– max%) new Belady (min– max%) new.
		"$tmp/nvmai-run" route-trace sim --trace "$tmp/$regime.trace" -g qwen3.5-35b-a3b --bits "$bits" --ram-budget 4G,8G,12G |
			tail -n +3 | sed -E 's/\( +/(/g' | awk -v b="$bits" -v r="$regime" '{ split($1, s, "="); printf "| %s | %s (%s slots) | %s | %s | %s | %s |\n", b, s[1], s[2], r, $3, $6, $10 }'
	done
done
