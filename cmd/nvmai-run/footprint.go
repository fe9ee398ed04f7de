package main

import (
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/nvmai/nvmai/pkg/cliutil"
	"github.com/nvmai/nvmai/pkg/expertcache"
	"github.com/nvmai/nvmai/pkg/runtime"
	"github.com/nvmai/nvmai/pkg/runtime/qwen35"
)

// checkKVFlags validates --kv-bits and --rope-scaling before anything loads.
func checkKVFlags(c *cli.Context) error {
	if !qwen35.ValidKVBits(c.Int("kv-bits")) {
		return cliutil.Usagef("--kv-bits %d: use 8, 16 or 32", c.Int("kv-bits"))
	}
	switch c.String("rope-scaling") {
	case "none", qwen35.YaRN:
	default:
		return cliutil.Usagef("--rope-scaling %q: use none or yarn", c.String("rope-scaling"))
	}
	if c.Int("max-context") < 0 {
		return cliutil.Usagef("--max-context must be positive")
	}
	return nil
}

// reportFootprint prints the process's memory footprint (one line, stderr)
// and refuses one that an explicit --max-context or --ram-budget makes
// larger than the machine, unless --force.
func reportFootprint(c *cli.Context, e *runtime.Engine, budget int64) error {
	f, err := runtime.ComputeFootprint(e.Install, runtime.FootprintOptions{
		Experts: runtime.ExpertOptions{Budget: budget, Slots: c.Int("expert-cache-slots")}, KVBits: c.Int("kv-bits"),
		MaxContext: c.Int("max-context"), RopeScaling: c.String("rope-scaling"), Threads: c.Int("threads"),
	})
	if err != nil {
		return cliutil.Usagef("%v", err)
	}
	fmt.Fprintln(os.Stderr, f)
	if !(c.IsSet("max-context") || c.IsSet("ram-budget")) || c.Bool("force") {
		return nil
	}
	total, _ := expertcache.MemTotal()
	if err := f.CheckFits(total); err != nil {
		return cliutil.Usagef("%v", err)
	}
	return nil
}
