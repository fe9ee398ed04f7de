#!/usr/bin/env python3
"""Render the chat-template goldens of pkg/chattemplate with Python Jinja2.

The oracle is transformers' own Jinja environment (transformers is not
installed here, so it is rebuilt as in transformers' chat_template_utils.py:
ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
extensions=[loopcontrols]), its tojson filter, raise_exception raising
TemplateError, strftime_now; render(messages=, tools=, documents=,
add_generation_prompt=, **special_tokens_map, **kwargs)).

For every model directory under pkg/chattemplate/testdata/models/ and every
case of pkg/chattemplate/testdata/cases.json it writes
testdata/golden/<model>/<case>.txt (the prompt) or <case>.err (JSON: the
exception's class and message). The Go test TestGoldens compares against
these byte for byte. Rerun this script after changing cases.json or a
template:

    python3 scripts/render-template-goldens.py [--out DIR]

--out writes the goldens under DIR/<model>/ instead (the opt-in Go test
TestGoldensAreCurrent uses it to check the committed ones). Needs Jinja2 3.1.x (the image has 3.1.6). Files it no longer produces are
removed from golden/ (they were all written by it).
"""

import argparse
import datetime
import json
import os
import pathlib
import sys

import jinja2
from jinja2.exceptions import TemplateError
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = pathlib.Path(__file__).resolve().parent.parent / "pkg" / "chattemplate" / "testdata"

# transformers' SPECIAL_TOKENS_ATTRIBUTES: special_tokens_map holds the set ones.
SPECIAL_TOKENS = ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token",
                  "cls_token", "mask_token", "additional_special_tokens"]


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    # transformers: "We override the built-in tojson filter because Jinja's
    # default filter escapes HTML characters".
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent,
                      separators=separators, sort_keys=sort_keys)


def raise_exception(message):
    raise TemplateError(message)


def strftime_now(format):
    return datetime.datetime.now().strftime(format)


def environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def token_text(v):
    if isinstance(v, dict):
        return v.get("content")
    return v


def load_model(d):
    """The template the way transformers picks it, and its special tokens."""
    cfg = {}
    if (d / "tokenizer_config.json").exists():
        cfg = json.loads((d / "tokenizer_config.json").read_text(encoding="utf-8"))
    if (d / "chat_template.jinja").exists():
        source = (d / "chat_template.jinja").read_text(encoding="utf-8")
    else:
        source = cfg["chat_template"]
        if isinstance(source, list):
            source = {t["name"]: t["template"] for t in source}["default"]
    specials = {}
    for name in SPECIAL_TOKENS:
        v = cfg.get(name)
        if v is None:
            continue
        if name == "additional_special_tokens":
            specials[name] = [token_text(t) for t in v if token_text(t) is not None]
        elif token_text(v) is not None:
            specials[name] = token_text(v)
    return source, specials


def arguments(a):
    """OpenAI sends arguments as a JSON string; the template needs a mapping.
    Decode a string holding a JSON object (an empty one means no arguments);
    leave any other string alone."""
    if a is None:
        return {}
    if isinstance(a, str):
        s = a.strip()
        if not s:
            return {}
        if s.startswith("{"):
            try:
                v = json.loads(s)
            except ValueError:
                return a
            if isinstance(v, dict):
                return v
        return a
    if isinstance(a, dict):
        return a
    return json.dumps(a, ensure_ascii=False)


def message(m):
    """The message as nvmai hands it to the template (FromOpenAIMessages):
    known keys only, in OpenAI's order; reasoning accepted for
    reasoning_content; text parts reduced to {type, text}."""
    out = {"role": m["role"]}
    c = m.get("content")
    if isinstance(c, list):
        c = [{"type": p["type"], "text": p["text"]} for p in c]
    out["content"] = c
    r = m.get("reasoning_content")
    if r is None:
        r = m.get("reasoning")
    if r is not None:
        out["reasoning_content"] = r
    if m.get("name"):
        out["name"] = m["name"]
    if m.get("tool_calls"):
        calls = []
        for tc in m["tool_calls"]:
            call = {}
            if tc.get("id"):
                call["id"] = tc["id"]
            call["type"] = "function"
            call["function"] = {"name": tc["function"]["name"],
                                "arguments": arguments(tc["function"].get("arguments"))}
            calls.append(call)
        out["tool_calls"] = calls
    if m.get("tool_call_id"):
        out["tool_call_id"] = m["tool_call_id"]
    return out


def render(template, specials, case):
    kwargs = dict(specials)
    kwargs.update(case.get("kwargs", {}))
    return template.render(messages=[message(m) for m in case["messages"]],
                           tools=case.get("tools"), documents=None,
                           add_generation_prompt=case["add_generation_prompt"],
                           **kwargs)


def main():
    ap = argparse.ArgumentParser(description="render the chattemplate goldens with Python Jinja2")
    ap.add_argument("--out", type=pathlib.Path, default=ROOT / "golden",
                    help="directory for <model>/<case>.txt|.err (default: testdata/golden)")
    args = ap.parse_args()
    if not jinja2.__version__.startswith("3.1."):
        sys.exit(f"need Jinja2 3.1.x, have {jinja2.__version__}")
    cases = json.loads((ROOT / "cases.json").read_text(encoding="utf-8"))
    env = environment()
    for d in sorted((ROOT / "models").iterdir()):
        source, specials = load_model(d)
        template = env.from_string(source)
        out = args.out / d.name
        out.mkdir(parents=True, exist_ok=True)
        written = set()
        for case in cases:
            try:
                text = render(template, specials, case)
                name, data = case["name"] + ".txt", text
            except Exception as e:  # the Go side must fail too
                name = case["name"] + ".err"
                data = json.dumps({"class": type(e).__name__, "message": str(e)},
                                  ensure_ascii=False) + "\n"
            with open(out / name, "w", encoding="utf-8", newline="") as f:
                f.write(data)
            written.add(name)
        for old in out.iterdir():
            if old.name not in written:
                old.unlink()
        print(f"{d.name}: {len(written)} goldens", file=sys.stderr)


if __name__ == "__main__":
    main()
