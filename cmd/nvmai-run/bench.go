package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/nvmai/nvmai/pkg/cliutil"
	nvmodel "github.com/nvmai/nvmai/pkg/model"
	"github.com/nvmai/nvmai/pkg/routing"
	"github.com/nvmai/nvmai/pkg/runtime"
)

func benchCommand() *cli.Command {
	return &cli.Command{
		Name:      "bench",
		Usage:     "measure prefill and decode speed on fixed prompts (greedy)",
		UsageText: "nvmai-run bench --model DIR [--tokens 512] [--prompt-tokens N] [--routing-trace FILE [--routing-trace-wrap] | --routing synthetic:REGIME[:seed=N]] [--json] [--cpuprofile FILE]",
		Description: `Generates --tokens tokens greedily (EOS ignored) from each fixed prompt (counting, prose,
code) in a fresh session and reports per prompt prefill and decode tok/s, the decode's expert-cache
hit rate, bytes read from disk per token and peak RSS, then the median across prompts, and how
many experts per token were read ahead on a guess (--prefetch) and how many of those were used. It also
measures, in the same process, the plain memory-read rate (1 … --threads goroutines summing a
512 MiB buffer) and the raw read rate of random whole experts (the cache's I/O mode), and relates decode to them.
On a qwen4_exp install it adds the n-gram table reads per decode step (rows, bytes read from SSD,
the time the PLE layer waited for them) and the prefill's n-gram bytes.
Last it splits the decode steps by phase (projections, recurrences, attention, router, experts,
lm_head …): each phase's share of a step and the rate it reads its weights or state at.
Random-weight installs route almost uniformly, the worst case for the expert cache: --routing-trace
replays a recorded trace (NVMAI_ROUTE_TRACE's format) and --routing a synthetic regime calibrated to
published locality (docs/routing.md); each prompt token and decode step then takes its experts per
layer from it, the rest of the forward unchanged, and read-ahead is off unless --prefetch asks for it
(its guesses come from the router, which the replay overrides). The report names the routing source and adds the
decode's hit rate of the worst and best layer, the experts per layer per step read on demand, and
the layers per step that waited for a read.`,
		Flags: append(engineFlags(),
			cliutil.IntRange(&cli.IntFlag{Name: "tokens", Value: 512, Usage: "tokens to generate per prompt (N tokens are N-1 decode steps: the first comes from the prefill)"}, 2, maxContextCeiling, "2 = one decode step"),
			cliutil.IntRange(&cli.IntFlag{Name: "prompt-tokens", Usage: "repeat or cut every prompt to exactly `N` tokens", DefaultText: "the prompt's own length"}, 0, maxContextCeiling, ""),
			&cli.StringFlag{Name: "prompt-ids", Usage: "one prompt of comma-separated token `IDS` instead of the fixed prompts (scripts/vs-llamacpp.sh gives both engines the same ids)"},
			cliutil.IntRange(&cli.IntFlag{Name: "prefill-chunk", Usage: "prefill in passes of `N` tokens", DefaultText: "as long as the pass scratch allows: up to ~2,800 tokens with every expert resident, longer beside a streaming cache (docs/prefill.md)"}, 0, maxContextCeiling, ""),
			cliutil.IntRange(&cli.IntFlag{Name: "warmup", Usage: "first prefill `N` tokens in a throwaway session, so the expert cache starts warm"}, 0, maxContextCeiling, ""),
			&cli.BoolFlag{Name: "json", Usage: "print the report as one JSON object"},
			&cli.BoolFlag{Name: "kv", Usage: "print one line of key=value pairs (labels and medians), for scripts"},
			&cli.StringFlag{Name: "cpuprofile", Usage: "write a CPU profile of the first prompt's decode to `FILE`"},
			&cli.StringFlag{Name: "prefill-cpuprofile", Usage: "write a CPU profile of the first prompt's prefill to `FILE`"},
			&cli.BoolFlag{Name: "skip-bandwidth", Usage: "do not measure the memory and disk read rates"},
			&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "no progress lines on stderr"},
			cliutil.IntRange(&cli.IntFlag{Name: "fill-context", Usage: "fill the KV cache with synthetic rows so each prompt's context ends at `N` tokens (measures memory and attention cost, not quality)"}, 0, maxContextCeiling, ""),
			&cli.StringFlag{Name: "routing-trace", Usage: "take every token's experts per layer from the routing trace `FILE` (\"position layer e0 … ek\" lines, NVMAI_ROUTE_TRACE's format; each prompt replays it from its first token) instead of the router (the CPU and GPU engines)"},
			&cli.BoolFlag{Name: "routing-trace-wrap", Usage: "repeat the --routing-trace file when a prompt needs more positions than it has (the report says so), instead of failing"},
			&cli.StringFlag{Name: "routing", Usage: "take every token's experts from a synthetic routing `SPEC`: synthetic:diverse, synthetic:agent or synthetic:uniform, optionally :seed=N (default seed 1; docs/routing.md)", DefaultText: "the router's own"},
		),
		Action: benchAction,
	}
}

func benchAction(c *cli.Context) error {
	if c.NArg() > 0 {
		return cliutil.Usagef("unexpected argument %q", c.Args().First())
	}
	if err := cliutil.Exclusive(c, "json", "kv"); err != nil {
		return err
	}
	if err := checkRoutingFlags(c); err != nil {
		return err
	}
	if (c.IsSet("routing-trace") || c.IsSet("routing")) && !c.IsSet("prefetch") {
		// The read-ahead guesses come from the model's router, which replayed
		// routing overrides: on a trace they would only waste reads and slots.
		if err := c.Set("prefetch", "0"); err != nil {
			return err
		}
	}
	e, err := loadEngine(c)
	if err != nil {
		return err
	}
	defer e.Close()
	src, err := benchRouting(c, e)
	if err != nil {
		return err
	}
	opt := runtime.BenchOptions{Tokens: c.Int("tokens"), PromptTokens: c.Int("prompt-tokens"), Warmup: c.Int("warmup"), CPUProfile: c.String("cpuprofile"),
		PrefillCPUProfile: c.String("prefill-cpuprofile"), KVBits: kvBits(c), FillContext: c.Int("fill-context"), PrefillChunk: c.Int("prefill-chunk"),
		Routing: src}
	if c.Bool("skip-bandwidth") {
		opt.MemBandwidthBytes, opt.DiskReads = -1, -1
	}
	if !c.Bool("quiet") {
		printFootprint(c, e)
		opt.OnPrompt = func(i, n int, name string, run *runtime.BenchRun) {
			printBenchProgress(c.App.ErrWriter, i, n, name, run)
		}
	}
	if c.IsSet("prompt-ids") {
		ids, err := parseIDs(c.String("prompt-ids"))
		if err != nil {
			return err
		}
		if err := checkIDs(e, ids); err != nil {
			return err
		}
		opt.Prompts = []runtime.BenchPrompt{{Name: "ids", IDs: ids}}
	}
	r, err := e.Bench(c.Context, opt)
	if errors.Is(err, context.Canceled) {
		return &cliutil.InterruptedError{Msg: "interrupted; no report (each prompt's line above is what was measured)"}
	}
	if err != nil {
		return err
	}
	if err := gpuReplayFigures(e, r, src); err != nil {
		fmt.Fprintf(c.App.ErrWriter, "bench: the GPU's replay figures: %v\n", err)
	}
	w := c.App.Writer
	switch {
	case c.Bool("json"):
		enc := json.NewEncoder(w)
		enc.SetIndent("", " ")
		return enc.Encode(r)
	case c.Bool("kv"):
		printBenchKV(w, r)
		return nil
	}
	printBench(w, r)
	return nil
}

// checkRoutingFlags refuses, before the model loads, routing flags that
// cannot go together.
func checkRoutingFlags(c *cli.Context) error {
	if err := cliutil.Exclusive(c, "routing-trace", "routing"); err != nil {
		return err
	}
	if c.Bool("routing-trace-wrap") && !c.IsSet("routing-trace") {
		return cliutil.Usagef("--routing-trace-wrap repeats a --routing-trace file; give one")
	}
	if c.IsSet("routing") {
		if _, err := routing.ParseSpec(c.String("routing")); err != nil {
			return cliutil.Usagef("--routing: %v", err)
		}
	}
	// The CPU and GPU engines both replay (qwen3_5_moe and qwen4_exp); an
	// engine whose states cannot is refused once loaded (runtime's
	// canOverrideRouting), saying so.
	return nil
}

// benchRouting opens the routing source the flags name for e's geometry
// (nil: the router's own).
func benchRouting(c *cli.Context, e *runtime.Engine) (routing.Source, error) {
	if !c.IsSet("routing-trace") && !c.IsSet("routing") {
		return nil, nil
	}
	geom, err := e.RoutingGeometry()
	if err != nil {
		return nil, err
	}
	if c.IsSet("routing-trace") {
		return routing.OpenTrace(c.String("routing-trace"), geom, c.Bool("routing-trace-wrap"))
	}
	spec, err := routing.ParseSpec(c.String("routing"))
	if err != nil {
		return nil, cliutil.Usagef("--routing: %v", err)
	}
	return routing.NewSynthetic(geom, spec)
}

// gpuReplayFigures adds to the GPU section, when the GPU engine streamed
// its experts under a replayed routing, the VRAM hit rate beside a
// simulated per-layer LRU's on the positions the prompts decoded, and the
// copy wait measured again under that routing (docs/gpu.md). The section
// does it (pkg/gpu's BenchInfo.AddReplayFigures): commands reach the GPU
// engine only through interfaces, importing it blank.
func gpuReplayFigures(e *runtime.Engine, r *runtime.BenchReport, src routing.Source) error {
	f, ok := r.GPU.(interface {
		AddReplayFigures(m nvmodel.Model, src routing.Source, desc string, geom routing.Geometry, runs []routing.BenchRun) error
	})
	if src == nil || !ok || len(r.Runs) == 0 {
		return nil
	}
	geom, err := e.RoutingGeometry()
	if err != nil {
		return err
	}
	runs := make([]routing.BenchRun, len(r.Runs))
	for i, run := range r.Runs {
		runs[i] = routing.BenchRun{PromptTokens: run.PromptTokens, Generated: run.Generated, HitRate: run.HitRate}
	}
	return f.AddReplayFigures(e.Model(), src, r.Routing, geom, runs)
}

// printBenchProgress writes one line as each prompt starts and ends.
func printBenchProgress(w io.Writer, i, n int, name string, run *runtime.BenchRun) {
	if run == nil {
		fmt.Fprintf(w, "bench: prompt %d of %d (%s) …\n", i+1, n, name)
		return
	}
	fmt.Fprintf(w, "bench: prompt %d of %d (%s): prefill %.1f tok/s, decode %.1f tok/s over %s\n",
		i+1, n, name, run.PrefillTokS, run.DecodeTokS, plural(max(run.Generated-1, 0), "step"))
}

func printBench(w io.Writer, r *runtime.BenchReport) {
	fmt.Fprintf(w, "engine %s | %s (%s), %d layers, %d-bit | budget %s (%d/%s per layer, %s I/O × %d, read-ahead %d) | threads %d | %s\n",
		r.Engine, r.Model, r.ModelID, r.Layers, r.Width, cliutil.Bytes(r.BudgetBytes), r.SlotsPerLayer, plural(r.Experts, "slot"),
		r.IOMode, r.IOThreads, r.Prefetch, r.Threads, r.CPU)
	fmt.Fprintf(w, "%-9s %6s %5s %9s %9s %6s %10s %12s %8s %10s | %11s %12s %12s\n",
		"prompt", "tokens", "gen", "prefill/s", "decode/s", "hit", "read/tok", "read/s", "io wait", "peak RSS",
		"prefill hit", "prefill read", "prefill wait")
	for _, run := range append(r.Runs, r.Median) {
		fmt.Fprintf(w, "%-9s %6d %5d %9.2f %9.2f %5.1f%% %10s %12s %6.1fms %10s | %10.1f%% %12s %11.2fs\n",
			run.Prompt, run.PromptTokens, run.Generated, run.PrefillTokS, run.DecodeTokS, 100*run.HitRate,
			cliutil.Bytes(int64(run.BytesPerToken)), cliutil.Rate(run.ReadRate),
			1e3*run.IOWaitPerTok, cliutil.Bytes(run.PeakRSS),
			100*run.PrefillHitRate, cliutil.Bytes(run.PrefillBytesRead), run.PrefillIOWait)
	}
	fmt.Fprintf(w, "decode/s counts decode steps: %d generated tokens are %s (the first comes from the prefill); read/tok is per step\n",
		r.Median.Generated, plural(max(r.Median.Generated-1, 0), "step"))
	printRouting(w, r)
	if g, ok := r.GPU.(interface{ Summary() []string }); ok {
		for _, line := range g.Summary() {
			fmt.Fprintln(w, line)
		}
	}
	if m := r.Median; m.GuessesPerToken > 0 {
		fmt.Fprintf(w, "read ahead on a guess (--prefetch): %.1f experts per decode token, %.0f%% of them then used\n", m.GuessesPerToken, 100*m.GuessesUsed)
	}
	printNgram(w, r)
	printPrefillLimits(w, r)
	fmt.Fprintf(w, "compute pool hand-offs per decode step: %.0f (parked waits: %.0f)\n", r.Median.HandoffsPerToken, r.Median.ParksPerToken)
	if r.HugePageBytes >= 0 {
		fmt.Fprintf(w, "huge pages back %s of the process's memory (NVMAI_HUGEPAGES=0 turns them off)\n", cliutil.Bytes(r.HugePageBytes))
	}
	fmt.Fprintf(w, "per decode step: weights %s + state %s → %s at the median decode rate (weights alone %s)\n",
		cliutil.Bytes(r.WeightBytesPerToken), cliutil.Bytes(int64(r.Median.StateBytesPerToken)),
		cliutil.Rate(r.ReadRate), cliutil.Rate(r.WeightRate))
	for t := 1; t <= r.Threads; t++ {
		if v, ok := r.WeightMemRead[t]; ok {
			b := r.WeightMemReadBest[t]
			fmt.Fprintf(w, "plain read of the weights' own memory as a step reads it, %s: median %s, best %s (decode's read rate = %.0f%% of the median, %.0f%% of the best)\n",
				plural(t, "thread"), cliutil.Rate(v), cliutil.Rate(b), 100*r.ReadRate/v, 100*r.ReadRate/b)
		}
	}
	for t := 1; t <= r.Threads; t++ {
		if v, ok := r.MemRead[t]; ok {
			b := r.MemReadBest[t]
			fmt.Fprintf(w, "plain read of a fresh 512 MiB buffer, %s: median %s, best %s (decode's read rate = %.0f%% of the median, %.0f%% of the best)\n",
				plural(t, "thread"), cliutil.Rate(v), cliutil.Rate(b), 100*r.ReadRate/v, 100*r.ReadRate/b)
		}
	}
	if r.DiskRead > 0 {
		fmt.Fprintf(w, "raw %s reads of random experts × %d: %s; decode's disk time per step ÷ measured time per step = %.2f\n",
			r.IOMode, r.IOThreads, cliutil.Rate(r.DiskRead), r.DiskBound)
	}
	printPhases(w, r.Phases)
}

// printRouting names the routing source and, per prompt, the decode's
// spread of hit rates across layers, the experts per layer per step read
// on demand and the layers per step that waited for a read.
func printRouting(w io.Writer, r *runtime.BenchReport) {
	fmt.Fprintf(w, "routing: %s", r.Routing)
	if r.RoutingWrapped {
		fmt.Fprint(w, " (wrapped: the trace repeated to cover a prompt)")
	}
	fmt.Fprintln(w)
	if r.Routing != runtime.UniformRouting && r.Prefetch > 0 {
		fmt.Fprintf(w, "note: the read-ahead guesses (--prefetch %d) still come from the model's router, which the replayed routing overrides; without --prefetch replayed routing runs with read-ahead off\n", r.Prefetch)
	} else if r.Routing != runtime.UniformRouting {
		fmt.Fprintln(w, "read-ahead: off (its guesses come from the model's router, which the replayed routing overrides; --prefetch N turns it on anyway)")
	}
	if r.Experts == 0 {
		return
	}
	fmt.Fprintf(w, "%-9s %6s %14s %14s %12s %13s\n", "prompt", "hit", "layer hit min", "layer hit max", "new/layer/tok", "waits/tok")
	for _, run := range append(r.Runs, r.Median) {
		fmt.Fprintf(w, "%-9s %5.1f%% %13.1f%% %13.1f%% %13.2f %13.2f\n", run.Prompt, 100*run.HitRate,
			100*run.LayerHitRateMin, 100*run.LayerHitRateMax, run.NewExpertsPerLayerToken, run.WaitsPerToken)
	}
}

// printNgram writes the n-gram table reads of a qwen4_exp install (nothing
// for other models): per decode step and for the prefill, the median over
// prompts.
func printNgram(w io.Writer, r *runtime.BenchReport) {
	m := r.Median
	if m.NgramRowsPerToken <= 0 && m.PrefillNgramBytes <= 0 {
		return
	}
	fmt.Fprintf(w, "n-gram tables (%s I/O): %.1f rows of %s per decode step, %s read per step", r.IOMode, m.NgramRowsPerToken,
		cliutil.Bytes(m.NgramRowBytes), cliutil.Bytes(int64(m.NgramBytesPerToken)))
	if m.NgramBytesPerToken > 0 && m.NgramRowBytes > 0 {
		fmt.Fprintf(w, " (%.1f%% of it the rows themselves)", 100*m.NgramRowsPerToken*float64(m.NgramRowBytes)/m.NgramBytesPerToken)
	}
	fmt.Fprintf(w, ", %.2f ms per step waited for (read ahead from the step's start); prefill read %s\n",
		1e3*m.NgramWaitPerTok, cliutil.Bytes(m.PrefillNgramBytes))
}

// printPrefillLimits relates the median prefill to the disk and compute
// limits measured in the same run.
func printPrefillLimits(w io.Writer, r *runtime.BenchReport) {
	m := r.Median
	fmt.Fprintf(w, "prefill: passes of %s, %s of experts read per prompt token", plural(m.PrefillChunk, "token"), cliutil.Bytes(int64(m.PrefillBytesPerToken)))
	if m.PrefillWarmBytes > 0 {
		fmt.Fprintf(w, " (warm reads %s: %s used, %s wasted)", cliutil.Bytes(m.PrefillWarmBytes), cliutil.Bytes(m.PrefillWarmUsed), cliutil.Bytes(m.PrefillWarmBytes-m.PrefillWarmUsed))
	}
	if r.PrefillDiskTokS > 0 {
		fmt.Fprintf(w, "; disk-bound %.1f tok/s (raw read rate ÷ bytes per token)", r.PrefillDiskTokS)
	}
	if m.PrefillComputeTokS > 0 {
		fmt.Fprintf(w, "; compute-bound %.1f tok/s (estimated, an upper bound: tokens ÷ prefill time less I/O wait)", m.PrefillComputeTokS)
	}
	if r.PrefillBinding != "" {
		limit := m.PrefillComputeTokS
		if r.PrefillBinding == "disk" {
			limit = r.PrefillDiskTokS
		}
		fmt.Fprintf(w, "; %s binds, prefill runs at %.0f%% of it", r.PrefillBinding, 100*m.PrefillTokS/limit)
	}
	fmt.Fprintln(w)
}

// printPhases writes where a decode step's time goes, with the rate each
// phase reads its weights or state at.
func printPhases(w io.Writer, phases []runtime.BenchPhase) {
	if len(phases) == 0 {
		return
	}
	fmt.Fprintf(w, "decode step by phase (every prompt):\n%-14s %9s %7s %10s %12s\n", "phase", "ms/step", "share", "read/step", "rate")
	for _, p := range phases {
		rate := "-"
		if p.Rate > 0 {
			rate = cliutil.Rate(p.Rate)
		}
		fmt.Fprintf(w, "%-14s %9.3f %6.1f%% %10s %12s\n", p.Name, 1e3*p.SecondsPerToken, 100*p.Share,
			cliutil.Bytes(int64(p.BytesPerToken)), rate)
	}
}

// printBenchKV writes the labels and the median as key=value pairs on one
// line (sizes in MiB or GiB, rates in decimal GB/s = 1e9 bytes/s, as
// scripts/bench.sh and the README tables have always read them; pf_* are
// the prefill's figures), for scripts/bench.sh.
func printBenchKV(w io.Writer, r *runtime.BenchReport) {
	m := r.Median
	const mib, gib = 1 << 20, 1 << 30
	fmt.Fprintf(w, "model=%s layers=%d width=%d threads=%d engine=%s budget_gib=%.2f slots=%d experts=%d io=%s io_threads=%d",
		r.Model, r.Layers, r.Width, r.Threads, r.Engine, float64(r.BudgetBytes)/gib, r.SlotsPerLayer, r.Experts, r.IOMode, r.IOThreads)
	fmt.Fprintf(w, " prompt_tokens=%d gen=%d prefill_tok_s=%.2f decode_tok_s=%.2f hit=%.3f read_mib_tok=%.1f read_gbs=%.2f io_wait_ms=%.1f peak_rss_gib=%.2f",
		m.PromptTokens, m.Generated, m.PrefillTokS, m.DecodeTokS, m.HitRate, m.BytesPerToken/mib, m.ReadRate/1e9, 1e3*m.IOWaitPerTok, float64(m.PeakRSS)/gib)
	fmt.Fprintf(w, " pf_hit=%.3f pf_read_gib=%.2f pf_wait_s=%.2f weight_mib_tok=%.1f weight_gbs=%.2f mem1_gbs=%.2f mem2_gbs=%.2f disk_gbs=%.2f disk_bound=%.2f handoffs_tok=%.0f parks_tok=%.1f huge_gib=%.2f mem1_best_gbs=%.2f mem2_best_gbs=%.2f state_mib_tok=%.1f bytes_gbs=%.2f wmem1_gbs=%.2f wmem2_gbs=%.2f wmem1_best_gbs=%.2f wmem2_best_gbs=%.2f",
		m.PrefillHitRate, float64(m.PrefillBytesRead)/gib, m.PrefillIOWait, float64(r.WeightBytesPerToken)/mib, r.WeightRate/1e9,
		r.MemRead[1]/1e9, r.MemRead[2]/1e9, r.DiskRead/1e9, r.DiskBound, m.HandoffsPerToken, m.ParksPerToken, float64(r.HugePageBytes)/gib,
		r.MemReadBest[1]/1e9, r.MemReadBest[2]/1e9, m.StateBytesPerToken/mib, r.ReadRate/1e9,
		r.WeightMemRead[1]/1e9, r.WeightMemRead[2]/1e9, r.WeightMemReadBest[1]/1e9, r.WeightMemReadBest[2]/1e9)
	// phases=NAME:SHARE%:GB/s,… (rate 0 for phases that read no weights or state)
	var phases []string
	for _, p := range r.Phases {
		phases = append(phases, fmt.Sprintf("%s:%.1f:%.1f", p.Name, 100*p.Share, p.Rate/1e9))
	}
	fmt.Fprintf(w, " pf_chunk=%d pf_read_mib_tok=%.1f pf_disk_tok_s=%.2f pf_compute_tok_s=%.2f pf_binding=%s pf_warm_gib=%.2f pf_warm_used_gib=%.2f",
		m.PrefillChunk, m.PrefillBytesPerToken/mib, r.PrefillDiskTokS, m.PrefillComputeTokS, cmp.Or(r.PrefillBinding, "-"),
		float64(m.PrefillWarmBytes)/gib, float64(m.PrefillWarmUsed)/gib)
	fmt.Fprintf(w, " prefetch=%d guesses_tok=%.1f guesses_used=%.3f", r.Prefetch, m.GuessesPerToken, m.GuessesUsed)
	fmt.Fprintf(w, " routing=%s routing_wrapped=%t layer_hit_min=%.3f layer_hit_max=%.3f new_layer_tok=%.2f waits_tok=%.2f",
		strings.ReplaceAll(r.Routing, " ", "_"), r.RoutingWrapped, m.LayerHitRateMin, m.LayerHitRateMax, m.NewExpertsPerLayerToken, m.WaitsPerToken)
	fmt.Fprintf(w, " ngram_kib_tok=%.2f ngram_rows_tok=%.1f ngram_wait_ms=%.2f pf_ngram_mib=%.2f phases=%s\n",
		m.NgramBytesPerToken/1024, m.NgramRowsPerToken, 1e3*m.NgramWaitPerTok, float64(m.PrefillNgramBytes)/mib, strings.Join(phases, ","))
}
