#!/usr/bin/env bash
# Decode of a synthetic Qwen3.8-Flash-Next 125B-A6B install (the release shape with LAYERS decoder
# layers and the full-size n-gram table) under a bounded expert budget, and the projection to the
# released 48 layers.
#
# Builds the commands, writes WORKDIR/q38-lLAYERS (4-bit, `nvmai-convert synth`, ~18 GiB on disk for
# 12 layers, 119 GiB apparent) unless an install is already there, runs `nvmai-run bench` RUNS times
# (three fixed prompts each, every one cut or repeated to PROMPT_TOKENS, TOKENS generated: TOKENS-1
# decode steps; the memory and raw disk read rates measured in the same process), keeps each JSON
# report in WORKDIR, and prints per prompt: prefill and decode tok/s, expert bytes and n-gram bytes
# read per decode step, the expert-cache hit rate, the n-gram wait, peak RSS; then the projection
# (docs/qwen38.md "Decode at the release geometry" states the model). It removes the install only
# if it wrote it (KEEP=1 keeps it). Heavy (minutes of CPU, GiBs of disk): on a shared machine run it
# under the lock, `flock /work/wt/heavy.lock scripts/bench-qwen38.sh …`.
#
# usage: scripts/bench-qwen38.sh [LAYERS] [RUNS] [WORKDIR]     (defaults: 12, 2, /tmp/bench-qwen38)
#        BUDGET=8G PROMPT_TOKENS=64 TOKENS=17 KEEP=1 scripts/bench-qwen38.sh 12 3 /big/dir
set -euo pipefail
cd "$(dirname "$0")/.."
export GOTOOLCHAIN="${GOTOOLCHAIN:-auto}"
export PATH="/usr/local/go/bin:$PATH"
layers=${1:-12}
runs=${2:-2}
work=${3:-/tmp/bench-qwen38}
budget=${BUDGET:-8G}
prompt_tokens=${PROMPT_TOKENS:-64}
tokens=${TOKENS:-17}
model="$work/q38-l$layers"
. scripts/lib/qwen38-install.sh
qwen38_install WORKDIR 10
reports=()
for r in $(seq 1 "$runs"); do
  out="$work/bench-l$layers-run$r.json"
  echo "== run $r of $runs: nvmai-run bench --model $model --ram-budget $budget --prompt-tokens $prompt_tokens --tokens $tokens --json" >&2
  nice -n 10 "$work/bin/nvmai-run" bench --model "$model" --ram-budget "$budget" --prompt-tokens "$prompt_tokens" \
    --tokens "$tokens" --json -q >"$out"
  reports+=("$out")
done
python3 - "$layers" "${reports[@]}" <<'EOF'
import json, sys
layers = int(sys.argv[1])
NVMAI = 5.25  # NVMAI 5.4, Qwen3.8-Flash-Next 4-bit, 24 GB M3 (issue #18)
TARGET = 48
gib, mib = 1 << 30, 1 << 20
rows, reports = [], []
print("| run | prompt | prefill tok/s | decode tok/s | expert hit | expert read/step | n-gram read/step (rows) | n-gram wait/step | io wait/step | peak RSS |")
print("|---|---|---|---|---|---|---|---|---|---|")
for i, path in enumerate(sys.argv[2:], 1):
    r = json.load(open(path))
    reports.append(r)
    lm = next((p["share"] for p in r.get("phases") or [] if p["name"] == "lm_head"), 0.0)
    for p in r["runs"]:
        print(f"| {i} | {p['prompt']} | {p['prefill_tok_s']:.2f} | {p['decode_tok_s']:.2f} | {100*p['hit_rate']:.1f}% | "
              f"{p['bytes_read_per_token']/mib:.0f} MiB | {p.get('ngram_bytes_read_per_token',0)/1024:.0f} KiB ({p.get('ngram_rows_per_token',0):.0f}) | "
              f"{1e3*p.get('ngram_wait_s_per_token',0):.2f} ms | {1e3*p['io_wait_s_per_token']:.0f} ms | {p['peak_rss_bytes']/gib:.2f} GiB |")
        rows.append((r, p, lm))
r0 = rows[0][0]
slots, experts, disk = r0["slots_per_layer"], r0["experts_per_layer"], r0.get("disk_read_bytes_per_s", 0)
budget = r0["budget_bytes"]
stride = budget / (slots * layers)
print(f"\n{layers} layers, {r0['width_bits']}-bit, budget {budget/gib:.2f} GiB ({slots}/{experts} slots per layer, {r0['io_mode']} I/O x {r0['io_threads']}), "
      f"{r0['threads']} threads, {r0['cpu']}; raw disk read of random experts: "
      + ", ".join(f"{x.get('disk_read_bytes_per_s',0)/1e9:.2f}" for x in reports) + " GB/s (per run)")
# The model: a decode step is a resident part (lm_head, the embedding row, the final mixer; only
# lm_head is a phase of its own and it dominates) plus LAYERS times a per-layer part.
# (a) 48 layers with 4x the budget (the same slots per layer, so the same hit rate): the per-layer
#     part and the expert bytes scale by 48/LAYERS; the n-gram bytes do not (one PLE layer).
# (b) 48 layers at the same budget: slots per layer drop to budget/(48 stride); with the near-uniform
#     routing of random weights the hit rate is about slots/experts, and the missing experts are
#     read at the raw disk rate on top of the compute (no overlap assumed).
top_k = 10
a, b = [], []
for r, p, lm in rows:
    step = 1 / p["decode_tok_s"]
    res = step * lm
    per_layer = (step - res) / layers
    a.append(1 / (res + per_layer * TARGET))
    slots48 = min(experts, int(budget // (stride * TARGET)))
    miss48 = top_k * (1 - slots48 / experts) * stride * TARGET
    compute = (step - res - p["io_wait_s_per_token"]) / layers
    dr = r.get("disk_read_bytes_per_s", 0)
    if dr > 0:
        b.append((1 / (res + compute * TARGET + miss48 / dr), miss48, slots48))
def rng(v): return f"{min(v):.2f}-{max(v):.2f}"
dec = [p["decode_tok_s"] for _, p, _ in rows]
xb = [p["bytes_read_per_token"] for _, p, _ in rows]
nb = [p.get("ngram_bytes_read_per_token", 0) for _, p, _ in rows]
hit = [p["hit_rate"] for _, p, _ in rows]
print(f"measured, {layers} layers: decode {rng(dec)} tok/s, expert reads {min(xb)/mib:.0f}-{max(xb)/mib:.0f} MiB/step "
      f"(hit {100*min(hit):.0f}-{100*max(hit):.0f}%, slots/experts = {100*slots/experts:.0f}%), n-gram reads {min(nb)/1024:.0f}-{max(nb)/1024:.0f} KiB/step, "
      f"lm_head {100*min(x[2] for x in rows):.0f}-{100*max(x[2] for x in rows):.0f}% of a step")
print(f"projection (a), {TARGET} layers, {budget*TARGET/layers/gib:.0f} GiB budget (same hit rate): {rng(a)} tok/s = "
      f"{min(a)/NVMAI:.2f}-{max(a)/NVMAI:.2f}x NVMAI's {NVMAI} tok/s; expert reads {min(xb)*TARGET/layers/mib:.0f}-{max(xb)*TARGET/layers/mib:.0f} MiB/step, "
      f"n-gram reads unchanged")
if b:
    v = [x[0] for x in b]
    print(f"projection (b), {TARGET} layers, {budget/gib:.0f} GiB budget ({b[0][2]} slots/layer, hit ~{100*b[0][2]/experts:.0f}%): {rng(v)} tok/s = "
          f"{min(v)/NVMAI:.2f}-{max(v)/NVMAI:.2f}x NVMAI's; expert reads ~{b[0][1]/mib:.0f} MiB/step at the measured disk rate")
EOF
