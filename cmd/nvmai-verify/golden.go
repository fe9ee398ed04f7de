package main

import (
	"fmt"
	"io"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/nvmai/nvmai/pkg/cliutil"
	_ "github.com/nvmai/nvmai/pkg/gpu"           // --engine gpu: the 35B-A3B's GPU engine registers itself
	_ "github.com/nvmai/nvmai/pkg/gpu/qwen38gpu" // and qwen4_exp's
	"github.com/nvmai/nvmai/pkg/model"
	"github.com/nvmai/nvmai/pkg/verify"
)

func goldenCommand() *cli.Command {
	return &cli.Command{
		Name:      "golden",
		Usage:     "compare fixed greedy generations with the stored baselines (the release gate)",
		UsageText: "nvmai-verify golden --models-dir DIR [--golden-dir benchmark/golden] [--targets FILE] [--only NAME,...] [--record [--force]] [--engine cpu|gpu] [--json]",
		Description: `For every target declared in GOLDEN_DIR/targets.json (the embedded model at 4, 8 and 16 bits,
and with "registry": true every registry model at each width), runs its prompt greedily for exactly
its number of tokens on MODELS_DIR/INSTALL and compares the text byte for byte with
GOLDEN_DIR/TARGET.txt. A target whose install is absent is NOT CHECKED: listed, never skipped
silently. An installed model (a directory holding manifest.json) that no target covers fails the
gate unless targets.json lists it under not_golden with its reason. The models directory is
fingerprinted before and after; any change fails the gate. Nothing is downloaded, converted or
written there. --record writes missing baselines and checks the others (never writes over one
without --force). --only runs just the named targets and does not judge coverage (scripts/demo.sh
checks the embedded model's three that way). --engine gpu runs the targets on the GPU engine and
checks its text against the same baselines (the CPU engine's; --record needs --engine cpu).
Exit status 0 when the gate passes, 1 when it fails, 2 for a bad command line.`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "models-dir", Usage: "`DIR` holding the installs (never written)"},
			&cli.StringFlag{Name: "golden-dir", Value: filepath.Join("benchmark", "golden"), Usage: "`DIR` holding the baselines"},
			&cli.StringFlag{Name: "targets", Usage: "targets `FILE` (default GOLDEN_DIR/targets.json)"},
			&cli.StringSliceFlag{Name: "only", Usage: "run only the targets `NAME,...`; coverage is not judged"},
			&cli.BoolFlag{Name: "record", Usage: "write a baseline for every target with an install and none recorded yet; check the rest"},
			&cli.BoolFlag{Name: "force", Usage: "with --record, replace existing baselines"},
			&cli.BoolFlag{Name: "json", Usage: "print the report as JSON on stdout"},
			cliutil.IntRange(&cli.IntFlag{Name: "threads", Value: runtime.NumCPU(), Usage: "compute threads (the text does not depend on it)"}, 1, cliutil.MaxThreads, ""),
			&cli.StringFlag{Name: "engine", Value: "cpu", Usage: "the engine the targets run on: cpu, or gpu (an NVIDIA GPU; checks the GPU engine against the CPU engine's baselines)"},
			&cli.StringFlag{Name: "commit", Value: buildCommit(), Usage: "commit recorded in new baselines (informational)"},
		},
		Action: goldenAction,
	}
}

// buildCommit is the VCS revision the binary was built from, when recorded.
func buildCommit() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				return s.Value
			}
		}
	}
	return "unknown"
}

func goldenAction(c *cli.Context) error {
	if c.NArg() > 0 {
		return cliutil.Usagef("unexpected argument %q", c.Args().First())
	}
	if c.String("models-dir") == "" {
		return cliutil.Usagef("--models-dir DIR is required (the directory holding the installs)")
	}
	if c.Bool("force") && !c.Bool("record") {
		return cliutil.Usagef("--force only applies to --record")
	}
	device := strings.ToLower(c.String("engine"))
	if devices := model.Devices(); !slices.Contains(devices, device) {
		return cliutil.Usagef("--engine %q: want one of %s", c.String("engine"), strings.Join(devices, ", "))
	}
	if device != model.CPU && c.Bool("record") {
		return cliutil.Usagef("--record needs --engine cpu: baselines are the CPU engine's text, which --engine %s is checked against", device)
	}
	targetsPath := c.String("targets")
	if targetsPath == "" {
		targetsPath = filepath.Join(c.String("golden-dir"), verify.TargetsFile)
	}
	out := c.App.Writer
	ts, err := verify.ReadTargets(targetsPath)
	if err != nil {
		return notRun(c, c.String("models-dir"), err)
	}
	opt := verify.GateOptions{
		ModelsDir: c.String("models-dir"), GoldenDir: c.String("golden-dir"), Targets: ts,
		Only: c.StringSlice("only"), Record: c.Bool("record"), Force: c.Bool("force"), Threads: c.Int("threads"), Device: device, Commit: c.String("commit"),
	}
	if !c.Bool("json") {
		opt.OnResult = func(r verify.TargetResult) { printResult(out, r) }
	}
	rep, err := verify.Gate(c.Context, opt)
	if err != nil {
		return notRun(c, c.String("models-dir"), err)
	}
	return outcome(c, rep.OK(), struct {
		OK bool `json:"ok"`
		*verify.GateReport
	}{rep.OK(), rep}, func(w io.Writer) { printGateSummary(w, rep) }, "golden gate failed")
}

// printResult prints one target's line. Release tooling greps the
// "NOT CHECKED " prefix: keep it stable.
func printResult(w io.Writer, r verify.TargetResult) {
	switch r.Status {
	case verify.StatusPassed:
		fmt.Fprintf(w, "PASS %s (%s)\n", r.Target, r.Install)
	case verify.StatusRecorded:
		fmt.Fprintf(w, "RECORDED %s -> %s\n", r.Target, r.Baseline)
	case verify.StatusNotChecked:
		fmt.Fprintf(w, "NOT CHECKED %s: %s\n", r.Target, r.Problem)
	default:
		fmt.Fprintf(w, "FAIL %s: %s\n", r.Target, r.Problem)
	}
}

func printGateSummary(w io.Writer, rep *verify.GateReport) {
	for _, in := range rep.Uncovered {
		fmt.Fprintf(w, "UNCOVERED %s: installed, but no golden target checks it; declare a target in targets.json or list it under not_golden with its reason\n", in)
	}
	for _, e := range rep.Excused {
		fmt.Fprintf(w, "EXCUSED %s: %s\n", e.Install, e.Reason)
	}
	for _, ch := range rep.ModelsDirChanges {
		fmt.Fprintf(w, "CHANGED %s\n", ch)
	}
	verdict := "passed"
	if !rep.OK() {
		verdict = "FAILED"
	}
	uncovered := fmt.Sprintf("%d uncovered", len(rep.Uncovered))
	if !rep.CoverageChecked {
		uncovered = "coverage not checked (--only)"
	}
	fmt.Fprintf(w, "golden gate %s: %d passed, %d failed, %d recorded, %d not checked, %s, %d change(s) to %s\n",
		verdict, rep.Passed, rep.Failed, rep.Recorded, len(rep.NotChecked), uncovered, len(rep.ModelsDirChanges), rep.ModelsDir)
	if len(rep.NotChecked) > 0 {
		fmt.Fprintf(w, "not checked: %s\n", strings.Join(rep.NotChecked, ", "))
	}
	if len(rep.Installs) == 0 {
		fmt.Fprintf(w, "no installs found under %s (an install is a directory holding manifest.json): is it the directory that holds them?\n", rep.ModelsDir)
	}
}
