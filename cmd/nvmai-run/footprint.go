package main

import (
	"fmt"
	"sync"

	"github.com/urfave/cli/v2"

	"github.com/nvmai/nvmai/pkg/cliutil"
	nvmodel "github.com/nvmai/nvmai/pkg/model"
	"github.com/nvmai/nvmai/pkg/runtime"
)

// kvBits is --kv-bits: the KV width of both engines' sessions.
func kvBits(c *cli.Context) int { return c.Int("kv-bits") }

// checkKVFlags validates --kv-bits and --rope-scaling before anything loads.
func checkKVFlags(c *cli.Context) error {
	if !nvmodel.ValidKVBits(c.Int("kv-bits")) {
		return cliutil.Usagef("--kv-bits %d: use 8, 16 or 32", c.Int("kv-bits"))
	}
	switch c.String("rope-scaling") {
	case nvmodel.RopeNone, nvmodel.RopeYaRN:
	default:
		return cliutil.Usagef("--rope-scaling %q: use none or yarn", c.String("rope-scaling"))
	}
	if c.Int("max-context") < 0 {
		return cliutil.Usagef("--max-context must be positive")
	}
	return nil
}

// footprints holds each loaded engine's footprint until its command has
// checked its own arguments and prints it (printFootprint), so a usage
// error stays the one line on stderr.
var footprints sync.Map // *runtime.Engine → runtime.Footprint

// printFootprint prints e's memory footprint as one line on stderr.
func printFootprint(c *cli.Context, e *runtime.Engine) {
	if f, ok := footprints.LoadAndDelete(e); ok {
		fmt.Fprintln(c.App.ErrWriter, f)
	}
}

// reportFootprint computes the process's memory footprint and refuses one
// that an explicit --max-context or --ram-budget makes larger than the
// machine, unless --force.
func reportFootprint(c *cli.Context, e *runtime.Engine, budget int64) error {
	f, err := runtime.ComputeFootprint(e.Install, runtime.FootprintOptions{
		Experts: runtime.ExpertOptions{Budget: budget, Slots: c.Int("expert-cache-slots")}, Device: engineDevice(c), KVBits: kvBits(c),
		MaxContext: c.Int("max-context"), RopeScaling: c.String("rope-scaling"), Threads: c.Int("threads"),
	})
	if err != nil {
		return cliutil.Usagef("%v", err)
	}
	footprints.Store(e, f)
	if !(c.IsSet("max-context") || c.IsSet("ram-budget")) || c.Bool("force") {
		return nil
	}
	total, _ := machineMemory()
	if err := f.CheckFits(total); err != nil {
		return cliutil.Usagef("%v", err)
	}
	return nil
}
