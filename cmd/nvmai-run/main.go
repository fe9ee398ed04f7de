// Command nvmai-run generates text from an nvmai install on the CPU.
package main

import (
	"github.com/urfave/cli/v2"

	"github.com/nvmai/nvmai/pkg/cliutil"
)

func main() { cliutil.Run(app()) }

func app() *cli.App {
	return &cli.App{
		Name:  "nvmai-run",
		Usage: "generate text from an nvmai install",
		UsageText: `nvmai-run --model DIR --prompt "The capital of France is" [--max-tokens 64]
   nvmai-run --model DIR --chat --system "Be brief." --prompt "Hello"
   nvmai-run --model DIR --prompt-ids 516,2390,2761 --temperature 0 --json --logits-out logits.f32
   nvmai-run chat --model DIR`,
		Description: `Streams the generated text to stdout and prints timing (prefill and decode tokens/s) to stderr.
Sampling defaults come from the model's generation_config.json; --temperature 0 is greedy.
Generation stops at any EOS id of the generation config (with --chat also at <|im_end|>) unless
--ignore-eos, or after --max-tokens. Greedy output is identical for any --threads.`,
		Flags:  append(modelFlags(), promptFlags()...),
		Action: generateAction,
		Commands: []*cli.Command{{
			Name:      "chat",
			Usage:     "interactive conversation that keeps its state between turns",
			UsageText: "nvmai-run chat --model DIR [--system TEXT]",
			Flags:     modelFlags(),
			Action:    chatAction,
		}, benchCommand()},
	}
}

func modelFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "model", Aliases: []string{"m"}, Usage: "install `DIR` (from nvmai-convert or nvmai-install)"},
		&cli.IntFlag{Name: "threads", Aliases: []string{"t"}, Usage: "compute threads", DefaultText: "all cores"},
		&cli.IntFlag{Name: "max-tokens", Aliases: []string{"n"}, Value: 256, Usage: "most tokens to generate"},
		&cli.Float64Flag{Name: "temperature", Usage: "sampling temperature, 0 = greedy", DefaultText: "generation_config.json"},
		&cli.IntFlag{Name: "top-k", Usage: "keep the K most likely tokens, 0 = off", DefaultText: "generation_config.json"},
		&cli.Float64Flag{Name: "top-p", Usage: "nucleus sampling mass, 1 = off", DefaultText: "generation_config.json"},
		&cli.Uint64Flag{Name: "seed", Value: 0, Usage: "random seed; the same seed gives the same text"},
		&cli.BoolFlag{Name: "ignore-eos", Usage: "do not stop at end-of-sequence tokens"},
		&cli.StringFlag{Name: "system", Usage: "system message for --chat and chat"},
		&cli.IntFlag{Name: "kv-initial", Usage: "initial KV cache size in tokens; doubles on demand", DefaultText: "8192"},
		&cli.IntFlag{Name: "max-context", Usage: "most tokens of context", DefaultText: "the model's maximum"},
		&cli.IntFlag{Name: "kv-bits", Value: 8, Usage: "KV cache width: 8 (int8, a scale per 64 values), 16 (bfloat16) or 32 (float32)"},
		&cli.StringFlag{Name: "rope-scaling", Value: "none", Usage: "none, or yarn to extend the context 2x or 4x (--max-context 524288 or 1048576 for Qwen3.5/3.6)"},
		&cli.BoolFlag{Name: "force", Usage: "start even when the memory footprint exceeds the machine's RAM"},
		&cli.StringFlag{Name: "ram-budget", Usage: "memory for cached experts, e.g. 8G or 512M (binary units)", DefaultText: "8G, at most half the RAM"},
		&cli.IntFlag{Name: "expert-cache-slots", Usage: "experts cached per layer (overrides --ram-budget)"},
		&cli.IntFlag{Name: "io-threads", Usage: "parallel expert reads", DefaultText: "4"},
		&cli.IntFlag{Name: "prefetch", Usage: "experts per layer to predict and read ahead while decoding (at most top_k); 0 = off. Only when the cache cannot hold every expert", DefaultText: "4"},
		&cli.BoolFlag{Name: "stats", Usage: "print expert-cache hits, misses, bytes read, read rate, I/O wait and peak RSS to stderr"},
	}
}

func promptFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "prompt", Aliases: []string{"p"}, Usage: "prompt `TEXT`"},
		&cli.StringFlag{Name: "prompt-file", Aliases: []string{"f"}, Usage: "read the prompt from `FILE`"},
		&cli.StringFlag{Name: "prompt-ids", Usage: "comma-separated token ids, bypassing the tokenizer"},
		&cli.BoolFlag{Name: "chat", Usage: "wrap the prompt in the model's chat format and stop at <|im_end|>"},
		&cli.BoolFlag{Name: "json", Usage: "print one JSON object (prompt_ids, ids, text, timings) instead of streaming"},
		&cli.StringFlag{Name: "logits-out", Usage: "write float32 little-endian logits, one vocab-size row per generated token, to `FILE`"},
	}
}
