#!/usr/bin/env node
// Times llama.cpp (CPU, prebuilt, through node-llama-cpp) on a GGUF with the
// same semantics as `nvmai-run bench`: the prompt is a list of token ids, M
// tokens are generated greedily with EOS ignored; the first comes from the
// prefill's logits, so decode is M−1 one-token steps and
// decode_tok_s = (M−1) / (time from the first token to the last);
// prefill_tok_s = prompt tokens / time to the first token. Prints one JSON line.
//
//   node bench.mjs --model F.gguf --prompt-ids 1,2,3 --tokens 32 --threads 2 [--warmup N] [--mmap on|off]
//
// node-llama-cpp comes from --llama-dir (default $NVMAI_LLAMACPP_DIR or
// ~/.cache/nvmai-llamacpp), where scripts/vs-llamacpp.sh installs it.
import {createRequire} from "node:module";
import {pathToFileURL} from "node:url";
import fs from "node:fs";
import path from "node:path";
import os from "node:os";

function args(argv) {
  const o = {tokens: 32, threads: 0, warmup: 0, mmap: true, batch: 512,
    llamaDir: process.env.NVMAI_LLAMACPP_DIR || path.join(os.homedir(), ".cache", "nvmai-llamacpp")};
  const value = (i) => {
    if (i + 1 >= argv.length) throw new Error(`${argv[i]} needs a value`);
    return argv[i + 1];
  };
  const count = (i) => {
    const v = Number(value(i));
    if (!Number.isInteger(v) || v < 0) throw new Error(`${argv[i]} ${argv[i + 1]}: want a non-negative integer`);
    return v;
  };
  for (let i = 0; i < argv.length; i += 2) {
    switch (argv[i]) {
      case "--model": o.model = value(i); break;
      case "--prompt-ids": o.ids = value(i).split(",").map(Number); break;
      case "--tokens": o.tokens = count(i); break;
      case "--threads": o.threads = count(i); break;
      case "--warmup": o.warmup = count(i); break;
      case "--batch": o.batch = count(i); break;
      case "--mmap": o.mmap = value(i) === "on"; break;
      case "--llama-dir": o.llamaDir = value(i); break;
      default: throw new Error(`unknown option ${argv[i]}`);
    }
  }
  if (!o.model || !o.ids?.length) throw new Error("--model FILE and --prompt-ids LIST are required");
  if (o.ids.some((x) => !Number.isInteger(x) || x < 0)) throw new Error("--prompt-ids: want comma-separated token ids");
  if (o.tokens < 1) throw new Error("--tokens must be at least 1");
  return o;
}

const now = () => Number(process.hrtime.bigint()) / 1e9;

function peakRSSMiB() {
  const m = fs.readFileSync("/proc/self/status", "utf8").match(/^VmHWM:\s+(\d+) kB/m);
  return m ? Math.round(Number(m[1]) / 1024) : null;
}

async function main() {
  const o = args(process.argv.slice(2));
  const req = createRequire(path.join(path.resolve(o.llamaDir), "node_modules", "_"));
  const entry = req.resolve("node-llama-cpp");
  const nlc = await import(pathToFileURL(entry).href);
  const version = JSON.parse(fs.readFileSync(path.join(path.dirname(entry), "..", "package.json"), "utf8")).version;
  // Prebuilt CPU binaries only; maxThreads 0 lifts node-llama-cpp's own cap so --threads is what runs.
  const llama = await nlc.getLlama({gpu: false, build: "never", usePrebuiltBinaries: true, maxThreads: 0,
    logLevel: "error", progressLogs: false});
  const threads = o.threads || llama.cpuMathCores;
  const model = await llama.loadModel({modelPath: path.resolve(o.model), gpuLayers: 0, useMmap: o.mmap,
    ignoreMemorySafetyChecks: true});
  const context = await model.createContext({contextSize: Math.max(512, o.ids.length + o.tokens + o.warmup + 16),
    batchSize: o.batch, threads, sequences: 1, ignoreMemorySafetyChecks: true, failedCreationRemedy: false});
  const seq = context.getSequence({checkpoints: {interval: false, max: 1}});

  async function generate(ids, n) {
    const gen = seq.evaluate(ids, {temperature: 0, yieldEogToken: true});
    const t0 = now();
    let r = await gen.next();
    const t1 = now();
    const out = [r.value];
    for (let i = 1; i < n; i++) {
      r = await gen.next();
      if (r.done) throw new Error(`generation stopped after ${out.length} tokens`);
      out.push(r.value);
    }
    const t2 = now();
    await gen.return();
    return {tokens: out, prefillS: t1 - t0, decodeS: t2 - t1};
  }
  if (o.warmup > 0) { // a throwaway prefill, as nvmai-run bench --warmup does
    const w = [];
    for (let i = 0; i < o.warmup; i++) w.push(o.ids[i % o.ids.length]);
    await generate(w, 2);
    await seq.clearHistory();
  }
  const res = await generate(o.ids, o.tokens);
  const steps = res.tokens.length - 1;
  const report = {
    engine: "llama.cpp", version: `${llama.llamaCppRelease?.release ?? "?"} (node-llama-cpp ${version})`,
    model: path.resolve(o.model), threads: context.currentThreads, mmap: o.mmap,
    prompt_tokens: o.ids.length, prefill_tok_s: o.ids.length / res.prefillS,
    decode_steps: steps, decode_tok_s: steps > 0 ? steps / res.decodeS : null, peak_rss_bytes: peakRSSMiB() * 2 ** 20,
    first_tokens: res.tokens.slice(0, 8),
  };
  await context.dispose();
  await model.dispose();
  await llama.dispose();
  process.stdout.write(JSON.stringify(report) + "\n");
}

main().catch((e) => {
  process.stderr.write(`llamabench: ${e?.message ?? e}\n`);
  process.exit(1);
});
