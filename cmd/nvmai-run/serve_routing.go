package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/nvmai/nvmai/pkg/cliutil"
	nvmodel "github.com/nvmai/nvmai/pkg/model"
	"github.com/nvmai/nvmai/pkg/routing"
	"github.com/nvmai/nvmai/pkg/runtime"
)

// serveRoutingFlags replay realistic routing in serve, for benchmarks on
// random-weight installs (whose router spreads tokens almost uniformly):
// scripts/serve-bench.sh --only parallel --routing synthetic:agent.
func serveRoutingFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "routing", Usage: "benchmarks: every slot takes each token's experts from a synthetic routing `SPEC` (synthetic:agent, synthetic:diverse or synthetic:uniform, optionally :seed=N; slot i draws seed N+i) instead of the router; the CPU and GPU engines (docs/routing.md)"},
		&cli.StringFlag{Name: "routing-trace", Usage: "benchmarks: every slot takes each token's experts from the routing trace `FILE`, slot i reading it from position i × its length ÷ --parallel and starting over at its end, instead of the router; the CPU and GPU engines"},
	}
}

// checkServeRouting refuses routing flags serve cannot apply, before the
// model loads, and turns read-ahead off under replayed routing unless
// --prefetch asks for it (its guesses come from the router, which the
// replay overrides), as bench does.
func checkServeRouting(c *cli.Context) error {
	if !c.IsSet("routing") && !c.IsSet("routing-trace") {
		return nil
	}
	if c.IsSet("models-dir") {
		return cliutil.Usagef("--routing and --routing-trace apply to --model; --models-dir serves each install by its own router")
	}
	if err := checkRoutingFlags(c); err != nil {
		return err
	}
	if !c.IsSet("prefetch") {
		return c.Set("prefetch", "0")
	}
	return nil
}

// serveRouting is what each of n slots replays (nil: the router's own) and
// a line saying so. Each slot replays its own stream, so that the batch's
// sequences do not all ask for the same experts at the same positions:
// with a synthetic spec, its seed plus the slot's index; with a trace, the
// trace from the slot's own offset on, wrapping at its end.
func serveRouting(c *cli.Context, e *runtime.Engine, n int) (func(slot int) nvmodel.RouteOverride, string, error) {
	if !c.IsSet("routing") && !c.IsSet("routing-trace") {
		return nil, "", nil
	}
	geom, err := e.RoutingGeometry()
	if err != nil {
		return nil, "", cliutil.Usagef("%v", err)
	}
	if path := c.String("routing-trace"); path != "" {
		src, err := routing.OpenTrace(path, geom, true)
		if err != nil {
			return nil, "", err
		}
		tokens := src.Trace().Tokens()
		if tokens == 0 {
			return nil, "", cliutil.Usagef("--routing-trace %s holds no positions", path)
		}
		line := fmt.Sprintf("routing replayed from %s (%d positions), slot i from position i × %d, repeating at its end; read-ahead %s", src.Describe(), tokens, tokens/n, prefetchWord(c))
		return func(slot int) nvmodel.RouteOverride { return offsetRoutes{src: src, first: slot * (tokens / n)} }, line, nil
	}
	spec, err := routing.ParseSpec(c.String("routing"))
	if err != nil {
		return nil, "", cliutil.Usagef("--routing: %v", err)
	}
	sources := make([]nvmodel.RouteOverride, n)
	for i := range sources {
		s := spec
		s.Seed += uint64(i)
		if sources[i], err = routing.NewSynthetic(geom, s); err != nil {
			return nil, "", err
		}
	}
	line := fmt.Sprintf("routing replayed from %s, slot i drawing seed %d+i; read-ahead %s", spec, spec.Seed, prefetchWord(c))
	return func(slot int) nvmodel.RouteOverride { return sources[slot] }, line, nil
}

func prefetchWord(c *cli.Context) string {
	if c.Int("prefetch") == 0 {
		return "off"
	}
	return fmt.Sprint(c.Int("prefetch"))
}

// offsetRoutes replays src from position first on: position pos of the
// slot's sequence takes src's position first+pos.
type offsetRoutes struct {
	src   routing.Source
	first int
}

func (o offsetRoutes) Experts(pos, layer int, dst []int) ([]int, error) {
	return o.src.Experts(o.first+pos, layer, dst)
}
