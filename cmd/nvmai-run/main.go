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
--ignore-eos, or after --max-tokens. Greedy output is identical for any --threads.
The decode rate counts decode steps: N generated tokens take N-1 steps, since the first comes from
the prefill (the same in --json: decode_tok_s = steps / decode_s). Ctrl-C stops the generation,
prints what was generated and the timing line (with --json a partial object whose stop_reason is
"interrupted") and exits 130.
Exit status: 0 done, 1 the run failed (a broken install, a failed write of stdout or --logits-out),
2 a bad command line, 130 interrupted.`,
		Flags:  append(modelFlags(), promptFlags()...),
		Action: generateAction,
		Commands: []*cli.Command{{
			Name:      "chat",
			Usage:     "interactive conversation that keeps its state between turns",
			UsageText: "nvmai-run chat --model DIR [--system TEXT] [--reasoning-effort LEVEL] [--stats]",
			Description: `Type a message and press Enter; a line starting with """ opens a multi-line message, a line
ending in """ sends it. /reset starts a new conversation (keeping --system), /exit quits, /help lists
the keys. Ctrl-C stops the reply being written and keeps the conversation; Ctrl-C at the prompt, or
twice within a second, quits (exit status 130); Ctrl-D quits (0). Piped input is one message per line.
An install whose chat template has a reasoning effort (the Qwen3.8 family, told by what the template
does, not by the model's name) is rendered with its template: --reasoning-effort (or /effort LEVEL)
picks the effort, and earlier replies keep their reasoning, which the template renders back.`,
			Flags:  modelFlags(),
			Action: chatAction,
		}, benchCommand(), templateCommand(), serveCommand(), routeTraceCommand()},
	}
}

// modelFlags are the flags of a command that generates text: the engine,
// the session, sampling, and the chat and report options.
func modelFlags() []cli.Flag {
	flags := append(engineFlags(), sessionFlags()...)
	flags = append(flags, samplingFlags()...)
	return append(flags,
		&cli.StringFlag{Name: "system", Usage: "system message for --chat and chat"},
		&cli.StringFlag{Name: "reasoning-effort", Usage: "reasoning effort `LEVEL` for --chat and chat when the install's chat template has one (Qwen3.8 family: xhigh, medium or low; default xhigh)"},
		&cli.BoolFlag{Name: "stats", Usage: "print expert-cache hits, misses, bytes read, read rate, I/O wait and peak RSS to stderr"},
	)
}

func promptFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "prompt", Aliases: []string{"p"}, Usage: "prompt `TEXT`"},
		&cli.StringFlag{Name: "prompt-file", Aliases: []string{"f"}, Usage: "read the prompt from `FILE` (- = stdin); one trailing newline is dropped, as llama.cpp's -f does"},
		&cli.StringFlag{Name: "prompt-ids", Usage: "comma-separated token `IDS`, bypassing the tokenizer (not with --chat)"},
		&cli.BoolFlag{Name: "chat", Usage: "wrap the prompt in the model's chat format and stop at <|im_end|>"},
		&cli.BoolFlag{Name: "json", Usage: "print one JSON object (prompt_ids, ids, text, stop_reason, timings) instead of streaming"},
		&cli.StringFlag{Name: "logits-out", Usage: "write float32 little-endian logits, one vocab-size row per generated token, to `FILE`"},
	}
}
