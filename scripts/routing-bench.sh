#!/usr/bin/env bash
# routing-bench.sh: the streaming table of issue #37 on this machine. The 40-layer synthetic
# 35B-A3B at 4 and 8 bits, each --ram-budget (and every expert in RAM), each routing regime
# (synthetic uniform, diverse and agent routing, the last two calibrated to published locality,
# docs/routing.md; "router" names the random-weight install's own router, as every figure before
# issue #37) gives decode and prefill tok/s, the
# decode hit rate, bytes read from disk per decode step and layers per step that waited; rounds
# are interleaved (each round runs every case once, its order rotated) and the table gives medians
# with ranges. Beside each hit rate: the simulated LRU's and the cache's own policy replayed
# without I/O, on the same routing and positions (route-trace sim --from: the prompt warms the
# caches, the decode is counted). Last, the acceptance lines: 4-bit, 8G, agent decode against all
# in RAM (the ratio within each round), and the cache's measured hit rate against the simulated LRU.
#
#   scripts/routing-bench.sh [--synth-dir DIR] [--rounds 3] [--tokens 48] [--prompt-tokens 64]
#                            [--bits "4 8"] [--budgets "4G 8G 12G all"] [--regimes "uniform diverse agent [router]"]
#
#   --synth-dir DIR    where the installs are, DIR/35b-4bit and DIR/35b-8bit (written when missing:
#                      18.7 and 35 GiB; default models/synth, as scripts/bench.sh)
#   --tokens N         tokens generated per run (N-1 decode steps; default 96)
#   --prompt-tokens N  prompt length, one prompt per run (default 64)
#   --report-only      no runs: rebuild the table from out/routing-bench/runs.txt (give the same
#                      --tokens and --prompt-tokens as the runs had)
#   all                every expert in RAM (--expert-cache-slots = experts, filled by a 512-token
#                      warm-up before the clock starts); skipped with a note where the experts and
#                      the rest of the model do not fit in the available memory.
#
# Output: out/routing-bench/ (runs.txt: one key=value line per run; table.md). Each run loads the
# model afresh with one prompt of fixed token ids; greedy, EOS ignored. Hours on 2 cores with the
# defaults (about a minute a run); every figure of the table comes from the run that printed it.
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN="${GOTOOLCHAIN:-auto}"

report_only=0 synth=models/synth rounds=3 tokens=96 ptokens=64 bitsList="4 8" budgets="4G 8G 12G all" regimes="uniform diverse agent"
while [ $# -gt 0 ]; do
	case $1 in
	--synth-dir) synth=$2; shift 2 ;;
	--rounds) rounds=$2; shift 2 ;;
	--tokens) tokens=$2; shift 2 ;;
	--prompt-tokens) ptokens=$2; shift 2 ;;
	--bits) bitsList=$2; shift 2 ;;
	--budgets) budgets=$2; shift 2 ;;
	--regimes) regimes=$2; shift 2 ;;
	--report-only) report_only=1; shift ;;
	*) echo "routing-bench.sh: unknown argument $1 (see the header of $0)" >&2; exit 2 ;;
	esac
done
out=out/routing-bench
mkdir -p "$out" "$synth"
echo "== build"
go build -o bin/ ./cmd/nvmai-run ./cmd/nvmai-convert
if [ "$report_only" = 0 ]; then
: >"$out/skipped.txt"

for b in $bitsList; do
	dir=$synth/35b-${b}bit
	if [ ! -f "$dir/manifest.json" ]; then
		echo "== writing $dir (40 layers, $b-bit)"
		bin/nvmai-convert synth --geometry qwen3.5-35b-a3b --bits "$b" --output "$dir" --quiet
	fi
done

# One prompt of fixed ids, the same for every run.
ids=$(seq -s, 1000 $((1000 + ptokens - 1)))
# Experts' bytes per install, to tell whether "all" fits.
experts_gib() { du -sk "$1/experts" | awk '{ printf "%.1f", $1 / 1048576 }'; }
avail_gib() { awk '/MemAvailable/ { printf "%.1f", $2 / 1048576 }' /proc/meminfo; }

cases=()
for b in $bitsList; do
	for budget in $budgets; do
		if [ "$budget" = all ]; then
			need=$(awk -v e="$(experts_gib "$synth/35b-${b}bit")" 'BEGIN { printf "%.1f", e + 2.5 }')
			if awk -v n="$need" -v a="$(avail_gib)" 'BEGIN { exit !(n > a) }'; then
				echo "== $b-bit, all in RAM: skipped: the experts and the rest need about $need GiB, $(avail_gib) GiB available"
				echo "skip bits=$b budget=all need_gib=$need avail_gib=$(avail_gib)" >>"$out/skipped.txt"
				continue
			fi
		fi
		for r in $regimes; do cases+=("$b/$budget/$r"); done
	done
done
: >"$out/runs.txt"
n=${#cases[@]}
echo "== $n cases × $rounds rounds, $ptokens prompt tokens and $tokens generated per run; load average $(cut -d' ' -f1-3 /proc/loadavg)"
for round in $(seq 1 "$rounds"); do
	for i in $(seq 0 $((n - 1))); do
		c=${cases[$(((i + (round - 1) * n / rounds) % n))]}
		IFS=/ read -r b budget r <<<"$c"
		size=(--ram-budget "$budget")
		[ "$budget" = all ] && size=(--expert-cache-slots 256 --warmup 512)
		routing=()
		[ "$r" != router ] && routing=(--routing "synthetic:$r")
		echo "== round $round: $b-bit, $budget, $r" >&2
		line=$(bin/nvmai-run bench --model "$synth/35b-${b}bit" "${size[@]}" "${routing[@]}" --prompt-ids "$ids" \
			--tokens "$tokens" --skip-bandwidth --quiet --kv)
		echo "round=$round bits=$b budget=$budget regime=$r $line" >>"$out/runs.txt"
	done
done
fi # report_only

# The simulated LRU and the cache's own policy on the routing the bench replayed: the synthetic
# regime (seed 1) from its first position, the prompt warming the caches and the decode steps counted.
trace_len=$((ptokens + tokens - 1))
declare -A sim_lru sim_cache
for r in $regimes; do
	[ "$r" = router ] && continue
	bin/nvmai-run route-trace gen -g qwen3.5-35b-a3b --regime "$r" --tokens "$trace_len" --seed 1 -o "$out/$r.trace" 2>/dev/null
	for slots in $(awk -v r="$r" '$0 ~ " regime="r" " { for (i = 1; i <= NF; i++) if ($i ~ /^slots=/) { sub(/^slots=/, "", $i); print $i } }' "$out/runs.txt" | sort -un); do
		row=$(bin/nvmai-run route-trace sim --trace "$out/$r.trace" -g qwen3.5-35b-a3b --slots "$slots" --from "$ptokens" | tail -1 | sed -E 's/\( +/(/g')
		sim_cache[$r/$slots]=$(awk '{ print $3 }' <<<"$row")
		sim_lru[$r/$slots]=$(awk '{ print $6 }' <<<"$row")
	done
done

# stat KEY FILTER [SCALE] [FMT]: the median (min–max) of KEY over the runs matching FILTER (a
# substring of the line), each value times SCALE, printed with FMT.
stat() {
	local vals
	vals=$(grep -F -- "$2" "$out/runs.txt" | tr ' ' '\n' | sed -n "s/^$1=//p" | awk -v s="${3:-1}" '{ printf "%.6f\n", $1 * s }' | sort -g)
	[ -n "$vals" ] || { echo "-"; return; }
	awk -v fmt="${4:-%.2f}" '{ v[NR] = $1 } END {
		med = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
		if (NR == 1 || v[1] == v[NR]) printf fmt "\n", med
		else printf fmt " (" fmt "–" fmt ")\n", med, v[1], v[NR]
	}' <<<"$vals"
}
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
{
	echo "$cpu, $(nproc) CPUs, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo) RAM; $rounds interleaved rounds,"
	echo "one $ptokens-token prompt and $tokens generated tokens a run; medians (ranges). \`scripts/routing-bench.sh\`."
	echo
	echo "| bits | budget (slots) | routing | decode tok/s | prefill tok/s | decode hit | LRU sim | cache sim | disk MiB/step | waits/step |"
	echo "|---|---|---|---|---|---|---|---|---|---|"
	for b in $bitsList; do
		for budget in $budgets; do
			for r in $regimes; do
				f=" bits=$b budget=$budget regime=$r "
				grep -q -- "$f" "$out/runs.txt" || continue
				slots=$(stat slots "$f" 1 %d)
				lru=${sim_lru[$r/$slots]:--} cache=${sim_cache[$r/$slots]:--}
				[ "$budget" = all ] && lru=- cache=-
				echo "| $b | $budget ($slots) | $r | $(stat decode_tok_s "$f") | $(stat prefill_tok_s "$f" 1 %.1f) | $(stat hit "$f" 100 %.1f)% | $lru | $cache | $(stat read_mib_tok "$f" 1 %.1f) | $(stat waits_tok "$f" 1 %.1f) |"
			done
		done
	done
	while read -r _ bits budget need avail; do
		echo "| ${bits#bits=} | all | - | not run: ${need#need_gib=} GiB needed, ${avail#avail_gib=} GiB available | | | | | | |"
	done < <(cat "$out/skipped.txt" 2>/dev/null)
	echo
	# Acceptance: 4-bit, 8G, agent decode ÷ all in RAM, the ratio taken within each round.
	ratios=$(awk '
		/ bits=4 budget=8G regime=agent / { for (i = 1; i <= NF; i++) { split($i, kv, "="); if (kv[1] == "round") rd = kv[2]; if (kv[1] == "decode_tok_s") d = kv[2] } a[rd] = d }
		/ bits=4 budget=all regime=agent / { for (i = 1; i <= NF; i++) { split($i, kv, "="); if (kv[1] == "round") rd = kv[2]; if (kv[1] == "decode_tok_s") d = kv[2] } b[rd] = d }
		END { for (rd in a) if (rd in b) printf "%.3f\n", a[rd] / b[rd] }' "$out/runs.txt" | sort -n | paste -sd' ')
	if [ -n "$ratios" ]; then
		med=$(tr ' ' '\n' <<<"$ratios" | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }')
		verdict=FAIL
		awk -v m="$med" 'BEGIN { exit !(m >= 0.85) }' && verdict=PASS
		echo "- 4-bit, --ram-budget 8G, agent routing: decode $med× the all-in-RAM rate (median of the rounds' ratios: $ratios); target ≥ 0.85: $verdict"
	else
		echo "- 4-bit, 8G, agent against all in RAM: not measured (a case is missing)"
	fi
	worst=""
	for r in $regimes; do
		[ "$r" = router ] && continue
		for budget in $budgets; do
			[ "$budget" = all ] && continue
			for b in $bitsList; do
				f=" bits=$b budget=$budget regime=$r "
				grep -q -- "$f" "$out/runs.txt" || continue
				slots=$(stat slots "$f" 1 %d)
				hit=$(stat hit "$f" 100 %.1f | cut -d' ' -f1)
				lru=${sim_lru[$r/$slots]%\%}
				gap=$(awk -v h="$hit" -v l="$lru" 'BEGIN { printf "%.1f", h - l }')
				worst+="$gap $b-bit/$budget/$r (measured $hit%, LRU $lru%)"$'\n'
			done
		done
	done
	if [ -n "$worst" ]; then
		low=$(sort -n <<<"$worst" | head -1)
		verdict=FAIL
		awk -v g="${low%% *}" 'BEGIN { exit !(g >= -1) }' && verdict=PASS
		echo "- the cache's decode hit rate less the simulated LRU's, lowest over every budget and regime: ${low%% *} points at ${low#* }; target ≥ -1: $verdict"
	fi
} | tee "$out/table.md"
