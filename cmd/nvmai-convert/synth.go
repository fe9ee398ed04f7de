package main

import (
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/nvmai/nvmai/pkg/cliutil"
	"github.com/nvmai/nvmai/pkg/convert"
)

func synthCommand() *cli.Command {
	return &cli.Command{
		Name:  "synth",
		Usage: "write a full-size install with deterministic random weights (no checkpoint needed)",
		UsageText: `nvmai-convert synth --geometry qwen3.5-35b-a3b --bits 4 --output DIR [--layers N] [--seed S]
   nvmai-convert synth --geometry qwen3.5-35b-a3b --bits 4 --output DIR --dry-run   (print the size only)`,
		Description: `Writes an install of the real shape of a known model, filled with random weights drawn from a
fixed seed: the same --seed always writes byte-identical files, whatever --threads. It is for
measuring nvmai (load time, expert streaming, tokens/s) at full scale without downloading a
checkpoint; the model says nothing meaningful. The install passes nvmai-verify --verify-install
and carries a tiny 4103-token tokenizer: generated ids beyond it decode to nothing.
Geometries: ` + strings.Join(convert.SynthGeometryNames(), ", ") + `. See docs/synthetic.md.`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "geometry", Aliases: []string{"g"}, Usage: "model shape `NAME`: " + strings.Join(convert.SynthGeometryNames(), ", ")},
			&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Usage: "install `DIR` to create"},
			&cli.IntFlag{Name: "bits", Aliases: []string{"b"}, Value: 4, Usage: "width: 4, 8 or 16 (bf16)"},
			cliutil.IntRange(&cli.IntFlag{Name: "layers", Usage: "keep only the first `N` decoder layers (same layer pattern); 0 keeps all", DefaultText: "all"}, 0, 1<<16, "0 = all"),
			&cli.Uint64Flag{Name: "seed", Usage: "random seed; the same seed writes the same bytes"},
			&cli.BoolFlag{Name: "overwrite", Usage: "replace an existing install at --output"},
			cliutil.ThreadsFlag("generator threads; never changes the bytes", "t"),
			&cli.BoolFlag{Name: "dry-run", Usage: "print what would be written and its size, write nothing"},
			&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "no progress output"},
		},
		Action: synthAction,
	}
}

func synthAction(c *cli.Context) error {
	opt, err := synthOptions(c)
	if err != nil {
		return err
	}
	if c.Bool("dry-run") {
		m, err := convert.PlanSynth(opt)
		if err != nil {
			return err
		}
		var total, resident, experts, ngram int64
		for _, f := range m.Files {
			total += f.Size
			switch {
			case f.Name == "resident.bin":
				resident = f.Size
			case strings.HasPrefix(f.Name, "experts/"):
				experts = f.Size
			case strings.HasPrefix(f.Name, "ngram/"):
				ngram += f.Size
			}
		}
		w := c.App.Writer
		fmt.Fprintf(w, "%s, %d-bit, %d layers: %s in %d files (%d bytes): resident.bin %s", opt.Geometry, opt.Bits,
			m.Geometry.NumLayers, cliutil.Bytes(total), len(m.Files), total, cliutil.Bytes(resident))
		if m.Experts != nil {
			fmt.Fprintf(w, ", %d expert files of %s", len(m.Experts.Layers), cliutil.Bytes(experts))
		}
		if len(m.NGram) > 0 {
			fmt.Fprintf(w, ", n-gram table %s (sparse: written as a hole)", cliutil.Bytes(ngram))
		}
		fmt.Fprintln(w, "; nothing written")
		return nil
	}
	prog := cliutil.NewProgress("writing", c.Bool("quiet"))
	opt.Progress = prog.Update
	res, err := convert.Synth(c.Context, opt)
	prog.End(err)
	if err != nil {
		return err
	}
	secs := res.Elapsed.Seconds()
	fmt.Fprintf(c.App.Writer, "wrote %s (%s, %d layers, %d-bit, seed %d): %s in %.1fs, %s\n",
		res.Dir, opt.Geometry, res.Manifest.Geometry.NumLayers, opt.Bits, opt.Seed,
		cliutil.Bytes(res.Bytes), secs, cliutil.Rate(float64(res.Bytes)/max(secs, 1e-9)))
	return nil
}

// synthOptions reads and checks the flags; every mistake is a usage error.
func synthOptions(c *cli.Context) (convert.SynthOptions, error) {
	opt := convert.SynthOptions{
		Geometry: c.String("geometry"), Bits: c.Int("bits"), Output: c.String("output"), Layers: c.Int("layers"),
		Seed: c.Uint64("seed"), Overwrite: c.Bool("overwrite"), Threads: c.Int("threads"),
	}
	switch {
	case c.NArg() > 0:
		return opt, cliutil.Usagef("unexpected argument %q (use --geometry and --output)", c.Args().First())
	case opt.Geometry == "":
		return opt, cliutil.Usagef("--geometry is required; choose one of %s", strings.Join(convert.SynthGeometryNames(), ", "))
	case opt.Output == "" && !c.Bool("dry-run"):
		return opt, cliutil.Usagef("--output is required: the install directory to create")
	case opt.Bits != 4 && opt.Bits != 8 && opt.Bits != 16:
		return opt, cliutil.Usagef("--bits %d is not supported: choose 4, 8 or 16", opt.Bits)
	}
	if _, err := convert.LookupSynthGeometry(opt.Geometry, opt.Layers); err != nil {
		return opt, cliutil.Usagef("%v", err)
	}
	return opt, nil
}
