#!/usr/bin/env bash
# Rebuilds the performance tables of docs/performance.md on this machine: the Q4/Q8 GEMV kernels against a plain
# memory read, decode with every expert cached (4- and 12-layer synthetic 35B-A3B installs, and the
# 40-layer one where 21 GiB of RAM are free, else a projection to 40 layers), decode and prefill of the
# full 40-layer 4-bit synthetic install under an 8 GiB expert budget, and a decode CPU profile grouped
# by what the time is spent on. Synthetic installs have random weights, which route almost uniformly:
# the worst case for an expert cache.
#
#   scripts/bench.sh [--synth-dir DIR] [--tokens N] [--no-full] [--update-readme] [--delete]
#
#   --synth-dir DIR   where the synthetic installs are (created when missing; default models/synth)
#   --tokens N        tokens generated per prompt (default 128)
#   --no-full         skip the 40-layer install (18.7 GiB on disk)
#   --update-readme   replace the block between the bench markers in docs/performance.md
#                     (the name is kept from when the tables lived in the README)
#   --delete          remove the synthetic installs this run created
#
# Needs only Go and POSIX tools. Output: out/bench/ (performance.md, the raw key=value lines, the
# kernel benchmark and the profile). Every number in the table comes from this run.
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN="${GOTOOLCHAIN:-auto}" # go.mod pins the toolchain; images whose go.env says "local" would refuse it

synth=models/synth tokens=128 full=1 update=0 delete=0
while [ $# -gt 0 ]; do
  case $1 in
    --synth-dir) synth=$2; shift 2 ;;
    --tokens) tokens=$2; shift 2 ;;
    --no-full) full=0; shift ;;
    --update-readme) update=1; shift ;;
    --delete) delete=1; shift ;;
    *) echo "bench.sh: unknown argument $1 (see the header of $0)" >&2; exit 2 ;;
  esac
done

out=out/bench
mkdir -p "$out" "$synth"
echo "== build"
go build -o bin/ ./cmd/...

created=()
ensure() { # ensure LAYERS DIR: a 4-bit synthetic 35B-A3B install with LAYERS layers
  if [ ! -f "$2/manifest.json" ]; then
    echo "== writing $2 ($1 layers)"
    bin/nvmai-convert synth --geometry qwen3.5-35b-a3b --bits 4 --layers "$1" --output "$2" --quiet
    created+=("$2")
  fi
}
cleanup() { if [ "$delete" = 1 ]; then for d in "${created[@]}"; do rm -rf "$d"; done; fi; }
trap cleanup EXIT

kv() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<" $2"; }      # kv KEY LINE
bench() { # bench LABEL ARGS...: one bench run, its key=value line saved and echoed
  local label=$1; shift
  echo "== $label: nvmai-run bench $*" >&2
  local line; line=$(bin/nvmai-run bench "$@" --kv)
  echo "$label $line" >>"$out/runs.txt"
  echo "$line"
}
: >"$out/runs.txt"

cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
machine="$cpu, $(nproc) CPUs, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo) RAM, Linux $(uname -r), $(go env GOVERSION)"
echo "== machine: $machine (load average $(cut -d' ' -f1-3 /proc/loadavg))"

echo "== GEMV kernels against a plain read of the same bytes (BenchmarkMatVecFastVsRead, 3 runs)"
go test ./pkg/kernels/ -run '^$' -bench 'MatVecFastVsRead' -benchtime 40x -count 3 | tee "$out/kernels.txt" |
  grep '^Benchmark' || true
# Median over the runs of each case's kernel/read %, and of the kernel and read GB/s.
kernels=$(awk '/^BenchmarkMatVecFastVsRead/ {
    split($1, p, "/"); key = p[2] " " p[3] " " p[4] " " p[5]; sub(/-[0-9]+$/, "", key)
    for (i = 2; i < NF; i++) { if ($(i+1) == "kernel-GB/s") k[key] = k[key] " " $i
      if ($(i+1) == "read-GB/s") r[key] = r[key] " " $i; if ($(i+1) == "kernel/read-%") q[key] = q[key] " " $i }
    keys[key] = 1 }
  function med(s,   a, n, i, j, t) { n = split(s, a, " "); for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++)
      if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }; return a[int((n + 1) / 2)] }
  END { for (key in keys) { split(key, f, " "); sub("threads=", "", f[3]); sub("pages=", "", f[4])
      printf "| %s | %s | %s | %s | %.1f | %.1f | **%.0f%%** |\n", f[1], f[2], f[4], f[3], med(k[key]), med(r[key]), med(q[key]) } }' \
  "$out/kernels.txt" | sort)

echo "== decode with every expert cached (4 and 12 layers, and 40 when RAM allows; 512-token random warm-up)"
ensure 4 "$synth/35b-4bit-l4"
ensure 12 "$synth/35b-4bit-l12"
cached_layers="4 12"
# All 40 layers' experts take 18.5 GiB of slots: measure them directly where that fits with room to spare.
avail_gib=$(awk '/MemAvailable/ { printf "%d", $2 / 1048576 }' /proc/meminfo)
if [ "$full" = 1 ] && [ "$avail_gib" -ge 21 ]; then
  ensure 40 "$synth/35b-4bit"
  cached_layers="4 12 40"
fi
declare -A cached
for t in 1 2; do
  for l in $cached_layers; do
    dir="$synth/35b-4bit-l$l"
    [ "$l" = 40 ] && dir="$synth/35b-4bit"
    cached[$l,$t]=$(bench "cached-l$l-t$t" --model "$dir" --expert-cache-slots 256 --warmup 512 \
      --tokens "$tokens" --threads "$t")
  done
done
bin/nvmai-run bench --model "$synth/35b-4bit-l12" --expert-cache-slots 256 --warmup 512 --tokens "$tokens" \
  --cpuprofile "$out/decode.prof" --skip-bandwidth >/dev/null

echo "== decode after a 4000-token prompt (12 layers, all cached, 2 threads): attention over a long context"
long=$(bench "long-l12-t2" --model "$synth/35b-4bit-l12" --expert-cache-slots 256 --prompt-tokens 4000 --tokens 64 \
  --threads 2 --skip-bandwidth)
phase_of() { kv phases "$2" | tr ',' '\n' | awk -F: -v p="$1" '$1 == p { print $2 }'; } # phase_of NAME LINE: its share %
long_row=$(awk -v d="$(kv decode_tok_s "$long")" -v s="$(kv decode_tok_s "${cached[12,2]}")" -v st="$(kv state_mib_tok "$long")" \
  -v a="$(phase_of attn_heads "$long")" -v a0="$(phase_of attn_heads "${cached[12,2]}")" -v p="$(kv prefill_tok_s "$long")" \
  'BEGIN { printf "| 12 layers, all cached, 2 threads | %.1f tok/s | %.2f tok/s (%.0f%% of the %.2f after ~70 tokens) | %.0f MiB | %.1f%% (%.1f%% after ~70 tokens) |\n", p, d, 100*d/s, s, st, a, a0 }')

cached_row() { # cached_row LABEL THREADS LINE
  local t=$2 line=$3
  awk -v label="$1" -v t="$t" -v d="$(kv decode_tok_s "$line")" -v w="$(kv weight_mib_tok "$line")" \
    -v st="$(kv state_mib_tok "$line")" -v g="$(kv bytes_gbs "$line")" -v wm="$(kv "wmem${t}_gbs" "$line")" \
    -v wb="$(kv "wmem${t}_best_gbs" "$line")" -v m="$(kv "mem${t}_gbs" "$line")" -v rss="$(kv peak_rss_gib "$line")" \
    'BEGIN { printf "| %s | %d | %.2f | %.0f + %.0f MiB | %.1f GB/s | %.1f / %.1f GB/s | **%.0f%%** / %.0f%% | %.1f GB/s, %.0f%% | %.2f GiB |\n",
      label, t, d, w, st, g, wm, wb, 100*g/wm, 100*g/wb, m, 100*g/m, rss }'
}
cached_rows=""
for t in 1 2; do
  for l in $cached_layers; do
    cached_rows+=$(cached_row "$l layers, all 256 experts cached" "$t" "${cached[$l,$t]}")$'\n'
  done
  if [[ " $cached_layers " != *" 40 "* ]]; then
    # Time per token is a + b·layers: fit it on 4 and 12 layers, and the bytes likewise.
    a=${cached[4,$t]} b=${cached[12,$t]}
    cached_rows+=$(awk -v t="$t" -v d4="$(kv decode_tok_s "$a")" -v d12="$(kv decode_tok_s "$b")" \
      -v w4="$(kv weight_mib_tok "$a")" -v w12="$(kv weight_mib_tok "$b")" -v wm="$(kv "wmem${t}_gbs" "$b")" \
      -v s4="$(kv state_mib_tok "$a")" -v s12="$(kv state_mib_tok "$b")" -v m="$(kv "mem${t}_gbs" "$b")" \
      'BEGIN { t4 = 1/d4; t12 = 1/d12; s = (t12 - t4)/8; t40 = t4 + 36*s; w40 = w4 + 36*(w12 - w4)/8
        st40 = s4 + 36*(s12 - s4)/8; g = (w40 + st40)*1048576/t40/1e9
        printf "| 40 layers, projected from 4 and 12 | %d | %.2f | %.0f + %.0f MiB | %.1f GB/s | %.1f GB/s (12 layers) | **%.0f%%** | %.1f GB/s, %.0f%% | – |\n",
          t, 1/t40, w40, st40, g, wm, 100*g/wm, m, 100*g/m }')$'\n'
  fi
done

full_rows=""
if [ "$full" = 1 ]; then
  echo "== the full 40-layer install under an 8 GiB expert budget"
  ensure 40 "$synth/35b-4bit"
  for t in 1 2; do
    for pf in 0 4; do # read-ahead off, then the default
      line=$(bench "full-8G-t$t-prefetch$pf" --model "$synth/35b-4bit" --ram-budget 8G --tokens "$tokens" --threads "$t" --prefetch "$pf")
      full_rows+=$(awk -v t="$t" -v d="$(kv decode_tok_s "$line")" -v h="$(kv hit "$line")" -v r="$(kv read_mib_tok "$line")" \
        -v rr="$(kv read_gbs "$line")" -v disk="$(kv disk_gbs "$line")" -v b="$(kv disk_bound "$line")" -v s="$(kv slots "$line")" \
        -v io="$(kv io "$line")" -v w="$(kv io_wait_ms "$line")" -v rss="$(kv peak_rss_gib "$line")" \
        -v pf="$(kv prefetch "$line")" -v g="$(kv guesses_tok "$line")" -v gu="$(kv guesses_used "$line")" \
        'BEGIN { ra = pf > 0 ? sprintf("%d: %.0f/token, %.0f%% used", pf, g, 100*gu) : "off"
          printf "| 40 layers, 8 GiB (%d of 256 slots) | %d | %s | %.2f | %.1f%% | %.0f MiB | %.2f GB/s | %.2f GB/s (%s) | %.0f ms | **%.2f** | %.2f GiB |\n", s, t, ra, d, 100*h, r, rr, disk, io, w, b, rss }')$'\n'
    done
  done
  line=$(bench "prefill-512" --model "$synth/35b-4bit" --ram-budget 8G --prompt-tokens 512 --tokens 2 \
    --prefill-cpuprofile "$out/prefill.prof")
  prefill_row=$(awk -v p="$(kv prefill_tok_s "$line")" -v h="$(kv pf_hit "$line")" -v r="$(kv pf_read_gib "$line")" \
    -v w="$(kv pf_wait_s "$line")" -v disk="$(kv disk_gbs "$line")" \
    'BEGIN { s = 512/p; printf "| 512-token prompt, 40 layers, 8 GiB, 2 threads | %.1f tok/s | %.1f s | %.1f%% | %.1f GiB | %.1f s | %.1f s |\n", p, s, 100*h, r, r*1.073741824/disk, w }')
fi

# Decode profile, flat time grouped by what it is spent on.
group() { # group PROFILE: "| group | share |" rows, largest first
  go tool pprof -top -nodecount=100000 bin/nvmai-run "$1" 2>/dev/null | awk '
    function secs(v) { if (v ~ /ms$/) return substr(v, 1, length(v)-2)/1000; if (v ~ /us$|µs$/) return 0; sub(/s$/, "", v); return v + 0 }
    $1 ~ /^[0-9.]+(m|µ|u)?s$/ && NF >= 6 {
      f = $6; for (i = 7; i <= NF; i++) f = f " " $i; s = secs($1)
      if (f ~ /q[48](Rows|Pairs)|qRowsGeneric|sdotRows/) g = "Q4/Q8 GEMV kernels (weights)"
      else if (f ~ /dotBF16|rowDot|matMulRows/) g = "BF16 GEMV (router, GDN a/b, shared-expert gate)"
      else if (f ~ /deltaStep|deltaRule|DeltaRule|gdnHeads|l2Norm|gatedNorm|causalConv/) g = "Gated DeltaNet recurrence, conv, gated norm"
      else if (f ~ /attendGroup|DotRows|AxpyRows|dotRows4|axpyRows|softmax|rotate|attnHeads/) g = "attention (scores, softmax, values, RoPE)"
      else if (f ~ /rmsNorm|invRMS|addTo/) g = "RMS norms, residual adds"
      else if (f ~ /Exp|sigmoid32|silu32|swiglu|softplus|exp32|activate/) g = "exp, sigmoid, SiLU"
      else if (f ~ /route|sample\.|Greedy/) g = "router top-k, sampling"
      else if (f ~ /quantize|Quantize/) g = "activation quantization"
      else if (f ~ /Syscall|pread|Pread/) g = "expert reads (syscalls)"
      else if (f ~ /^runtime\.|internal\/runtime|sync\/atomic|sync\./) g = "Go runtime: scheduling, spinning, GC"
      else g = "other"
      t[g] += s; total += s }
    END { for (g in t) printf "%.4f|%s\n", t[g], g | "sort -t\"|\" -k1,1 -rn"; close("sort -t\"|\" -k1,1 -rn"); printf "%.4f|TOTAL\n", total }' |
    awk -F'|' '$2 == "TOTAL" { next } { rows[++n] = $0; tot += $1 } END { for (i = 1; i <= n; i++) { split(rows[i], f, "|"); printf "| %s | %.1f%% |\n", f[2], 100*f[1]/tot } }'
}
profile_rows=$(group "$out/decode.prof")

# Decode step by phase (nvmai-run bench's StepProfile) of the largest all-cached 2-thread run.
phase_layers=12
[[ " $cached_layers " == *" 40 "* ]] && phase_layers=40
phase_line=${cached[$phase_layers,2]}
phase_rows=$(kv phases "$phase_line" | tr ',' '\n' | awk -F: -v m="$(kv mem2_gbs "$phase_line")" '
  { rate = ($3 > 0) ? sprintf("%.1f GB/s", $3) : "–"; ratio = ($3 > 0 && m > 0) ? sprintf("%.0f%%", 100*$3/m) : "–"
    printf "| %s | %.1f%% | %s | %s |\n", $1, $2, rate, ratio }')
go tool pprof -top -nodecount=40 bin/nvmai-run "$out/decode.prof" >"$out/decode-profile.txt" 2>/dev/null || true

{
  echo "<!-- bench:begin (generated by scripts/bench.sh; do not edit by hand) -->"
  echo "Measured $(date -u +%Y-%m-%d) on $machine; 4-bit synthetic Qwen3.5-35B-A3B installs (random weights:"
  echo "routing is close to uniform, the worst case for the expert cache); greedy, $tokens tokens per prompt,"
  echo "medians over the counting, prose and code prompts; load average at the start $(cut -d' ' -f1-3 /proc/loadavg)."
  echo
  echo "**GEMV kernels** (\`go test ./pkg/kernels -bench MatVecFastVsRead\`, medians of 3 runs; target ≥ 80%). Pages 2M:"
  echo "matrix and read buffer in huge-page memory, as the runtime holds weights (internal/hugemem); 4K: the Go heap."
  echo
  echo "| width | shape | pages | threads | kernel GB/s | plain read GB/s | kernel ÷ read |"
  echo "|---|---|---|---|---|---|---|"
  echo "$kernels"
  echo
  echo "**Decode, every expert in RAM** (\`nvmai-run bench --expert-cache-slots 256 --warmup 512\`; bytes read per"
  echo "token (weights, plus the sequence state: Gated DeltaNet matrices and conv windows, K/V up to the position)"
  echo "÷ time per token, against plain reads measured in the same process after the prompts: of the weights' own"
  echo "memory as a step reads it (the resident copy and 8 random filled slots per layer; median / best of 10"
  echo "passes), and of a fresh 512 MiB buffer (median of 24). Decode rates are medians of averages, so the"
  echo "median is the like-for-like figure; target ≥ 70%):"
  echo
  echo "| install | threads | decode tok/s | weights + state per token | read rate | read of the same memory (median / best) | ratio (median / best) | fresh 512 MiB read, ratio | peak RSS |"
  echo "|---|---|---|---|---|---|---|---|---|"
  printf '%s' "$cached_rows"
  if [ "$full" = 1 ]; then
    echo
    echo "**Decode, full 40-layer install, \`--ram-budget 8G\`**, read-ahead (\`--prefetch\`) off and on (hit rate counts"
    echo "guessed experts that were then used; read/token includes the guesses; read rate is the demand reads' rate while"
    echo "in flight; bound = bytes read per token ÷ raw read rate, over the measured time per token: 1 would be disk-bound):"
    echo
    echo "| install | threads | read-ahead | decode tok/s | hit rate | read/token | read rate | raw reads | I/O wait/token | disk bound | peak RSS |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|"
    printf '%s' "$full_rows"
    echo
    echo "**Prefill** (\`--prompt-tokens 512\`; disk time = bytes read ÷ raw read rate):"
    echo
    echo "| prompt | prefill | time | hit rate | read | disk time | I/O wait |"
    echo "|---|---|---|---|---|---|---|"
    echo "$prefill_row"
  fi
  echo
  echo "**Long context** (\`--prompt-tokens 4000 --tokens 64\`: decode after a 4000-token prompt; attention reads"
  echo "every cached key and value, in the state column, on each step):"
  echo
  echo "| install | prefill | decode | state per token | attention's share of a step |"
  echo "|---|---|---|---|---|"
  echo "$long_row"
  echo
  echo "**A decode step by phase** ($phase_layers layers, all cached, 2 threads; wall time between phase marks over"
  echo "every prompt's steps, and the rate each phase reads its weights or sequence state at, against the fresh"
  echo "512 MiB read of the same run; \`nvmai-run bench\` prints this table):"
  echo
  echo "| phase | share | read rate | of the plain read |"
  echo "|---|---|---|---|"
  echo "$phase_rows"
  echo
  echo "**Where a decode step's CPU time goes** (12 layers, all cached, 2 threads; \`--cpuprofile\`, flat samples):"
  echo
  echo "| spent on | share |"
  echo "|---|---|"
  echo "$profile_rows"
  echo "<!-- bench:end -->"
} >"$out/performance.md"

echo
cat "$out/performance.md"
if [ "$update" = 1 ]; then
  doc=docs/performance.md
  if ! grep -q '^<!-- bench:begin' "$doc" || ! grep -q '^<!-- bench:end' "$doc"; then
    echo "bench.sh: $doc has no bench markers; paste $out/performance.md by hand" >&2
    exit 1
  fi
  awk -v f="$out/performance.md" '
    /^<!-- bench:begin/ { while ((getline l < f) > 0) print l; skip = 1; next }
    /^<!-- bench:end/ { skip = 0; next }
    !skip' "$doc" >"$doc.bench" && mv "$doc.bench" "$doc"
  echo "== $doc updated"
fi
