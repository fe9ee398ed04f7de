// Command nvmai-convert turns a Hugging Face snapshot of a Qwen3.5,
// Qwen3.5-MoE or Qwen3.8-Flash-Next (qwen4_exp) checkpoint into an nvmai
// install.
package main

import (
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/nvmai/nvmai/pkg/cliutil"
	"github.com/nvmai/nvmai/pkg/convert"
)

func main() { cliutil.Run(app()) }

func app() *cli.App {
	return &cli.App{
		Name:  "nvmai-convert",
		Usage: "convert a Hugging Face snapshot into an nvmai install (4-bit, 8-bit or 16-bit)",
		UsageText: `nvmai-convert --input SNAPSHOT --output DIR --bits 4|8|16
   nvmai-convert --input SNAPSHOT --output DIR --bits 4,8     (writes DIR-4bit and DIR-8bit from one read)
   nvmai-convert synth --geometry qwen3.5-35b-a3b --bits 4 --output DIR   (random weights, no snapshot)`,
		Description: `Reads config.json, the tokenizer and the safetensors shards of SNAPSHOT (a folder, e.g. a
Hugging Face cache snapshot), quantizes the weights (MLX affine, group 64) and writes an install:
manifest.json, resident.bin, experts/layer-NNN.bin (one per MoE layer), for qwen4_exp
ngram/layer-NNN.bin (the PLE layer's n-gram table, bf16, rows packed for direct reads), the
tokenizer and configs, and the receipt verified-install.json. Output appears only when complete; an existing install is
never replaced without --overwrite, and nothing but an nvmai install ever is (nor an --output
overlapping --input). Vision-tower tensors are skipped; mtp.* draft-head tensors are
copied verbatim to draft/mtp.safetensors. --bits 4,8 (any comma list of 4, 8 and 16) writes
DIR-4bit, DIR-8bit (and DIR-16bit) from one read of the snapshot.
Exit status: 0 written, 1 the conversion failed (nothing is left half-written), 2 a bad command
line, 130 interrupted.`,
		Flags: []cli.Flag{
			// Checked in convertAction, not with Required: urfave/cli would
			// then demand them of the synth subcommand too.
			&cli.StringFlag{Name: "input", Aliases: []string{"i"}, Usage: "Hugging Face snapshot `DIR` (required)"},
			&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Usage: "install `DIR` to create (required)"},
			&cli.StringFlag{Name: "bits", Aliases: []string{"b"}, Value: "4", Usage: "widths, one or a comma list of 4, 8 and 16 (exact bf16): 4, 8, 16, 4,8, 4,16, 8,16 or 4,8,16"},
			&cli.BoolFlag{Name: "overwrite", Usage: "replace an existing install at --output"},
			&cli.StringFlag{Name: "model-id", Usage: "model name recorded in the manifest (default: the repo or the input folder name)"},
			&cli.StringFlag{Name: "repo", Usage: "source repo `ORG/NAME` to record (default: taken from a Hugging Face cache path)"},
			&cli.StringFlag{Name: "revision", Usage: "source revision to record (default: taken from a Hugging Face cache path)"},
			cliutil.ThreadsFlag("quantization threads", "t"),
			&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "no progress output"},
		},
		Action:   convertAction,
		Commands: []*cli.Command{synthCommand()},
	}
}

func convertAction(c *cli.Context) error {
	if c.NArg() > 0 {
		return cliutil.Usagef("unexpected argument %q (use --input and --output, or the synth command)", c.Args().First())
	}
	for _, name := range []string{"input", "output"} {
		if c.String(name) == "" {
			return cliutil.Usagef("--%s is required (see nvmai-convert --help)", name)
		}
	}
	bits, err := convert.ParseBits(c.String("bits"))
	if err != nil {
		return cliutil.Usagef("%v", err)
	}
	prog := cliutil.NewProgress("converting", c.Bool("quiet"))
	start := time.Now()
	results, err := convert.Run(c.Context, convert.Options{
		Input: c.String("input"), Targets: convert.Targets(c.String("output"), bits),
		Overwrite: c.Bool("overwrite"), ModelID: c.String("model-id"), Repo: c.String("repo"),
		Revision: c.String("revision"), Threads: c.Int("threads"), Progress: prog.Update,
		Notice: func(msg string) {
			if !c.Bool("quiet") {
				fmt.Fprintln(c.App.ErrWriter, msg)
			}
		},
	})
	prog.End(err)
	if err != nil {
		return err
	}
	for _, r := range results {
		fmt.Fprintf(c.App.Writer, "wrote %s (%d-bit, %s, %d resident tensors) in %.1fs\n", r.Dir, r.Bits, r.Manifest.Architecture, len(r.Manifest.Tensors), time.Since(start).Seconds())
	}
	return nil
}
