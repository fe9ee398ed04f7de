#!/usr/bin/env python3
"""Reference logits for nvmai's long-context tests (pkg/models/qwen35/testdata).

Runs transformers (float32, CPU, eager attention) on the tiny-moe-fused fixture twice:

  yarn:   the snapshot with rope_parameters switched to YaRN (factor 4,
          original_max_position_embeddings 1024) over a 1,300-token prompt, so
          the last ~270 positions lie past the native context; logits rows at a
          few of those positions, argmax per position, and the rotary
          embedding's inv_freq / attention_scaling as transformers built them.
  long:   the unmodified snapshot over a 4,000-token prompt: last logits and
          argmax per position (the 8-bit KV cache's agreement test).

Usage (transformers 5.17, torch 2.11):
  python3 scripts/yarn-refs.py <tiny-moe-fused dir> <tiny-moe.refs.json> <out.json>

The prompts are built from the long prompt of tiny-moe.refs.json: its
paragraphs in a fixed shuffled order, repeated until long enough, tokenized
and truncated; the ids are written out, so the Go tests need no tokenizer.
"""
import inspect
import json
import os
import random
import shutil
import sys
import tempfile

import torch
import transformers
from transformers import AutoTokenizer, Qwen3_5MoeForConditionalGeneration
from transformers import modeling_rope_utils

YARN_FACTOR = 4.0
YARN_ORIGINAL = 1024
YARN_TOKENS = 1300
YARN_ROWS = [1100, 1200, 1299]
LONG_TOKENS = 4000


def prompt_ids(tok, refs_path, n, seed):
    refs = json.load(open(refs_path))
    text = max(refs["prompts"], key=lambda p: len(p["ids"]))["text"]
    paras = [p for p in text.split("\n\n") if p.strip()]
    rng = random.Random(seed)
    ids = []
    while len(ids) < n:
        order = paras[:]
        rng.shuffle(order)
        ids += tok("\n\n".join(order) + "\n\n", add_special_tokens=False)["input_ids"]
    return ids[:n]


def load(snapshot):
    m = Qwen3_5MoeForConditionalGeneration.from_pretrained(snapshot, dtype=torch.float32, attn_implementation="eager")
    m.eval()
    return m


def run(m, ids):
    with torch.no_grad():
        out = m(input_ids=torch.tensor([ids]))
    return out.logits[0].float()


def rows(logits, positions):
    return {str(p): [float(x) for x in logits[p].tolist()] for p in positions}


def main():
    snapshot, refs_path, out_path = sys.argv[1:4]
    torch.set_num_threads(os.cpu_count() or 1)
    tok = AutoTokenizer.from_pretrained(snapshot)
    result = {"transformers_version": transformers.__version__, "torch_version": torch.__version__,
              "dtype": "float32 compute over the snapshot's bf16 weights, CPU, eager attention",
              "yarn_source": inspect.getsource(modeling_rope_utils._compute_yarn_parameters)}

    # The long prompt at native RoPE.
    m = load(snapshot)
    ids = prompt_ids(tok, refs_path, LONG_TOKENS, 4000)
    lg = run(m, ids)
    result["long"] = {"ids": ids, "argmax_per_position": lg.argmax(-1).tolist(),
                      "last_logits": [float(x) for x in lg[-1].tolist()]}
    del m
    json.dump(result, open(out_path, "w"))
    print(result["yarn_source"])

    # YaRN: a copy of the snapshot with rope_parameters rewritten.
    tmp = tempfile.mkdtemp()
    yarn_dir = os.path.join(tmp, "tiny-moe-yarn")
    shutil.copytree(snapshot, yarn_dir)
    cfg_path = os.path.join(yarn_dir, "config.json")
    cfg = json.load(open(cfg_path))
    rp = cfg["text_config"]["rope_parameters"]
    rp.update({"rope_type": "yarn", "factor": YARN_FACTOR, "original_max_position_embeddings": YARN_ORIGINAL})
    json.dump(cfg, open(cfg_path, "w"), indent=2)
    m = load(yarn_dir)
    rot = next(mod for name, mod in m.named_modules() if name.endswith("rotary_emb") and "visual" not in name)
    ids = prompt_ids(tok, refs_path, YARN_TOKENS, 1300)
    lg = run(m, ids)
    result["yarn"] = {"rope_parameters": dict(m.config.text_config.rope_parameters),
                      "inv_freq": [float(x) for x in rot.inv_freq.tolist()],
                      "attention_scaling": float(rot.attention_scaling),
                      "ids": ids, "argmax_per_position": lg.argmax(-1).tolist(),
                      "logits_at": rows(lg, YARN_ROWS)}
    with open(out_path, "w") as f:
        json.dump(result, f)
    print("yarn rope_parameters", result["yarn"]["rope_parameters"])
    print("inv_freq", result["yarn"]["inv_freq"], "attention_scaling", result["yarn"]["attention_scaling"])


if __name__ == "__main__":
    main()
