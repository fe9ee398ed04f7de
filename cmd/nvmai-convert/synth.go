package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/nvmai/nvmai/pkg/cliutil"
	"github.com/nvmai/nvmai/pkg/convert"
)

func synthCommand() *cli.Command {
	return &cli.Command{
		Name:  "synth",
		Usage: "write a full-size install with deterministic random weights (no checkpoint needed)",
		UsageText: `nvmai-convert synth --geometry qwen3.5-35b-a3b --bits 4 --output DIR [--layers N] [--seed S] [--sparse]
   nvmai-convert synth --geometry qwen3.5-35b-a3b --bits 4 --output DIR --dry-run   (print the size only)`,
		Description: `Writes an install of the real shape of a known model, filled with random weights drawn from a
fixed seed: the same --seed always writes byte-identical files, whatever --threads. It is for
measuring nvmai (load time, expert streaming, tokens/s) at full scale without downloading a
checkpoint; the model says nothing meaningful. The install passes nvmai-verify --verify-install
and carries a tiny 4103-token tokenizer: generated ids beyond it decode to nothing.

--sparse leaves the routed experts' packed weight codes as file holes (they read as zeros; their
scales, the dense trunk and the tokenizer are written as usual, their biases with a random sign so
the weights stay zero-mean), so an install bigger than the disk fits: the 48-layer 4-bit
qwen3.8-flash-next-125b-a6b takes 10.3 GiB of its 168.3 GiB. It is for speed and memory
measurements of installs bigger than the disk, not for fidelity: kernels read every weight byte
whatever its value, and routing comes from the random router over the hidden state as in any
synthetic install, but the experts compute nothing meaningful, and reading holes from disk costs
no disk I/O, so disk-streaming figures are not honest on it. It needs a file system that keeps
holes (checked before writing).
Geometries: ` + strings.Join(convert.SynthGeometryNames(), ", ") + `. See docs/synthetic.md.`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "geometry", Aliases: []string{"g"}, Usage: "model shape `NAME`: " + strings.Join(convert.SynthGeometryNames(), ", ")},
			&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Usage: "install `DIR` to create"},
			&cli.IntFlag{Name: "bits", Aliases: []string{"b"}, Value: 4, Usage: "width: 4, 8 or 16 (bf16)"},
			cliutil.IntRange(&cli.IntFlag{Name: "layers", Usage: "keep only the first `N` decoder layers (same layer pattern); 0 keeps all", DefaultText: "all"}, 0, 1<<16, "0 = all"),
			&cli.Uint64Flag{Name: "seed", Usage: "random seed; the same seed writes the same bytes"},
			&cli.BoolFlag{Name: "overwrite", Usage: "replace an existing install at --output"},
			cliutil.ThreadsFlag("generator threads; never changes the bytes", "t"),
			&cli.BoolFlag{Name: "sparse", Usage: "routed experts' weight codes as file holes: an install bigger than the disk, for speed and memory measurements, not fidelity (4 or 8 bits)"},
			&cli.BoolFlag{Name: "dry-run", Usage: "print what would be written, its size and its size on disk, write nothing"},
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
		m, disk, err := convert.PlanSynthDisk(opt)
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
		if opt.Sparse {
			fmt.Fprintf(w, " (their codes written as holes)")
		}
		if len(m.NGram) > 0 {
			fmt.Fprintf(w, ", n-gram table %s (sparse: written as a hole)", cliutil.Bytes(ngram))
		}
		fmt.Fprintf(w, "; on disk %s (%d bytes) where holes are kept", cliutil.Bytes(disk), disk)
		fmt.Fprintln(w, "; nothing written")
		if disk < total && opt.Output != "" {
			if dir := filepath.Dir(filepath.Clean(opt.Output)); isDir(dir) {
				if err := convert.CheckHoles(dir); err != nil {
					fmt.Fprintf(w, "warning: %v: the install would take its full %s there\n", err, cliutil.Bytes(total))
					if opt.Sparse {
						return cliutil.Usagef("--sparse needs a file system that keeps holes: %v", err)
					}
				} else {
					fmt.Fprintf(w, "%s keeps holes\n", dir)
				}
			}
		}
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
	fmt.Fprintf(c.App.Writer, "wrote %s (%s, %d layers, %d-bit, seed %d%s): %s (%s on disk) in %.1fs, %s\n",
		res.Dir, opt.Geometry, res.Manifest.Geometry.NumLayers, opt.Bits, opt.Seed, map[bool]string{true: ", sparse"}[opt.Sparse],
		cliutil.Bytes(res.Bytes), cliutil.Bytes(res.DiskBytes), secs, cliutil.Rate(float64(res.Bytes)/max(secs, 1e-9)))
	return nil
}

// synthOptions reads and checks the flags; every mistake is a usage error.
func synthOptions(c *cli.Context) (convert.SynthOptions, error) {
	opt := convert.SynthOptions{
		Geometry: c.String("geometry"), Bits: c.Int("bits"), Output: c.String("output"), Layers: c.Int("layers"),
		Seed: c.Uint64("seed"), Overwrite: c.Bool("overwrite"), Threads: c.Int("threads"), Sparse: c.Bool("sparse"),
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
	if opt.Sparse {
		if _, err := convert.PlanSynth(opt); err != nil {
			return opt, cliutil.Usagef("%v", err)
		}
	}
	return opt, nil
}

func isDir(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.IsDir()
}
