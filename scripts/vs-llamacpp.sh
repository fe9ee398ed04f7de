#!/usr/bin/env bash
# nvmai and llama.cpp side by side on the same synthetic Qwen3.5-35B-A3B geometry, interleaved.
#
#   scripts/vs-llamacpp.sh [--regimes LIST] [--rounds N] [--threads N] [--tokens M] [--prompt N]
#                          [--warmup N] [--work DIR] [--keep] [--append] [--update-docs FILE]
#
# Regimes (default: ram-l4,ram-l12,ram-l40,disk8-l40,mem16-l40):
#   ram-lN     N layers at 4 bits, everything in RAM: nvmai with a slot for every expert
#              (--expert-cache-slots 256), llama.cpp Q4_0 with token_embd and output at Q8_0 (the
#              widths nvmai's 4-bit installs use), --mmap off.
#   disk8-l40  40 layers at 8 bits (34 GiB, bigger than this 24 GiB machine): nvmai --ram-budget 8G,
#              llama.cpp Q8_0 memory-mapped (its only way to run a model bigger than RAM).
#   mem16-l40  the 4-bit 40-layer pair inside a 16 GiB cgroup (memory.max), standing in for a
#              16 GB machine: nvmai --ram-budget 6G, llama.cpp memory-mapped. Skipped, saying so,
#              where no memory cgroup (v2 or v1) can be made.
# Both engines get the same prompt token ids (a fixed LCG over ordinary ids), the same threads and
# the same warm-up (a throwaway prefill of --warmup tokens, default 512: enough random ids to reach
# every expert, so nvmai's slots hold what llama.cpp's load put in RAM), generate --tokens tokens greedily with
# EOS ignored, and are timed the same way (prefill = prompt / time to the first token; decode =
# (M−1) / time from the first token to the last). Each round runs every engine once per regime, the
# engines alternating, so drifts of this shared VM fall on both. It prints medians, ranges and the
# ratio of medians; --update-docs FILE rewrites the block between <!-- vs-llamacpp:start --> and
# <!-- vs-llamacpp:end --> in FILE with the table.
#
# It installs node-llama-cpp (pinned) into ~/.cache/nvmai-llamacpp from npm, writes GGUFs with
# scripts/internal/ggufsynth (its Q4_0/Q8_0 are checked bit for bit against the libggml-base that
# package ships, first) and nvmai installs with nvmai-convert synth, under --work (default
# /tmp/nvmai-vs-llamacpp). Models it made are deleted after their regime unless --keep (the
# 40-layer pairs take 37 GiB at 4 bits and 69 GiB at 8 bits). --append keeps the runs of earlier
# calls in --work's runs.jsonl, so regimes run one call at a time (a disk too small for both 40-layer
# pairs at once) still come out as one table.
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN="${GOTOOLCHAIN:-auto}" # go.mod pins the toolchain; images whose go.env says "local" would refuse it
export PATH="/usr/local/go/bin:$PATH"

NLC_VERSION=3.22.1
regimes="ram-l4,ram-l12,ram-l40,disk8-l40,mem16-l40" rounds=3 threads=2 tokens=32 prompt=64 warmup=512
work=/tmp/nvmai-vs-llamacpp keep=0 append=0 update=""
die() { echo "vs-llamacpp: $*" >&2; exit 1; }
while [ $# -gt 0 ]; do
  case "$1" in
    --regimes) regimes=${2:?}; shift 2 ;;
    --rounds) rounds=${2:?}; shift 2 ;;
    --threads) threads=${2:?}; shift 2 ;;
    --tokens) tokens=${2:?}; shift 2 ;;
    --prompt) prompt=${2:?}; shift 2 ;;
    --warmup) warmup=${2:?}; shift 2 ;;
    --work) work=${2:?}; shift 2 ;;
    --keep) keep=1; shift ;;
    --append) append=1; shift ;;
    --update-docs) update=${2:?}; shift 2 ;;
    -h|--help) sed -n '2,31p' "$0"; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
done
for n in "$rounds" "$threads" "$tokens" "$prompt" "$warmup"; do
  [[ "$n" =~ ^[0-9]+$ ]] || die "numeric options take whole numbers, got $n"
done
[ "$tokens" -ge 2 ] || die "--tokens must be at least 2"
command -v node >/dev/null && command -v npm >/dev/null || die "node and npm are needed (Debian: apt-get install nodejs npm)"

nlc_dir=${NVMAI_LLAMACPP_DIR:-$HOME/.cache/nvmai-llamacpp}
if [ ! -f "$nlc_dir/node_modules/node-llama-cpp/package.json" ] ||
   ! grep -q "\"version\": \"$NLC_VERSION\"" "$nlc_dir/node_modules/node-llama-cpp/package.json"; then
  echo "== install node-llama-cpp $NLC_VERSION into $nlc_dir"
  mkdir -p "$nlc_dir"
  (cd "$nlc_dir" && { [ -f package.json ] || npm init -y >/dev/null; } &&
   npm install --no-audit --no-fund --ignore-scripts "node-llama-cpp@$NLC_VERSION" "@node-llama-cpp/linux-x64@$NLC_VERSION" >/dev/null)
fi
export NVMAI_LLAMACPP_DIR=$nlc_dir
libdir=$nlc_dir/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64

mkdir -p "$work" bin
echo "== build"
go build -o bin/ ./cmd/nvmai-run ./cmd/nvmai-convert
CGO_ENABLED=0 go build -o "$work/ggufsynth" ./scripts/internal/ggufsynth
echo "== Q4_0 / Q8_0 writer against ggml's quantizer"
"$work/ggufsynth" --selftest --lib-dir "$libdir"

# The prompt: an LCG over ordinary token ids [256, 248044), the same on every run.
ids=$(awk -v n="$prompt" 'BEGIN { x = 12345; for (i = 0; i < n; i++) { x = (x * 1103515245 + 12345) % 4294967296;
  printf "%s%d", (i ? "," : ""), 256 + int(x / 256) % (248044 - 256) } }')

made=()
nvmai_install() { # LAYERS BITS → sets nv to the install
  nv="$work/nvmai-l$1-$2bit"
  if [ ! -f "$nv/manifest.json" ]; then
    bin/nvmai-convert synth --geometry qwen3.5-35b-a3b --bits "$2" --layers "$1" --output "$nv" --quiet
    made+=("$nv")
  fi
}
gguf() { # LAYERS TYPE EMBD OUT → sets gg to the file
  gg="$work/llama-l$1-$2-$3-$4.gguf"
  if [ ! -f "$gg" ]; then
    "$work/ggufsynth" --output "$gg" --layers "$1" --type "$2" --embd-type "$3" --output-type "$4"
    made+=("$gg")
  fi
}

# A 16 GiB memory cgroup for the mem16 regime (v2's memory.max, else v1's memory.limit_in_bytes;
# both charge the page cache, as a 16 GB machine would). Sets cg; fails when neither can be written.
cg=""
make_cgroup() {
  local limit=$((16 << 30))
  if [ -w /sys/fs/cgroup/cgroup.subtree_control ] && grep -qw memory /sys/fs/cgroup/cgroup.controllers; then
    cg=/sys/fs/cgroup/nvmai-vs-llamacpp
    echo "+memory" >/sys/fs/cgroup/cgroup.subtree_control 2>/dev/null || true
    mkdir -p "$cg" && echo "$limit" >"$cg/memory.max" && echo 0 >"$cg/memory.swap.max" 2>/dev/null
    [ "$(cat "$cg/memory.max" 2>/dev/null)" = "$limit" ] && return 0
  elif [ -d /sys/fs/cgroup/memory ] && mkdir -p /sys/fs/cgroup/memory/nvmai-vs-llamacpp 2>/dev/null; then
    cg=/sys/fs/cgroup/memory/nvmai-vs-llamacpp
    echo "$limit" >"$cg/memory.limit_in_bytes" 2>/dev/null
    [ "$(cat "$cg/memory.limit_in_bytes" 2>/dev/null)" = "$limit" ] && return 0
  fi
  cg=""
  return 1
}
in_cgroup() { if [ -n "$cg" ]; then bash -c 'echo $$ >"$1/cgroup.procs"; shift; exec "$@"' _ "$cg" "$@"; else "$@"; fi; }

runs="$work/runs.jsonl"
[ "$append" = 1 ] || : >"$runs"
# failed REGIME ROUND ENGINE STATUS: records a run that ended without a report (the OOM killer in the
# cgroup: status 137), so the table says so and the other runs go on.
failed() {
  local why="exit status $4"
  [ "$4" = 137 ] && why="killed (out of memory)"
  echo "{\"regime\": \"$1\", \"round\": $2, \"engine\": \"$3\", \"failed\": \"$why\"}" | tee -a "$runs"
}
run_nvmai() { # REGIME ROUND MODEL ARGS...
  local regime=$1 round=$2 model=$3 out rc=0; shift 3
  out=$(in_cgroup bin/nvmai-run bench --model "$model" --prompt-ids "$ids" --tokens "$tokens" --threads "$threads" \
      --warmup "$warmup" --skip-bandwidth --json "$@" 2>/dev/null) || rc=$?
  if [ "$rc" != 0 ]; then failed "$regime" "$round" nvmai "$rc"; return; fi
  python3 -c 'import json,sys; d=json.load(sys.stdin); m=d["median"]
print(json.dumps({"regime": sys.argv[1], "round": int(sys.argv[2]), "engine": "nvmai", "prefill_tok_s": m["prefill_tok_s"],
  "decode_tok_s": m["decode_tok_s"], "peak_rss_bytes": m["peak_rss_bytes"]}))' "$regime" "$round" <<<"$out" | tee -a "$runs"
}
run_llama() { # REGIME ROUND GGUF MMAP
  local out rc=0
  out=$(in_cgroup node scripts/internal/llamabench/bench.mjs --model "$3" --prompt-ids "$ids" --tokens "$tokens" \
      --threads "$threads" --warmup "$warmup" --mmap "$4") || rc=$?
  if [ "$rc" != 0 ]; then failed "$1" "$2" llama.cpp "$rc"; return; fi
  python3 -c 'import json,sys; d=json.load(sys.stdin)
print(json.dumps({"regime": sys.argv[1], "round": int(sys.argv[2]), "engine": "llama.cpp", "prefill_tok_s": d["prefill_tok_s"],
  "decode_tok_s": d["decode_tok_s"], "peak_rss_bytes": d["peak_rss_bytes"], "version": d["version"]}))' "$1" "$2" <<<"$out" | tee -a "$runs"
}

regime_pair() { # REGIME → makes the pair; sets nv, nv_args, gg, mmap
  case "$1" in
    ram-l*) nvmai_install "${1#ram-l}" 4; nv_args=(--expert-cache-slots 256); gguf "${1#ram-l}" q4_0 q8_0 q8_0; mmap=off ;;
    disk8-l40) nvmai_install 40 8; nv_args=(--ram-budget 8G); gguf 40 q8_0 q8_0 q8_0; mmap=on ;;
    mem16-l40) nvmai_install 40 4; nv_args=(--ram-budget 6G); gguf 40 q4_0 q8_0 q8_0; mmap=on ;;
    *) die "unknown regime $1" ;;
  esac
}

skipped=()
for regime in ${regimes//,/ }; do
  cg=""
  if [ "$regime" = mem16-l40 ] && ! make_cgroup; then
    echo "== $regime: SKIPPED: cgroup v2 memory limits cannot be set here (need a writable cgroup v2 or v1 memory controller)"
    skipped+=("$regime (no writable memory cgroup)")
    continue
  fi
  echo "== $regime: make the models"
  made=()
  regime_pair "$regime"
  for r in $(seq 1 "$rounds"); do
    echo "== $regime: round $r of $rounds"
    if [ $((r % 2)) = 1 ]; then run_nvmai "$regime" "$r" "$nv" "${nv_args[@]}"; run_llama "$regime" "$r" "$gg" "$mmap"
    else run_llama "$regime" "$r" "$gg" "$mmap"; run_nvmai "$regime" "$r" "$nv" "${nv_args[@]}"; fi
  done
  if [ "$keep" = 0 ] && [ ${#made[@]} -gt 0 ]; then rm -rf -- "${made[@]}"; fi
  [ -z "$cg" ] || rmdir "$cg" 2>/dev/null || true
done

# The CPU the table was measured on (its SIMD level decides which kernels either engine runs).
cpu=$(awk -F': ' '/^model name/ { m = $2 } /^flags/ { f = " " $2 " " } END {
  isa = (f ~ / avx512_vnni /) ? "AVX-512 VNNI" : (f ~ / avx512f /) ? "AVX-512" : (f ~ / avx2 /) ? "AVX2, no AVX-512" : "no AVX2"
  printf "%s (%s)", m, isa }' /proc/cpuinfo)
table=$(VS_CPU="$cpu, $(nproc) CPUs" python3 - "$runs" "$threads" "$tokens" "$prompt" "$warmup" "$rounds" "${skipped[@]+"${skipped[@]}"}" <<'EOF'
import collections, json, os, statistics as st, sys
runs, threads, tokens, prompt, warmup, rounds = sys.argv[1:7]
skipped = sys.argv[7:]
g = collections.defaultdict(list)
fails = collections.defaultdict(list)
order = []
for line in open(runs):
    r = json.loads(line)
    if r["regime"] not in order:
        order.append(r["regime"])
    (fails if "failed" in r else g)[(r["regime"], r["engine"])].append(r)
label = {"ram-l4": "4 layers 4-bit, all in RAM", "ram-l12": "12 layers 4-bit, all in RAM",
         "ram-l40": "40 layers 4-bit, all in RAM", "disk8-l40": "40 layers 8-bit (34 GiB), 24 GiB machine",
         "mem16-l40": "40 layers 4-bit in a 16 GiB cgroup"}
def fmt(v):
    d = 2 if st.median(v) < 10 else 1  # below 10 tok/s one decimal hides the ratio
    return f"{st.median(v):.{d}f} [{min(v):.{d}f}–{max(v):.{d}f}]"
version = next((r["version"] for v in g.values() for r in v if "version" in r), "?")
print(f"Same token ids, {threads} threads, prompt {prompt} tokens, {tokens} generated greedily (EOS ignored), "
      f"warm-up {warmup} tokens in both; median [range] of {rounds} interleaved rounds; llama.cpp {version}, CPU, prebuilt; "
      f"measured on {os.environ.get('VS_CPU', 'an unnamed CPU')}.")
print()
print("| regime | phase | nvmai tok/s | llama.cpp tok/s | ratio | nvmai peak RSS | llama.cpp peak RSS |")
print("|---|---|---|---|---|---|---|")
for reg in order:
    nv, ll = g[(reg, "nvmai")], g[(reg, "llama.cpp")]
    if not nv or not ll:
        # an engine that failed every round: say how, with the other's figures
        why = {e: "; ".join(sorted({f["failed"] for f in fails[(reg, e)]})) for e in ("nvmai", "llama.cpp")}
        rss = lambda v: f"{st.median([x['peak_rss_bytes'] for x in v]) / 2**30:.1f} GiB" if v else ""
        for phase in ("decode", "prefill"):
            cell = lambda v, e: fmt([x[f"{phase}_tok_s"] for x in v]) if v else f"{why[e] or 'not run'} ({len(fails[(reg, e)])} of {rounds})"
            print(f"| {label.get(reg, reg)} | {phase} | {cell(nv, 'nvmai')} | {cell(ll, 'llama.cpp')} | – | "
                  f"{rss(nv) if phase == 'decode' else ''} | {rss(ll) if phase == 'decode' else ''} |")
        continue
    rss = lambda v: f"{st.median([x['peak_rss_bytes'] for x in v]) / 2**30:.1f} GiB"
    for phase in ("decode", "prefill"):
        a = [x[f"{phase}_tok_s"] for x in nv]; b = [x[f"{phase}_tok_s"] for x in ll]
        print(f"| {label.get(reg, reg)} | {phase} | {fmt(a)} | {fmt(b)} | **{st.median(a) / st.median(b):.2f}×** | "
              f"{rss(nv) if phase == 'decode' else ''} | {rss(ll) if phase == 'decode' else ''} |")
for s in skipped:
    print(f"| {s} | – | not run | | | | |")
EOF
)
echo
echo "$table"
if [ -n "$update" ]; then
  python3 - "$update" "$table" <<'EOF'
import sys
path, table = sys.argv[1], sys.argv[2]
s = open(path).read()
a, b = "<!-- vs-llamacpp:start -->", "<!-- vs-llamacpp:end -->"
if a not in s or b not in s:
    sys.exit(f"vs-llamacpp: {path} has no {a} … {b} block")
i, j = s.index(a) + len(a), s.index(b)
open(path, "w").write(s[:i] + "\n" + table + "\n" + s[j:])
print(f"rewrote the side-by-side table in {path}")
EOF
fi
