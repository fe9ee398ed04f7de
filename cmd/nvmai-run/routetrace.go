package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/nvmai/nvmai/pkg/cliutil"
	"github.com/nvmai/nvmai/pkg/convert"
	"github.com/nvmai/nvmai/pkg/expertcache"
	"github.com/nvmai/nvmai/pkg/packexperts"
	"github.com/nvmai/nvmai/pkg/routing"
)

// routingOnlyGeometries are shapes the routing statistics were published
// for that nvmai-convert synth cannot build (docs/routing.md).
var routingOnlyGeometries = map[string]routing.Geometry{
	"qwen3-30b-a3b": {Layers: 48, Experts: 128, TopK: 8},
}

func geometryFlags() []cli.Flag {
	names := append(convert.SynthGeometryNames(), "qwen3-30b-a3b")
	return []cli.Flag{
		&cli.StringFlag{Name: "geometry", Aliases: []string{"g"}, Usage: "model shape `NAME` (a MoE one): " + strings.Join(names, ", ")},
		cliutil.IntRange(&cli.IntFlag{Name: "layers", Usage: "MoE `LAYERS` (with --geometry: keep only the first N)"}, 0, routing.MaxLayers, "0 = the geometry's"),
		cliutil.IntRange(&cli.IntFlag{Name: "experts", Usage: "experts per layer, `N` (instead of --geometry)"}, 0, routing.MaxExperts, ""),
		cliutil.IntRange(&cli.IntFlag{Name: "top-k", Usage: "experts per token per layer, `K` (instead of --geometry)"}, 0, routing.MaxTopK, ""),
	}
}

// routeGeometry reads --geometry (named as nvmai-convert synth names
// shapes) or --experts, --top-k and --layers.
func routeGeometry(c *cli.Context) (routing.Geometry, error) {
	name, layers := c.String("geometry"), c.Int("layers")
	if name != "" {
		if c.IsSet("experts") || c.IsSet("top-k") {
			return routing.Geometry{}, cliutil.Usagef("give --geometry or --experts and --top-k, not both")
		}
		if g, ok := routingOnlyGeometries[name]; ok {
			if layers > 0 {
				g.Layers = min(layers, g.Layers)
			}
			return g, nil
		}
		sg, err := convert.LookupSynthGeometry(name, min(layers, 1<<16))
		if err != nil {
			return routing.Geometry{}, cliutil.Usagef("%v", err)
		}
		if sg.Geometry.NumExperts == 0 {
			return routing.Geometry{}, cliutil.Usagef("--geometry %s has no experts; choose a MoE geometry", name)
		}
		return routing.Geometry{Layers: sg.Geometry.NumLayers, Experts: sg.Geometry.NumExperts, TopK: sg.Geometry.NumExpertsPerTok}, nil
	}
	g := routing.Geometry{Layers: layers, Experts: c.Int("experts"), TopK: c.Int("top-k")}
	if g.Layers == 0 || g.Experts == 0 || g.TopK == 0 {
		return g, cliutil.Usagef("give --geometry NAME, or --experts N, --top-k K and --layers L")
	}
	if err := g.Validate(); err != nil {
		return g, cliutil.Usagef("%v", err)
	}
	return g, nil
}

func routeTraceCommand() *cli.Command {
	return &cli.Command{
		Name:  "route-trace",
		Usage: "write a synthetic expert-routing trace, or replay one through cache simulators",
		Description: `Routing traces are in the NVMAI_ROUTE_TRACE format: one line per token position and MoE layer,
"position layer e0 … ek". gen draws one from a regime calibrated to published routing locality;
sim replays one through a per-layer LRU cache and Belady's offline optimum. See docs/routing.md.`,
		Subcommands: []*cli.Command{{
			Name:      "gen",
			Usage:     "write a synthetic routing trace",
			UsageText: "nvmai-run route-trace gen --geometry NAME|--experts N --top-k K --layers L --regime diverse|agent|uniform --tokens N [--seed S] [-o FILE]",
			Description: `The same geometry, regime, token count and seed write the same bytes on every machine.
Without -o the trace goes to stdout; with it, to a temporary file renamed into place when complete.`,
			Flags: append(geometryFlags(),
				&cli.StringFlag{Name: "regime", Usage: "`REGIME`: diverse (varied text), agent (a long agent session) or uniform (no locality)"},
				cliutil.IntRange(&cli.IntFlag{Name: "tokens", Usage: "token positions, `N`"}, 1, 1<<24, ""),
				&cli.Uint64Flag{Name: "seed", Value: 1, Usage: "generator seed `S`"},
				&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Usage: "write to `FILE` instead of stdout"},
			),
			Action: routeTraceGen,
		}, {
			Name:      "sim",
			Usage:     "replay a routing trace through nvmai's expert cache, an LRU and Belady's optimum",
			UsageText: "nvmai-run route-trace sim --trace FILE --geometry NAME|--experts N --top-k K --layers L --slots N[,N…]\n   nvmai-run route-trace sim --trace FILE --geometry NAME --bits 4|8 --ram-budget SIZE[,SIZE…]",
			Description: `Prints, for each cache size, the hit rate of nvmai's expert cache as built (its eviction policy,
replayed without I/O), of a cold per-layer LRU cache and of Belady's offline optimum (the most any
cache of that size can hit on the trace): overall, with the per-layer minimum and maximum, and new
experts per layer per token. Sizes are slots per layer (--slots) or, for a --geometry that
nvmai-convert synth builds, the slots a --ram-budget buys at --bits, as nvmai-run computes them.`,
			Flags: append(geometryFlags(),
				&cli.StringFlag{Name: "trace", Usage: "trace `FILE`"},
				&cli.IntSliceFlag{Name: "slots", Usage: "cache slots per layer, `N` (repeat or comma-separate for several)"},
				&cli.StringSliceFlag{Name: "ram-budget", Usage: "expert budgets, `SIZE` (e.g. 4G,8G,12G), turned into slots per layer as nvmai-run --ram-budget does; needs --geometry and --bits"},
				&cli.IntFlag{Name: "bits", Usage: "expert width for --ram-budget: 4 or 8"},
				cliutil.IntRange(&cli.IntFlag{Name: "from", Usage: "count hits from token position `N` on; earlier positions only warm the caches (a bench's prompt before the decode it measures)"}, 0, 1<<24, "0 = every position"),
			),
			Action: routeTraceSim,
		}},
	}
}

func routeTraceGen(c *cli.Context) error {
	if c.NArg() > 0 {
		return cliutil.Usagef("unexpected argument %q", c.Args().First())
	}
	g, err := routeGeometry(c)
	if err != nil {
		return err
	}
	if c.String("regime") == "" {
		return cliutil.Usagef("--regime is required: diverse, agent or uniform")
	}
	regime, err := routing.ParseRegime(c.String("regime"))
	if err != nil {
		return cliutil.Usagef("--regime: %v", err)
	}
	if !c.IsSet("tokens") {
		return cliutil.Usagef("--tokens N is required")
	}
	t, err := routing.Generate(g, regime, c.Int("tokens"), c.Uint64("seed"))
	if err != nil {
		return cliutil.Usagef("%v", err)
	}
	out := c.String("output")
	if out == "" {
		_, err := t.WriteTo(c.App.Writer)
		return err
	}
	if err := writeFileAtomic(out, t); err != nil {
		return err
	}
	fmt.Fprintf(c.App.ErrWriter, "wrote %s: %d positions of %s, synthetic %s seed=%d\n", out, t.Tokens(), g, regime, c.Uint64("seed"))
	return nil
}

// writeFileAtomic writes t next to path and renames it into place, so a
// failed write leaves no half trace under path.
func writeFileAtomic(path string, t *routing.Trace) (err error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("route-trace gen: %w", err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	w := bufio.NewWriterSize(f, 1<<16)
	if _, err = t.WriteTo(w); err == nil {
		err = w.Flush()
	}
	if err == nil {
		err = f.Chmod(0o644)
	}
	if err == nil {
		err = f.Close()
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("route-trace gen: writing %s: %w", path, err)
	}
	return nil
}

func routeTraceSim(c *cli.Context) error {
	if c.NArg() > 0 {
		return cliutil.Usagef("unexpected argument %q", c.Args().First())
	}
	g, err := routeGeometry(c)
	if err != nil {
		return err
	}
	path := c.String("trace")
	if path == "" {
		return cliutil.Usagef("--trace FILE is required")
	}
	slots, labels, err := simSizes(c, g)
	if err != nil {
		return err
	}
	src, err := routing.OpenTrace(path, g, false)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return cliutil.Usagef("--trace: %v", err)
		}
		return err
	}
	t := src.Trace()
	w := c.App.Writer
	from := c.Int("from")
	if from >= t.Tokens() {
		return cliutil.Usagef("--from %d: the trace has %d positions", from, t.Tokens())
	}
	fmt.Fprintf(w, "%s: %d positions of %s\n", src.Describe(), t.Tokens(), g)
	if from > 0 {
		fmt.Fprintf(w, "hits counted from position %d on (%d positions); the first %d only warm the caches\n", from, t.Tokens()-from, from)
	}
	rows := traceRows(t, g)
	fmt.Fprintf(w, "%-10s %9s  %-21s %-21s %9s  %-21s %9s\n", "size", "residency", "cache hit (range)", "LRU hit (range)", "LRU new", "Belady hit (range)", "Bel. new")
	for i, s := range slots {
		cache, err := simulateCache(rows, g, s, from)
		if err != nil {
			return err
		}
		lru, opt := routing.SimulateLRUFrom(t, s, from), routing.SimulateBeladyFrom(t, s, from)
		fmt.Fprintf(w, "%-10s %8.1f%%  %s %s %9.2f  %s %9.2f\n", labels[i], 100*float64(s)/float64(g.Experts),
			hitRange(cache), hitRange(lru), lru.NewPerLayerToken, hitRange(opt), opt.NewPerLayerToken)
	}
	return nil
}

func hitRange(s routing.Stats) string {
	return fmt.Sprintf("%5.1f%% (%4.1f–%5.1f%%)", 100*s.HitRate, 100*s.LayerMin, 100*s.LayerMax)
}

// simSizes reads --slots or --ram-budget (with --bits) into slots per
// layer, each with the label its row is printed under.
func simSizes(c *cli.Context, g routing.Geometry) (slots []int, labels []string, err error) {
	budgets := c.StringSlice("ram-budget")
	if len(budgets) > 0 {
		if c.IsSet("slots") {
			return nil, nil, cliutil.Usagef("give --slots or --ram-budget, not both")
		}
		bits := c.Int("bits")
		if bits != 4 && bits != 8 {
			return nil, nil, cliutil.Usagef("--ram-budget needs --bits 4 or 8 (the installed expert width)")
		}
		name := c.String("geometry")
		if name == "" || routingOnlyGeometries[name] != (routing.Geometry{}) {
			return nil, nil, cliutil.Usagef("--ram-budget needs a --geometry that nvmai-convert synth builds (%s), to know the expert size", strings.Join(convert.SynthGeometryNames(), ", "))
		}
		sg, err := convert.LookupSynthGeometry(name, 0)
		if err != nil {
			return nil, nil, cliutil.Usagef("%v", err)
		}
		_, stride, err := packexperts.LayoutExperts(sg.Geometry.HiddenSize, sg.Geometry.MoeIntermediateSize, convert.ExpertEncoding(bits))
		if err != nil {
			return nil, nil, err
		}
		for _, b := range budgets {
			n, err := expertcache.ParseSize(b)
			if err != nil {
				return nil, nil, cliutil.Usagef("--ram-budget: %v", err)
			}
			s := min(expertcache.SlotsForBudget(n, stride, g.Layers), g.Experts)
			if s < g.TopK {
				return nil, nil, cliutil.Usagef("--ram-budget %s is below this geometry's minimum of %s at %d bits (%d layers × %d experts × %s)",
					b, cliutil.Bytes(expertcache.MinBudget(stride, g.Layers, g.TopK)), bits, g.Layers, g.TopK, cliutil.Bytes(stride))
			}
			slots = append(slots, s)
			labels = append(labels, fmt.Sprintf("%s=%d", b, s))
		}
		return slots, labels, nil
	}
	if c.IsSet("bits") {
		return nil, nil, cliutil.Usagef("--bits goes with --ram-budget")
	}
	slots = c.IntSlice("slots")
	if len(slots) == 0 {
		return nil, nil, cliutil.Usagef("--slots N or --ram-budget SIZE is required (slots per layer, several as --slots 27,40)")
	}
	for _, s := range slots {
		if s < g.TopK || s > g.Experts {
			return nil, nil, cliutil.Usagef("--slots %d is out of range: use %d (top-k) to %d (experts)", s, g.TopK, g.Experts)
		}
		labels = append(labels, fmt.Sprint(s))
	}
	return slots, labels, nil
}

// traceRows lists t's requests position by position, layer by layer, as
// expertcache.SimulateHitRate takes them.
func traceRows(t *routing.Trace, g routing.Geometry) [][]int {
	rows := make([][]int, 0, t.Tokens()*g.Layers)
	for tok := range t.Tokens() {
		for l := range g.Layers {
			row := t.Row(tok, l)
			ids := make([]int, len(row))
			for i, e := range row {
				ids[i] = int(e)
			}
			rows = append(rows, ids)
		}
	}
	return rows
}

// simulateCache replays rows through the expert cache's own placement
// (the default policy), per layer, and summarizes it as the routing
// simulators do, counting from token position from on. The placement is
// causal, so the hits from there on are the whole replay's less those of
// the first from positions replayed alone.
func simulateCache(rows [][]int, g routing.Geometry, slots, from int) (routing.Stats, error) {
	st := routing.Stats{Slots: slots, LayerMin: 1}
	var hits, total int64
	for l := range g.Layers {
		var layer [][]int
		for i := l; i < len(rows); i += g.Layers {
			layer = append(layer, rows[i])
		}
		r, err := expertcache.SimulateHitRate(layer, 1, slots, expertcache.PolicyDefault)
		if err != nil {
			return st, fmt.Errorf("route-trace sim: layer %d: %w", l, err)
		}
		if from > 0 {
			warm, err := expertcache.SimulateHitRate(layer[:from], 1, slots, expertcache.PolicyDefault)
			if err != nil {
				return st, fmt.Errorf("route-trace sim: layer %d: %w", l, err)
			}
			r.Hits -= warm.Hits
			r.Misses -= warm.Misses
		}
		hits += r.Hits
		total += r.Hits + r.Misses
		st.LayerMin = min(st.LayerMin, r.HitRate())
		st.LayerMax = max(st.LayerMax, r.HitRate())
	}
	st.Accesses, st.Hits = total, hits
	if total > 0 {
		st.HitRate = float64(hits) / float64(total)
		st.NewPerLayerToken = float64(total-hits) / float64(len(rows)-from*g.Layers)
	}
	return st, nil
}
